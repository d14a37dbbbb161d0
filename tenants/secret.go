package tenants

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// API keys look like rb_<43 base62 characters>: 32 random bytes (256 bits)
// written in base62, left-padded with '0' to a fixed width.
const (
	KeyPrefix      = "rb_"
	keyRandomBytes = 32
	keyBodyLen     = 43 // ceil(256 / log2(62))
	// KeyVisibleLen is how much of a key is stored and shown in clear:
	// "rb_" and the first 8 characters of its body.
	KeyVisibleLen = len(KeyPrefix) + 8
)

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// NewKeySecret returns a fresh API key secret and its visible prefix.
func NewKeySecret() (secret, prefix string, err error) {
	var b [keyRandomBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("key entropy: %w", err)
	}
	n := new(big.Int).SetBytes(b[:])
	body := make([]byte, keyBodyLen)
	base := big.NewInt(62)
	mod := new(big.Int)
	for i := keyBodyLen - 1; i >= 0; i-- {
		n.DivMod(n, base, mod)
		body[i] = base62[mod.Int64()]
	}
	secret = KeyPrefix + string(body)
	return secret, secret[:KeyVisibleLen], nil
}

// WellFormedKey reports whether s has the shape of an API key, so garbage
// is refused without touching the cache or the database.
func WellFormedKey(s string) bool {
	if len(s) != len(KeyPrefix)+keyBodyLen || !strings.HasPrefix(s, KeyPrefix) {
		return false
	}
	for i := len(KeyPrefix); i < len(s); i++ {
		if strings.IndexByte(base62, s[i]) < 0 {
			return false
		}
	}
	return true
}

// HashKey returns the stored form of an API key secret: hex SHA-256. A
// fast hash is right here because the secret has 256 bits of entropy;
// slow hashes exist for low-entropy passwords.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Sealer encrypts upstream credentials at rest with AES-256-GCM. A sealed
// value is: version byte 1, a 12-byte random nonce, the ciphertext and
// the 16-byte tag. The owning record's id is bound as additional data, so
// a sealed value copied onto another row fails to open.
//
// A Sealer may also hold previous keys: values sealed with them still open,
// and Reseal moves them onto the current key, so the encryption key can be
// rotated without losing upstream credentials.
type Sealer struct {
	aead cipher.AEAD
	// previous open values sealed before a rotation; never used to seal.
	previous []cipher.AEAD
}

const sealVersion = 1

// NewSealer returns a Sealer for a 32-byte key and any previous keys.
func NewSealer(key []byte, previous ...[]byte) (*Sealer, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	s := &Sealer{aead: aead}
	for i, k := range previous {
		p, err := newAEAD(k)
		if err != nil {
			return nil, fmt.Errorf("previous key %d: %w", i+1, err)
		}
		s.previous = append(s.previous, p)
	}
	return s, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("encryption key must be 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("encryption key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("encryption key: %w", err)
	}
	return aead, nil
}

// Seal encrypts plaintext bound to the record id ad.
func (s *Sealer) Seal(plaintext, ad string) ([]byte, error) {
	out := make([]byte, 1+s.aead.NonceSize(), 1+s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return s.aead.Seal(out, out[1:], []byte(plaintext), []byte(ad)), nil
}

// ErrSealed means a sealed value could not be opened: wrong key, wrong
// record or tampering.
var ErrSealed = errors.New("sealed value cannot be opened")

// Open decrypts a value made by Seal with the same ad, with the current
// key or a previous one.
func (s *Sealer) Open(sealed []byte, ad string) (string, error) {
	pt, _, err := s.open(sealed, ad)
	return pt, err
}

// open also reports whether the current key opened the value.
func (s *Sealer) open(sealed []byte, ad string) (pt string, current bool, err error) {
	ns := s.aead.NonceSize()
	if len(sealed) < 1+ns+s.aead.Overhead() || sealed[0] != sealVersion {
		return "", false, ErrSealed
	}
	for i, a := range append([]cipher.AEAD{s.aead}, s.previous...) {
		b, err := a.Open(nil, sealed[1:1+ns], sealed[1+ns:], []byte(ad))
		if err == nil {
			return string(b), i == 0, nil
		}
	}
	return "", false, ErrSealed
}

// Reseal returns the value sealed with the current key. changed is false
// when it already was; a value no key opens returns ErrSealed.
func (s *Sealer) Reseal(sealed []byte, ad string) (out []byte, changed bool, err error) {
	pt, current, err := s.open(sealed, ad)
	if err != nil || current {
		return sealed, false, err
	}
	out, err = s.Seal(pt, ad)
	return out, err == nil, err
}
