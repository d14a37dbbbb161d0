package owner

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSignerRoundTrip(t *testing.T) {
	s, err := NewSigner([]byte(strings.Repeat("s", 32)), 0)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_700_000_000_123)
	body := []byte(`{"model":"auto"}`)
	h := s.Sign(now, "pod-a", "POST", "/v1/chat/completions", body)
	from, err := s.Verify(h, now.Add(3*time.Second), "POST", "/v1/chat/completions", body)
	if err != nil || from != "pod-a" {
		t.Fatalf("Verify(own header) = %q, %v", from, err)
	}
	other, _ := NewSigner([]byte(strings.Repeat("t", 32)), 0)
	for _, tc := range []struct {
		name   string
		s      *Signer
		h      string
		at     time.Time
		method string
		uri    string
		body   string
		want   error
	}{
		{"other secret", other, h, now, "POST", "/v1/chat/completions", string(body), ErrSignature},
		{"other body", s, h, now, "POST", "/v1/chat/completions", `{"model":"x"}`, ErrSignature},
		{"other path", s, h, now, "POST", "/v1/completions", string(body), ErrSignature},
		{"other method", s, h, now, "PUT", "/v1/chat/completions", string(body), ErrSignature},
		{"other sender", s, strings.Replace(h, "pod-a", "pod-b", 1), now, "POST", "/v1/chat/completions", string(body), ErrSignature},
		{"replayed late", s, h, now.Add(11 * time.Second), "POST", "/v1/chat/completions", string(body), ErrStale},
		{"from the future", s, h, now.Add(-11 * time.Second), "POST", "/v1/chat/completions", string(body), ErrStale},
		{"empty", s, "", now, "POST", "/", "", ErrMalformed},
		{"v2", s, strings.Replace(h, "v1", "v2", 1), now, "POST", "/v1/chat/completions", string(body), ErrMalformed},
		{"bad signature bytes", s, h[:len(h)-2] + "!!", now, "POST", "/v1/chat/completions", string(body), ErrMalformed},
		{"extra field", s, h + " x", now, "POST", "/v1/chat/completions", string(body), ErrMalformed},
	} {
		if _, err := tc.s.Verify(tc.h, tc.at, tc.method, tc.uri, []byte(tc.body)); !errors.Is(err, tc.want) {
			t.Errorf("%s: Verify = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := NewSigner([]byte("short"), 0); err == nil {
		t.Error("NewSigner accepted a 5-byte secret")
	}
}

// FuzzParseForwarded: the parser of the X-RouteBalance-Forwarded header
// (outside input: any client can send it) never panics, accepts only
// what it can print back, and Verify refuses every header the fuzzer
// makes up.
func FuzzParseForwarded(f *testing.F) {
	s, _ := NewSigner([]byte(strings.Repeat("k", 32)), 0)
	now := time.UnixMilli(1_700_000_000_000)
	f.Add(s.Sign(now, "pod-a", "POST", "/v1/chat/completions", []byte("{}")))
	for _, seed := range []string{"", "v1", "v1 1 a b", "v1 -1 a AAAA", "v1 +5 a AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
		"v1 1700000000000 pod AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "v1  1 a x", "v1 99999999999999999999 a x",
		"v1 1700000000000 a@b AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", strings.Repeat("v1 ", 300)} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, h string) {
		fw, err := ParseForwarded(h)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseForwarded(%q) error %v is not ErrMalformed", h, err)
			}
			return
		}
		if fw.From == "" || len(fw.Sig) != 32 || strings.ContainsAny(fw.From, " @") {
			t.Fatalf("ParseForwarded(%q) accepted %+v", h, fw)
		}
		from, err := s.Verify(h, fw.At, "POST", "/v1/chat/completions", []byte("{}"))
		if err == nil && h != s.Sign(fw.At, from, "POST", "/v1/chat/completions", []byte("{}")) {
			t.Fatalf("Verify accepted %q, which is not the signer's own header", h)
		}
	})
}
