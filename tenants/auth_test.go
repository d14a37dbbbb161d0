package tenants

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

func testPasswordParams() PasswordParams {
	p := DefaultPasswordParams()
	p.MemoryKiB, p.Time = 8*1024, 1
	return p
}

func TestPasswordHashRoundTrip(t *testing.T) {
	h, err := HashPassword("correct horse 9", testPasswordParams())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=8192,t=1,p=1$") {
		t.Errorf("hash %q is not a PHC argon2id string with the given parameters", h)
	}
	for _, tc := range []struct {
		pw   string
		want bool
	}{{"correct horse 9", true}, {"correct horse 8", false}, {"", false}, {"Correct horse 9", false}} {
		got, err := VerifyPassword(tc.pw, h)
		if err != nil || got != tc.want {
			t.Errorf("VerifyPassword(%q) = %v, %v; want %v", tc.pw, got, err, tc.want)
		}
	}
	h2, _ := HashPassword("correct horse 9", testPasswordParams())
	if h == h2 {
		t.Error("two hashes of one password are equal: salt is not random")
	}
	for _, bad := range []string{"", "$2a$10$abc", "$argon2id$v=19$m=x$a$b", "$argon2id$v=18$m=1,t=1,p=1$YQ$YQ"} {
		if _, err := VerifyPassword("x", bad); err == nil {
			t.Errorf("VerifyPassword accepted malformed hash %q", bad)
		}
	}
	if err := DefaultPasswordParams().Validate(); err != nil {
		t.Errorf("default parameters invalid: %v", err)
	}
}

func TestPasswordStrength(t *testing.T) {
	for _, tc := range []struct {
		pw, email string
		wantMsg   string // "" = accepted
	}{
		{"tr0ub4dor&3", "a@b.co", ""},
		{"short1", "a@b.co", "at least 10 characters"},
		{"abcdefghijkl", "a@b.co", "at least two of letters, digits and symbols"},
		{"1111111111a", "a@b.co", "at least 5 different characters"},
		{"alice12345", "alice12345@example.com", "must not be your email"},
		{strings.Repeat("ab1", 50), "a@b.co", "at most 128"},
		{"abc\x00defgh12", "a@b.co", "control characters"},
		{"pässwört 123", "a@b.co", ""},
	} {
		err := CheckPasswordStrength(tc.pw, tc.email)
		switch {
		case tc.wantMsg == "" && err != nil:
			t.Errorf("%q rejected: %v", tc.pw, err)
		case tc.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tc.wantMsg)):
			t.Errorf("%q: got %v, want an error containing %q", tc.pw, err, tc.wantMsg)
		}
	}
}

func newTestSessions(t *testing.T, clock *fixedClock) *Sessions {
	t.Helper()
	s, err := NewSessions(DefaultSessionConfig([]byte(strings.Repeat("k", 32))), clock)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSessions(t *testing.T) {
	clock := &fixedClock{t: time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)}
	s := newTestSessions(t, clock)
	pair, err := s.Issue("u1", "t1")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := s.Verify(pair.AccessToken, TokenAccess)
	if err != nil {
		t.Fatalf("valid access token refused: %v", err)
	}
	if sess.UserID != "u1" || sess.TenantID != "t1" || sess.Type != TokenAccess {
		t.Errorf("session = %+v", sess)
	}
	if _, err := s.Verify(pair.RefreshToken, TokenRefresh); err != nil {
		t.Fatalf("valid refresh token refused: %v", err)
	}

	base := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: "routebalance", Subject: "u1", Audience: jwt.ClaimStrings{"routebalance/access"},
			IssuedAt: jwt.NewNumericDate(clock.t), ExpiresAt: jwt.NewNumericDate(clock.t.Add(time.Hour)),
		},
		TenantID: "t1", Type: TokenAccess,
	}
	secret := []byte(strings.Repeat("k", 32))
	sign := func(m jwt.SigningMethod, key any, mut func(*claims)) string {
		c := base
		if mut != nil {
			mut(&c)
		}
		tok, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	// A hand-made alg:none token with the same claims.
	parts := strings.Split(sign(jwt.SigningMethodHS256, secret, nil), ".")
	noneHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))

	for _, tc := range []struct {
		name, token, typ string
	}{
		{"control: well-formed", sign(jwt.SigningMethodHS256, secret, nil), ""},
		{"alg none (library)", sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, nil), TokenAccess},
		{"alg none (hand-made)", noneHeader + "." + parts[1] + ".", TokenAccess},
		{"foreign secret", sign(jwt.SigningMethodHS256, []byte(strings.Repeat("x", 32)), nil), TokenAccess},
		{"HS512 with our secret", sign(jwt.SigningMethodHS512, secret, nil), TokenAccess},
		{"RS256", sign(jwt.SigningMethodRS256, rsaKey, nil), TokenAccess},
		{"expired", sign(jwt.SigningMethodHS256, secret, func(c *claims) { c.ExpiresAt = jwt.NewNumericDate(clock.t.Add(-time.Minute)) }), TokenAccess},
		{"no exp", sign(jwt.SigningMethodHS256, secret, func(c *claims) { c.ExpiresAt = nil }), TokenAccess},
		{"wrong issuer", sign(jwt.SigningMethodHS256, secret, func(c *claims) { c.Issuer = "evil" }), TokenAccess},
		{"wrong audience", sign(jwt.SigningMethodHS256, secret, func(c *claims) { c.Audience = jwt.ClaimStrings{"other"} }), TokenAccess},
		{"refresh used as access", pair.RefreshToken, TokenAccess},
		{"access used as refresh", pair.AccessToken, TokenRefresh},
		{"typ mismatch", sign(jwt.SigningMethodHS256, secret, func(c *claims) { c.Type = TokenRefresh }), TokenAccess},
		{"issued in the future", sign(jwt.SigningMethodHS256, secret, func(c *claims) { c.IssuedAt = jwt.NewNumericDate(clock.t.Add(time.Hour)) }), TokenAccess},
		{"no tenant", sign(jwt.SigningMethodHS256, secret, func(c *claims) { c.TenantID = "" }), TokenAccess},
		{"garbage", "not.a.jwt", TokenAccess},
		{"tampered payload", parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"u2","tid":"t2"}`)) + "." + parts[2], TokenAccess},
	} {
		typ := tc.typ
		if typ == "" {
			if _, err := s.Verify(tc.token, TokenAccess); err != nil {
				t.Errorf("%s: refused: %v", tc.name, err)
			}
			continue
		}
		if _, err := s.Verify(tc.token, typ); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: got %v, want ErrUnauthorized", tc.name, err)
		}
	}

	clock.t = clock.t.Add(16 * time.Minute)
	if _, err := s.Verify(pair.AccessToken, TokenAccess); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("access token accepted after 16 min: %v", err)
	}
	if _, err := s.Verify(pair.RefreshToken, TokenRefresh); err != nil {
		t.Errorf("refresh token refused after 16 min: %v", err)
	}
	if _, err := NewSessions(DefaultSessionConfig([]byte("short")), nil); err == nil {
		t.Error("a 5-byte secret was accepted")
	}
}

func TestKeySecret(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		secret, prefix, err := NewKeySecret()
		if err != nil {
			t.Fatal(err)
		}
		if !WellFormedKey(secret) || !strings.HasPrefix(secret, prefix) || len(prefix) != KeyVisibleLen || seen[secret] {
			t.Fatalf("bad key %q prefix %q", secret, prefix)
		}
		seen[secret] = true
	}
	for _, bad := range []string{"", "rb_", "sk-abc", "rb_" + strings.Repeat("a", 42), "rb_" + strings.Repeat("a", 42) + "-"} {
		if WellFormedKey(bad) {
			t.Errorf("WellFormedKey(%q) = true", bad)
		}
	}
	if HashKey("a") == HashKey("b") || len(HashKey("a")) != 64 {
		t.Error("HashKey is not a hex SHA-256")
	}
}

func TestSealer(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key) //nolint:errcheck
	s, err := NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := s.Seal("sk-upstream", "inst-1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "sk-upstream") {
		t.Fatal("plaintext visible in sealed value")
	}
	if got, err := s.Open(sealed, "inst-1"); err != nil || got != "sk-upstream" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := s.Open(sealed, "inst-2"); !errors.Is(err, ErrSealed) {
		t.Errorf("opened with another record id: %v", err)
	}
	tampered := append([]byte(nil), sealed...)
	tampered[len(tampered)-1] ^= 1
	if _, err := s.Open(tampered, "inst-1"); !errors.Is(err, ErrSealed) {
		t.Errorf("opened a tampered value: %v", err)
	}
	other, _ := NewSealer(make([]byte, 32))
	if _, err := other.Open(sealed, "inst-1"); !errors.Is(err, ErrSealed) {
		t.Errorf("opened with another key: %v", err)
	}
	if _, err := NewSealer(key[:16]); err == nil {
		t.Error("a 16-byte key was accepted")
	}
}

func TestSessionsAcceptPreviousSecretDuringRotation(t *testing.T) {
	oldS, newS := bytes.Repeat([]byte("o"), 32), bytes.Repeat([]byte("n"), 32)
	before, err := NewSessions(DefaultSessionConfig(oldS), nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := before.Issue("u1", "t1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultSessionConfig(newS)
	cfg.PreviousSecrets = [][]byte{oldS}
	during, err := NewSessions(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := during.Verify(pair.AccessToken, TokenAccess); err != nil {
		t.Errorf("token signed with the previous secret refused during rotation: %v", err)
	}
	fresh, _ := during.Issue("u1", "t1")
	after, _ := NewSessions(DefaultSessionConfig(newS), nil)
	if _, err := after.Verify(fresh.AccessToken, TokenAccess); err != nil {
		t.Errorf("token issued during rotation not signed with the new secret: %v", err)
	}
	if _, err := after.Verify(pair.AccessToken, TokenAccess); err == nil {
		t.Error("old token still accepted after the previous secret was dropped")
	}
	cfg.PreviousSecrets = [][]byte{[]byte("short")}
	if _, err := NewSessions(cfg, nil); err == nil {
		t.Error("a short previous secret was accepted")
	}
}

func TestSealerOpensWithPreviousKeyAndReseals(t *testing.T) {
	oldK, newK := bytes.Repeat([]byte{7}, 32), bytes.Repeat([]byte{9}, 32)
	old, _ := NewSealer(oldK)
	sealed, err := old.Seal("sk-upstream", "inst-1")
	if err != nil {
		t.Fatal(err)
	}
	rot, err := NewSealer(newK, oldK)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := rot.Open(sealed, "inst-1"); err != nil || got != "sk-upstream" {
		t.Fatalf("open with previous key = %q, %v", got, err)
	}
	out, changed, err := rot.Reseal(sealed, "inst-1")
	if err != nil || !changed {
		t.Fatalf("reseal = changed %v, %v; want true, nil", changed, err)
	}
	if _, changed, _ := rot.Reseal(out, "inst-1"); changed {
		t.Error("resealing a current value changed it")
	}
	newOnly, _ := NewSealer(newK)
	if got, err := newOnly.Open(out, "inst-1"); err != nil || got != "sk-upstream" {
		t.Errorf("resealed value with the new key alone = %q, %v", got, err)
	}
	if _, err := newOnly.Open(sealed, "inst-1"); err == nil {
		t.Error("the new key alone opened a value sealed with the old one")
	}
}
