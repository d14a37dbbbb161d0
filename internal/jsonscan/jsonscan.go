// Package jsonscan walks JSON text that encoding/json's Valid accepted,
// without decoding it into Go values and without allocating: object
// members and array elements come out as sub-slices of the input, strings
// are unquoted only when asked (and then exactly as encoding/json decodes
// them). The inference path uses it to read a request body once and to
// rewrite it by splicing instead of re-encoding.
//
// Every function here assumes valid JSON (check with json.Valid first);
// on invalid input the results are meaningless but never a panic or an
// endless loop.
package jsonscan

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// Kind is the type of a JSON value, told by its first byte.
type Kind byte

// The kinds of JSON values; Invalid is an empty or unknown value.
const (
	Invalid Kind = iota
	Null
	Bool
	Number
	String
	Array
	Object
)

// KindOf returns the kind of the value v (no leading whitespace).
func KindOf(v []byte) Kind {
	if len(v) == 0 {
		return Invalid
	}
	switch v[0] {
	case 'n':
		return Null
	case 't', 'f':
		return Bool
	case '"':
		return String
	case '[':
		return Array
	case '{':
		return Object
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return Number
	}
	return Invalid
}

// IsNull reports whether v is the literal null.
func IsNull(v []byte) bool { return len(v) == 4 && string(v) == "null" }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace returns the index of the first non-space byte of b at or
// after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// end returns the index just past the value that starts at b[i].
func end(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	}
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// stringEnd returns the index just past the string whose opening quote
// is b[i].
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		q := i + j
		k := q - 1 // an odd run of backslashes before the quote escapes it
		for k >= i && b[k] == '\\' {
			k--
		}
		if (q-1-k)%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
	return len(b)
}

// Trim returns v without surrounding whitespace.
func Trim(v []byte) []byte {
	i := skipSpace(v, 0)
	j := len(v)
	for j > i && isSpace(v[j-1]) {
		j--
	}
	return v[i:j]
}

// Iter walks the members of an object or the elements of an array.
type Iter struct {
	b   []byte
	i   int
	end byte // '}' or ']'
}

// Members returns an iterator over the object v (trimmed, Kind Object).
func Members(v []byte) Iter { return Iter{b: v, i: 1, end: '}'} }

// Elements returns an iterator over the array v (trimmed, Kind Array).
func Elements(v []byte) Iter { return Iter{b: v, i: 1, end: ']'} }

// Offset returns the position in the iterated value where the next member
// or element search starts (just past the last one returned).
func (it *Iter) Offset() int { return it.i }

// NextMember returns the next member of an object: its key as written
// (without the quotes, escapes not decoded: see Key) and its value, both
// sub-slices of the object; k0 is the index of the key's opening quote.
// ok is false after the last member.
func (it *Iter) NextMember() (key, val []byte, k0 int, ok bool) {
	b := it.b
	i := skipSpace(b, it.i)
	if i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		it.i = len(b)
		return nil, nil, 0, false
	}
	k0 = i
	ke := stringEnd(b, i)
	key = b[i+1 : max(i+1, ke-1)]
	i = skipSpace(b, ke)
	if i < len(b) && b[i] == ':' {
		i = skipSpace(b, i+1)
	}
	ve := end(b, i)
	val = b[i:ve]
	it.i = ve
	return key, val, k0, true
}

// NextElement returns the next element of an array; ok is false after
// the last one.
func (it *Iter) NextElement() (val []byte, ok bool) {
	b := it.b
	i := skipSpace(b, it.i)
	if i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] == it.end {
		it.i = len(b)
		return nil, false
	}
	ve := end(b, i)
	if ve == i { // not a value: stop rather than loop
		it.i = len(b)
		return nil, false
	}
	it.i = ve
	return b[i:ve], true
}

// KeyIs reports whether a raw member key (as NextMember returns it)
// decodes to name.
func KeyIs(raw []byte, name string) bool {
	if Simple(raw) {
		return string(raw) == name
	}
	var buf [64]byte
	k, ok := AppendUnquoted(buf[:0], raw)
	return ok && string(k) == name
}

// Get returns the value of the last member named name of the object v
// (encoding/json's rule for repeated keys); ok is false when there is
// none.
func Get(v []byte, name string) (val []byte, ok bool) {
	it := Members(v)
	for {
		k, x, _, more := it.NextMember()
		if !more {
			return val, ok
		}
		if KeyIs(k, name) {
			val, ok = x, true
		}
	}
}

// Simple reports whether the body of a string (between its quotes) is its
// own value: no escapes and only valid UTF-8, so it needs no decoding.
func Simple(s []byte) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' {
			return false
		}
		if c >= utf8.RuneSelf {
			return utf8.Valid(s[i:]) && !hasByte(s[i:], '\\')
		}
	}
	return true
}

func hasByte(s []byte, c byte) bool {
	for _, x := range s {
		if x == c {
			return true
		}
	}
	return false
}

// AppendUnquoted appends the decoded body of a string (the bytes between
// its quotes) to dst, as encoding/json decodes it: escapes resolved,
// invalid UTF-8 and unpaired surrogates replaced by U+FFFD. ok is false
// for a malformed escape.
func AppendUnquoted(dst, s []byte) ([]byte, bool) {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return dst, false
			}
			switch s[i+1] {
			case '"', '\\', '/', '\'':
				dst = append(dst, s[i+1])
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := hex4(s, i+2)
				if !ok {
					return dst, false
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
						if r2, ok := hex4(s, i+2); ok {
							if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
								dst = utf8.AppendRune(dst, dec)
								i += 6
								continue
							}
						}
					}
					r = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default:
				return dst, false
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				dst = utf8.AppendRune(dst, utf8.RuneError)
			} else {
				dst = append(dst, s[i:i+size]...)
			}
			i += size
		}
	}
	return dst, true
}

func hex4(s []byte, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range s[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}
