package api

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"

	"github.com/routebalance/routebalance/routing"
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
		s.logRequest(c, time.Now(), nil)
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
	s.logRequest(c, start, nil) // interns the address
	if n := testing.AllocsPerRun(200, func() { s.logRequest(c, start, nil) }); n > 2 {
		t.Errorf("access log allocates %v times per request, want at most 2 (slog's attribute slice and float encoding)", n)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestDecisionHeaders checks the decision's headers and that writing them
// allocates nothing.
func TestDecisionHeaders(t *testing.T) {
	s := New(Config{}, Deps{Log: slog.New(slog.NewJSONHandler(discard{}, nil))})
	fctx := accessLogCtx(t, s, "198.51.100.9")
	c := s.app.AcquireCtx(fctx)
	defer s.app.ReleaseCtx(c)
	a := &routing.Assignment{Decision: routing.Decision{Instance: routing.Instance{ID: "i-1", Model: "m-1"}, Policy: "routebalance",
		DecisionTime: 1234 * time.Microsecond, BatchSize: 3, PredictedQuality: 0.61234, PredictedE2E: 1500 * time.Millisecond,
		PredictedCostUSD: 0.000123456789, QueueWait: 2500 * time.Microsecond, QualitySource: routing.SourceCluster}}
	c.Set(hdrRelaxed, "stale")
	setDecisionHeaders(c, a)
	got := map[string]string{}
	for _, k := range []string{hdrInstance, hdrModel, hdrPolicyOut, hdrDecisionUs, hdrBatchSize, hdrPredictedQuality,
		hdrPredictedE2EMs, hdrPredictedCostUSD, hdrQueueWaitMs, hdrRelaxed, hdrQualitySource} {
		got[k] = string(c.Response().Header.Peek(k))
	}
	want := map[string]string{hdrInstance: "i-1", hdrModel: "m-1", hdrPolicyOut: "routebalance", hdrDecisionUs: "1234",
		hdrBatchSize: "3", hdrPredictedQuality: "0.6123", hdrPredictedE2EMs: "1500.0", hdrPredictedCostUSD: "0.000123457",
		hdrQueueWaitMs: "2.5", hdrRelaxed: "", hdrQualitySource: "cluster"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("headers (-want +got):\n%s", d)
	}
	a.Relaxed = []string{"ttft"}
	setDecisionHeaders(c, a)
	if v := string(c.Response().Header.Peek(hdrRelaxed)); v != "ttft" {
		t.Errorf("%s = %q, want ttft", hdrRelaxed, v)
	}
	a.Relaxed = nil
	if n := testing.AllocsPerRun(100, func() { setDecisionHeaders(c, a) }); n != 0 {
		t.Errorf("setDecisionHeaders allocates %v times, want 0", n)
	}
}

// TestAccessWriterMatchesSlog checks that the access writer writes the
// bytes slog's JSON handler writes for the same record: awkward strings
// (quotes, control characters, invalid UTF-8, U+2028, HTML characters,
// non-ASCII), every float form encoding/json has, ints and bools.
func TestAccessWriterMatchesSlog(t *testing.T) {
	ts := time.Date(2026, 12, 1, 13, 4, 5, 6_789_000, time.UTC)
	strs := []string{"", "plain", `q"uo\te`, "a\nb\rc\td\x00e\x1f\x7f", "bad\xffutf8\xc3", "line\u2028sep\u2029", "<a href='x'>&amp;</a>", "héllo 世界 🚀", "/v1/chat/completions"}
	floats := []float64{0, 0.001, 1.5, 1234.567, 1e-7, -2.5e-9, 1e21, 123456789012, -0.25, 5e-324, math.MaxFloat64}
	var cases [][]slog.Attr
	for _, s := range strs {
		cases = append(cases, []slog.Attr{slog.String("path", s), slog.String(s+"k", "v")})
	}
	for _, f := range floats {
		cases = append(cases, []slog.Attr{slog.Float64("duration_ms", f)})
	}
	cases = append(cases, []slog.Attr{slog.Int("status", 200), slog.Int64("bytes_out", -7), slog.Bool("stream", true), slog.Bool("b", false)},
		nil)
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelError} {
		for _, attrs := range cases {
			var want bytes.Buffer
			r := slog.NewRecord(ts, level, "http request", 0)
			r.AddAttrs(attrs...)
			if err := slog.NewJSONHandler(&want, nil).Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if !newAccessWriter(&got).write(ts, level, "http request", attrs) {
				t.Fatalf("write(%v) refused", attrs)
			}
			if got.String() != want.String() {
				t.Errorf("attrs %v:\n got %q\nwant %q", attrs, got.String(), want.String())
			}
		}
	}
	// Kinds it does not encode, NaN and years slog formats otherwise are
	// left to slog.
	for _, attrs := range [][]slog.Attr{{slog.Any("x", []int{1})}, {slog.Duration("d", time.Second)}, {slog.Float64("f", math.NaN())}} {
		var got bytes.Buffer
		if newAccessWriter(&got).write(ts, slog.LevelInfo, "m", attrs) || got.Len() != 0 {
			t.Errorf("write(%v) = true (%q), want false and nothing written", attrs, got.String())
		}
	}
	if newAccessWriter(&bytes.Buffer{}).write(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), slog.LevelInfo, "m", nil) {
		t.Error("write with year 10000 = true, want false")
	}
}

// TestAccessLogWriterLine checks the line logRequest writes through
// Deps.AccessLog (same fields as through slog, the level still Log's) and
// that it allocates nothing.
func TestAccessLogWriterLine(t *testing.T) {
	var out, slogOut bytes.Buffer
	s := New(Config{}, Deps{Log: slog.New(slog.NewJSONHandler(&slogOut, nil)), AccessLog: &out})
	fctx := accessLogCtx(t, s, "203.0.113.7")
	c := s.app.AcquireCtx(fctx)
	defer s.app.ReleaseCtx(c)
	c.Locals(localRequestID, "req-1")
	c.Locals(localTenantID, "t-1")
	c.Locals(localTraceID, "0af7651916cd43dd8448eb211c80319c")
	s.logRequest(c, time.Now(), nil)
	if slogOut.Len() != 0 {
		t.Errorf("the line went through slog too: %q", slogOut.String())
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("line %q: %v", out.String(), err)
	}
	if _, err := time.Parse(time.RFC3339, got["time"].(string)); err != nil {
		t.Errorf("time %q: %v", got["time"], err)
	}
	if d, ok := got["duration_ms"].(float64); !ok || d < 0 {
		t.Errorf("duration_ms = %v", got["duration_ms"])
	}
	delete(got, "time")
	delete(got, "duration_ms")
	want := map[string]any{"level": "INFO", "msg": "http request", "request_id": "req-1", "method": "POST",
		"path": "/v1/chat/completions", "status": 200.0, "bytes_in": 16.0, "bytes_out": 10.0, "ip": "203.0.113.7",
		"tenant_id": "t-1", "trace_id": "0af7651916cd43dd8448eb211c80319c"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("access line (-want +got):\n%s", d)
	}
	start := time.Now()
	s.access.w = discard{}
	if n := testing.AllocsPerRun(200, func() { s.logRequest(c, start, nil) }); n != 0 {
		t.Errorf("access log through Deps.AccessLog allocates %v times per request, want 0", n)
	}
	// The logger's level still rules: an INFO line is not written at WARN.
	out.Reset()
	s = New(Config{}, Deps{Log: slog.New(slog.NewJSONHandler(&slogOut, &slog.HandlerOptions{Level: slog.LevelWarn})), AccessLog: &out})
	c2 := s.app.AcquireCtx(accessLogCtx(t, s, "203.0.113.7"))
	defer s.app.ReleaseCtx(c2)
	s.logRequest(c2, time.Now(), nil)
	if out.Len() != 0 {
		t.Errorf("INFO line written at level WARN: %q", out.String())
	}
}

// BenchmarkAccessLog compares one access line through slog's JSON handler
// with the same line through Deps.AccessLog.
func BenchmarkAccessLog(b *testing.B) {
	for _, direct := range []bool{false, true} {
		name := "slog"
		deps := Deps{Log: slog.New(slog.NewJSONHandler(discard{}, nil))}
		if direct {
			name, deps.AccessLog = "writer", discard{}
		}
		b.Run(name, func(b *testing.B) {
			s := New(Config{}, deps)
			c := s.app.AcquireCtx(accessLogCtx(b, s, "198.51.100.9"))
			defer s.app.ReleaseCtx(c)
			c.Locals(localRequestID, "0123456789abcdef01234567")
			c.Locals(localTenantID, "t-1")
			start := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				s.logRequest(c, start, nil)
			}
		})
	}
}
