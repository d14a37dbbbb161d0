package tenants

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/trustelem/zxcvbn"
	"golang.org/x/crypto/argon2"

	"github.com/routebalance/routebalance/routing"
)

// PasswordParams are the argon2id cost parameters. The defaults follow
// OWASP's password storage guidance for argon2id (19 MiB of memory, two
// passes, one lane), which costs about 20–40 ms on one core of a current
// server: slow for an attacker with a stolen table, cheap for a login.
// The parameters are written into every hash, so raising them later
// keeps old hashes verifiable.
type PasswordParams struct {
	// MemoryKiB is argon2's m, in KiB.
	MemoryKiB uint32
	// Time is argon2's t, the number of passes.
	Time uint32
	// Threads is argon2's p, the degree of parallelism.
	Threads uint8
	// SaltLen and KeyLen are in bytes.
	SaltLen uint32
	KeyLen  uint32
}

// DefaultPasswordParams returns the production argon2id parameters.
func DefaultPasswordParams() PasswordParams {
	return PasswordParams{MemoryKiB: 19 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}
}

// Validate rejects parameters weaker than RFC 9106's floor for interactive
// use that this service accepts (8 MiB, one pass, 16-byte salt and key).
// Tests may use the floor to stay fast.
func (p PasswordParams) Validate() error {
	switch {
	case p.MemoryKiB < 8*1024:
		return errors.New("argon2id memory must be at least 8192 KiB")
	case p.Time < 1:
		return errors.New("argon2id time must be at least 1")
	case p.Threads < 1:
		return errors.New("argon2id threads must be at least 1")
	case p.SaltLen < 16 || p.KeyLen < 16:
		return errors.New("argon2id salt and key must be at least 16 bytes")
	}
	return nil
}

// HashPassword returns the argon2id hash of password in the PHC string
// format: $argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>, with
// salt and hash in unpadded standard base64.
func HashPassword(password string, p PasswordParams) (string, error) {
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("password salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, p.Time, p.MemoryKiB, p.Threads, p.KeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.MemoryKiB, p.Time, p.Threads, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// VerifyPassword reports whether password matches a hash made by
// HashPassword. The comparison of the derived keys is constant-time. A
// malformed hash is an error, not a mismatch.
func VerifyPassword(password, hash string) (bool, error) {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return false, errors.New("password hash: not an argon2id PHC string")
	}
	var v int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return false, fmt.Errorf("password hash: unsupported version %q", parts[2])
	}
	var m, t uint32
	var th uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &th); err != nil {
		return false, fmt.Errorf("password hash: bad parameters %q: %w", parts[3], err)
	}
	b64 := base64.RawStdEncoding
	salt, err := b64.DecodeString(parts[4])
	if err != nil {
		return false, fmt.Errorf("password hash: salt: %w", err)
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false, errors.New("password hash: bad key")
	}
	got := argon2.IDKey([]byte(password), salt, t, m, th, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// Password length limits, in characters.
const (
	MinPasswordLen = 10
	MaxPasswordLen = 128
)

// CheckPasswordStrength applies the password rules and returns a
// *routing.FieldError for "password" that says which rule failed: at least
// MinPasswordLen and at most MaxPasswordLen characters, valid UTF-8 without
// control characters, at least two character classes (letters, digits,
// other symbols), at least five distinct characters, and not the email (or
// its local part).
func CheckPasswordStrength(password, email string) error {
	fail := func(msg string) error { return &routing.FieldError{Field: "password", Msg: msg} }
	if !utf8.ValidString(password) {
		return fail("must be valid UTF-8")
	}
	n := utf8.RuneCountInString(password)
	if n < MinPasswordLen {
		return fail(fmt.Sprintf("must be at least %d characters long, got %d", MinPasswordLen, n))
	}
	if n > MaxPasswordLen {
		return fail(fmt.Sprintf("must be at most %d characters long, got %d", MaxPasswordLen, n))
	}
	var letters, digits, others bool
	distinct := map[rune]bool{}
	for _, r := range password {
		switch {
		case unicode.IsControl(r):
			return fail("must not contain control characters")
		case unicode.IsLetter(r):
			letters = true
		case unicode.IsDigit(r):
			digits = true
		default:
			others = true
		}
		distinct[r] = true
	}
	classes := 0
	for _, b := range []bool{letters, digits, others} {
		if b {
			classes++
		}
	}
	if classes < 2 {
		return fail("must mix at least two of letters, digits and symbols")
	}
	if len(distinct) < 5 {
		return fail("must contain at least 5 different characters")
	}
	lower := strings.ToLower(password)
	email = strings.ToLower(email)
	local, _, _ := strings.Cut(email, "@")
	if email != "" && (lower == email || lower == local) {
		return fail("must not be your email address")
	}
	return checkGuessable(password, email, local)
}

// MinPasswordGuesses is the least number of guesses, as estimated by
// zxcvbn, a password must need: 10⁸ (zxcvbn score 3, "safely
// unguessable: moderate protection from offline slow-hash scenario").
const MinPasswordGuesses = 1e8

// checkGuessable refuses passwords that zxcvbn
// (github.com/trustelem/zxcvbn, a port of Dropbox's estimator) guesses in
// fewer than MinPasswordGuesses. It embeds frequency lists of common
// passwords (the 30 000 most common of leaked password lists), English
// words, names and TV/film vocabulary and models l33t substitutions,
// keyboard walks, sequences, repeats, dates and the user's own email, so
// "password123", "P@ssw0rd2024", "qwertyuiop1" and "Welcome123!" fail
// while "correct-horse-42" passes. A password that is one entry of the
// common-password list (plus at most a few appended characters) is named
// as such.
func checkGuessable(password, email, local string) error {
	var inputs []string
	if email != "" {
		inputs = []string{email, local}
	}
	r := zxcvbn.PasswordStrength(password, inputs)
	if r.Guesses >= MinPasswordGuesses {
		return nil
	}
	msg := fmt.Sprintf("is too easy to guess (about %.0e guesses; at least %.0e needed): add words or characters that do not form a common pattern", r.Guesses, MinPasswordGuesses)
	for _, m := range r.Sequence {
		if m.Pattern == "dictionary" && m.DictionaryName == "passwords" && utf8.RuneCountInString(m.Token)*2 >= utf8.RuneCountInString(password) {
			msg = fmt.Sprintf("is a commonly used password (%q is on the list of the most common passwords)", m.Token)
			break
		}
	}
	return &routing.FieldError{Field: "password", Msg: msg}
}
