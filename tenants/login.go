package tenants

import (
	"context"
	"errors"
	"fmt"
)

// errBadLogin is the one message for an unknown email and a wrong password.
var errBadLogin = fmt.Errorf("invalid email or password: %w", ErrUnauthorized)

// Login is LoginFrom without a client address (the per-IP limit does not
// apply).
func (s *Service) Login(ctx context.Context, email, password string) (TokenPair, error) {
	return s.LoginFrom(ctx, email, password, "")
}

// LoginFrom checks a password and starts a session (a new refresh-token
// family). An unknown email and a wrong password do the same work — one
// user lookup and one argon2id verification (against a dummy hash made
// with the same parameters) — and get the same error. Failures are
// throttled per (email, clientIP) and per clientIP (limiter.go); a refused
// login is a *ThrottleError matching ErrTooManyAttempts.
func (s *Service) LoginFrom(ctx context.Context, email, password, clientIP string) (TokenPair, error) {
	e, err := normaliseEmail(email)
	if err != nil || password == "" || len(password) > 4*MaxPasswordLen {
		VerifyPassword(password, s.dummyHash) //nolint:errcheck // equal timing
		return TokenPair{}, errBadLogin
	}
	now := s.clock.Now()
	if err := s.logins.check(e, clientIP, now); err != nil {
		return TokenPair{}, err
	}
	u, err := s.store.UserByEmail(ctx, e)
	known := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return TokenPair{}, fmt.Errorf("find user: %w", err)
	}
	hash := s.dummyHash
	if known {
		hash = u.PasswordHash
	}
	ok, err := VerifyPassword(password, hash)
	if err != nil {
		return TokenPair{}, fmt.Errorf("user %s: %w", u.ID, err)
	}
	if !known || !ok {
		s.logins.fail(e, clientIP, now)
		return TokenPair{}, errBadLogin
	}
	s.logins.succeed(e, clientIP)
	return s.startSession(ctx, u.ID, u.TenantID)
}
