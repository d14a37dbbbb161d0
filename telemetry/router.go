package telemetry

import (
	"context"
	"errors"
	"strconv"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing"
)

// Scheduler admits requests; schedule.Router implements it (and so does
// the Router this package returns, so the api sees no difference).
type Scheduler interface {
	Route(ctx context.Context, c *routing.Cluster, req *routing.Request) (*routing.Assignment, error)
}

// Router observes every routing decision and outcome of an inner
// Scheduler: decision time, batch size, queue wait, rejections, fail-overs,
// upstream errors and the observed/predicted latency ratios.
type Router struct {
	m     *Metrics
	inner Scheduler
}

// Router wraps inner so that its decisions and outcomes are measured.
func (m *Metrics) Router(inner Scheduler) *Router { return &Router{m: m, inner: inner} }

// Route routes through the inner scheduler. A request with Exclude set is
// a fail-over retry and is counted as such. The returned Assignment
// forwards Release (once) and Progress to the inner one.
func (r *Router) Route(ctx context.Context, c *routing.Cluster, req *routing.Request) (*routing.Assignment, error) {
	m := r.m
	m.trackCluster(c.ID)
	if len(req.Exclude) > 0 {
		m.failovers.WithLabelValues(m.labels.cluster(c.ID)).Inc()
	}
	a, err := r.inner.Route(ctx, c, req)
	if err != nil {
		m.rejections.WithLabelValues(m.labels.cluster(c.ID), rejectReason(err)).Inc()
		return nil, err
	}
	policy := policyLabel(a.Policy, c)
	cluster := m.labels.cluster(c.ID)
	m.decision.WithLabelValues(cluster, policy).Observe(a.DecisionTime.Seconds())
	m.batch.WithLabelValues(cluster, policy).Observe(float64(a.BatchSize))
	m.queueWait.WithLabelValues(cluster, m.labels.instance(a.Instance.ID)).Observe(a.QueueWait.Seconds())
	d := a.Decision
	return routing.NewAssignment(d, func(o routing.Outcome) {
		m.observeOutcome(cluster, &d, o)
		a.Release(o)
	}, a.Progress), nil
}

// observeOutcome counts instance faults and records how far the latency
// predictions were off. Failed and truncated requests say nothing about
// calibration (their length was not the model's natural one).
func (m *Metrics) observeOutcome(cluster string, d *routing.Decision, o routing.Outcome) {
	if o.Err != nil {
		if o.Upstream {
			m.upstreamErrs.WithLabelValues(cluster, m.labels.instance(d.Instance.ID)).Inc()
		}
		return
	}
	if o.Truncated {
		return
	}
	// The predictions include the predicted wait for a slot on the
	// instance; the outcome is timed from the upstream send, so the
	// measured wait is added back. A zero TTFT (non-streamed answer) was
	// not observed and is no sample.
	if d.PredictedE2E > 0 && o.E2E > 0 {
		m.ratio.WithLabelValues(cluster, m.labels.model(d.Instance.Model), "e2e").Observe(float64(o.E2E+d.QueueWait) / float64(d.PredictedE2E))
	}
	if d.PredictedTTFT > 0 && o.TTFT > 0 {
		m.ratio.WithLabelValues(cluster, m.labels.model(d.Instance.Model), "ttft").Observe(float64(o.TTFT+d.QueueWait) / float64(d.PredictedTTFT))
	}
}

// rejectReason names a routing error for the reason label.
func rejectReason(err error) string {
	switch {
	case errors.Is(err, routing.ErrUnknownModel):
		return "unknown_model"
	case errors.Is(err, routing.ErrModelDisabled): // before its wrapped ErrNoHealthyInstance; the api's 403
		return "model_disabled"
	case errors.Is(err, routing.ErrNoHealthyInstance):
		return "no_healthy_instance"
	case errors.Is(err, routing.ErrNoCapacity):
		return "no_capacity"
	case errors.Is(err, routing.ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	return "other"
}

// policyLabel is the decision's policy, else the cluster's, else the
// scheduler's default.
func policyLabel(p string, c *routing.Cluster) string {
	if p != "" {
		return p
	}
	if c != nil && c.Policy.Name != "" {
		return c.Policy.Name
	}
	return "default"
}

// Recorder receives usage events; billing.Meter implements it.
type Recorder interface {
	Record(ev billing.UsageEvent)
}

// Meter measures every usage event before handing it to an inner
// Recorder: request counts and latency by outcome, tokens, cost and the
// billed amount (priced like billing.Meter prices it).
type Meter struct {
	m       *Metrics
	inner   Recorder
	pricing billing.Pricing
}

// Meter wraps inner (which may be nil: events are then only measured).
// pricing must be the billing meter's, so the billed counter matches the
// ledger.
func (m *Metrics) Meter(inner Recorder, pricing billing.Pricing) *Meter {
	return &Meter{m: m, inner: inner, pricing: pricing}
}

// Record observes ev and forwards it. It never blocks.
func (mt *Meter) Record(ev billing.UsageEvent) {
	priced := ev
	_ = mt.pricing.Price(&priced) // a refused amount counts 0, as in the ledger; billing.Meter logs it
	mt.m.ObserveUsage(priced, priced.Billed.USD())
	if mt.inner != nil {
		mt.inner.Record(ev)
	}
}

// ObserveUsage records one served request's usage event; billedUSD is what
// the tenant is charged for it.
func (m *Metrics) ObserveUsage(ev billing.UsageEvent, billedUSD float64) {
	policy := knownPolicy(ev.Policy)
	status := boundedStatus(ev.Status)
	code := strconv.Itoa(ev.HTTPStatus)
	if ev.HTTPStatus < 100 || ev.HTTPStatus > 599 {
		code = "other"
	}
	cl, model, inst := m.labels.cluster(ev.ClusterID), m.labels.model(ev.Model), m.labels.instance(ev.InstanceID)
	m.requests.WithLabelValues(cl, model, inst, policy, status, code).Inc()
	m.duration.WithLabelValues(cl, model, inst, policy, status).Observe(ev.E2E.Seconds())
	if ev.TTFT > 0 {
		m.ttft.WithLabelValues(cl, model, inst).Observe(ev.TTFT.Seconds())
	}
	m.tokens.WithLabelValues(cl, model, inst, "prompt").Add(float64(max(ev.PromptTokens, 0)))
	m.tokens.WithLabelValues(cl, model, inst, "output").Add(float64(max(ev.OutputTokens, 0)))
	cost := ev.Cost.USD()
	if ev.Cost == 0 && ev.CostUSD != 0 { // not priced yet (deprecated float cost)
		c, _ := billing.NanoFromUSD(ev.CostUSD)
		cost = c.USD()
	}
	m.costUSD.WithLabelValues(cl, model, inst).Add(finiteNonNeg(cost))
	m.billedUSD.WithLabelValues(cl, model).Add(finiteNonNeg(billedUSD))
}
