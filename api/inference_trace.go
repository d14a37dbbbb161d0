package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy"
)

// tracerName is the instrumentation scope of the inference spans.
const tracerName = "github.com/routebalance/routebalance/api"

// Span attribute keys (documented in telemetry/README.md).
const (
	attrRequestID    = attribute.Key("routebalance.request_id")
	attrCluster      = attribute.Key("routebalance.cluster")
	attrModel        = attribute.Key("routebalance.model")
	attrPolicy       = attribute.Key("routebalance.policy")
	attrInstance     = attribute.Key("routebalance.instance")
	attrStatusCode   = attribute.Key("http.response.status_code")
	attrStream       = attribute.Key("routebalance.stream")
	attrAttempt      = attribute.Key("routebalance.attempt")
	attrBatchSize    = attribute.Key("routebalance.batch_size")
	attrDecisionUs   = attribute.Key("routebalance.decision_us")
	attrEstimateUs   = attribute.Key("routebalance.estimate_us")
	attrQueueWaitMs  = attribute.Key("routebalance.queue_wait_ms")
	attrPromptTokens = attribute.Key("routebalance.prompt_tokens")
	attrOutputTokens = attribute.Key("routebalance.output_tokens")
	attrTTFTMs       = attribute.Key("routebalance.ttft_ms")
	attrResult       = attribute.Key("routebalance.result")
	attrTruncated    = attribute.Key("routebalance.truncated")
	attrTenant       = attribute.Key("routebalance.tenant")
	attrDerived      = attribute.Key("routebalance.derived")
)

// tracer starts the inference path's spans. When the provider is the
// no-op one (tracing off, the default) start does nothing at all: no
// context, no span allocation.
type tracer struct {
	tr trace.Tracer
	on bool
}

func newTracer(tp trace.TracerProvider) tracer {
	if tp == nil {
		return tracer{}
	}
	if _, off := tp.(noop.TracerProvider); off {
		return tracer{}
	}
	return tracer{tr: tp.Tracer(tracerName), on: true}
}

// start begins a span under ctx's span; with tracing off it returns ctx
// and a non-recording span. Callers set attributes only when
// span.IsRecording(), so unsampled requests cost nothing either.
func (t tracer) start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.on {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.tr.Start(ctx, name, opts...)
}

// extract continues a caller's W3C trace (traceparent/tracestate
// headers) when tracing is on; the sampler follows its sampled flag.
func (t tracer) extract(ctx context.Context, c *fiber.Ctx) context.Context {
	if !t.on || len(c.Request().Header.Peek("traceparent")) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, headerCarrier{c})
}

// headerCarrier reads a fiber request's headers for propagation (copied:
// fasthttp reuses their memory).
type headerCarrier struct{ c *fiber.Ctx }

func (h headerCarrier) Get(key string) string { return strings.Clone(h.c.Get(key)) }
func (h headerCarrier) Set(string, string)    {}
func (h headerCarrier) Keys() []string        { return []string{"traceparent", "tracestate"} }

// startServer starts the request's root (server-kind) span; the option
// is built only when tracing is on (a variadic option would allocate
// even when off).
func (t tracer) startServer(ctx context.Context, name string) (context.Context, trace.Span) {
	if !t.on {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
}

// startNow is start with the span's start time returned (zero when
// tracing is off), for spans whose children are placed in time by hand.
func (t tracer) startNow(ctx context.Context, name string) (context.Context, trace.Span, time.Time) {
	if !t.on {
		return ctx, trace.SpanFromContext(context.Background()), time.Time{}
	}
	t0 := time.Now()
	ctx, sp := t.tr.Start(ctx, name, trace.WithTimestamp(t0))
	return ctx, sp, t0
}

// traceRoute annotates the route span of one Router call that ran from t0
// to t1 and adds its phases as child spans. The scheduler runs the batch
// on its cluster goroutine, so the phases are rebuilt from the durations
// it measured (Decision.QueueWait, DecisionTime, EstimateTime), counted
// back from the admission at t1: "batch wait" (queued for the next batch),
// "estimate" (the batch's estimator call), "score" (snapshot, ordering and
// scoring of the whole batch) and, when the instance's admission queue held
// the request, "queue wait". Each carries routebalance.derived=true.
func (t tracer) traceRoute(ctx context.Context, sp trace.Span, t0, t1 time.Time, attempt int, a *routing.Assignment, err error) {
	sp.SetAttributes(attrAttempt.Int(attempt))
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
		return
	}
	d := &a.Decision
	sp.SetAttributes(
		attrInstance.String(a.Instance.ID), attrModel.String(a.Instance.Model), attrPolicy.String(a.Policy),
		attrBatchSize.Int(d.BatchSize), attrDecisionUs.Int64(d.DecisionTime.Microseconds()),
		attrEstimateUs.Int64(d.EstimateTime.Microseconds()),
		attrQueueWaitMs.Float64(float64(d.QueueWait)/float64(time.Millisecond)),
	)
	clamp := func(x, lo, hi time.Time) time.Time {
		if x.Before(lo) {
			return lo
		}
		if x.After(hi) {
			return hi
		}
		return x
	}
	decided := clamp(t1.Add(-d.QueueWait), t0, t1)
	batched := clamp(decided.Add(-d.DecisionTime), t0, decided)
	estimated := clamp(batched.Add(d.EstimateTime), batched, decided)
	phase := func(name string, from, to time.Time) {
		_, p := t.tr.Start(ctx, name, trace.WithTimestamp(from))
		p.SetAttributes(attrDerived.Bool(true))
		p.End(trace.WithTimestamp(to))
	}
	phase("batch wait", t0, batched)
	phase("estimate", batched, estimated)
	phase("score", estimated, decided)
	if d.QueueWait > 0 {
		phase("queue wait", decided, t1)
	}
}

// endUpstream ends the upstream span with the relay's result (res nil
// when the upstream could not be opened; err is then the failure).
func endUpstream(sp trace.Span, res *proxy.Result, err error) {
	if sp.IsRecording() {
		if res != nil {
			o := &res.Outcome
			sp.SetAttributes(attrResult.String(res.Status), attrPromptTokens.Int(o.PromptTokens),
				attrOutputTokens.Int(o.OutputTokens), attrTruncated.Bool(o.Truncated),
				attrTTFTMs.Float64(float64(o.TTFT)/float64(time.Millisecond)))
			err = o.Err
		}
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		}
	}
	sp.End()
}

// endRoot ends the request's root span with the status the client got.
func (x *exchange) endRoot(status int) {
	if x.root == nil {
		return
	}
	if x.root.IsRecording() {
		x.root.SetAttributes(attrStatusCode.Int(status))
		if status >= 500 {
			x.root.SetStatus(codes.Error, "")
		}
	}
	x.root.End()
}

// errorStatus is the status the error handler will answer err with, as
// far as the root span needs it: an httpError's or fiber.Error's own
// status, else 500.
func errorStatus(err error) int {
	var he *httpError
	var fe *fiber.Error
	switch {
	case errors.As(err, &he):
		return he.status
	case errors.As(err, &fe):
		return fe.Code
	}
	return http.StatusInternalServerError
}
