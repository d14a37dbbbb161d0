package api

import (
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// accessWriter writes access-log lines straight to w, byte for byte as
// slog.NewJSONHandler(w, nil) writes them (time in RFC 3339 with
// nanoseconds, level, msg, then the attributes in order), from a pooled
// buffer: a line costs no allocation. Only the kinds the access log uses
// (string, int64, float64, bool) are encoded here; write reports false for
// any other and the caller goes through slog. Safe for concurrent use: one
// Write per line, under a lock, as slog's handler does.
type accessWriter struct {
	mu   sync.Mutex
	w    io.Writer
	pool sync.Pool // *[]byte
}

func newAccessWriter(w io.Writer) *accessWriter {
	a := &accessWriter{w: w}
	a.pool.New = func() any { b := make([]byte, 0, 512); return &b }
	return a
}

// write writes one line with time t, or returns false (nothing written)
// when an attribute is of a kind it does not encode.
func (a *accessWriter) write(t time.Time, level slog.Level, msg string, attrs []slog.Attr) bool {
	for i := range attrs {
		switch attrs[i].Value.Kind() {
		case slog.KindString, slog.KindInt64, slog.KindFloat64, slog.KindBool:
		default:
			return false
		}
		if f := attrs[i].Value; f.Kind() == slog.KindFloat64 && (math.IsNaN(f.Float64()) || math.IsInf(f.Float64(), 0)) {
			return false
		}
	}
	if y := t.Year(); y < 0 || y > 9999 {
		return false
	}
	bp := a.pool.Get().(*[]byte)
	b := appendAccessLine((*bp)[:0], t, level, msg, attrs)
	a.mu.Lock()
	a.w.Write(b) //nolint:errcheck // as slog: a failed log write is not the request's error
	a.mu.Unlock()
	if cap(b) <= 16<<10 {
		*bp = b
		a.pool.Put(bp)
	}
	return true
}

// appendAccessLine appends the JSON line (with its newline) to b.
func appendAccessLine(b []byte, t time.Time, level slog.Level, msg string, attrs []slog.Attr) []byte {
	b = append(b, `{"time":"`...)
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"`...)
	b = appendJSONString(b, level.String())
	b = append(b, `","msg":"`...)
	b = appendJSONString(b, msg)
	b = append(b, '"')
	for i := range attrs {
		b = append(b, ',', '"')
		b = appendJSONString(b, attrs[i].Key)
		b = append(b, '"', ':')
		v := attrs[i].Value
		switch v.Kind() {
		case slog.KindString:
			b = append(b, '"')
			b = appendJSONString(b, v.String())
			b = append(b, '"')
		case slog.KindInt64:
			b = strconv.AppendInt(b, v.Int64(), 10)
		case slog.KindFloat64:
			b = appendJSONFloat(b, v.Float64())
		case slog.KindBool:
			b = strconv.AppendBool(b, v.Bool())
		}
	}
	return append(b, '}', '\n')
}

// appendJSONFloat encodes f as encoding/json does (which slog's JSON
// handler calls): %f-like between 1e-6 and 1e21, exponent form outside,
// with a two-digit negative exponent shortened (e-09 → e-9).
func appendJSONFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendJSONString escapes s as slog's JSON handler does: quote, backslash
// and control characters escaped (\n, \r, \t by name), invalid UTF-8 as
// \ufffd, U+2028 and U+2029 escaped; everything else (including <, >, &)
// as is.
func appendJSONString(b []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			b = append(b, '\\')
			switch c {
			case '\\', '"':
				b = append(b, c)
			case '\n':
				b = append(b, 'n')
			case '\r':
				b = append(b, 'r')
			case '\t':
				b = append(b, 't')
			default:
				b = append(b, 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}
