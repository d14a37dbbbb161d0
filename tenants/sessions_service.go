package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/routebalance/routebalance/routing"
)

// Session errors; each wraps ErrUnauthorized (401) with a reason the api
// does not show (its message stays "invalid or expired … token").
var (
	errNoFamily       = fmt.Errorf("token predates session families; log in again: %w", ErrUnauthorized)
	errSessionRevoked = fmt.Errorf("session revoked: %w", ErrUnauthorized)
	errSessionReused  = fmt.Errorf("refresh token reused; every session of this login is revoked: %w", ErrUnauthorized)
)

// startSession begins a refresh-token family for the user and returns its
// first token pair.
func (s *Service) startSession(ctx context.Context, userID, tenantID string) (TokenPair, error) {
	fam := newID()
	pair, jti, err := s.sessions.IssueFamily(userID, tenantID, fam)
	if err != nil {
		return TokenPair{}, err
	}
	now := s.now()
	f := SessionFamily{ID: fam, TenantID: tenantID, UserID: userID, CurrentJTI: jti,
		CreatedAt: now, RotatedAt: now, ExpiresAt: now.Add(s.sessions.cfg.RefreshTTL)}
	if err := s.store.CreateSessionFamily(ctx, f); err != nil {
		return TokenPair{}, fmt.Errorf("start session: %w", err)
	}
	return pair, nil
}

// liveFamily loads the session's family and checks that it is the
// session's and not revoked.
func (s *Service) liveFamily(ctx context.Context, sess Session) (SessionFamily, error) {
	if sess.Family == "" {
		return SessionFamily{}, errNoFamily
	}
	f, err := s.store.SessionFamily(ctx, sess.Family)
	if errors.Is(err, ErrNotFound) {
		return SessionFamily{}, errSessionRevoked
	}
	if err != nil {
		return SessionFamily{}, fmt.Errorf("session family: %w", err)
	}
	if f.UserID != sess.UserID || f.TenantID != sess.TenantID {
		return SessionFamily{}, errSessionRevoked
	}
	if f.RevokedAt != nil {
		return f, errSessionRevoked
	}
	return f, nil
}

// Refresh exchanges the current refresh token of a session family for a
// new pair and retires it: each refresh token is good for one exchange.
// Presenting a retired token of the family — a replay, or a stolen copy
// used after (or before) its owner — is a reuse: it revokes the whole
// family, so both holders must log in again. A revoked family, a token
// issued before families existed, or a tenant that is gone are
// ErrUnauthorized.
func (s *Service) Refresh(ctx context.Context, refreshToken string) (TokenPair, error) {
	sess, err := s.sessions.Verify(refreshToken, TokenRefresh)
	if err != nil {
		return TokenPair{}, err
	}
	f, err := s.liveFamily(ctx, sess)
	if err != nil {
		return TokenPair{}, err
	}
	if f.CurrentJTI != sess.ID {
		return TokenPair{}, s.reused(ctx, f)
	}
	if _, err := s.store.Tenant(ctx, sess.TenantID); err != nil {
		if errors.Is(err, ErrNotFound) {
			return TokenPair{}, fmt.Errorf("tenant is gone: %w", ErrUnauthorized)
		}
		return TokenPair{}, err
	}
	pair, jti, err := s.sessions.IssueFamily(sess.UserID, sess.TenantID, f.ID)
	if err != nil {
		return TokenPair{}, err
	}
	now := s.now()
	ok, err := s.store.RotateSessionFamily(ctx, f.ID, sess.ID, jti, now, now.Add(s.sessions.cfg.RefreshTTL))
	if err != nil {
		return TokenPair{}, fmt.Errorf("rotate session: %w", err)
	}
	if !ok {
		// Another exchange of the same token won the race: that is a
		// reuse too.
		return TokenPair{}, s.reused(ctx, f)
	}
	return pair, nil
}

func (s *Service) reused(ctx context.Context, f SessionFamily) error {
	if err := s.store.RevokeSessionFamily(ctx, f.ID, s.now(), RevokedReuse); err != nil {
		return fmt.Errorf("revoke reused session: %w", err)
	}
	s.log.WarnContext(ctx, "refresh token reused; session family revoked",
		slog.String("tenant_id", f.TenantID), slog.String("user_id", f.UserID), slog.String("family", f.ID))
	return errSessionReused
}

// Authenticate verifies an access token and that its session family is
// still live (not logged out, revoked or replaced by a password change),
// one indexed read per call.
func (s *Service) Authenticate(ctx context.Context, accessToken string) (Session, error) {
	sess, err := s.sessions.Verify(accessToken, TokenAccess)
	if err != nil {
		return Session{}, err
	}
	if _, err := s.liveFamily(ctx, sess); err != nil {
		return Session{}, err
	}
	return sess, nil
}

// Logout revokes the session's family: its refresh token and every access
// token of the family stop working at once.
func (s *Service) Logout(ctx context.Context, sess Session) error {
	if sess.Family == "" {
		return errNoFamily
	}
	if err := s.store.RevokeSessionFamily(ctx, sess.Family, s.now(), RevokedLogout); err != nil {
		return fmt.Errorf("logout: %w", err)
	}
	return nil
}

// RevokeAllSessions revokes every session family of the session's user
// (every device, this one included) and returns how many were live.
func (s *Service) RevokeAllSessions(ctx context.Context, sess Session) (int, error) {
	n, err := s.store.RevokeUserSessions(ctx, sess.UserID, s.now(), RevokedAll)
	if err != nil {
		return 0, fmt.Errorf("revoke sessions: %w", err)
	}
	s.log.InfoContext(ctx, "all sessions revoked", slog.String("tenant_id", sess.TenantID), slog.String("user_id", sess.UserID), slog.Int("families", n))
	return n, nil
}

// PasswordChange is the body of POST /api/v1/password.
type PasswordChange struct {
	OldPassword string `json:"old_password"`
	NewPassword string `json:"new_password"`
}

// ChangePassword replaces the session user's password after checking the
// old one, revokes every session of the user (other devices must log in
// again) and returns a new pair for the caller. A wrong old password is a
// *routing.FieldError on old_password and counts as a failed login for the
// user's email (and clientIP) in the login throttle; the new password must
// pass the strength rules and differ from the old.
func (s *Service) ChangePassword(ctx context.Context, sess Session, clientIP string, in PasswordChange) (TokenPair, error) {
	if in.OldPassword == "" {
		return TokenPair{}, fieldErr("old_password", "is required")
	}
	if in.NewPassword == "" {
		return TokenPair{}, fieldErr("new_password", "is required")
	}
	u, err := s.store.UserByID(ctx, sess.UserID)
	if errors.Is(err, ErrNotFound) {
		return TokenPair{}, fmt.Errorf("user is gone: %w", ErrUnauthorized)
	}
	if err != nil {
		return TokenPair{}, fmt.Errorf("find user: %w", err)
	}
	now := s.clock.Now()
	if err := s.logins.check(u.Email, clientIP, now); err != nil {
		return TokenPair{}, err
	}
	ok, err := VerifyPassword(in.OldPassword, u.PasswordHash)
	if err != nil {
		return TokenPair{}, fmt.Errorf("user %s: %w", u.ID, err)
	}
	if !ok {
		s.logins.fail(u.Email, clientIP, now)
		return TokenPair{}, fieldErr("old_password", "does not match your current password")
	}
	if in.NewPassword == in.OldPassword {
		return TokenPair{}, fieldErr("new_password", "must differ from the old password")
	}
	if err := CheckPasswordStrength(in.NewPassword, u.Email); err != nil {
		return TokenPair{}, fieldRename(err, "new_password")
	}
	hash, err := HashPassword(in.NewPassword, s.cfg.Password)
	if err != nil {
		return TokenPair{}, err
	}
	n, err := s.store.SetPasswordHash(ctx, u.ID, hash, s.now())
	if err != nil {
		return TokenPair{}, fmt.Errorf("change password: %w", err)
	}
	s.logins.succeed(u.Email, clientIP)
	s.log.InfoContext(ctx, "password changed; sessions revoked", slog.String("tenant_id", u.TenantID), slog.String("user_id", u.ID), slog.Int("families", n))
	return s.startSession(ctx, u.ID, u.TenantID)
}

// fieldRename returns err with its *routing.FieldError's field renamed.
func fieldRename(err error, field string) error {
	var fe *routing.FieldError
	if errors.As(err, &fe) {
		c := *fe
		c.Field = field
		return &c
	}
	return err
}
