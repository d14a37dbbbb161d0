// Package dispatch runs one inference request's journey between the HTTP
// layer and the routing layer: admit (spend guard, rate limits) → route →
// open the upstream → fail over → relay → release → meter. It declares the
// narrow interfaces it needs (Router, Upstream, SpendGuard, Limiter,
// Meter, Client) and knows no HTTP framework: the api parses a request
// into a Call, calls Dispatch and writes what it returns. README.md
// walks the journey step by step.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/routing/respcache"
	"github.com/routebalance/routebalance/telemetry"
	"github.com/routebalance/routebalance/tenants/limits"
)

// Router admits a request on one instance of a cluster. Route blocks until
// the request is admitted or ctx ends; errors: routing.ErrUnknownModel,
// routing.ErrNoHealthyInstance, routing.ErrNoCapacity, routing.ErrClosed,
// ctx.Err(). Dispatch releases the Assignment exactly once. It is called
// concurrently. schedule.Router implements it.
type Router interface {
	Route(ctx context.Context, c *routing.Cluster, req *routing.Request) (*routing.Assignment, error)
}

// Upstream opens a call on one instance and returns once the instance's
// response headers arrived with a 2xx status. Errors: an error matching
// proxy.ErrUnreachable (nothing reached the client; Dispatch fails over),
// *proxy.StatusError (the instance answered an error), or ctx's error.
// It is called concurrently. *proxy.Proxy implements it.
type Upstream interface {
	Open(ctx context.Context, in *routing.Instance, call *proxy.Call) (*proxy.Response, error)
}

// SpendGuard is the spend control run before routing. Check returns an
// error matching billing.ErrBudgetExceeded (a tenant or key monthly budget
// is spent) or billing.ErrPaymentRequired (the subscription is unpaid past
// its grace period), or nil to proceed; any other error is a failed check.
// It must be cheap (no database round trip) and safe for concurrent use.
// billing.Guard implements it.
type SpendGuard interface {
	Check(l billing.Limits) error
}

// Limiter applies the key's and the tenant's rate limits, charging one
// request and tokens (the estimated prompt plus max_tokens). When ok the
// caller holds the Ticket until the request ends and releases it once;
// the Status is for the response headers either way. Safe for concurrent
// use. *limits.Limiter implements it.
type Limiter interface {
	Admit(tenantID string, tl limits.Limits, keyID string, kl limits.Limits, tokens int64) (t limits.Ticket, st limits.Status, r limits.Refusal, ok bool)
}

// Meter receives one usage event per request that reached an instance
// (served, failed or cut short). Record must not block; it prices the
// event (Billed is left 0). billing.Meter implements it.
type Meter interface {
	Record(ev billing.UsageEvent)
}

// Client is the caller's side of one call: the HTTP layer implements it
// to put the journey's facts on its response. Dispatch calls it from the
// goroutine that runs Dispatch, in this order: Limited (once, when a
// Limiter is wired, also before a refusal), then per attempt Decided and,
// when that instance could not be reached, FailedOver; finally Begin once,
// when an upstream answered 2xx and its body is about to be relayed.
type Client interface {
	// Limited reports the rate-limit status after admission.
	Limited(st limits.Status)
	// Decided reports each granted assignment before its upstream is
	// opened (the decision the response explains).
	Decided(a *routing.Assignment)
	// FailedOver reports that the instance could not be reached before
	// its first byte and that the call is routed again without it.
	FailedOver(instanceID string)
	// Begin starts the answer: status is the upstream's 2xx status. It
	// returns the writer the body is relayed to (an error from its
	// methods means the client is gone). A streaming client's answer is
	// committed from here on; a non-streamed one is buffered by the
	// implementation and sent once Dispatch returned without error. a is
	// nil for an answer from the response cache (no instance was asked).
	Begin(a *routing.Assignment, status int) proxy.Writer
}

// Cache is the exact-match response cache (routing/respcache's LRU and
// Redis stores implement it). Get and Put are called concurrently; an
// error is treated as a miss (Get) or ignored (Put) and logged.
type Cache interface {
	Get(ctx context.Context, key string) (respcache.Entry, bool, error)
	Put(ctx context.Context, key string, e respcache.Entry) (bool, error)
	// MaxEntryBytes is the largest body Put takes.
	MaxEntryBytes() int
}

// Config holds the journey's settings.
type Config struct {
	// MaxAttempts bounds the instances one call is opened on: the first
	// and the fallbacks after an instance that could not be reached, or
	// answered 5xx or 429, before its first byte (default 2: one
	// fallback). Each fallback routes again with every instance tried so
	// far excluded — and, for "auto", the failed instance's model.
	MaxAttempts int
}

// DefaultConfig returns one fallback before the first byte.
func DefaultConfig() Config { return Config{MaxAttempts: 2} }

// Validate reports a negative setting.
func (c Config) Validate() error {
	if c.MaxAttempts < 0 {
		return fmt.Errorf("dispatch: max attempts %d must be >= 0", c.MaxAttempts)
	}
	return nil
}

// Deps are the dispatcher's collaborators. Router and Upstream are
// required; Spend, Limiter and Meter are optional (no spend check, no
// rate limits, no metering).
type Deps struct {
	Router   Router
	Upstream Upstream
	Spend    SpendGuard
	Limiter  Limiter
	Meter    Meter
	// Cache answers calls with a CacheKey from earlier answers (nil: no
	// cache).
	Cache Cache
	// Status is the HTTP status the client is answered for an error of
	// Dispatch, and 200 for nil: the usage event records it. The HTTP
	// layer supplies its one mapping (api); the default answers 200 for
	// nil and 500 for any error.
	Status func(error) int
	// Clock stamps usage events (default the wall clock).
	Clock routing.Clock
	// Log receives what no caller can act on (default discarded).
	Log *slog.Logger
	// Tracer receives the route (with its derived phases), upstream and
	// meter spans, children of the span in Dispatch's ctx; nil or a no-op
	// provider turns them off at no cost.
	Tracer trace.TracerProvider
}

// Dispatcher runs calls; it is safe for concurrent use.
type Dispatcher struct {
	cfg    Config
	deps   Deps
	status func(error) int
	clock  routing.Clock
	log    *slog.Logger
	spans  telemetry.Spans
	turn   atomic.Uint64 // Pass's rotating start
}

// New returns a dispatcher; zero Config fields take the defaults.
func New(cfg Config, deps Deps) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = DefaultConfig().MaxAttempts
	}
	if deps.Router == nil || deps.Upstream == nil {
		return nil, errors.New("dispatch: a Router and an Upstream are required")
	}
	d := &Dispatcher{cfg: cfg, deps: deps, status: deps.Status, clock: deps.Clock, log: deps.Log, spans: telemetry.NewSpans(deps.Tracer)}
	if d.status == nil {
		d.status = defaultStatus
	}
	if d.clock == nil {
		d.clock = routing.WallClock{}
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	return d, nil
}

func defaultStatus(err error) int {
	if err == nil {
		return 200
	}
	return 500
}

// Call is one request to dispatch.
type Call struct {
	// Request is what the router sees; a fail-over routes a copy with
	// the instances tried so far added to Exclude (Request is not
	// changed). Its ID names the usage event, its Arrival starts it.
	Request *routing.Request
	// Cluster is the tenant's cluster to route in.
	Cluster *routing.Cluster
	// Forward is what the instance is sent. Dispatch sets its MaxTokens
	// (the assignment's budget clamp) and BudgetUSD (Request.Budget()).
	Forward proxy.Call
	// Spend names who pays (tenant and key, also for the rate limits and
	// the usage event) and the monthly budgets the spend guard checks.
	Spend billing.Limits
	// TenantLimits and KeyLimits are the rate limits of the tenant and
	// the key.
	TenantLimits, KeyLimits limits.Limits
	// Client receives the journey's facts and the body; required.
	Client Client
	// CacheKey is the call's response-cache key (respcache.Key); "" for a
	// call that must not be answered from, or stored in, the cache (not
	// deterministic, streamed, or the cache is off).
	CacheKey string
}

// Result is how a call ended.
type Result struct {
	// Decision is the decision the call ended on, nil when no instance
	// was granted. Its assignment has been released.
	Decision *routing.Decision
	// Relay is what relaying the upstream's answer produced (zero when
	// nothing was relayed).
	Relay proxy.Result
	// UpstreamStatus is the instance's 2xx status (0 when none answered).
	UpstreamStatus int
	// Attempts counts the instances the call was routed to.
	Attempts int
	// Cache is "hit" when the answer came from the cache (Begin got a nil
	// assignment and the cached body), "miss" when a cacheable call went
	// upstream, "" when the call was not cacheable.
	Cache string
	// CachedModel is the model that produced a cached answer.
	CachedModel string
}

// Step names the part of the journey an Error comes from.
type Step string

// Steps.
const (
	StepSpend Step = "spend" // the spend guard refused or failed
	StepLimit Step = "limit" // a rate limit refused
	StepRoute Step = "route" // the router found no instance
	StepOpen  Step = "open"  // the instance could not be reached or answered an error
	StepRelay Step = "relay" // a non-streamed answer broke while it was read
)

// Error is every error Dispatch returns: the step that ended the call,
// the instance it ended on (open and relay), and the cause (errors.Is/As
// see through it: routing's sentinels, billing's refusals, proxy's
// errors, ctx's errors). A rate-limit refusal carries its Refusal.
type Error struct {
	Step     Step
	Instance string
	Err      error
	Refusal  *limits.Refusal
}

func (e *Error) Error() string {
	if e.Instance != "" {
		return fmt.Sprintf("dispatch %s on %s: %v", e.Step, e.Instance, e.Err)
	}
	return fmt.Sprintf("dispatch %s: %v", e.Step, e.Err)
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// errAbandoned is the outcome of an assignment released by the safety
// net: Dispatch ended (a panic) while still holding it.
var errAbandoned = errors.New("request abandoned while holding its instance")

// errRateLimited is the cause of a StepLimit Error.
var errRateLimited = errors.New("rate limited")

// Dispatch runs one call to its end: a streamed answer has been relayed
// (or cut) when it returns. The caller's ctx carries the request's
// deadline and is cancelled when the client leaves; its span is the
// parent of the journey's spans. Every granted assignment is released
// exactly once and a usage event is recorded once per call that reached
// an instance, on every path, panics included.
func (d *Dispatcher) Dispatch(ctx context.Context, call Call) (Result, error) {
	j := &journey{d: d, call: &call, root: trace.SpanFromContext(ctx)}
	defer j.end()
	if err := j.admit(); err != nil {
		return j.res, err
	}
	if j.fromCache(ctx) {
		return j.res, nil
	}
	resp, err := j.open(ctx)
	if err != nil {
		return j.res, err
	}
	rel := j.relay(ctx, resp)
	err = j.finish(ctx, rel)
	j.toCache(ctx, rel, err)
	return j.res, err
}

// fromCache answers the call from the cache when it holds the key: the
// client gets the stored body (Begin with a nil assignment) and the call
// is metered as "cached" with no instance and no cost.
func (j *journey) fromCache(ctx context.Context) bool {
	c, key := j.d.deps.Cache, j.call.CacheKey
	if c == nil || key == "" {
		return false
	}
	j.res.Cache = "miss"
	e, ok, err := c.Get(ctx, key)
	if err != nil {
		j.d.log.Warn("response cache lookup failed; going upstream", slog.String("error", err.Error()))
		return false
	}
	if !ok {
		return false
	}
	j.res.Cache, j.res.CachedModel, j.res.UpstreamStatus = "hit", e.Model, e.Status
	w := j.call.Client.Begin(nil, e.Status)
	_, werr := w.Write(e.Body)
	if werr == nil {
		werr = w.Flush()
	}
	j.ticket.Observe(int64(e.PromptTokens) + int64(e.OutputTokens))
	if m := j.d.deps.Meter; m != nil {
		cl, now := j.call, j.d.clock.Now()
		status := "cached"
		if werr != nil {
			status = proxy.ResultCancelled
		}
		m.Record(billing.UsageEvent{
			RequestID: cl.Request.ID, TenantID: cl.Spend.TenantID, KeyID: cl.Spend.KeyID, ClusterID: cl.Cluster.ID,
			Model: e.Model, Policy: "cache", Status: status, HTTPStatus: e.Status,
			StartedAt: cl.Request.Arrival, FinishedAt: now, E2E: now.Sub(cl.Request.Arrival), TTFT: now.Sub(cl.Request.Arrival),
			PromptTokens: e.PromptTokens, OutputTokens: e.OutputTokens,
		})
	}
	return true
}

// toCache stores a served, whole answer of a cacheable call.
func (j *journey) toCache(ctx context.Context, rel proxy.Result, err error) {
	if j.tee == nil || err != nil || rel.Status != proxy.ResultOK || j.tee.over || j.res.Decision == nil {
		return
	}
	d := j.res.Decision
	e := respcache.Entry{Status: j.res.UpstreamStatus, ContentType: "application/json", Body: j.tee.buf,
		Model: d.Instance.Model, InstanceID: d.Instance.ID, PromptTokens: rel.Outcome.PromptTokens,
		OutputTokens: rel.Outcome.OutputTokens, Stored: j.d.clock.Now()}
	if _, err := j.d.deps.Cache.Put(ctx, j.call.CacheKey, e); err != nil {
		j.d.log.Warn("response cache store failed", slog.String("error", err.Error()))
	}
}

// teeWriter copies what is relayed to the client, up to max bytes.
type teeWriter struct {
	proxy.Writer
	buf  []byte
	max  int
	over bool
}

func (t *teeWriter) Write(p []byte) (int, error) {
	if !t.over {
		if len(t.buf)+len(p) > t.max {
			t.over, t.buf = true, nil
		} else {
			t.buf = append(t.buf, p...)
		}
	}
	return t.Writer.Write(p)
}

// journey is one call's state, owned by the goroutine running Dispatch.
type journey struct {
	d      *Dispatcher
	call   *Call
	root   trace.Span
	held   *routing.Assignment // granted and not yet released
	ticket limits.Ticket
	res    Result
	usp    trace.Span // the upstream span of the open attempt
	stream bool
	tee    *teeWriter // the copy of a cacheable answer
}

// end frees the rate-limit ticket and, when a panic cut the journey
// short, the assignment still held (the panic goes on).
func (j *journey) end() {
	j.release(routing.Outcome{Err: errAbandoned})
	j.ticket.Release()
}

// admit runs the spend guard, then the rate limits.
func (j *journey) admit() error {
	c := j.call
	if g := j.d.deps.Spend; g != nil {
		if err := g.Check(c.Spend); err != nil {
			return &Error{Step: StepSpend, Err: err}
		}
	}
	l := j.d.deps.Limiter
	if l == nil {
		return nil
	}
	cost := int64(c.Forward.PromptTokens) + int64(c.Request.MaxTokens)
	t, st, r, ok := l.Admit(c.Spend.TenantID, c.TenantLimits, c.Spend.KeyID, c.KeyLimits, cost)
	c.Client.Limited(st)
	if !ok {
		return &Error{Step: StepLimit, Err: errRateLimited, Refusal: &r}
	}
	j.ticket = t
	return nil
}

// open routes the call and opens its upstream, falling back to another
// instance while the one tried could not be reached before its first byte,
// answered 5xx or 429, attempts remain and ctx has not ended. The retry
// excludes every instance tried so far; a request for any model ("auto")
// also excludes the failed instance's model, so it falls back to another
// model (when the cluster has one), while a pinned model is retried on
// another replica of it. Only the attempt the call ends on is metered.
func (j *journey) open(ctx context.Context) (*proxy.Response, error) {
	req := j.call.Request
	var (
		last        *Error              // the last failed attempt
		lastA       *routing.Assignment // its assignment (released)
		lastReached bool                // it reached the instance (an answer, not a connection failure)
	)
	for attempt := 0; ; attempt++ {
		a, err := j.route(ctx, req, attempt)
		if err != nil {
			if last != nil { // no other instance to fall back to
				if lastReached {
					j.meter(ctx, lastA, nil, proxy.ResultError, last)
				}
				return nil, last
			}
			if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				err = fmt.Errorf("%w (%w)", err, ctx.Err())
			}
			return nil, &Error{Step: StepRoute, Err: err}
		}
		j.held, j.res.Attempts = a, attempt+1
		j.res.Decision = &a.Decision
		j.call.Client.Decided(a)
		resp, err := j.openOn(ctx, a)
		if err == nil {
			j.res.UpstreamStatus = resp.Status
			return resp, nil
		}
		endUpstream(j.usp, nil, err)
		var se *proxy.StatusError
		e := &Error{Step: StepOpen, Instance: a.Instance.ID, Err: err}
		unreachable := errors.Is(err, proxy.ErrUnreachable)
		switch {
		case unreachable || (errors.As(err, &se) && se.InstanceFault()):
			j.release(routing.Outcome{Err: err, Upstream: true})
			if attempt+1 < j.d.cfg.MaxAttempts && ctx.Err() == nil {
				last, lastA, lastReached = e, a, !unreachable
				req = excluding(req, j.call.Cluster, a.Instance)
				j.call.Client.FailedOver(a.Instance.ID)
				continue
			}
			j.meter(ctx, a, nil, proxy.ResultError, e)
		case errors.As(err, &se):
			j.release(routing.Outcome{Err: err, Upstream: se.InstanceFault()})
			j.meter(ctx, a, nil, proxy.ResultError, e)
		case errors.Is(err, context.DeadlineExceeded):
			j.release(routing.Outcome{Err: err})
			j.meter(ctx, a, nil, proxy.ResultError, e)
		default: // the client went away (or the server is stopping)
			j.release(routing.Outcome{Err: err})
			j.meter(ctx, a, nil, proxy.ResultCancelled, e)
		}
		return nil, e
	}
}

// route asks the router for an instance, under a route span.
func (j *journey) route(ctx context.Context, req *routing.Request, attempt int) (*routing.Assignment, error) {
	rctx, sp, t0 := j.d.spans.StartNow(ctx, "route")
	a, err := j.d.deps.Router.Route(rctx, j.call.Cluster, req)
	j.d.traceRoute(rctx, sp, t0, attempt, a, err)
	if err == nil && j.root.IsRecording() {
		j.root.SetAttributes(telemetry.AttrModel.String(a.Instance.Model), telemetry.AttrPolicy.String(a.Policy),
			telemetry.AttrInstance.String(a.Instance.ID))
	}
	return a, err
}

// openOn opens the upstream of a, under an upstream span whose context
// goes to Open (so the instance's traceparent names it as the parent).
func (j *journey) openOn(ctx context.Context, a *routing.Assignment) (*proxy.Response, error) {
	fw := j.call.Forward // a copy: the clamp is this assignment's
	fw.MaxTokens, fw.BudgetUSD = a.MaxTokens, j.call.Request.Budget()
	j.stream = fw.Stream
	uctx, sp := j.d.spans.Start(ctx, "upstream")
	if sp.IsRecording() {
		sp.SetAttributes(telemetry.AttrInstance.String(a.Instance.ID), telemetry.AttrStream.Bool(fw.Stream))
	}
	j.usp = sp
	return j.d.deps.Upstream.Open(uctx, &a.Instance, &fw)
}

// excluding returns a copy of req that also excludes the failed
// instance: for a request of any model, every instance of the failed
// instance's model when the cluster has an enabled instance of another
// model (the fallback goes to another model), else just the instance.
func excluding(req *routing.Request, c *routing.Cluster, failed routing.Instance) *routing.Request {
	retry := *req // an earlier ticket may still refer to req
	retry.Exclude = append(append([]string(nil), req.Exclude...), failed.ID)
	if !req.AnyModel() || c == nil {
		return &retry
	}
	other := false
	for _, in := range c.Instances {
		if !in.Disabled && in.Model != failed.Model {
			other = true
			break
		}
	}
	if !other {
		return &retry
	}
	for _, in := range c.Instances {
		if in.Model == failed.Model && in.ID != failed.ID && !slices.Contains(retry.Exclude, in.ID) {
			retry.Exclude = append(retry.Exclude, in.ID)
		}
	}
	return &retry
}

// relay copies the upstream's answer to the client. A panic while
// relaying (a Progress hook, the writer) ends the relay as an error with
// the tokens streamed so far, so they are metered.
func (j *journey) relay(ctx context.Context, resp *proxy.Response) (res proxy.Result) {
	a := j.held
	sent := &tokenTally{a: a}
	defer func() {
		if r := recover(); r != nil {
			j.d.log.Error("panic while relaying", slog.String("request_id", j.call.Request.ID), slog.Any("panic", r))
			res = proxy.Result{Status: proxy.ResultError, Outcome: routing.Outcome{
				Err: fmt.Errorf("panic while relaying: %v", r), PromptTokens: j.call.Forward.PromptTokens, OutputTokens: sent.n}}
			resp.Close()
		}
		endUpstream(j.usp, &res, nil)
	}()
	w := j.call.Client.Begin(a, resp.Status)
	if j.d.deps.Cache != nil && j.call.CacheKey != "" && !j.stream {
		j.tee = &teeWriter{Writer: w, max: j.d.deps.Cache.MaxEntryBytes()}
		w = j.tee
	}
	return resp.Relay(ctx, w, sent)
}

// finish releases the assignment with the relay's outcome and meters the
// call; a non-streamed answer that did not arrive whole is an error.
func (j *journey) finish(ctx context.Context, rel proxy.Result) error {
	a := j.held
	j.release(rel.Outcome)
	j.res.Relay = rel
	var err error
	status := rel.Status
	switch {
	case rel.Status == proxy.ResultCancelled:
		// A stream cut by the deadline is answered like one the client
		// left (its 200 went out); a non-streamed one times out.
		cause := error(context.Canceled)
		if !j.stream && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			cause, status = context.DeadlineExceeded, proxy.ResultError
		}
		err = &Error{Step: StepRelay, Instance: a.Instance.ID, Err: cause}
	case !j.stream && rel.Status != proxy.ResultOK:
		err = &Error{Step: StepRelay, Instance: a.Instance.ID, Err: rel.Outcome.Err}
	}
	j.meter(ctx, a, &rel, status, err)
	if j.stream && rel.Status != proxy.ResultCancelled {
		return nil // the client got a 200 stream; how it ended is in Relay
	}
	return err
}

// release frees the held assignment (if any) with o.
func (j *journey) release(o routing.Outcome) {
	if j.held != nil {
		j.held.Release(o)
		j.held = nil
	}
}

// meter records the call's usage event (once per call: only the last
// assignment is metered) and corrects the rate-limit token charge. err is
// what the client is answered (nil: served), status the event's result.
func (j *journey) meter(ctx context.Context, a *routing.Assignment, rel *proxy.Result, status string, err error) {
	if rel != nil {
		j.ticket.Observe(int64(rel.Outcome.PromptTokens) + int64(rel.Outcome.OutputTokens))
	}
	m := j.d.deps.Meter
	if m == nil {
		return
	}
	httpStatus := j.d.status(err)
	if j.root.IsRecording() {
		_, sp := j.d.spans.Start(ctx, "meter")
		sp.SetAttributes(telemetry.AttrResult.String(status), telemetry.AttrStatusCode.Int(httpStatus))
		defer sp.End()
	}
	c := j.call
	now := j.d.clock.Now()
	arrival, w := c.Request.Arrival, c.Request.Weights
	ev := billing.UsageEvent{
		RequestID: c.Request.ID, TenantID: c.Spend.TenantID, KeyID: c.Spend.KeyID, ClusterID: c.Cluster.ID,
		InstanceID: a.Instance.ID, Model: a.Instance.Model, Policy: a.Policy,
		PredictedQuality: a.PredictedQuality, Status: status, HTTPStatus: httpStatus,
		StartedAt: arrival, FinishedAt: now, E2E: now.Sub(arrival),
		PredictedE2E: a.PredictedE2E, Relaxed: a.Relaxed, Attempts: j.res.Attempts,
		Weights: billing.Weights{Quality: w.Quality, Cost: w.Cost, Latency: w.Latency},
	}
	if rel != nil {
		ev.PromptTokens, ev.OutputTokens = rel.Outcome.PromptTokens, rel.Outcome.OutputTokens
		// In integers; a price the meter must refuse (non-finite, huge)
		// goes on as the float cost so the meter logs, counts and zeroes it.
		if c, err := billing.TokenCost(ev.PromptTokens, ev.OutputTokens, a.Instance.PriceInPerMTok, a.Instance.PriceOutPerMTok); err == nil {
			ev.Cost = c
		} else {
			ev.CostUSD = a.Instance.CostUSD(float64(ev.PromptTokens), float64(ev.OutputTokens))
		}
		switch {
		case rel.Outcome.TTFT > 0:
			// the client's TTFT: its E2E less the instance's decode time
			ev.TTFT = ev.E2E - (rel.Outcome.E2E - rel.Outcome.TTFT)
		case rel.Outcome.Err == nil && !j.stream:
			// a non-streamed client gets its first token with the whole
			// answer (the proxy reports no TTFT for it: see routing.Outcome)
			ev.TTFT = ev.E2E
		}
	}
	m.Record(ev)
}

// tokenTally forwards streamed-token progress to the assignment and keeps
// the last count.
type tokenTally struct {
	a *routing.Assignment
	n int
}

// Progress records n and passes it on.
func (t *tokenTally) Progress(n int) {
	t.n = n
	t.a.Progress(n)
}
