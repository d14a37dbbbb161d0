package tenants

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/routebalance/routebalance/routing"
)

// Token types, carried in the typ claim and mirrored by distinct audiences
// so an access token can never be used as a refresh token or vice versa.
const (
	TokenAccess  = "access"
	TokenRefresh = "refresh"
)

// SessionConfig configures JWT sessions.
type SessionConfig struct {
	// Secret is the HS256 signing key; at least 32 bytes.
	Secret []byte
	// PreviousSecrets still verify tokens but never sign: set the old
	// secret here when rotating, so sessions survive until they expire.
	PreviousSecrets [][]byte
	// Issuer is the iss claim written and required.
	Issuer string
	// AccessTTL and RefreshTTL are the token lifetimes.
	AccessTTL  time.Duration
	RefreshTTL time.Duration
	// Leeway tolerates clock skew when checking exp, nbf and iat.
	Leeway time.Duration
}

// DefaultSessionConfig returns the defaults (15 min access, 30 days
// refresh, 30 s leeway) with the given secret.
func DefaultSessionConfig(secret []byte) SessionConfig {
	return SessionConfig{Secret: secret, Issuer: "routebalance", AccessTTL: 15 * time.Minute, RefreshTTL: 30 * 24 * time.Hour, Leeway: 30 * time.Second}
}

// Validate checks the configuration.
func (c SessionConfig) Validate() error {
	switch {
	case len(c.Secret) < 32:
		return errors.New("session secret must be at least 32 bytes")
	case !allLong(c.PreviousSecrets, 32):
		return errors.New("previous session secrets must be at least 32 bytes each")
	case c.Issuer == "":
		return errors.New("session issuer must be set")
	case c.AccessTTL <= 0 || c.RefreshTTL <= 0:
		return errors.New("session lifetimes must be positive")
	case c.Leeway < 0:
		return errors.New("session leeway must not be negative")
	}
	return nil
}

// Session is who a valid session token speaks for.
type Session struct {
	UserID    string
	TenantID  string
	Type      string // TokenAccess or TokenRefresh
	ExpiresAt time.Time
	// Family is the refresh-token family (one login) the token belongs
	// to, "" for tokens made by Issue; ID is the token's jti.
	Family string
	ID     string
}

// TokenPair is what signup, login and refresh hand out.
type TokenPair struct {
	AccessToken  string
	RefreshToken string
	// ExpiresIn is the access token's lifetime.
	ExpiresIn time.Duration
}

type claims struct {
	jwt.RegisteredClaims
	TenantID string `json:"tid"`
	Type     string `json:"typ"`
	Family   string `json:"fam,omitempty"`
}

// Sessions issues and verifies HS256 JWTs. It is safe for concurrent use.
type Sessions struct {
	cfg   SessionConfig
	clock routing.Clock
	// keys verify: the current secret first, then the previous ones.
	keys jwt.VerificationKeySet
}

// NewSessions returns a Sessions; clock may be nil for the wall clock.
func NewSessions(cfg SessionConfig, clock routing.Clock) (*Sessions, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = routing.WallClock{}
	}
	keys := jwt.VerificationKeySet{Keys: []jwt.VerificationKey{cfg.Secret}}
	for _, k := range cfg.PreviousSecrets {
		keys.Keys = append(keys.Keys, k)
	}
	return &Sessions{cfg: cfg, clock: clock, keys: keys}, nil
}

func allLong(keys [][]byte, n int) bool {
	for _, k := range keys {
		if len(k) < n {
			return false
		}
	}
	return true
}

func (s *Sessions) audience(typ string) string { return s.cfg.Issuer + "/" + typ }

// Issue returns a fresh access and refresh token for the user that belong
// to no session family. The Service refuses such tokens (it issues with
// IssueFamily); Issue stays for tools and tests that need a well-signed
// token.
func (s *Sessions) Issue(userID, tenantID string) (TokenPair, error) {
	p, _, err := s.IssueFamily(userID, tenantID, "")
	return p, err
}

// IssueFamily returns a fresh access and refresh token of the session
// family, and the refresh token's id (jti), which the family records as
// the one refresh token that may be exchanged next.
func (s *Sessions) IssueFamily(userID, tenantID, family string) (TokenPair, string, error) {
	acc, _, err := s.sign(userID, tenantID, family, TokenAccess, s.cfg.AccessTTL)
	if err != nil {
		return TokenPair{}, "", err
	}
	ref, jti, err := s.sign(userID, tenantID, family, TokenRefresh, s.cfg.RefreshTTL)
	if err != nil {
		return TokenPair{}, "", err
	}
	return TokenPair{AccessToken: acc, RefreshToken: ref, ExpiresIn: s.cfg.AccessTTL}, jti, nil
}

func (s *Sessions) sign(userID, tenantID, family, typ string, ttl time.Duration) (string, string, error) {
	now := s.clock.Now()
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", fmt.Errorf("token id: %w", err)
	}
	jti := base64.RawURLEncoding.EncodeToString(raw[:])
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    s.cfg.Issuer,
			Subject:   userID,
			Audience:  jwt.ClaimStrings{s.audience(typ)},
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID:        jti,
		},
		TenantID: tenantID,
		Type:     typ,
		Family:   family,
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(s.cfg.Secret)
	if err != nil {
		return "", "", fmt.Errorf("sign token: %w", err)
	}
	return tok, jti, nil
}

// Verify parses a token of the wanted type (TokenAccess or TokenRefresh).
// Only HS256 with this service's secret (or a previous one, during a
// rotation) is accepted ("alg": "none" and
// every other algorithm are refused before any key is used); iss, aud
// (which encodes the type), exp, nbf and iat are required and checked; the
// typ claim must match too. Every failure wraps ErrUnauthorized.
func (s *Sessions) Verify(token, typ string) (Session, error) {
	var c claims
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(s.cfg.Issuer),
		jwt.WithAudience(s.audience(typ)),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(s.cfg.Leeway),
		jwt.WithTimeFunc(s.clock.Now),
		jwt.WithStrictDecoding(),
	)
	_, err := p.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return s.keys, nil })
	if err != nil {
		return Session{}, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	if c.Type != typ || c.Subject == "" || c.TenantID == "" {
		return Session{}, fmt.Errorf("%w: token is not a %s token", ErrUnauthorized, typ)
	}
	return Session{UserID: c.Subject, TenantID: c.TenantID, Type: c.Type, ExpiresAt: c.ExpiresAt.Time, Family: c.Family, ID: c.ID}, nil
}
