-- Refresh-token families (issue 16 item 4). Login and sign-up start a
-- family; each refresh rotates it: the family keeps the id (jti) of the one
-- refresh token that may still be used, and presenting any other token of
-- the family (a reuse: the token was stolen, or replayed) revokes the whole
-- family. Logout revokes one family; a password change and revoke-all
-- revoke every family of the user. Access tokens carry their family and are
-- refused once it is revoked.
CREATE TABLE session_families (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    user_id       TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    current_jti   TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    rotated_at    TEXT NOT NULL,
    expires_at    TEXT NOT NULL,
    revoked_at    TEXT,
    revoke_reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX session_families_user ON session_families (user_id);
