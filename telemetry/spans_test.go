package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestTracingOffCostsNothing: without a provider, or with the no-op one
// telemetry returns by default, the inference path's span calls allocate nothing
// and record nothing.
func TestTracingOffCostsNothing(t *testing.T) {
	off, err := NewTracing(context.Background(), DefaultTracingConfig())
	if err != nil {
		t.Fatal(err)
	}
	for name, tp := range map[string]trace.TracerProvider{"nil": nil, "noop": noop.NewTracerProvider(), "default": off.Provider()} {
		tr := NewSpans(tp)
		if tr.On() {
			t.Errorf("%s: tracing on", name)
		}
		ctx := context.Background()
		allocs := testing.AllocsPerRun(100, func() {
			c, sp := tr.Start(ctx, "auth")
			c2, root := tr.StartServer(ctx, "POST /v1/chat/completions")
			c3, route, t0 := tr.StartNow(ctx, "route")
			if sp.IsRecording() || root.IsRecording() || route.IsRecording() || c != ctx || c2 != ctx || c3 != ctx || !t0.IsZero() {
				t.Fatalf("%s: recording span", name)
			}
			sp.End()
			root.End()
			route.End()
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per span, want 0", name, allocs)
		}
	}
	if tr := NewSpans(NewTracingWith(TracingConfig{}).Provider()); !tr.On() {
		t.Error("SDK provider: tracing off")
	}
}
