package api

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/routebalance/routebalance/internal/syncbuf"
	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/telemetry"
	"github.com/routebalance/routebalance/tenants"
)

// lockedBuffer is a buffer safe for concurrent writers and readers.
type lockedBuffer = syncbuf.Buffer

// attrOf returns a span attribute's value, or an invalid Value.
func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// endedTrace waits (bounded) until the root span named root has ended —
// a stream's root ends on the stream goroutine after the client has read
// the body — and returns every ended span.
func endedTrace(t *testing.T, sr *tracetest.SpanRecorder, root string) []sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(testwait.Bound)
	for {
		spans := sr.Ended()
		for _, s := range spans {
			if s.Name() == root {
				return spans
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("root span %q never ended; have %d spans", root, len(spans))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTracingSpanTree(t *testing.T) {
	const root = "POST /v1/chat/completions"
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	for _, tc := range []struct {
		name   string
		body   string
		parent string // the caller's traceparent, if any
	}{
		{"non-streamed", `{"model":"m","messages":[{"role":"user","content":"hello there"}]}`, ""},
		{"streamed", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}`, ""},
		{"caller's trace continued", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, "00-" + callerTrace + "-00f067aa0ba902b7-01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sr := tracetest.NewSpanRecorder()
			tr := telemetry.NewTracingWith(telemetry.TracingConfig{}, sdktrace.WithSpanProcessor(sr))
			up := vllmtest.New(t, vllmtest.Config{Model: "m", Tokens: 3})
			logs := &lockedBuffer{}
			e := newInfEnv(t, envOpts{realRouter: true, tracer: tr.Provider(), logTo: logs, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
			var hdr map[string]string
			if tc.parent != "" {
				hdr = map[string]string{"traceparent": tc.parent}
			}
			resp, body := e.post(t, "/v1/chat/completions", testKey, tc.body, hdr)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			rid := resp.Header.Get(HeaderRequestID)
			spans := endedTrace(t, sr, root)

			byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
			for _, s := range spans {
				byID[s.SpanContext().SpanID()] = s
			}
			var paths []string
			var rootSpan sdktrace.ReadOnlySpan
			for _, s := range spans {
				path := s.Name()
				for p := s; p.Parent().IsValid() && !p.Parent().IsRemote(); {
					parent, ok := byID[p.Parent().SpanID()]
					if !ok {
						t.Fatalf("span %q has a parent that was not recorded", s.Name())
					}
					path = parent.Name() + " > " + path
					p = parent
				}
				paths = append(paths, path)
				if !s.Parent().IsValid() || s.Parent().IsRemote() {
					rootSpan = s
				}
				if s.SpanContext().TraceID() != spans[0].SpanContext().TraceID() {
					t.Errorf("span %q is in another trace", s.Name())
				}
			}
			sort.Strings(paths)
			want := []string{
				root,
				root + " > auth",
				root + " > meter",
				root + " > route",
				root + " > route > batch wait",
				root + " > route > estimate",
				root + " > route > score",
				root + " > upstream",
			}
			if diff := cmp.Diff(want, paths); diff != "" {
				t.Fatalf("span tree (-want +got):\n%s", diff)
			}

			got := map[string]string{
				"request_id": attrOf(rootSpan, telemetry.AttrRequestID).AsString(),
				"cluster":    attrOf(rootSpan, telemetry.AttrCluster).AsString(),
				"model":      attrOf(rootSpan, telemetry.AttrModel).AsString(),
				"policy":     attrOf(rootSpan, telemetry.AttrPolicy).AsString(),
				"status":     attrOf(rootSpan, telemetry.AttrStatusCode).Emit(),
				"kind":       rootSpan.SpanKind().String(),
			}
			wantAttrs := map[string]string{
				"request_id": rid, "cluster": "cl-t1", "model": "m", "policy": resp.Header.Get(hdrPolicyOut),
				"status": "200", "kind": "server",
			}
			if diff := cmp.Diff(wantAttrs, got); diff != "" || rid == "" {
				t.Errorf("root attributes (-want +got):\n%s", diff)
			}

			if tc.parent != "" {
				if got := rootSpan.SpanContext().TraceID().String(); got != callerTrace || !rootSpan.Parent().IsRemote() {
					t.Errorf("root in trace %s (remote parent %v), want the caller's %s", got, rootSpan.Parent().IsRemote(), callerTrace)
				}
			} else if rootSpan.Parent().IsValid() {
				t.Errorf("root has a parent %v without a traceparent", rootSpan.Parent())
			}

			// The access log line carries the same request id and the trace id.
			var logged []string
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var l struct {
					Msg       string `json:"msg"`
					RequestID string `json:"request_id"`
					TraceID   string `json:"trace_id"`
				}
				if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "http request" {
					logged = append(logged, l.RequestID+" "+l.TraceID)
				}
			}
			if diff := cmp.Diff([]string{rid + " " + rootSpan.SpanContext().TraceID().String()}, logged); diff != "" {
				t.Errorf("access log (-want +got):\n%s", diff)
			}

			named := map[string]sdktrace.ReadOnlySpan{}
			for _, s := range spans {
				named[s.Name()] = s
			}
			route, upstream := named["route"], named["upstream"]
			if bs := attrOf(route, telemetry.AttrBatchSize).AsInt64(); bs != 1 {
				t.Errorf("route batch size %d, want 1", bs)
			}
			if attrOf(upstream, telemetry.AttrOutputTokens).AsInt64() != 3 || attrOf(upstream, telemetry.AttrResult).AsString() != "ok" {
				t.Errorf("upstream attributes %v", upstream.Attributes())
			}
			// The instance joined the trace as a child of the upstream span.
			var sent []string
			for _, r := range up.Requests() {
				sent = append(sent, r.Header.Values("Traceparent")...)
			}
			wantTP := fmt.Sprintf("00-%s-%s-01", upstream.SpanContext().TraceID(), upstream.SpanContext().SpanID())
			if diff := cmp.Diff([]string{wantTP}, sent); diff != "" {
				t.Errorf("traceparent sent upstream (-want +got):\n%s", diff)
			}
			// The derived phases tile the route span in order.
			bw, est, sc := named["batch wait"], named["estimate"], named["score"]
			if !bw.StartTime().Equal(route.StartTime()) || !bw.EndTime().Equal(est.StartTime()) ||
				!est.EndTime().Equal(sc.StartTime()) || sc.EndTime().After(route.EndTime()) {
				t.Errorf("phases do not tile the route span: route %v–%v, batch wait %v–%v, estimate %v–%v, score %v–%v",
					route.StartTime(), route.EndTime(), bw.StartTime(), bw.EndTime(), est.StartTime(), est.EndTime(), sc.StartTime(), sc.EndTime())
			}
			// The stream's root outlives the upstream span, which
			// outlives the route.
			if rootSpan.EndTime().Before(upstream.EndTime()) || upstream.StartTime().Before(route.EndTime()) {
				t.Errorf("root ends %v before upstream ends %v, or upstream starts before route ends", rootSpan.EndTime(), upstream.EndTime())
			}
		})
	}
}

func TestTracingFailedAuthSpan(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tr := telemetry.NewTracingWith(telemetry.TracingConfig{}, sdktrace.WithSpanProcessor(sr))
	e := newInfEnv(t, envOpts{tracer: tr.Provider()})
	resp, _ := e.post(t, "/v1/chat/completions", "rb_nope", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	if resp.StatusCode != 401 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spans := endedTrace(t, sr, "POST /v1/chat/completions")
	got := map[string]string{}
	for _, s := range spans {
		got[s.Name()] = s.Status().Code.String()
		if !s.Parent().IsValid() {
			got["status"] = attrOf(s, telemetry.AttrStatusCode).Emit()
		}
	}
	want := map[string]string{"POST /v1/chat/completions": "Unset", "auth": "Error", "status": "401"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
}
