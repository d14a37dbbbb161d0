package schedule

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/fleet"
)

// Router routes requests of many clusters: one Core and one owner
// goroutine per cluster (plus its scraper), all started and stopped by Run.
type Router struct {
	cfg  Config
	deps Deps

	mu       sync.Mutex
	clusters map[string]*runner
	starting []*runner // created before their goroutines run
	wake     chan struct{}
	closed   bool
}

// runner is one cluster's Core and the queue of requests waiting for the
// next batch.
type runner struct {
	core   *Core
	log    *slog.Logger
	tenant string // the cluster's TenantID

	mu      sync.Mutex
	pending []*Ticket
	latest  *routing.Cluster // newer version to apply before the next batch
	version int64            // newest version seen
	wake    chan struct{}
	stopped bool
	// assigning is true while a goroutine runs step (the cluster's
	// goroutine, or a request's on an idle runner, see Route); stepMu
	// lets one at a time do so, and stop wait for it.
	assigning bool
	stepMu    sync.Mutex
	// lastUse is when a request was last submitted (clock time).
	lastUse time.Time
	// cancel stops the runner's goroutines; nil until they start. ctx is
	// theirs: what a request's goroutine computes a batch under.
	cancel context.CancelFunc
	ctx    context.Context
	batch  []*Ticket // owner's scratch
}

// NewRouter returns a router. It routes once Run is running.
func NewRouter(cfg Config, deps Deps) (*Router, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	deps = deps.withDefaults(cfg)
	return &Router{cfg: cfg, deps: deps, clusters: map[string]*runner{}, wake: make(chan struct{}, 1)}, nil
}

// Run owns the router's background work: each cluster's scheduling
// goroutine and its scraper and prober. It returns when ctx is done, after
// every goroutine stopped; requests still waiting then fail with
// routing.ErrClosed.
func (r *Router) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer func() {
		r.mu.Lock()
		r.closed = true
		starting := r.starting
		r.starting = nil
		r.mu.Unlock()
		for _, run := range starting {
			run.stop()
		}
		wg.Wait()
	}()
	sweep := time.NewTicker(max(r.cfg.IdleAfter/4, time.Second))
	defer sweep.Stop()
	for {
		r.mu.Lock()
		starting := r.starting
		r.starting = nil
		r.mu.Unlock()
		for _, run := range starting {
			rctx, cancel := context.WithCancel(ctx)
			run.mu.Lock()
			run.cancel, run.ctx = cancel, rctx
			run.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer cancel()
				run.loop(rctx)
			}()
			if !r.deps.NoScrape {
				sc := fleet.NewScraper(run.core.Fleet(), r.deps.HTTPClient, r.deps.Clock, r.deps.Logger)
				wg.Add(1)
				go func() {
					defer wg.Done()
					sc.Run(rctx)
				}()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case <-sweep.C:
			r.sweepIdle(r.deps.Clock.Now())
		}
	}
}

// sweepIdle stops and forgets the clusters that received no request for
// Config.IdleAfter and have nothing in flight, queued or pending (a
// deleted cluster stops being scraped). A later request for such a cluster
// builds it afresh.
func (r *Router) sweepIdle(now time.Time) {
	var idle []*runner
	r.mu.Lock()
	for id, run := range r.clusters {
		if run.retireIfIdle(now, r.cfg.IdleAfter) {
			delete(r.clusters, id)
			idle = append(idle, run)
		}
	}
	r.mu.Unlock()
	for _, run := range idle {
		run.log.Debug("idle cluster retired")
		run.cancel()
	}
}

// retireIfIdle marks the runner stopped when it has been idle for at least
// d with nothing pending or in flight, and reports whether it did.
func (run *runner) retireIfIdle(now time.Time, d time.Duration) bool {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.stopped || run.cancel == nil || run.assigning || len(run.pending) > 0 || run.latest != nil ||
		now.Sub(run.lastUse) < d || run.core.busy() {
		return false
	}
	run.stopped = true
	return true
}

// Route blocks until req is admitted on one instance of cluster c, and
// returns the Assignment its caller must Release exactly once. Errors:
// routing.ErrUnknownModel, ErrNoHealthyInstance, ErrNoCapacity, ErrClosed,
// a *routing.FieldError for an unknown policy, or ctx.Err(). A change of
// c.Version rebuilds the cluster's state (live counters of instances that
// persist are kept).
func (r *Router) Route(ctx context.Context, c *routing.Cluster, req *routing.Request) (*routing.Assignment, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c == nil || req == nil {
		return nil, &routing.FieldError{Field: "request", Msg: "cluster and request are required"}
	}
	run, err := r.runner(c)
	if err != nil {
		return nil, err
	}
	if req.Arrival.IsZero() {
		req.Arrival = r.deps.Clock.Now()
	}
	done := make(chan struct{})
	t := &Ticket{Req: req, Notify: func(*Ticket) { close(done) }}
	for !run.submit(c, t, r.deps.Clock.Now()) {
		// The runner was retired as idle just now: build a new one (or
		// learn that the router is closed).
		if run, err = r.runner(c); err != nil {
			return nil, err
		}
	}
	run.stepOrWake()
	select {
	case <-done:
	case <-ctx.Done():
		run.core.Cancel(r.deps.Clock.Now(), t, ctx.Err())
		return nil, ctx.Err()
	}
	if t.Err != nil {
		return nil, t.Err
	}
	core, clock := run.core, r.deps.Clock
	return routing.NewAssignment(t.Decision,
		func(o routing.Outcome) { core.Release(clock.Now(), t, o) },
		func(tokens int) { core.Progress(clock.Now(), t, tokens) },
	), nil
}

// runner returns the cluster's runner, creating it on first use.
func (r *Router) runner(c *routing.Cluster) (*runner, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, routing.ErrClosed
	}
	if run := r.clusters[c.ID]; run != nil {
		return run, nil
	}
	core, err := NewCore(r.cfg, r.deps, cloneCluster(c))
	if err != nil {
		return nil, err
	}
	run := &runner{core: core, log: r.deps.Logger.With(slog.String("cluster", c.ID)), tenant: c.TenantID, version: c.Version, wake: make(chan struct{}, 1), lastUse: r.deps.Clock.Now()}
	core.SetRequeue(run.requeue)
	r.clusters[c.ID] = run
	r.starting = append(r.starting, run)
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return run, nil
}

func cloneCluster(c *routing.Cluster) *routing.Cluster {
	cp := *c
	cp.Instances = append([]routing.Instance(nil), c.Instances...)
	return &cp
}

// submit queues t for the next batch, noting a newer cluster version. It
// reports false when the runner has stopped.
func (run *runner) submit(c *routing.Cluster, t *Ticket, now time.Time) bool {
	run.mu.Lock()
	if run.stopped {
		run.mu.Unlock()
		return false
	}
	run.lastUse = now
	// Only a newer version replaces the state: a request that resolved its
	// cluster just before a change (a cached principal) must not bring a
	// deleted instance back after SyncTenant applied the change.
	if c.Version > run.version {
		run.version = c.Version
		run.latest = cloneCluster(c)
	}
	run.pending = append(run.pending, t)
	run.mu.Unlock()
	return true
}

// stepOrWake assigns what is pending on the calling goroutine when no
// batch is being computed (a lone request on an idle scheduler is then
// decided without two goroutine hand-offs: to the cluster's goroutine and
// back), else wakes the cluster's goroutine. Batching is unchanged: a
// request that finds a batch being computed waits for the next one, which
// the goroutine computing the current batch hands on when it is done.
func (run *runner) stepOrWake() {
	run.mu.Lock()
	ctx := run.ctx
	idle := ctx != nil && !run.assigning && !run.stopped
	run.mu.Unlock()
	if !idle || !run.step(ctx) {
		run.wakeUp()
	}
}

// wakeUp wakes the cluster's goroutine (a no-op when a wake-up is due).
func (run *runner) wakeUp() {
	select {
	case run.wake <- struct{}{}:
	default:
	}
}

// requeue puts tickets taken back from an ejected instance at the head of
// the next batch.
func (run *runner) requeue(ts []*Ticket) {
	run.mu.Lock()
	if run.stopped {
		run.mu.Unlock()
		for _, t := range ts {
			run.core.Reject(t, routing.ErrClosed)
		}
		return
	}
	run.pending = append(ts, run.pending...)
	run.mu.Unlock()
	run.wakeUp()
}

// loop is the cluster's owner goroutine: whenever requests wait, it takes
// up to the batch limit of them and assigns them. Requests arriving while
// a batch is computed form the next batch; an idle loop takes a lone
// request at once.
func (run *runner) loop(ctx context.Context) {
	defer run.stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-run.wake:
		}
		for ctx.Err() == nil && run.step(ctx) {
		}
	}
}

// step assigns one batch; it reports whether it did (false: nothing was
// pending, or another goroutine is computing a batch and will hand what
// is pending on). When requests arrived during the batch, the cluster's
// goroutine is woken for the next one.
func (run *runner) step(ctx context.Context) bool {
	if !run.stepMu.TryLock() {
		return false
	}
	did := func() bool {
		defer run.stepMu.Unlock() // on a panic too: the runner must not stay busy
		return run.stepLocked(ctx)
	}()
	// A request that found stepMu held before this unlock queued itself
	// first and is seen here, whichever goroutine this is.
	run.mu.Lock()
	more := len(run.pending) > 0 || run.latest != nil
	run.mu.Unlock()
	if more {
		run.wakeUp()
	}
	return did
}

// stepLocked is step's batch; run.stepMu is held.
func (run *runner) stepLocked(ctx context.Context) bool {
	now := run.core.deps.Clock.Now()
	run.mu.Lock()
	if run.stopped {
		run.mu.Unlock()
		return false
	}
	run.assigning = true
	latest := run.latest
	run.latest = nil
	run.mu.Unlock()
	defer func() {
		// On a panic too (a request's goroutine, where the api recovers
		// it): the next step must not find the runner busy for ever.
		run.mu.Lock()
		run.assigning = false
		run.mu.Unlock()
	}()
	if latest != nil {
		orphans, err := run.core.Update(latest)
		if err != nil {
			run.log.ErrorContext(ctx, "cluster update rejected", slog.Int64("version", latest.Version), slog.Any("err", err))
		}
		if len(orphans) > 0 {
			run.mu.Lock()
			run.pending = append(orphans, run.pending...)
			run.mu.Unlock()
		}
	}
	limit := run.core.BatchLimit(now)
	run.mu.Lock()
	n := min(len(run.pending), max(limit, 1))
	run.batch = append(run.batch[:0], run.pending[:n]...)
	rest := copy(run.pending, run.pending[n:])
	clear(run.pending[rest:])
	run.pending = run.pending[:rest]
	run.mu.Unlock()
	if n == 0 {
		return false
	}
	run.core.Assign(ctx, now, run.batch)
	clear(run.batch)
	return true
}

// stop rejects everything still waiting with ErrClosed, once no batch is
// being computed (a request's goroutine may be computing one).
func (run *runner) stop() {
	run.stepMu.Lock()
	defer run.stepMu.Unlock()
	run.mu.Lock()
	run.stopped = true
	pending := run.pending
	run.pending = nil
	run.mu.Unlock()
	for _, t := range pending {
		run.core.Reject(t, routing.ErrClosed)
	}
	run.core.Close()
}

// InstanceState is one instance's live view for the state endpoint.
type InstanceState struct {
	ID             string  `json:"id"`
	Model          string  `json:"model"`
	GPU            string  `json:"gpu"`
	Tier           string  `json:"tier"`
	Healthy        bool    `json:"healthy"`
	Disabled       bool    `json:"disabled"`
	Exploring      bool    `json:"exploring"`
	InFlight       int     `json:"in_flight"`
	MaxConcurrency int     `json:"max_concurrency"`
	Queue          int     `json:"queue"`
	Running        float64 `json:"running"`
	Waiting        float64 `json:"waiting"`
	KVUsage        float64 `json:"kv_usage"`
	PendingTokens  float64 `json:"pending_tokens"`
	TPOTMs         float64 `json:"tpot_ms"`
	Stale          bool    `json:"stale"`
	ScrapeAgeMs    float64 `json:"scrape_age_ms"`
	Served         int     `json:"served"`
	Failed         int     `json:"failed"`
	// EstimateSource says where the model's quality estimates come from
	// (prior, index, cluster, oracle), as of the last batch: the most
	// informed source any of its requests got.
	EstimateSource string `json:"estimate_source"`
}

// State returns every instance's live view of a cluster, or nil when the
// router has not seen the cluster.
func (r *Router) State(clusterID string) []InstanceState {
	r.mu.Lock()
	run := r.clusters[clusterID]
	r.mu.Unlock()
	if run == nil {
		return nil
	}
	return run.core.State(r.deps.Clock.Now())
}

// State returns every instance's live view at now.
func (c *Core) State(now time.Time) []InstanceState {
	c.mu.Lock()
	defer c.mu.Unlock()
	snaps := c.fleet.Snapshot(now, nil)
	members := c.fleet.Members()
	out := make([]InstanceState, len(snaps))
	for i := range snaps {
		s := &snaps[i]
		in := s.Instance
		q := 0
		if aq := c.queues[members[i]]; aq != nil {
			q = aq.Len()
		}
		src := routing.SourcePrior
		if m, ok := c.modelOf[in.Model]; ok {
			src = c.sources[m]
		}
		out[i] = InstanceState{
			ID: in.ID, Model: in.Model, GPU: in.GPU, Tier: in.Tier(),
			Healthy: s.Healthy, Disabled: in.Disabled, Exploring: s.Exploring,
			InFlight: s.InFlight, MaxConcurrency: c.capOf(in), Queue: q,
			Running: s.Running, Waiting: s.Waiting, KVUsage: s.KVUsage,
			PendingTokens: s.Pending, TPOTMs: s.TPOT * 1000,
			Stale: s.Stale, ScrapeAgeMs: float64(s.ScrapeAge) / float64(time.Millisecond),
			Served: s.Served, Failed: s.Failed,
			EstimateSource: src.String(),
		}
	}
	return out
}
