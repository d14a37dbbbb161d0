package tenants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/mail"
	"strings"
	"unicode/utf8"

	"github.com/routebalance/routebalance/routing"
)

// This file holds the Service's accounts and sessions: signup, login,
// refresh and access-token checks.

// SignupInput is the body of POST /api/v1/signup.
type SignupInput struct {
	Email    string `json:"email"`
	Password string `json:"password"`
	Name     string `json:"name"`
}

func normaliseEmail(raw string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(raw))
	if e == "" {
		return "", fieldErr("email", "is required")
	}
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e || !strings.Contains(e, "@") || len(e) > 254 {
		return "", fieldErr("email", "must be an email address like name@example.com")
	}
	return e, nil
}

func checkName(field, name string, required bool) (string, error) {
	if err := checkNoControl(field, name); err != nil {
		return "", err
	}
	name = strings.TrimSpace(name)
	if name == "" && required {
		return "", fieldErr(field, "is required")
	}
	if n := utf8.RuneCountInString(name); n > 100 || !utf8.ValidString(name) {
		return "", fieldErr(field, "must be valid UTF-8 of at most 100 characters")
	}
	return name, nil
}

// DefaultSettings are a new tenant's settings: the balanced preset and no
// SLOs.
func DefaultSettings() Settings {
	w, _ := routing.PresetWeights(routing.PresetBalanced)
	return Settings{Preset: routing.PresetBalanced, Weights: w}
}

// Signup creates a tenant and its first user and logs the user in.
func (s *Service) Signup(ctx context.Context, in SignupInput) (Tenant, TokenPair, error) {
	email, err := normaliseEmail(in.Email)
	if err != nil {
		return Tenant{}, TokenPair{}, err
	}
	if in.Password == "" {
		return Tenant{}, TokenPair{}, fieldErr("password", "is required")
	}
	if err := CheckPasswordStrength(in.Password, email); err != nil {
		return Tenant{}, TokenPair{}, err
	}
	name, err := checkName("name", in.Name, true)
	if err != nil {
		return Tenant{}, TokenPair{}, err
	}
	hash, err := HashPassword(in.Password, s.cfg.Password)
	if err != nil {
		return Tenant{}, TokenPair{}, err
	}
	now := s.now()
	t := Tenant{ID: newID(), Name: name, CreatedAt: now, ConfigVersion: 1}
	u := User{ID: newID(), TenantID: t.ID, Email: email, PasswordHash: hash, CreatedAt: now}
	if err := s.store.CreateAccount(ctx, t, u, DefaultSettings()); err != nil {
		if errors.Is(err, ErrConflict) {
			return Tenant{}, TokenPair{}, fmt.Errorf("email is already registered: %w", ErrConflict)
		}
		return Tenant{}, TokenPair{}, fmt.Errorf("create account: %w", err)
	}
	pair, err := s.startSession(ctx, u.ID, t.ID)
	if err != nil {
		return Tenant{}, TokenPair{}, err
	}
	s.log.InfoContext(ctx, "tenant signed up", slog.String("tenant_id", t.ID), slog.String("user_id", u.ID))
	return t, pair, nil
}
