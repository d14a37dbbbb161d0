package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
)

// TestTraceContextPropagatesUpstream: with a span in Open's ctx the
// instance receives a W3C traceparent naming that span (version 00, its
// trace and span ids, sampled); without one, or with the propagator turned
// off, it receives none.
func TestTraceContextPropagatesUpstream(t *testing.T) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	spanCtx, span := tp.Tracer("test").Start(context.Background(), "upstream")
	defer span.End()
	sc := span.SpanContext()
	if !sc.IsValid() {
		t.Fatal("recording tracer gave an invalid span context")
	}

	for _, tc := range []struct {
		name string
		ctx  context.Context
		prop propagation.TextMapPropagator // nil: the default
		want []string
	}{
		{"span, default propagator", spanCtx, nil, []string{fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())}},
		{"no span", context.Background(), nil, nil},
		{"span, propagation off", spanCtx, propagation.NewCompositeTextMapPropagator(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := vllmtest.New(t, vllmtest.Config{APIKey: "up-secret", Tokens: 2})
			p, err := New(Config{}, Deps{Clock: &stepClock{now: time.Unix(1700000000, 0), step: time.Millisecond}, Propagator: tc.prop})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			call := &Call{Endpoint: Chat, PromptTokens: 3, Body: rawBody(t, `{"model":"auto","messages":[{"role":"user","content":"hi"}]}`)}
			resp, err := p.Open(tc.ctx, instance(up.URL), call)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if res := resp.Relay(tc.ctx, &recorder{}, nil); res.Outcome.Err != nil {
				t.Fatalf("Relay: %v", res.Outcome.Err)
			}
			reqs := up.Requests()
			if len(reqs) != 1 {
				t.Fatalf("upstream saw %d requests, want 1", len(reqs))
			}
			if diff := cmp.Diff(tc.want, reqs[0].Header.Values("Traceparent")); diff != "" {
				t.Errorf("upstream traceparent (-want +got):\n%s", diff)
			}
		})
	}
}
