package api

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"
)

// accessLogCtx returns a fiber context for an answered POST from ip with
// the locals the inference path sets.
func accessLogCtx(t testing.TB, s *Server, ip string) *fasthttp.RequestCtx {
	t.Helper()
	var req fasthttp.Request
	req.SetRequestURI("/v1/chat/completions?secret=1")
	req.Header.SetMethod("POST")
	req.SetBodyString(`{"model":"auto"}`)
	var fctx fasthttp.RequestCtx
	fctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(ip), Port: 4242}, nil)
	fctx.Response.SetStatusCode(200)
	fctx.Response.SetBodyString(`{"id":"x"}`)
	return &fctx
}

func TestAccessLogLine(t *testing.T) {
	var out bytes.Buffer
	s := New(Config{}, Deps{Log: slog.New(slog.NewJSONHandler(&out, nil))})
	for _, ip := range []string{"203.0.113.7", "2001:db8::1", "203.0.113.7"} {
		out.Reset()
		fctx := accessLogCtx(t, s, ip)
		c := s.app.AcquireCtx(fctx)
		c.Locals(localRequestID, "req-1")
		c.Locals(localTenantID, "t-1")
		s.logRequest(c, time.Now())
		s.app.ReleaseCtx(c)
		var got map[string]any
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("line %q: %v", out.String(), err)
		}
		delete(got, "time")
		delete(got, "duration_ms")
		want := map[string]any{"level": "INFO", "msg": "http request", "request_id": "req-1", "method": "POST",
			"path": "/v1/chat/completions", "status": 200.0, "bytes_in": 16.0, "bytes_out": 10.0, "ip": ip, "tenant_id": "t-1"}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("access line for %s (-want +got):\n%s", ip, d)
		}
	}
}

// TestAccessLogAllocations holds the access log to the line itself: the
// attributes live on the stack and the client address is interned, so the
// only allocations are slog's own for the line (its Record spills the
// attributes past its five inline ones into one slice, and its JSON
// handler encodes a float with encoding/json); the buffer is pooled.
func TestAccessLogAllocations(t *testing.T) {
	s := New(Config{}, Deps{Log: slog.New(slog.NewJSONHandler(discard{}, nil))})
	fctx := accessLogCtx(t, s, "198.51.100.9")
	c := s.app.AcquireCtx(fctx)
	defer s.app.ReleaseCtx(c)
	c.Locals(localRequestID, "req-1")
	c.Locals(localTenantID, "t-1")
	start := time.Now()
	s.logRequest(c, start) // interns the address
	if n := testing.AllocsPerRun(200, func() { s.logRequest(c, start) }); n > 2 {
		t.Errorf("access log allocates %v times per request, want at most 2 (slog's attribute slice and float encoding)", n)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
