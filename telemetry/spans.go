package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// SpansScope is the instrumentation scope of the inference path's spans
// (the api's root and auth spans, routing/dispatch's route, upstream and
// meter spans). It keeps the name it had when the api started them all.
const SpansScope = "github.com/routebalance/routebalance/api"

// Span attribute keys of the inference path (the table in README.md).
const (
	AttrRequestID    = attribute.Key("routebalance.request_id")
	AttrCluster      = attribute.Key("routebalance.cluster")
	AttrModel        = attribute.Key("routebalance.model")
	AttrPolicy       = attribute.Key("routebalance.policy")
	AttrInstance     = attribute.Key("routebalance.instance")
	AttrStatusCode   = attribute.Key("http.response.status_code")
	AttrStream       = attribute.Key("routebalance.stream")
	AttrAttempt      = attribute.Key("routebalance.attempt")
	AttrBatchSize    = attribute.Key("routebalance.batch_size")
	AttrDecisionUs   = attribute.Key("routebalance.decision_us")
	AttrEstimateUs   = attribute.Key("routebalance.estimate_us")
	AttrQueueWaitMs  = attribute.Key("routebalance.queue_wait_ms")
	AttrPromptTokens = attribute.Key("routebalance.prompt_tokens")
	AttrOutputTokens = attribute.Key("routebalance.output_tokens")
	AttrTTFTMs       = attribute.Key("routebalance.ttft_ms")
	AttrResult       = attribute.Key("routebalance.result")
	AttrTruncated    = attribute.Key("routebalance.truncated")
	AttrTenant       = attribute.Key("routebalance.tenant")
	AttrDerived      = attribute.Key("routebalance.derived")
)

// Spans starts the inference path's spans. When the provider is nil or
// the no-op one (tracing off, the default) its methods do nothing at all:
// no context, no span allocation. Callers set attributes only when
// span.IsRecording(), so unsampled requests cost nothing either. The zero
// Spans is off. It is a small value, safe for concurrent use.
type Spans struct {
	tr trace.Tracer
	on bool
}

// NewSpans returns the Spans of tp (off for nil or a no-op provider).
func NewSpans(tp trace.TracerProvider) Spans {
	if tp == nil {
		return Spans{}
	}
	if _, off := tp.(noop.TracerProvider); off {
		return Spans{}
	}
	return Spans{tr: tp.Tracer(SpansScope), on: true}
}

// On reports whether spans are recorded.
func (s Spans) On() bool { return s.on }

// Start begins a span under ctx's span; with tracing off it returns ctx
// and a non-recording span.
func (s Spans) Start(ctx context.Context, name string) (context.Context, trace.Span) {
	if !s.on {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return s.tr.Start(ctx, name)
}

// StartServer starts a request's root (server-kind) span; the option is
// built only when tracing is on (a variadic option would allocate even
// when off).
func (s Spans) StartServer(ctx context.Context, name string) (context.Context, trace.Span) {
	if !s.on {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return s.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
}

// StartNow is Start with the span's start time returned (zero when
// tracing is off), for spans whose children are placed in time by hand.
func (s Spans) StartNow(ctx context.Context, name string) (context.Context, trace.Span, time.Time) {
	if !s.on {
		return ctx, trace.SpanFromContext(context.Background()), time.Time{}
	}
	t0 := time.Now()
	ctx, sp := s.tr.Start(ctx, name, trace.WithTimestamp(t0))
	return ctx, sp, t0
}

// StartAt begins a span under ctx's span that started at t0 (a phase
// rebuilt after the fact); with tracing off it is Start.
func (s Spans) StartAt(ctx context.Context, name string, t0 time.Time) (context.Context, trace.Span) {
	if !s.on {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return s.tr.Start(ctx, name, trace.WithTimestamp(t0))
}
