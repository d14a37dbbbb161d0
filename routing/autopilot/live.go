package autopilot

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// Observation is one completed request of an autopilot target set, as the
// request path reports it.
type Observation struct {
	// At is when it completed.
	At        time.Time
	E2E, TTFT time.Duration
	CostUSD   float64
	// Quality is the scheduler's predicted quality of the served model.
	Quality float64
	// Failed requests count as infinitely late.
	Failed bool
}

// Predictor predicts what each candidate weight vector would give cl over
// the next interval from the live state (a what-if replay of its recent
// traffic, routing/sim.LivePredictor); it may return fewer predictions,
// or ones with OK false, and must bound its own time. Called from the
// controller's goroutine only, never from the request path.
type Predictor interface {
	Predict(ctx context.Context, cl *routing.Cluster, cands []routing.Weights) []Prediction
}

// LiveConfig configures the live controllers.
type LiveConfig struct {
	// Interval is the control interval (default 5 s); Window the feedback
	// window (default 20 s, chosen on validation with the Params).
	Interval time.Duration
	Window   time.Duration
	// History is how many past windows a controller keeps for its status
	// (default 60); Decisions how many decisions (default 20).
	History   int
	Decisions int
	// Buffer is the observation queue of each controller (default 4096);
	// when it is full the request path drops the observation rather than
	// wait (counted in Status.Dropped).
	Buffer int
	// IdleAfter stops a controller no request has used for this long
	// (default 10 min).
	IdleAfter time.Duration
	// MaxControllers bounds the controllers alive at once (default 256):
	// request-level targets are client input.
	MaxControllers int
	Params         Params
	// Start is where every controller starts (default balanced).
	Start routing.Weights
}

// WithDefaults fills the zero fields.
func (c LiveConfig) WithDefaults() LiveConfig {
	if c.Interval <= 0 {
		c.Interval = 5 * time.Second
	}
	if c.Window <= 0 {
		c.Window = 20 * time.Second
	}
	if c.History <= 0 {
		c.History = 60
	}
	if c.Decisions <= 0 {
		c.Decisions = 20
	}
	if c.Buffer <= 0 {
		c.Buffer = 4096
	}
	if c.IdleAfter <= 0 {
		c.IdleAfter = 10 * time.Minute
	}
	if c.MaxControllers <= 0 {
		c.MaxControllers = 256
	}
	if c.Params.MaxStep == 0 {
		c.Params = DefaultParams()
	}
	if c.Start == (routing.Weights{}) {
		c.Start, _ = routing.PresetWeights(routing.PresetBalanced)
	}
	return c
}

// WindowStatus is one past window of a controller.
type WindowStatus struct {
	End       time.Time `json:"end"`
	N         int       `json:"n"`
	P95E2EMs  float64   `json:"p95_e2e_ms"`
	P95TTFTMs float64   `json:"p95_ttft_ms"`
	// TargetMet is false when a latency target was missed (or a request
	// failed) in the window; windows without requests are not judged.
	TargetMet   bool            `json:"target_met"`
	MeanCostUSD float64         `json:"mean_cost_usd"`
	Quality     float64         `json:"quality"`
	Weights     routing.Weights `json:"weights"`
}

// DecisionStatus is one control step.
type DecisionStatus struct {
	At      time.Time       `json:"at"`
	Weights routing.Weights `json:"weights"`
	Action  string          `json:"action"`
	Reason  string          `json:"reason"`
	// Predicted says whether predictions were available.
	Predicted bool `json:"predicted"`
}

// Status is a controller's state for GET /api/v1/clusters/{id}/autopilot.
type Status struct {
	ClusterID string          `json:"cluster_id"`
	Targets   TargetsJSON     `json:"targets"`
	Weights   routing.Weights `json:"weights"`
	// Attainment is the share of judged windows in Windows that met the
	// targets (0 with none).
	Attainment float64          `json:"attainment"`
	Windows    []WindowStatus   `json:"windows"`
	Decisions  []DecisionStatus `json:"decisions"`
	Dropped    int64            `json:"dropped_observations"`
}

// TargetsJSON is Targets in milliseconds and USD.
type TargetsJSON struct {
	P95E2EMs   float64 `json:"p95_e2e_ms,omitempty"`
	P95TTFTMs  float64 `json:"p95_ttft_ms,omitempty"`
	MaxCostUSD float64 `json:"max_cost_usd_per_request,omitempty"`
}

// JSON converts t.
func (t Targets) JSON() TargetsJSON {
	return TargetsJSON{P95E2EMs: float64(t.P95E2E) / 1e6, P95TTFTMs: float64(t.P95TTFT) / 1e6, MaxCostUSD: t.MaxCostUSD}
}

// Controller is the live controller of one (cluster, target set). Weights
// and Observe are the request path's two calls: Weights is one atomic
// load, Observe a non-blocking send; neither ever waits for a control
// step.
type Controller struct {
	cluster string
	targets Targets
	cfg     LiveConfig
	weights atomic.Pointer[routing.Weights]
	obs     chan Observation
	used    atomic.Int64 // unix nanoseconds of the last Weights call
	// routed is the cluster as the request path last routed it (what
	// the predictor replays).
	routed  atomic.Pointer[routing.Cluster]
	dropped atomic.Int64

	// owned by the controller's goroutine (Step)
	started time.Time
	state   State
	recent  []Observation

	mu        sync.Mutex // guards windows and decisions for Status
	windows   []WindowStatus
	decisions []DecisionStatus
}

func newController(cluster string, t Targets, cfg LiveConfig, now time.Time) *Controller {
	c := &Controller{cluster: cluster, targets: t, cfg: cfg, obs: make(chan Observation, cfg.Buffer), state: NewState(cfg.Start), started: now}
	w := cfg.Start
	c.weights.Store(&w)
	c.used.Store(now.UnixNano())
	return c
}

// Weights returns the weights in force (lock-free).
func (c *Controller) Weights() routing.Weights { return *c.weights.Load() }

// Targets returns the controller's targets.
func (c *Controller) Targets() Targets { return c.targets }

// Observe queues a completed request without blocking; a full queue drops
// it.
func (c *Controller) Observe(o Observation) {
	select {
	case c.obs <- o:
	default:
		c.dropped.Add(1)
	}
}

// Step is one control interval at now: drain the observations, judge the
// window that ended, ask pred (nil: feedback only) and decide. Called by
// the controller's goroutine (and by tests with their own clock); not
// safe for concurrent use with itself.
func (c *Controller) Step(ctx context.Context, now time.Time, pred Predictor) DecisionStatus {
	for drained := false; !drained; {
		select {
		case o := <-c.obs:
			c.recent = append(c.recent, o)
		default:
			drained = true
		}
	}
	from := now.Add(-c.cfg.Window)
	k := 0
	for _, o := range c.recent {
		if !o.At.Before(from) {
			c.recent[k] = o
			k++
		}
	}
	c.recent = c.recent[:k]
	win := c.window(c.recent, now)
	ws := c.status(win, now)
	cands := Candidates(c.state, c.targets, c.cfg.Params)
	var preds []Prediction
	if cl := c.routed.Load(); pred != nil && cl != nil {
		preds = pred.Predict(ctx, cl, cands)
	}
	next, d := Decide(c.state, c.targets, []Window{win}, preds, c.cfg.Params)
	c.state = next
	w := next.Weights
	c.weights.Store(&w)
	ds := DecisionStatus{At: now, Weights: w, Action: d.Action, Reason: d.Reason, Predicted: len(preds) > 0}
	c.mu.Lock()
	c.windows = appendCapped(c.windows, ws, c.cfg.History)
	c.decisions = appendCapped(c.decisions, ds, c.cfg.Decisions)
	c.mu.Unlock()
	return ds
}

func appendCapped[T any](s []T, v T, n int) []T {
	s = append(s, v)
	if len(s) > n {
		s = slices.Delete(s, 0, len(s)-n)
	}
	return s
}

// window summarises observations (failed ones count as infinitely late)
// and their arrival rates over the window and its last interval (arrival
// = completion − E2E).
func (c *Controller) window(obs []Observation, now time.Time) Window {
	e2e := make([]float64, 0, len(obs))
	ttft := make([]float64, 0, len(obs))
	var cost, q float64
	var ok, arrived, recent int
	for _, o := range obs {
		if at := o.At.Add(-o.E2E); !at.Before(now.Add(-c.cfg.Window)) {
			arrived++
			if !at.Before(now.Add(-c.cfg.Interval)) {
				recent++
			}
		}
		if o.Failed {
			e2e, ttft = append(e2e, maxDur), append(ttft, maxDur)
			continue
		}
		e2e, ttft = append(e2e, float64(o.E2E)), append(ttft, float64(o.TTFT))
		cost += o.CostUSD
		q += o.Quality
		ok++
	}
	w := Window{N: len(obs), P95E2E: time.Duration(p95(e2e)), P95TTFT: time.Duration(p95(ttft))}
	if span := min(c.cfg.Window, now.Sub(c.started)); span > 0 { // the controller may be younger than the window
		w.Rate, w.RecentRate = float64(arrived)/span.Seconds(), float64(recent)/min(c.cfg.Interval, span).Seconds()
	}
	if ok > 0 {
		w.MeanCostUSD, w.Quality = cost/float64(ok), q/float64(ok)
	}
	return w
}

const maxDur = float64(1<<62 - 1)

// p95 is the 95th percentile with linear interpolation between closest
// ranks (numpy's default, as routing/sim/metrics).
func p95(x []float64) float64 {
	if len(x) == 0 {
		return 0
	}
	slices.Sort(x)
	h := float64(len(x)-1) * 0.95
	lo := int(h)
	if lo+1 >= len(x) || x[lo] >= maxDur {
		return x[lo]
	}
	if x[lo+1] >= maxDur && h > float64(lo) {
		return maxDur // the percentile reaches into failed requests
	}
	return x[lo] + (h-float64(lo))*(x[lo+1]-x[lo])
}

func (c *Controller) status(w Window, now time.Time) WindowStatus {
	met := w.N > 0
	if c.targets.P95E2E > 0 && w.P95E2E > c.targets.P95E2E {
		met = false
	}
	if c.targets.P95TTFT > 0 && w.P95TTFT > c.targets.P95TTFT {
		met = false
	}
	ms := func(d time.Duration) float64 {
		if float64(d) >= maxDur {
			return -1 // a failed request: no finite percentile
		}
		return float64(d) / 1e6
	}
	return WindowStatus{End: now, N: w.N, P95E2EMs: ms(w.P95E2E), P95TTFTMs: ms(w.P95TTFT), TargetMet: met, MeanCostUSD: w.MeanCostUSD, Quality: w.Quality, Weights: c.Weights()}
}

// Status returns a copy of the controller's state.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{ClusterID: c.cluster, Targets: c.targets.JSON(), Weights: c.Weights(), Windows: slices.Clone(c.windows), Decisions: slices.Clone(c.decisions), Dropped: c.dropped.Load()}
	var met, n int
	for _, w := range c.windows {
		if w.N == 0 {
			continue
		}
		n++
		if w.TargetMet {
			met++
		}
	}
	if n > 0 {
		s.Attainment = float64(met) / float64(n)
	}
	return s
}

// Hooks let the owner observe control steps (metrics); nil fields are
// skipped. Called from controller goroutines.
type Hooks struct {
	Step func(cluster string, t Targets, w WindowStatus, d DecisionStatus)
}

// Registry holds the live controllers, one per (cluster, target set),
// each stepped by its own goroutine every Interval. It is safe for
// concurrent use.
type Registry struct {
	cfg          LiveConfig
	now          func() time.Time
	newPredictor func(cluster string, t Targets) Predictor
	hooks        Hooks
	log          *slog.Logger

	mu      sync.Mutex
	ctx     context.Context // set by Run; nil before
	ctrls   map[string]*Controller
	stopped map[string]chan struct{}
	wg      sync.WaitGroup
}

// NewRegistry returns an empty registry. now is the clock (nil:
// time.Now); newPredictor (nil: feedback only) builds a controller's
// Predictor.
func NewRegistry(cfg LiveConfig, now func() time.Time, newPredictor func(cluster string, t Targets) Predictor, hooks Hooks, log *slog.Logger) (*Registry, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Params.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Start.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Registry{cfg: cfg, now: now, newPredictor: newPredictor, hooks: hooks, log: log, ctrls: map[string]*Controller{}, stopped: map[string]chan struct{}{}}, nil
}

// ErrNotRunning is returned by Get before Run started (or after it ended).
var ErrNotRunning = errors.New("autopilot: registry not running")

// ErrTooMany is returned by Get when MaxControllers target sets are in
// use.
var ErrTooMany = errors.New("too many distinct autopilot target sets in use on this server; reuse one")

// Get returns the controller of (cl.ID, t), starting it on first use, and
// remembers cl as the cluster its predictor replays. The request path
// calls it: it takes the registry's lock only to look up or insert, never
// while a controller steps.
func (r *Registry) Get(cl *routing.Cluster, t Targets) (*Controller, error) {
	cluster := cl.ID
	key := cluster + "\x00" + t.Key()
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.ctrls[key]; ok {
		c.used.Store(now.UnixNano())
		if c.routed.Load() != cl {
			c.routed.Store(cl)
		}
		return c, nil
	}
	if r.ctx == nil || r.ctx.Err() != nil {
		return nil, ErrNotRunning
	}
	if len(r.ctrls) >= r.cfg.MaxControllers {
		return nil, ErrTooMany
	}
	c := newController(cluster, t, r.cfg, now)
	c.routed.Store(cl)
	r.ctrls[key] = c
	var pred Predictor
	if r.newPredictor != nil {
		pred = r.newPredictor(cluster, t)
	}
	r.wg.Add(1)
	go r.loop(r.ctx, key, c, pred)
	return c, nil
}

func (r *Registry) loop(ctx context.Context, key string, c *Controller, pred Predictor) {
	defer r.wg.Done()
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := r.now()
		if now.Sub(time.Unix(0, c.used.Load())) > r.cfg.IdleAfter {
			r.mu.Lock()
			delete(r.ctrls, key)
			r.mu.Unlock()
			r.log.Info("autopilot: controller idle, stopped", slog.String("cluster", c.cluster), slog.String("targets", c.targets.String()))
			return
		}
		d := c.Step(ctx, now, pred)
		if r.hooks.Step != nil {
			c.mu.Lock()
			w := c.windows[len(c.windows)-1]
			c.mu.Unlock()
			r.hooks.Step(c.cluster, c.targets, w, d)
		}
	}
}

// Run makes Get start controllers and blocks until ctx ends, then waits
// for every controller goroutine.
func (r *Registry) Run(ctx context.Context) error {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	<-ctx.Done()
	r.wg.Wait()
	return nil
}

// Status returns the status of every controller of cluster, ordered by
// targets.
func (r *Registry) Status(cluster string) []Status {
	r.mu.Lock()
	var cs []*Controller
	for _, c := range r.ctrls {
		if c.cluster == cluster {
			cs = append(cs, c)
		}
	}
	r.mu.Unlock()
	out := make([]Status, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Status())
	}
	slices.SortFunc(out, func(a, b Status) int {
		switch {
		case a.Targets.P95E2EMs != b.Targets.P95E2EMs:
			return cmpF(a.Targets.P95E2EMs, b.Targets.P95E2EMs)
		case a.Targets.P95TTFTMs != b.Targets.P95TTFTMs:
			return cmpF(a.Targets.P95TTFTMs, b.Targets.P95TTFTMs)
		}
		return cmpF(a.Targets.MaxCostUSD, b.Targets.MaxCostUSD)
	})
	return out
}

func cmpF(a, b float64) int {
	if a < b {
		return -1
	}
	if a > b {
		return 1
	}
	return 0
}
