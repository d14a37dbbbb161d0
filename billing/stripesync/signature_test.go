package stripesync

import (
	"encoding/hex"
	"testing"

	"github.com/stripe/stripe-go/v76/webhook"
)

func TestSignatureTime(t *testing.T) {
	tests := []struct {
		header string
		want   int64
		ok     bool
	}{
		{"t=1764496800,v1=abc", 1764496800, true},
		{"v1=abc,t=12,v0=x", 12, true},
		{"t=1,t=2,v1=abc", 2, true}, // stripe-go keeps the last
		{"t=+7,v1=abc", 7, true},
		{"v1=abc", 0, false},
		{"", 0, false},
		{"t=12,,v1=abc", 0, false},
		{"t=1=2,v1=abc", 0, false},
		{"t=x,v1=abc", 0, false},
		{"t=99999999999999999999,v1=abc", 0, false},
	}
	for _, tt := range tests {
		got, ok := signatureTime(tt.header)
		if ok != tt.ok || (ok && got.Unix() != tt.want) {
			t.Errorf("signatureTime(%q) = %v, %v; want %d, %v", tt.header, got.Unix(), ok, tt.want, tt.ok)
		}
	}
}

// FuzzSignatureTime checks that the timestamp signatureTime reads from a
// Stripe-Signature header is the one stripe-go verifies the HMAC with: a
// header completed with a signature over that time validates, so the age
// check always judges the time the signature covers.
func FuzzSignatureTime(f *testing.F) {
	for _, s := range []string{"t=1764496800,v1=00", "v1=ab,t=5", "t=1,t=2", "t=-5", "t=+3", "", ",", "t=", "t==", "t=1,v1", "x=1,t=9"} {
		f.Add(s)
	}
	payload := []byte(`{"id":"evt_1","object":"event"}`)
	const secret = "whsec_fuzz"
	f.Fuzz(func(t *testing.T, header string) {
		at, ok := signatureTime(header)
		if !ok {
			return
		}
		signed := header + ",v1=" + hex.EncodeToString(webhook.ComputeSignature(at, payload, secret))
		if err := webhook.ValidatePayloadIgnoringTolerance(payload, signed, secret); err != nil {
			t.Fatalf("signatureTime(%q) = %v, but stripe-go rejects a signature over that time: %v", header, at, err)
		}
		if again, ok2 := signatureTime(signed); !ok2 || !again.Equal(at) {
			t.Fatalf("appending a v1 changed the time: %v → %v, %v", at, again, ok2)
		}
	})
}
