package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// FuzzParseUpstreamError: any upstream error body becomes a StatusError
// with the upstream's status and a message, and an OpenAI envelope's
// message is kept as sent.
func FuzzParseUpstreamError(f *testing.F) {
	for _, s := range []string{
		`{"error":{"message":"model overloaded","type":"server_error","param":null,"code":503}}`,
		`{"object":"error","message":"This model's maximum context length is 4096","type":"BadRequestError","param":null,"code":400}`,
		`{"error":"plain string"}`, `{"error":{"message":""}}`, `{"error":{"code":"x"}}`, `{"error":null}`, `{"message":1}`,
		"<html>502 Bad Gateway</html>", "", "   ", `{"error":{"message":"m","param":{"a":1},"code":1.5e300}}`, "\xff\xfe",
	} {
		f.Add(500, []byte(s))
		f.Add(429, []byte(s))
	}
	f.Fuzz(func(t *testing.T, status int, raw []byte) {
		se := parseUpstreamError(status, raw)
		if se == nil || se.Status != status {
			t.Fatalf("parseUpstreamError(%d, %q) = %+v", status, raw, se)
		}
		if se.Message == "" && http.StatusText(status) != "" {
			t.Fatalf("parseUpstreamError(%d, %q): empty message", status, raw)
		}
		var env struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &env) == nil && env.Error.Message != "" && se.Message != env.Error.Message {
			t.Fatalf("parseUpstreamError(%q).Message = %q, want the envelope's %q", raw, se.Message, env.Error.Message)
		}
	})
}

// splitLines is the reference: lines split at "\n", one "\r" before it
// dropped, no empty line after a final newline.
func splitLines(in []byte) [][]byte {
	if len(in) == 0 {
		return nil
	}
	parts := bytes.Split(in, []byte("\n"))
	if len(parts[len(parts)-1]) == 0 {
		parts = parts[:len(parts)-1]
	}
	for i, p := range parts {
		parts[i] = bytes.TrimSuffix(p, []byte("\r"))
	}
	return parts
}

// FuzzReadLine: the SSE relay's line reader returns the stream's lines
// as the reference split does, never a line holding "\n", and stops with
// an error instead of buffering a line far past max.
func FuzzReadLine(f *testing.F) {
	for _, s := range []string{
		"data: {\"a\":1}\n\ndata: [DONE]\n\n", "a\r\nb\r\n", "no newline", "\n\n\n", "\r\n", "x\r\r\n", ": comment\nevent: e\n",
		strings.Repeat("y", 100) + "\nshort\n", "\r", "",
	} {
		f.Add([]byte(s), uint8(40))
	}
	f.Fuzz(func(t *testing.T, in []byte, maxLen uint8) {
		const bufSize = 16 // bufio's smallest, so long lines take the slow path
		max := int(maxLen)
		br := bufio.NewReaderSize(bytes.NewReader(in), bufSize)
		want := splitLines(in)
		var got [][]byte
		eof := false
		for {
			line, err := readLine(br, max)
			if err == io.EOF {
				eof = true
				break
			}
			if err != nil {
				if !strings.Contains(err.Error(), "longer than") {
					t.Fatalf("readLine: unexpected error %v", err)
				}
				if len(got) >= len(want) || len(want[len(got)]) <= max {
					t.Fatalf("readLine refused line %d of %q as too long (max %d)", len(got), in, max)
				}
				break
			}
			if bytes.IndexByte(line, '\n') >= 0 || len(line) > max+bufSize+1 {
				t.Fatalf("readLine returned %q (max %d)", line, max)
			}
			got = append(got, append([]byte(nil), line...))
			if len(got) > len(want) {
				t.Fatalf("readLine returned more lines than %q has: %q", in, got)
			}
		}
		if eof && len(got) != len(want) {
			t.Fatalf("readLine read %d lines of %q to EOF, want %d", len(got), in, len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("line %d of %q = %q, want %q", i, in, got[i], want[i])
			}
		}
	})
}
