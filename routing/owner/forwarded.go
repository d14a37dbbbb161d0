package owner

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Header is the request header that marks a request forwarded by the
// replica that received it to the cluster's owner.
const Header = "X-RouteBalance-Forwarded"

// Errors of Verify. Each means the header must be refused.
var (
	// ErrMalformed: the header is not "v1 <unix-ms> <replica-id> <sig>".
	ErrMalformed = errors.New("malformed forwarded header")
	// ErrSignature: the signature does not match the request.
	ErrSignature = errors.New("forwarded header signature does not match")
	// ErrStale: the timestamp is outside the accepted window.
	ErrStale = errors.New("forwarded header timestamp is outside the accepted window")
)

// DefaultWindow is how far a forwarded header's timestamp may be from the
// receiver's clock, either way.
const DefaultWindow = 10 * time.Second

// Signer signs and verifies X-RouteBalance-Forwarded. The signature is
// HMAC-SHA-256, under a key derived from the replicas' shared session
// secret, of the version, the timestamp, the sending replica's id, the
// method, the request URI and the body: a header is good for that one
// request, within Window of its timestamp. It is safe for concurrent use.
type Signer struct {
	key    []byte
	window time.Duration
}

// NewSigner derives the forwarding key from secret (the JWT secret every
// replica shares); window 0 is DefaultWindow.
func NewSigner(secret []byte, window time.Duration) (*Signer, error) {
	if len(secret) < 16 {
		return nil, errors.New("owner: forwarding secret must be at least 16 bytes")
	}
	if window < 0 {
		return nil, errors.New("owner: forwarding window must be >= 0")
	}
	if window == 0 {
		window = DefaultWindow
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("routebalance forwarded request v1"))
	return &Signer{key: mac.Sum(nil), window: window}, nil
}

// Forwarded is a parsed X-RouteBalance-Forwarded header.
type Forwarded struct {
	// At is the sender's timestamp (millisecond precision).
	At time.Time
	// From is the sending replica's id.
	From string
	// Sig is the signature's bytes.
	Sig []byte
}

// ParseForwarded reads "v1 <unix-ms> <replica-id> <base64url-sig>" (single
// spaces). It checks the shape only, not the signature.
func ParseForwarded(h string) (Forwarded, error) {
	if len(h) > 512 {
		return Forwarded{}, fmt.Errorf("%w: longer than 512 bytes", ErrMalformed)
	}
	parts := strings.Split(h, " ")
	if len(parts) != 4 || parts[0] != "v1" {
		return Forwarded{}, fmt.Errorf("%w: want \"v1 <unix-ms> <replica-id> <signature>\"", ErrMalformed)
	}
	ms, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || ms < 0 || parts[1][0] == '+' || ms > 1<<53 {
		return Forwarded{}, fmt.Errorf("%w: timestamp is not unix milliseconds", ErrMalformed)
	}
	if parts[2] == "" || strings.ContainsAny(parts[2], "@\t\r\n") {
		return Forwarded{}, fmt.Errorf("%w: bad replica id", ErrMalformed)
	}
	// Strict refuses non-zero trailing bits but still skips "\r" and "\n";
	// re-encoding and comparing leaves exactly one accepted spelling.
	sig, err := base64.RawURLEncoding.Strict().DecodeString(parts[3])
	if err != nil || len(sig) != sha256.Size || base64.RawURLEncoding.EncodeToString(sig) != parts[3] {
		return Forwarded{}, fmt.Errorf("%w: signature is not 32 bytes of unpadded base64url", ErrMalformed)
	}
	return Forwarded{At: time.UnixMilli(ms), From: parts[2], Sig: sig}, nil
}

// mac is the signature of one request.
func (s *Signer) mac(ms int64, from, method, uri string, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	var b [20]byte
	m.Write([]byte("v1\n"))
	m.Write(strconv.AppendInt(b[:0], ms, 10))
	m.Write([]byte("\n" + from + "\n" + method + "\n" + uri + "\n"))
	m.Write(body)
	return m.Sum(nil)
}

// Sign returns the header value for a request sent now by replica from.
func (s *Signer) Sign(now time.Time, from, method, uri string, body []byte) string {
	ms := now.UnixMilli()
	return "v1 " + strconv.FormatInt(ms, 10) + " " + from + " " + base64.RawURLEncoding.EncodeToString(s.mac(ms, from, method, uri, body))
}

// Verify checks header h of a request received now and returns the
// sending replica's id; the error is ErrMalformed, ErrStale or
// ErrSignature (wrapped).
func (s *Signer) Verify(h string, now time.Time, method, uri string, body []byte) (string, error) {
	f, err := ParseForwarded(h)
	if err != nil {
		return "", err
	}
	if d := now.Sub(f.At); d > s.window || d < -s.window {
		return "", fmt.Errorf("%w (%v from this replica's clock, window ±%v)", ErrStale, d.Round(time.Millisecond), s.window)
	}
	if !hmac.Equal(f.Sig, s.mac(f.At.UnixMilli(), f.From, method, uri, body)) {
		return "", ErrSignature
	}
	return f.From, nil
}
