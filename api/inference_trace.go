package api

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/routebalance/routebalance/telemetry"
)

// tracer starts the api's own spans of the inference path (the root and
// auth; routing/dispatch starts the rest) and continues a caller's trace.
type tracer struct{ telemetry.Spans }

func newTracer(tp trace.TracerProvider) tracer { return tracer{telemetry.NewSpans(tp)} }

// extract continues a caller's W3C trace (traceparent/tracestate
// headers) when tracing is on; the sampler follows its sampled flag.
func (t tracer) extract(ctx context.Context, c *fiber.Ctx) context.Context {
	if !t.On() || len(c.Request().Header.Peek("traceparent")) == 0 {
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

// endRoot ends the request's root span with the status the client got.
func (x *exchange) endRoot(status int) {
	if x.root == nil {
		return
	}
	if x.root.IsRecording() {
		x.root.SetAttributes(telemetry.AttrStatusCode.Int(status))
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
