package api

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/routebalance/routebalance/routing/proxy/vllmtest"
	"github.com/routebalance/routebalance/telemetry"
	"github.com/routebalance/routebalance/tenants"
)

// BenchmarkInferenceOverhead compares one sequential chat completion sent
// straight to a loopback fake vLLM server with the same request sent
// through RouteBalance (auth, parsing, the scheduler's Router, the proxy):
// the difference of the two is the latency the service adds at light load.
// The -traced variants run the same server with tracing on (the SDK with
// its batch span processor over an exporter that discards), so their
// difference to routed is the cost of the spans.
//
//	go test -run '^$' -bench InferenceOverhead -benchtime 2000x ./api/
func BenchmarkInferenceOverhead(b *testing.B) {
	up := vllmtest.New(b, vllmtest.Config{Model: "m", Tokens: 4})
	e := newInfEnv(b, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	tr := telemetry.NewTracingWith(telemetry.TracingConfig{}, sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	traced := newInfEnv(b, envOpts{realRouter: true, tracer: tr.Provider(), instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	for _, bc := range []struct {
		name, url, auth string
		stream          bool
	}{
		{"direct", up.URL + "/v1/chat/completions", "", false},
		{"routed", e.url + "/v1/chat/completions", "Bearer " + testKey, false},
		{"routed-traced", traced.url + "/v1/chat/completions", "Bearer " + testKey, false},
		{"direct-stream", up.URL + "/v1/chat/completions", "", true},
		{"routed-stream", e.url + "/v1/chat/completions", "Bearer " + testKey, true},
		{"routed-stream-traced", traced.url + "/v1/chat/completions", "Bearer " + testKey, true},
	} {
		body := `{"model":"m","messages":[{"role":"user","content":"hello there"}]}`
		if bc.stream {
			body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello there"}]}`
		}
		b.Run(bc.name, func(b *testing.B) {
			client := &http.Client{}
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, bc.url, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if bc.auth != "" {
					req.Header.Set("Authorization", bc.auth)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

// BenchmarkStreamTTFT measures the time to the first byte of a streamed
// chat completion's body, sequentially, straight to a loopback fake vLLM
// server and through RouteBalance; ttft-p50-µs and ttft-p99-µs are
// reported besides ns/op (the whole stream).
//
//	go test -run '^$' -bench StreamTTFT -benchtime 2000x ./api/
func BenchmarkStreamTTFT(b *testing.B) {
	up := vllmtest.New(b, vllmtest.Config{Model: "m", Tokens: 16})
	e := newInfEnv(b, envOpts{realRouter: true, instances: []tenants.Instance{inst("i1", up.URL, "m")}})
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello there"}]}`
	for _, bc := range []struct{ name, url, auth string }{
		{"direct", up.URL + "/v1/chat/completions", ""},
		{"routed", e.url + "/v1/chat/completions", "Bearer " + testKey},
	} {
		b.Run(bc.name, func(b *testing.B) {
			client := &http.Client{}
			ttft := make([]time.Duration, 0, b.N)
			buf := make([]byte, 1)
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, bc.url, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if bc.auth != "" {
					req.Header.Set("Authorization", bc.auth)
				}
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
				if _, err := io.ReadFull(resp.Body, buf); err != nil {
					b.Fatal(err)
				}
				ttft = append(ttft, time.Since(t0))
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			slices.Sort(ttft)
			b.ReportMetric(float64(ttft[len(ttft)/2].Microseconds()), "ttft-p50-µs")
			b.ReportMetric(float64(ttft[len(ttft)*99/100].Microseconds()), "ttft-p99-µs")
		})
	}
}
