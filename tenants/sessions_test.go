package tenants_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/tenants"
)

// TestSessionRotationAndRevocation: issue 16 item 4, on both engines.
// Refresh tokens rotate; a reused one revokes its whole family (its
// newer tokens too); logout revokes one login; revoke-all and a password
// change revoke every login of the user; tokens outside any family are
// refused.
func TestSessionRotationAndRevocation(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, e dbtest.Engine) {
		ctx := context.Background()
		clk := &clock{t: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
		svc, _ := newService(t, e, clk)
		const email, pw = "sess@example.com", "analytical-engine-1"
		if _, _, err := svc.Signup(ctx, tenants.SignupInput{Email: email, Password: pw, Name: "S"}); err != nil {
			t.Fatal(err)
		}
		login := func() tenants.TokenPair {
			t.Helper()
			p, err := svc.Login(ctx, email, pw)
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
		alive := func(p tenants.TokenPair) bool {
			_, err := svc.Authenticate(ctx, p.AccessToken)
			return err == nil
		}
		auth := func(p tenants.TokenPair) tenants.Session {
			t.Helper()
			s, err := svc.Authenticate(ctx, p.AccessToken)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}

		// Rotation and reuse detection.
		p1 := login()
		p2, err := svc.Refresh(ctx, p1.RefreshToken)
		if err != nil {
			t.Fatal(err)
		}
		p3, err := svc.Refresh(ctx, p2.RefreshToken)
		if err != nil {
			t.Fatal(err)
		}
		if !alive(p1) || !alive(p3) {
			t.Fatal("access tokens of a live family refused")
		}
		if _, err := svc.Refresh(ctx, p1.RefreshToken); !errors.Is(err, tenants.ErrUnauthorized) || !strings.Contains(err.Error(), "reused") {
			t.Fatalf("reused refresh token: %v, want unauthorized (reused)", err)
		}
		if _, err := svc.Refresh(ctx, p3.RefreshToken); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("newest refresh token of a family revoked by reuse still works: %v", err)
		}
		if alive(p3) {
			t.Error("access token of a family revoked by reuse still works")
		}

		// Logout revokes this login only.
		a, b := login(), login()
		if err := svc.Logout(ctx, auth(a)); err != nil {
			t.Fatal(err)
		}
		if alive(a) {
			t.Error("access token works after logout")
		}
		if _, err := svc.Refresh(ctx, a.RefreshToken); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("refresh after logout: %v", err)
		}
		if !alive(b) {
			t.Error("logout of one login revoked another")
		}

		// Revoke-all.
		c := login()
		if n, err := svc.RevokeAllSessions(ctx, auth(c)); err != nil || n != 3 {
			t.Errorf("revoke-all revoked %d families (%v), want 3 (sign-up's, b and c)", n, err)
		}
		if alive(b) || alive(c) {
			t.Error("a session survived revoke-all")
		}

		// Password change: wrong old password, weak new one, then success.
		d, f := login(), login()
		sd := auth(d)
		_, err = svc.ChangePassword(ctx, sd, "", tenants.PasswordChange{OldPassword: "not-the-password-9", NewPassword: "difference-engine-2"})
		var fe *routing.FieldError
		if !errors.As(err, &fe) || fe.Field != "old_password" {
			t.Errorf("wrong old password: %v, want a field error on old_password", err)
		}
		if _, err = svc.ChangePassword(ctx, sd, "", tenants.PasswordChange{OldPassword: pw, NewPassword: "password123"}); !errors.As(err, &fe) || fe.Field != "new_password" {
			t.Errorf("common new password: %v, want a field error on new_password", err)
		}
		if !alive(f) {
			t.Fatal("a refused password change revoked sessions")
		}
		np, err := svc.ChangePassword(ctx, sd, "", tenants.PasswordChange{OldPassword: pw, NewPassword: "difference-engine-2"})
		if err != nil {
			t.Fatal(err)
		}
		if alive(d) || alive(f) {
			t.Error("a session from before the password change still works")
		}
		if _, err := svc.Refresh(ctx, f.RefreshToken); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("refresh token from before the password change: %v", err)
		}
		if !alive(np) {
			t.Error("the pair returned by the password change does not work")
		}
		if _, err := svc.Login(ctx, email, pw); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("old password still logs in: %v", err)
		}
		if _, err := svc.Login(ctx, email, "difference-engine-2"); err != nil {
			t.Errorf("new password: %v", err)
		}

		// A well-signed token outside any family is refused.
		sess, _ := tenants.NewSessions(tenants.DefaultSessionConfig([]byte(strings.Repeat("s", 32))), clk)
		loose, _ := sess.Issue(sd.UserID, sd.TenantID)
		if alive(loose) {
			t.Error("access token without a family accepted")
		}
		if _, err := svc.Refresh(ctx, loose.RefreshToken); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Errorf("refresh token without a family: %v", err)
		}
	})
}

// TestConcurrentRefreshIsReuse: the same refresh token presented twice at
// once succeeds at most once and revokes the family.
func TestConcurrentRefreshIsReuse(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, e dbtest.Engine) {
		ctx := context.Background()
		clk := &clock{t: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
		svc, _ := newService(t, e, clk)
		_, p, err := svc.Signup(ctx, tenants.SignupInput{Email: "race@example.com", Password: "analytical-engine-1", Name: "R"})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won []tenants.TokenPair
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if np, err := svc.Refresh(ctx, p.RefreshToken); err == nil {
					mu.Lock()
					won = append(won, np)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(won) > 1 {
			t.Fatalf("%d concurrent exchanges of one refresh token succeeded", len(won))
		}
		for _, np := range won {
			if _, err := svc.Refresh(ctx, np.RefreshToken); err == nil {
				t.Error("family survived a concurrent reuse")
			}
		}
	})
}

// TestLoginThrottlePerIP: issue 16 item 7. Failures from one address lock
// that (email, address) pair only, so the owner can still log in from
// elsewhere; many emails from one address lock the address; the refusal
// says when to retry; the windows come from the injected clock.
func TestLoginThrottlePerIP(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC)}
	svc, _ := newService(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, clk)
	const email, pw = "victim@example.com", "analytical-engine-1"
	if _, _, err := svc.Signup(ctx, tenants.SignupInput{Email: email, Password: pw, Name: "V"}); err != nil {
		t.Fatal(err)
	}
	cfg := tenants.DefaultConfig()
	for range cfg.LoginMaxFailures {
		svc.LoginFrom(ctx, email, "wrong-password-1", "198.51.100.7") //nolint:errcheck
	}
	clk.t = clk.t.Add(time.Minute)
	_, err := svc.LoginFrom(ctx, email, pw, "198.51.100.7")
	var te *tenants.ThrottleError
	if !errors.As(err, &te) || !errors.Is(err, tenants.ErrTooManyAttempts) || te.Scope != "email_ip" || te.RetryAfter != cfg.LoginWindow-time.Minute {
		t.Fatalf("attacker's address after %d failures: %v, want email_ip throttle with %v to wait", cfg.LoginMaxFailures, err, cfg.LoginWindow-time.Minute)
	}
	if _, err := svc.LoginFrom(ctx, email, pw, "203.0.113.9"); err != nil {
		t.Fatalf("the owner from another address is locked out: %v", err)
	}

	// Spraying one password over many emails from one address.
	spray := "192.0.2.44"
	for i := range cfg.LoginMaxFailuresPerIP {
		if _, err := svc.LoginFrom(ctx, "user"+string(rune('a'+i%26))+strings.Repeat("x", i/26)+"@example.com", "Summer2026!", spray); !errors.Is(err, tenants.ErrUnauthorized) {
			t.Fatalf("spray attempt %d: %v", i+1, err)
		}
	}
	if _, err := svc.LoginFrom(ctx, email, pw, spray); !errors.As(err, &te) || te.Scope != "ip" {
		t.Fatalf("address that sprayed %d emails: %v, want the ip throttle", cfg.LoginMaxFailuresPerIP, err)
	}
	clk.t = clk.t.Add(cfg.LoginWindow)
	if _, err := svc.LoginFrom(ctx, email, pw, spray); err != nil {
		t.Errorf("after the window: %v", err)
	}
}

// TestCommonPasswordsRefused: issue 16 item 7. Common and easily guessed
// passwords are refused at sign-up with a message naming the problem.
func TestCommonPasswordsRefused(t *testing.T) {
	for _, tc := range []struct{ pw, msg string }{
		{"password123", "commonly used"},
		{"Password123!", "commonly used"},
		{"qwertyuiop1", "commonly used"},
		{"P@ssw0rd2024", "commonly used"},
		{"Welcome123!", "commonly used"},
		{"summer2024!", "commonly used"},
		{"adalovelace12", "too easy to guess"}, // the email's local part plus digits
	} {
		err := tenants.CheckPasswordStrength(tc.pw, "adalovelace@example.com")
		var fe *routing.FieldError
		if !errors.As(err, &fe) || fe.Field != "password" || !strings.Contains(fe.Msg, tc.msg) {
			t.Errorf("%q: %v, want a password error containing %q", tc.pw, err, tc.msg)
		}
	}
	for _, ok := range []string{"correct-horse-42", "analytical-engine-1", "Tr0ub4dor&3-wide", "vq8#Lm2!zR"} {
		if err := tenants.CheckPasswordStrength(ok, "adalovelace@example.com"); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}
