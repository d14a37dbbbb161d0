-- Refresh-token families (issue 16 item 4). Login and sign-up start a
-- family; each refresh rotates it: the family keeps the id (jti) of the one
-- refresh token that may still be used, and presenting any other token of
-- the family (a reuse: the token was stolen, or replayed) revokes the whole
-- family. Logout revokes one family; a password change and revoke-all
-- revoke every family of the user. Access tokens carry their family and are
-- refused once it is revoked.
CREATE TABLE session_families (
    id            text PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    user_id       text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    current_jti   text NOT NULL,
    created_at    timestamptz NOT NULL,
    rotated_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    revoked_at    timestamptz,
    revoke_reason text NOT NULL DEFAULT ''
);
CREATE INDEX session_families_user ON session_families (user_id);
