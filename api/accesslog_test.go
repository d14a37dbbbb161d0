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
