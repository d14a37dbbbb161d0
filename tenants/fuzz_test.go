package tenants

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

// fuzzResolver resolves every name to a public address, except names that
// start with "internal", which resolve to a private one; it remembers the
// last name asked.
type fuzzResolver struct{ asked string }

func (r *fuzzResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.asked = host
	if strings.HasPrefix(host, "internal") {
		return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
}

// FuzzEndpointPolicyCheckURL: an accepted instance URL is an absolute
// http(s) URL without credentials, query or fragment whose host — the one
// the proxy will dial — is the host that was checked, never a private
// address, and checking it again gives it back unchanged.
func FuzzEndpointPolicyCheckURL(f *testing.F) {
	for _, s := range []string{
		"http://10.0.0.5:8000", "https://api.example.com/v1/", "http://93.184.216.34", "http://internal.svc:8000",
		"http://169.254.169.254/latest", "http://metadata.google.internal", "http://[::ffff:10.0.0.1]:80", "http://[64:ff9b::a00:1]",
		"http://user:pw@example.com", "http://example.com/?q=1", "http://example.com/#x", "ftp://example.com", "example.com:80",
		"http://EXAMPLE.com./", "http://127.1", "http://0x7f000001", "http://[fe80::1%25eth0]:8000", "http://%31%30.0.0.1",
		"http://example.com/a%2Fb/", "  http://example.com  ", "http://exa mple.com", "http://example.com:99999", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		ctx := context.Background()
		r := &fuzzResolver{}
		p := EndpointPolicy{Resolver: r}
		out, err := p.CheckURL(ctx, "base_url", raw)
		if err != nil {
			return
		}
		u, perr := url.Parse(out)
		if perr != nil {
			t.Fatalf("CheckURL(%q) = %q, which does not parse: %v", raw, out, perr)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.Hostname() == "" {
			t.Fatalf("CheckURL(%q) accepted %q", raw, out)
		}
		host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
		if ip, err := netip.ParseAddr(host); err == nil {
			if err := p.CheckAddr(ip); err != nil {
				t.Fatalf("CheckURL(%q) = %q dials %s, which the policy refuses: %v", raw, out, ip, err)
			}
		} else if host != r.asked || strings.HasPrefix(host, "internal") {
			t.Fatalf("CheckURL(%q) = %q dials %q but checked %q", raw, out, host, r.asked)
		}
		again, err := p.CheckURL(ctx, "base_url", out)
		if err != nil || again != out {
			t.Fatalf("CheckURL(%q) = %q, but checking that gives %q, %v", raw, out, again, err)
		}
	})
}

type fuzzClock struct{ t time.Time }

func (c fuzzClock) Now() time.Time { return c.t }

// FuzzSessionsVerify: a token verifies only as its own type and only with
// the claims this server signs (u1/t1, its type, expiry = now + TTL): the
// only tokens signed with this key carry exactly those, so anything else
// accepted would be a forgery. (Each fuzz worker issues its own tokens —
// jti is random — so the check is on claims, not on the token string.)
func FuzzSessionsVerify(f *testing.F) {
	clk := fuzzClock{time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	s, err := NewSessions(DefaultSessionConfig([]byte(strings.Repeat("k", 32))), clk)
	if err != nil {
		f.Fatal(err)
	}
	pair, err := s.Issue("u1", "t1")
	if err != nil {
		f.Fatal(err)
	}
	other, _ := NewSessions(DefaultSessionConfig([]byte(strings.Repeat("o", 32))), clk)
	foreign, _ := other.Issue("u1", "t1")
	for _, tok := range []string{pair.AccessToken, pair.RefreshToken, foreign.AccessToken, "", "a.b.c", "eyJhbGciOiJub25lIn0.e30.",
		strings.ToUpper(pair.AccessToken), pair.AccessToken + "=", strings.TrimRight(pair.AccessToken, "A")} {
		f.Add(tok, false)
		f.Add(tok, true)
	}
	cfg := DefaultSessionConfig(nil)
	f.Fuzz(func(t *testing.T, token string, refresh bool) {
		typ, ttl := TokenAccess, cfg.AccessTTL
		if refresh {
			typ, ttl = TokenRefresh, cfg.RefreshTTL
		}
		sess, err := s.Verify(token, typ)
		if err != nil {
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("Verify error %v does not wrap ErrUnauthorized", err)
			}
			return
		}
		if sess.UserID != "u1" || sess.TenantID != "t1" || sess.Type != typ || !sess.ExpiresAt.Equal(clk.t.Add(ttl)) {
			t.Fatalf("Verify(%q, %s) = %+v, want the claims this server signs", token, typ, sess)
		}
	})
}

// FuzzSealerOpen: only a value this key sealed, with its own associated
// data, opens, and to the plaintext sealed (each fuzz worker seals its own
// copy — the nonce is random — so the check is on what opens, not on the
// bytes).
func FuzzSealerOpen(f *testing.F) {
	s, err := NewSealer([]byte(strings.Repeat("e", 32)))
	if err != nil {
		f.Fatal(err)
	}
	sealed, err := s.Seal("sk-upstream-key", "i1")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed, "i1")
	f.Add(sealed, "i2")
	f.Add(sealed[:len(sealed)-1], "i1")
	f.Add(append([]byte{sealed[0] + 1}, sealed[1:]...), "i1")
	f.Add([]byte{}, "")
	f.Add([]byte{1}, "i1")
	f.Fuzz(func(t *testing.T, b []byte, ad string) {
		pt, err := s.Open(b, ad)
		if err != nil {
			if !errors.Is(err, ErrSealed) {
				t.Fatalf("Open error %v is not ErrSealed", err)
			}
			return
		}
		if ad != "i1" || pt != "sk-upstream-key" {
			t.Fatalf("Open(%x, %q) = %q: opened something that was not sealed", b, ad, pt)
		}
	})
}
