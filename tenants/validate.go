package tenants

import (
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxPricePerMTok is the largest price, in USD per million tokens, an
// instance may declare for input or output tokens. It is far above any
// real price (the most expensive public models charge well under
// $1,000 per million tokens) and small enough that no cost the scheduler or
// the meter computes from it can overflow: a request of 10⁹ tokens at this
// price is 10⁷ USD, exactly representable as a float64 and, as nano-USD, in
// an int64.
const MaxPricePerMTok = 10_000.0

// checkPrice validates one price field: a finite number in
// [0, MaxPricePerMTok].
func checkPrice(field string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxPricePerMTok {
		return fieldErr(field, "must be a price between 0 and %v USD per million tokens, got %v", MaxPricePerMTok, v)
	}
	return nil
}

// controlChar returns the first control character of s (C0 — NUL, CR, LF,
// TAB and the rest of U+0000–U+001F —, DEL U+007F and the C1 range
// U+0080–U+009F) and whether there is one. Such characters have no place in
// names, model names, GPU types or upstream keys: a CR or LF in a value that
// ends up in an HTTP header splits it, a NUL truncates it in C libraries
// and logs.
func controlChar(s string) (rune, bool) {
	for _, r := range s {
		if unicode.IsControl(r) {
			return r, true
		}
	}
	return 0, false
}

// checkNoControl refuses a value that is not valid UTF-8 or holds a
// control character, naming field.
func checkNoControl(field, v string) error {
	if !utf8.ValidString(v) {
		return fieldErr(field, "must be valid UTF-8")
	}
	if r, ok := controlChar(v); ok {
		return fieldErr(field, "must not contain control characters (found %U)", r)
	}
	return nil
}

// checkText trims v, applies checkNoControl and a length bound in bytes,
// and returns the trimmed value.
func checkText(field, v string, maxBytes int) (string, error) {
	if err := checkNoControl(field, v); err != nil {
		return "", err
	}
	v = strings.TrimSpace(v)
	if len(v) > maxBytes {
		return "", fieldErr(field, "must be at most %d bytes, got %d", maxBytes, len(v))
	}
	return v, nil
}

// checkUpstreamKey refuses an upstream API key unless every byte is a
// visible ASCII character (0x21–0x7E), which is what a bearer token may
// carry (RFC 6750's b64token is narrower still): the key is sent verbatim
// in the Authorization header to the tenant's server, so a CR, LF or NUL
// would break every request to that instance.
func checkUpstreamKey(field, v string) error {
	if err := checkNoControl(field, v); err != nil {
		return err
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x21 || c > 0x7e {
			return fieldErr(field, "must be printable ASCII without spaces (byte %d is 0x%02x)", i, c)
		}
	}
	return nil
}
