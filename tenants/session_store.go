package tenants

import (
	"context"
	"time"
)

// SessionFamily is one login's chain of refresh tokens. Only the token
// whose id is CurrentJTI may be exchanged; each exchange replaces it.
type SessionFamily struct {
	ID         string
	TenantID   string
	UserID     string
	CurrentJTI string
	CreatedAt  time.Time
	RotatedAt  time.Time
	// ExpiresAt is when the family's newest refresh token expires.
	ExpiresAt time.Time
	// RevokedAt is set by logout, revoke-all, a password change or a
	// detected reuse; RevokeReason says which.
	RevokedAt    *time.Time
	RevokeReason string
}

// Revoke reasons stored with a revoked family.
const (
	RevokedLogout    = "logout"
	RevokedAll       = "revoke_all"
	RevokedPassword  = "password_change"
	RevokedReuse     = "refresh_token_reuse"
	RevokedUserGone  = "user_gone"
	RevokedByAnother = "revoked"
)

// SessionStore keeps refresh-token families and the users' password
// hashes. tenants/sqlstore implements it on both engines.
type SessionStore interface {
	// CreateSessionFamily stores a new family and deletes the user's
	// families that expired before f.CreatedAt.
	CreateSessionFamily(ctx context.Context, f SessionFamily) error
	// SessionFamily returns one family (ErrNotFound when there is none).
	SessionFamily(ctx context.Context, id string) (SessionFamily, error)
	// RotateSessionFamily replaces the family's current jti oldJTI with
	// newJTI and sets rotated_at and expires_at, atomically and only if the
	// family is not revoked and oldJTI is still current; it reports whether
	// it did (false: a concurrent rotation or a revocation won).
	RotateSessionFamily(ctx context.Context, id, oldJTI, newJTI string, now, expires time.Time) (bool, error)
	// RevokeSessionFamily revokes one family (a revoked one stays as it
	// was).
	RevokeSessionFamily(ctx context.Context, id string, now time.Time, reason string) error
	// RevokeUserSessions revokes every live family of the user and returns
	// how many it revoked.
	RevokeUserSessions(ctx context.Context, userID string, now time.Time, reason string) (int, error)
	// UserByID finds a user.
	UserByID(ctx context.Context, id string) (User, error)
	// SetPasswordHash replaces a user's password hash and revokes all of
	// the user's families in the same transaction; it returns how many
	// families it revoked.
	SetPasswordHash(ctx context.Context, userID, hash string, now time.Time) (int, error)
}
