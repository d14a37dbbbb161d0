package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/routebalance/routebalance/tenants"
)

// CreateSessionFamily implements tenants.SessionStore.
func (s *Store) CreateSessionFamily(ctx context.Context, f tenants.SessionFamily) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q("DELETE FROM session_families WHERE user_id = ? AND expires_at < ?"), f.UserID, s.t(f.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO session_families (id, tenant_id, user_id, current_jti, created_at, rotated_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`),
			f.ID, f.TenantID, f.UserID, f.CurrentJTI, s.t(f.CreatedAt), s.t(f.RotatedAt), s.t(f.ExpiresAt))
		return err
	})
}

// SessionFamily implements tenants.SessionStore.
func (s *Store) SessionFamily(ctx context.Context, id string) (tenants.SessionFamily, error) {
	var f tenants.SessionFamily
	err := s.db.QueryRowContext(ctx, s.q(`SELECT id, tenant_id, user_id, current_jti, created_at, rotated_at, expires_at, revoked_at, revoke_reason
		FROM session_families WHERE id = ?`), id).
		Scan(&f.ID, &f.TenantID, &f.UserID, &f.CurrentJTI, reqTime{&f.CreatedAt}, reqTime{&f.RotatedAt}, reqTime{&f.ExpiresAt}, timeCol{&f.RevokedAt}, &f.RevokeReason)
	return f, notFound(err)
}

// RotateSessionFamily implements tenants.SessionStore.
func (s *Store) RotateSessionFamily(ctx context.Context, id, oldJTI, newJTI string, now, expires time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE session_families SET current_jti = ?, rotated_at = ?, expires_at = ?
		WHERE id = ? AND current_jti = ? AND revoked_at IS NULL`), newJTI, s.t(now), s.t(expires), id, oldJTI)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// RevokeSessionFamily implements tenants.SessionStore.
func (s *Store) RevokeSessionFamily(ctx context.Context, id string, now time.Time, reason string) error {
	_, err := s.db.ExecContext(ctx, s.q("UPDATE session_families SET revoked_at = ?, revoke_reason = ? WHERE id = ? AND revoked_at IS NULL"), s.t(now), reason, id)
	return err
}

// RevokeUserSessions implements tenants.SessionStore.
func (s *Store) RevokeUserSessions(ctx context.Context, userID string, now time.Time, reason string) (int, error) {
	return revokeUser(ctx, s, s.db, userID, now, reason)
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func revokeUser(ctx context.Context, s *Store, db execer, userID string, now time.Time, reason string) (int, error) {
	res, err := db.ExecContext(ctx, s.q("UPDATE session_families SET revoked_at = ?, revoke_reason = ? WHERE user_id = ? AND revoked_at IS NULL"), s.t(now), reason, userID)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// UserByID implements tenants.SessionStore.
func (s *Store) UserByID(ctx context.Context, id string) (tenants.User, error) {
	var u tenants.User
	err := s.db.QueryRowContext(ctx, s.q("SELECT id, tenant_id, email, password_hash, created_at FROM users WHERE id = ?"), id).
		Scan(&u.ID, &u.TenantID, &u.Email, &u.PasswordHash, reqTime{&u.CreatedAt})
	return u, notFound(err)
}

// SetPasswordHash implements tenants.SessionStore.
func (s *Store) SetPasswordHash(ctx context.Context, userID, hash string, now time.Time) (int, error) {
	var revoked int
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q("UPDATE users SET password_hash = ? WHERE id = ?"), hash, userID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return tenants.ErrNotFound
		}
		revoked, err = revokeUser(ctx, s, tx, userID, now, tenants.RevokedPassword)
		return err
	})
	return revoked, err
}
