package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracingConfig configures OpenTelemetry tracing. With an empty Endpoint
// tracing is off: the provider is a no-op and no SDK is built.
type TracingConfig struct {
	// Endpoint is the OTLP/HTTP collector URL, e.g.
	// "http://otel-collector:4318" (the exporter appends /v1/traces when
	// the URL has no path). Empty turns tracing off.
	Endpoint string
	// ServiceName is the service.name resource attribute (default
	// "routebalance").
	ServiceName string
	// SampleRatio is the fraction of new traces kept, in (0, 1]
	// (default 1). A sampled parent's decision is always followed.
	SampleRatio float64
}

// DefaultTracingConfig returns tracing off, service "routebalance", every
// trace sampled once an endpoint is set.
func DefaultTracingConfig() TracingConfig {
	return TracingConfig{ServiceName: "routebalance", SampleRatio: 1}
}

// Validate reports a malformed endpoint or a ratio outside [0, 1]
// (0 takes the default).
func (c TracingConfig) Validate() error {
	if c.SampleRatio < 0 || c.SampleRatio > 1 {
		return fmt.Errorf("tracing: sample ratio %v is not in (0, 1]", c.SampleRatio)
	}
	if c.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		return fmt.Errorf("tracing: endpoint: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("tracing: endpoint %q must be an http:// or https:// URL", c.Endpoint)
	}
	return nil
}

// Tracing owns the process's trace provider: a batching OTLP/HTTP
// exporter when an endpoint is configured, a no-op provider otherwise.
// It is passed to the components that trace (api.InferenceDeps.Tracer);
// it is never installed as the otel global.
type Tracing struct {
	provider trace.TracerProvider
	sdk      *sdktrace.TracerProvider
}

// NewTracing builds the provider for cfg. Zero fields take the defaults of
// DefaultTracingConfig. The exporter connects lazily: a collector that is
// down costs dropped spans, not a failed start.
func NewTracing(ctx context.Context, cfg TracingConfig) (*Tracing, error) {
	def := DefaultTracingConfig()
	if cfg.ServiceName == "" {
		cfg.ServiceName = def.ServiceName
	}
	if cfg.SampleRatio == 0 {
		cfg.SampleRatio = def.SampleRatio
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Endpoint == "" {
		return &Tracing{provider: noop.NewTracerProvider()}, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(tracesURL(cfg.Endpoint)))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	return NewTracingWith(cfg, sdktrace.WithBatcher(exp)), nil
}

// tracesURL appends the OTLP traces path to a bare collector URL (as
// OTEL_EXPORTER_OTLP_ENDPOINT does); a URL with a path is used as is.
func tracesURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Path != "" && u.Path != "/") {
		return endpoint
	}
	u.Path = "/v1/traces"
	return u.String()
}

// NewTracingWith builds an SDK provider for cfg with the given span
// processors (tests pass a tracetest.SpanRecorder); cfg.Endpoint is
// ignored.
func NewTracingWith(cfg TracingConfig, opts ...sdktrace.TracerProviderOption) *Tracing {
	if cfg.ServiceName == "" {
		cfg.ServiceName = DefaultTracingConfig().ServiceName
	}
	ratio := cfg.SampleRatio
	if ratio <= 0 || ratio > 1 {
		ratio = 1
	}
	res := resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName))
	opts = append([]sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	}, opts...)
	sdk := sdktrace.NewTracerProvider(opts...)
	return &Tracing{provider: sdk, sdk: sdk}
}

// Provider returns the trace provider to hand to the tracing components.
func (t *Tracing) Provider() trace.TracerProvider { return t.provider }

// Enabled reports whether spans are recorded and exported.
func (t *Tracing) Enabled() bool { return t.sdk != nil }

// Shutdown flushes buffered spans and stops the exporter; a no-op when
// tracing is off. Bound ctx: an unreachable collector waits until it ends.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	if err := t.sdk.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}
