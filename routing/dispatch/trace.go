package dispatch

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/telemetry"
)

// traceRoute ends the route span of one Router call that started at t0,
// annotated, with its phases as child spans. The scheduler runs the batch
// on its cluster goroutine, so the phases are rebuilt from the durations
// it measured (Decision.QueueWait, DecisionTime, EstimateTime), counted
// back from the admission now: "batch wait" (queued for the next batch),
// "estimate" (the batch's estimator call), "score" (snapshot, ordering and
// scoring of the whole batch) and, when the instance's admission queue held
// the request, "queue wait". Each carries routebalance.derived=true.
func (d *Dispatcher) traceRoute(ctx context.Context, sp trace.Span, t0 time.Time, attempt int, a *routing.Assignment, err error) {
	if !sp.IsRecording() {
		sp.End()
		return
	}
	t1 := time.Now()
	defer sp.End(trace.WithTimestamp(t1))
	sp.SetAttributes(telemetry.AttrAttempt.Int(attempt))
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
		return
	}
	dec := &a.Decision
	sp.SetAttributes(
		telemetry.AttrInstance.String(a.Instance.ID), telemetry.AttrModel.String(a.Instance.Model), telemetry.AttrPolicy.String(a.Policy),
		telemetry.AttrBatchSize.Int(dec.BatchSize), telemetry.AttrDecisionUs.Int64(dec.DecisionTime.Microseconds()),
		telemetry.AttrEstimateUs.Int64(dec.EstimateTime.Microseconds()),
		telemetry.AttrQueueWaitMs.Float64(float64(dec.QueueWait)/float64(time.Millisecond)),
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
	decided := clamp(t1.Add(-dec.QueueWait), t0, t1)
	batched := clamp(decided.Add(-dec.DecisionTime), t0, decided)
	estimated := clamp(batched.Add(dec.EstimateTime), batched, decided)
	phase := func(name string, from, to time.Time) {
		_, p := d.spans.StartAt(ctx, name, from)
		p.SetAttributes(telemetry.AttrDerived.Bool(true))
		p.End(trace.WithTimestamp(to))
	}
	phase("batch wait", t0, batched)
	phase("estimate", batched, estimated)
	phase("score", estimated, decided)
	if dec.QueueWait > 0 {
		phase("queue wait", decided, t1)
	}
}

// endUpstream ends the upstream span with the relay's result (res nil
// when the upstream could not be opened; err is then the failure).
func endUpstream(sp trace.Span, res *proxy.Result, err error) {
	if sp.IsRecording() {
		if res != nil {
			o := &res.Outcome
			sp.SetAttributes(telemetry.AttrResult.String(res.Status), telemetry.AttrPromptTokens.Int(o.PromptTokens),
				telemetry.AttrOutputTokens.Int(o.OutputTokens), telemetry.AttrTruncated.Bool(o.Truncated),
				telemetry.AttrTTFTMs.Float64(float64(o.TTFT)/float64(time.Millisecond)))
			err = o.Err
		}
		if err != nil {
			sp.RecordError(err)
			sp.SetStatus(codes.Error, err.Error())
		}
	}
	sp.End()
}
