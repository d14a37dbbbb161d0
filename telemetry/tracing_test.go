package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/trace/noop"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestTracingConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  TracingConfig
		ok   bool
	}{
		{"default (off)", DefaultTracingConfig(), true},
		{"http endpoint", TracingConfig{Endpoint: "http://collector:4318", SampleRatio: 0.5}, true},
		{"https endpoint with path", TracingConfig{Endpoint: "https://otel.example.com/v1/traces"}, true},
		{"ratio above 1", TracingConfig{Endpoint: "http://c:4318", SampleRatio: 1.5}, false},
		{"negative ratio", TracingConfig{SampleRatio: -0.1}, false},
		{"no scheme", TracingConfig{Endpoint: "collector:4318"}, false},
		{"grpc scheme", TracingConfig{Endpoint: "grpc://collector:4317"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// TestTracingOff: the default config builds no SDK, hands out the no-op
// provider and has nothing to flush.
func TestTracingOff(t *testing.T) {
	tr, err := NewTracing(context.Background(), DefaultTracingConfig())
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() || tr.sdk != nil {
		t.Error("tracing enabled without an endpoint")
	}
	if _, ok := tr.Provider().(noop.TracerProvider); !ok {
		t.Errorf("provider %T, want noop.TracerProvider", tr.Provider())
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// collector is a loopback OTLP/HTTP trace receiver.
type collector struct {
	mu    sync.Mutex
	names []string
	paths []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	c.paths = append(c.paths, r.URL.Path)
	for _, rs := range req.ResourceSpans {
		svc := ""
		for _, kv := range rs.Resource.GetAttributes() {
			if kv.Key == "service.name" {
				svc = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names = append(c.names, svc+"/"+s.Name)
			}
		}
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// TestTracingExportsOTLP sends spans to a loopback collector and checks
// that Shutdown flushes them with the configured service name; a ratio
// sampler that drops everything sends none.
func TestTracingExportsOTLP(t *testing.T) {
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	tr, err := NewTracing(context.Background(), TracingConfig{Endpoint: srv.URL, ServiceName: "rb-test"})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Enabled() {
		t.Fatal("tracing off with an endpoint")
	}
	tracer := tr.Provider().Tracer("test")
	ctx, parent := tracer.Start(context.Background(), "POST /v1/chat/completions")
	_, child := tracer.Start(ctx, "auth")
	child.End()
	parent.End()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if diff := cmp.Diff([]string{"rb-test/auth", "rb-test/POST /v1/chat/completions"}, col.names); diff != "" {
		t.Errorf("exported spans (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"/v1/traces"}, col.paths); diff != "" {
		t.Errorf("export paths (-want +got):\n%s", diff)
	}
}

func TestTracingSampleRatio(t *testing.T) {
	tr := NewTracingWith(TracingConfig{SampleRatio: 1e-12})
	kept := 0
	for i := 0; i < 200; i++ {
		_, sp := tr.Provider().Tracer("test").Start(context.Background(), "x")
		if sp.IsRecording() {
			kept++
		}
		sp.End()
	}
	if kept > 0 {
		t.Errorf("%d of 200 traces sampled at ratio 1e-12", kept)
	}
}
