// Package sim is the discrete-event simulator behind `routebalance
// simulate`: arrivals in virtual time, one engine.Engine per instance of
// a cluster file, and a Router (the real scheduler, adapted in
// schedsim.go) deciding batches synchronously. Nothing here sleeps or reads
// the wall clock except to measure the scheduler's own compute time.
//
// See README.md for the event loop, the metric definitions and what the
// virtual clock charges for a decision.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/sim/metrics"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// epoch returns virtual time zero of every run.
func epoch() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// Job is one simulated request on its way through the Router and an
// engine. The Router reads Req and sets Instance, Decision and Err; Handle
// is the Router's own per-job state. The other fields are the loop's.
type Job struct {
	Index int
	Req   routing.Request
	Item  *workload.Item
	// Instance is the index (in Cluster.Instances order) of the instance
	// the Router admitted the job on.
	Instance int
	Decision routing.Decision
	// Err is set when the Router rejected the job.
	Err error
	// Handle belongs to the Router.
	Handle any

	arrival   time.Time
	submitted time.Time
	first     time.Time
	ticket    engine.Ticket
	tokens    int  // output tokens streamed so far
	done      bool // completed or failed
}

// Router is the scheduler as the event loop drives it: synchronously, one
// call at a time, with virtual time passed in. schedsim.go adapts the real
// schedule.Core to it.
type Router interface {
	// BatchLimit is how many waiting jobs the next batch may take at now.
	BatchLimit(now time.Time) int
	// Assign decides a batch at now. It appends to done every job admitted
	// (Instance set) or rejected (Err set) during the call and returns it;
	// jobs it queues come back later from Release.
	Assign(ctx context.Context, now time.Time, batch []*Job, done []*Job) []*Job
	// Progress reports the output tokens a job has produced so far.
	Progress(now time.Time, j *Job, tokens int)
	// Release ends an admitted job with its outcome and appends to done
	// every job its freed slot admitted from the queues.
	Release(now time.Time, j *Job, o routing.Outcome, done []*Job) []*Job
	// Scrape reports instance i's /metrics gauges at now.
	Scrape(now time.Time, i int, s engine.State)
}

// Config is one simulated cell's load.
type Config struct {
	// Rate is λ in req/s; Burstiness the gamma shape (1 = Poisson).
	Rate       float64
	Burstiness float64
	// N is the number of requests.
	N int
	// Seed fixes the prompt sample and the arrivals (World.Seed fixes the
	// output lengths).
	Seed uint64
	// MaxTokens is each request's max_tokens (0 = none).
	MaxTokens int
	// DecisionCost is the virtual time a batch decision occupies the
	// scheduler; negative means the measured wall-clock compute time of
	// the real call (the default), 0 makes decisions instantaneous (and
	// runs fully deterministic).
	DecisionCost time.Duration
	// ScrapeInterval is how often engine gauges reach the Router, as the
	// live scraper would; 0 disables scraping.
	ScrapeInterval time.Duration
	// Goodput holds the SLO budgets of the goodput figure.
	Goodput metrics.SLO
	// ZeroLatency runs the engines with no latency at all.
	ZeroLatency bool
	// EstimatedQuality scores every completed request with the scheduler's
	// predicted quality of the model that served it (Decision.
	// PredictedQuality) instead of the data's label; for workloads without
	// labels (the what-if preview replays real, unlabelled prompts).
	EstimatedQuality bool
	// Profile, when set, replaces Rate and N: arrivals follow the
	// piecewise-constant rate until the profile ends.
	Profile workload.Profile
	// Replay, when set, replaces the sampled workload: its items arrive at
	// its offsets, after its preloaded requests are on the engines (a
	// what-if replay from a live state).
	Replay *Replay
	// Control, when set, is called every Control.Interval of virtual time
	// while arrivals remain; the weights it returns go on every request
	// that arrives from then on.
	Control *Control
}

// Replay is an explicit workload: Items[k] arrives at At[k]; Preload holds
// requests already running on the engines at time 0 (submitted there
// directly, outside the Router, and not recorded).
type Replay struct {
	Items   []workload.Item
	At      []time.Duration
	Preload []Preload
}

// Preload is one request running on engine Instance when a replay starts.
type Preload struct {
	Instance     int
	Prompt       string
	Task         string
	PromptTokens int
	// OutputTokens is what it still has to generate (at least 1).
	OutputTokens int
}

// Control is a periodic hook of the event loop (the autopilot).
type Control struct {
	// Interval is the virtual time between calls (> 0).
	Interval time.Duration
	// Step is called at each multiple of Interval with the run so far and
	// returns the weights for the requests arriving next. It runs inside
	// the event loop, so virtual time stands still while it works.
	Step func(ctx context.Context, v *View) routing.Weights
}

// View is the run so far as a Control sees it.
type View struct {
	// Now is the virtual time since the start of the run.
	Now  time.Duration
	jobs []Job
	l    *loop
}

// JobView is one arrived request as a Control sees it.
type JobView struct {
	Item    *workload.Item
	Arrival time.Duration
	Weights routing.Weights
	// Done is set once it completed or failed; Record is then its record.
	Done   bool
	Record *metrics.Record
	// Running is set while it is on an engine (Instance, Tokens so far,
	// FirstToken since arrival or 0 before it); otherwise it waits in the
	// batch or the Router's queues.
	Running         bool
	Instance        int
	Tokens          int
	FirstToken      time.Duration
	PromptTokens    int
	PredictedTokens float64
}

// Each calls fn for every arrived request in arrival order.
func (v *View) Each(fn func(*JobView)) {
	var jv JobView
	for k := range v.jobs {
		j := &v.jobs[k]
		jv = JobView{Item: j.Item, Arrival: j.arrival.Sub(epoch()), Weights: j.Req.Weights, Done: j.done, Instance: j.Instance,
			PromptTokens: j.Req.PromptTokens, PredictedTokens: j.Decision.PredictedOutputTokens}
		if j.done {
			jv.Record = &v.l.res.Records[j.Index]
		} else if !j.submitted.IsZero() {
			jv.Running, jv.Tokens, jv.PromptTokens = true, j.tokens, j.ticket.PromptTokens
			if !j.first.IsZero() {
				jv.FirstToken = j.first.Sub(j.arrival)
			}
		}
		fn(&jv)
	}
}

// DefaultConfig returns λ = 10, 3,000 Poisson arrivals, measured decision
// cost and a 250 ms scrape interval.
func DefaultConfig() Config {
	return Config{Rate: 10, Burstiness: 1, N: 3000, Seed: 1, DecisionCost: -1, ScrapeInterval: 250 * time.Millisecond}
}

// Validate reports a Config that cannot run.
func (c *Config) Validate() error {
	switch {
	case c.Control != nil && c.Control.Interval <= 0:
		return errors.New("control interval must be > 0")
	case c.Replay != nil && len(c.Replay.Items) != len(c.Replay.At):
		return fmt.Errorf("replay has %d items for %d arrival times", len(c.Replay.Items), len(c.Replay.At))
	case c.Replay != nil || len(c.Profile) > 0:
		// the explicit workload or the profile set rate and count
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate must be a positive number, got %v", c.Rate)
	case c.N <= 0:
		return fmt.Errorf("n must be > 0, got %d", c.N)
	}
	switch {
	case c.Burstiness <= 0:
		return fmt.Errorf("burstiness must be > 0, got %v", c.Burstiness)
	case c.ScrapeInterval < 0:
		return errors.New("scrape interval must be >= 0")
	}
	return nil
}

// World is a cluster file as the simulator uses it: the routing view of its
// instances and the engine parameters behind each.
type World struct {
	File *engine.ClusterFile
	// Cluster is what the scheduler sees (instance i ↔ File.Instances()[i]).
	Cluster routing.Cluster
	// Seed selects the world's output lengths (hash-seeded per prompt and
	// model); it is fixed per world, apart from the workload's seed.
	Seed  uint64
	specs []engine.InstanceSpec
}

// NewWorld builds the routing view of a cluster file. Each instance is
// registered with MaxConcurrency = its tier's max_num_seqs (what an
// operator registering a vLLM server would enter) and the model's
// quality prior left at 0 (the scheduler's default).
func NewWorld(f *engine.ClusterFile) *World {
	w := &World{File: f, Seed: 1, specs: f.Instances()}
	w.Cluster = routing.Cluster{ID: f.Name, TenantID: "sim", Version: 1}
	for _, s := range w.specs {
		t := s.Tier
		w.Cluster.Instances = append(w.Cluster.Instances, routing.Instance{
			ID:              s.ID,
			BaseURL:         "sim://" + s.ID,
			Model:           t.Model,
			GPU:             t.GPU,
			TensorParallel:  t.TensorParallel,
			PriceInPerMTok:  t.PriceInPerMTok,
			PriceOutPerMTok: t.PriceOutPerMTok,
			MaxConcurrency:  t.MaxNumSeqs,
		})
	}
	return w
}

// Models returns the distinct served models in instance order.
func (w *World) Models() []string {
	var out []string
	seen := map[string]bool{}
	for _, in := range w.Cluster.Instances {
		if !seen[in.Model] {
			seen[in.Model] = true
			out = append(out, in.Model)
		}
	}
	return out
}

// TrueLength is the output length the world gives prompt on model (before
// any max_tokens cap), for the oracle.
func (w *World) TrueLength(prompt, task, model string) (int, bool) {
	for i := range w.File.Tiers {
		t := &w.File.Tiers[i]
		if t.Model == model {
			return w.File.OutputLengths.Natural(prompt, model, task, t.Verbosity, w.Seed), true
		}
	}
	return 0, false
}

// TaskLength is the world's mean and median output length of model on
// task (median(task)·verbosity, the mean e^{σ²/2} above it; before any
// max_tokens cap), for the oracle's task-length mode.
func (w *World) TaskLength(task, model string) (mean, median float64, ok bool) {
	for i := range w.File.Tiers {
		t := &w.File.Tiers[i]
		if t.Model == model {
			o := &w.File.OutputLengths
			median = o.Median(task) * t.Verbosity
			return median * math.Exp(o.Sigma*o.Sigma/2), median, true
		}
	}
	return 0, 0, false
}

// Result is one finished run: the per-request records and the scheduler's
// own cost.
type Result struct {
	Records []metrics.Record
	// DecisionUs is the wall-clock compute time of each Assign call, in
	// microseconds; BatchSizes the size of each batch.
	DecisionUs []float64
	BatchSizes []int
	// Weights are the weights each request carried (Records' order).
	Weights []routing.Weights
	// VirtualEnd is the virtual time of the last completion.
	VirtualEnd time.Duration
	// Wall is the wall-clock time the run took.
	Wall time.Duration
}

// request returns the routing request the simulator builds for an item:
// model "auto", the prompt's estimated chat tokens, the given weights and
// policy (the Router may ignore them).
func request(id string, it *workload.Item, w routing.Weights, maxTokens int, at time.Time) routing.Request {
	return routing.Request{
		ID:           id,
		Prompt:       it.Prompt,
		PromptTokens: promptTokens(it),
		MaxTokens:    maxTokens,
		Model:        "auto",
		Weights:      w,
		Arrival:      at,
	}
}

func promptTokens(it *workload.Item) int {
	if it.PromptTokens > 0 {
		return it.PromptTokens
	}
	return routing.EstimateChatTokens([]string{it.Prompt})
}

// Run simulates one cell: cfg.N requests sampled from items arrive at
// cfg.Rate in virtual time, router decides, the world's engines serve. The
// weights are put on every request.
func Run(ctx context.Context, cfg Config, w *World, items []workload.Item, weights routing.Weights, router Router) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(items) == 0 && cfg.Replay == nil {
		return nil, workload.ErrEmpty
	}
	var (
		sample   []workload.Item
		arrivals []time.Duration
	)
	switch {
	case cfg.Replay != nil:
		sample, arrivals = cfg.Replay.Items, cfg.Replay.At
	case len(cfg.Profile) > 0:
		arrivals = cfg.Profile.Arrivals(cfg.Burstiness, cfg.Seed)
		sample = workload.Sample(items, len(arrivals), cfg.Seed)
	default:
		sample = workload.Sample(items, cfg.N, cfg.Seed)
		arrivals = workload.Arrivals(cfg.N, cfg.Rate, cfg.Burstiness, cfg.Seed)
	}
	cfg.N = len(arrivals)
	wall := time.Now()
	l := &loop{w: w, router: router, res: &Result{Records: make([]metrics.Record, cfg.N)}, estimated: cfg.EstimatedQuality}
	l.engines = make([]*engine.Engine, len(w.specs))
	l.live = make([]map[string]*Job, len(w.specs))
	for i, s := range w.specs {
		e, err := engine.NewEngine(engine.EngineConfig{Tier: *s.Tier, Lengths: w.File.OutputLengths, Seed: w.Seed, Start: epoch(), ZeroLatency: cfg.ZeroLatency})
		if err != nil {
			return nil, fmt.Errorf("instance %s: %w", s.ID, err)
		}
		l.engines[i] = e
		l.live[i] = map[string]*Job{}
	}
	if cfg.Replay != nil && len(cfg.Replay.Preload) > 0 {
		for k, p := range cfg.Replay.Preload {
			if p.Instance < 0 || p.Instance >= len(l.engines) {
				return nil, fmt.Errorf("preload %d on instance %d of %d", k, p.Instance, len(l.engines))
			}
			// The engine may refuse it (too long): it is then not there.
			_, _ = l.engines[p.Instance].Submit(epoch(), engine.Request{ID: fmt.Sprintf("pre%d", k), Prompt: p.Prompt, Task: p.Task,
				PromptTokens: p.PromptTokens, OutputTokens: max(p.OutputTokens, 1)})
		}
		for i, e := range l.engines {
			router.Scrape(epoch(), i, e.State())
		}
	}
	l.res.Weights = make([]routing.Weights, cfg.N)
	jobs := make([]Job, cfg.N)

	var (
		next       int    // next arrival
		waiting    []*Job // arrived, not yet in a batch
		batch      []*Job
		events     []engine.Event
		busyUntil  = epoch()
		deliveries []delivery // decided jobs, effective when the decision's virtual compute ends
		nextScrape = epoch()
		clock      = epoch() // virtual now: never goes back
		nextCtl    = epoch()
	)
	if cfg.Control != nil {
		nextCtl = epoch().Add(cfg.Control.Interval)
	}
	never := epoch().Add(1 << 62)

	// Each turn takes the earliest of: an engine event, a delivery of
	// decided jobs, an arrival, the scheduler free with jobs waiting, a
	// scrape. Ties go in that order.
	for l.finished < cfg.N {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if l.err != nil {
			return nil, l.err
		}
		tEng := never
		for _, e := range l.engines {
			if t, ok := e.NextEvent(); ok && t.Before(tEng) {
				tEng = t
			}
		}
		tDel := never
		if len(deliveries) > 0 {
			tDel = deliveries[0].at
		}
		tCtl := never
		if cfg.Control != nil && next < cfg.N {
			tCtl = maxTime(nextCtl, clock)
		}
		tArr := never
		if next < cfg.N {
			tArr = epoch().Add(arrivals[next])
		}
		tSched := never
		if len(waiting) > 0 {
			tSched = maxTime(busyUntil, clock)
		}
		tScrape := never
		if cfg.ScrapeInterval > 0 && l.liveCount > 0 {
			tScrape = maxTime(nextScrape, clock)
		}
		now := minTime(tEng, tDel, tCtl, tArr, tSched, tScrape)
		if now.Equal(never) {
			return nil, fmt.Errorf("simulation stalled with %d of %d requests unfinished (the router holds them)", cfg.N-l.finished, cfg.N)
		}
		clock = now
		switch {
		case now.Equal(tEng):
			for i, e := range l.engines {
				if t, ok := e.NextEvent(); !ok || t.After(now) {
					continue
				}
				events = e.Advance(now, events[:0])
				for _, ev := range events {
					l.event(i, ev)
				}
			}
		case now.Equal(tDel):
			d := deliveries[0]
			deliveries = deliveries[1:]
			l.admit(now, d.jobs)
		case now.Equal(tCtl):
			weights = cfg.Control.Step(ctx, &View{Now: now.Sub(epoch()), jobs: jobs[:next], l: l})
			nextCtl = now.Add(cfg.Control.Interval)
		case now.Equal(tArr):
			j := &jobs[next]
			j.Index, j.Item, j.arrival, j.Instance = next, &sample[next], now, -1
			j.Req = request(fmt.Sprintf("r%d", next), j.Item, weights, cfg.MaxTokens, now)
			l.res.Weights[next] = weights
			waiting = append(waiting, j)
			next++
		case now.Equal(tSched):
			n := min(max(router.BatchLimit(now), 1), len(waiting))
			batch = append(batch[:0], waiting[:n]...)
			waiting = waiting[n:]
			t0 := time.Now()
			decided := router.Assign(ctx, now, batch, nil)
			dt := time.Since(t0)
			l.res.DecisionUs = append(l.res.DecisionUs, float64(dt)/float64(time.Microsecond))
			l.res.BatchSizes = append(l.res.BatchSizes, n)
			cost := cfg.DecisionCost
			if cost < 0 {
				cost = dt
			}
			busyUntil = now.Add(cost)
			if cost == 0 {
				l.admit(now, decided)
			} else if len(decided) > 0 {
				deliveries = append(deliveries, delivery{at: busyUntil, jobs: decided})
			}
		case now.Equal(tScrape):
			for i, e := range l.engines {
				router.Scrape(now, i, e.State())
			}
			nextScrape = now.Add(cfg.ScrapeInterval)
		}
	}
	if l.err != nil {
		return nil, l.err
	}
	for i := range l.res.Records {
		r := &l.res.Records[i]
		l.res.VirtualEnd = max(l.res.VirtualEnd, r.Start+r.E2E)
	}
	l.res.Wall = time.Since(wall)
	return l.res, nil
}

// loop is the state of one run the event handlers share.
type loop struct {
	w         *World
	router    Router
	engines   []*engine.Engine
	live      []map[string]*Job // per engine, by request ID
	liveCount int
	finished  int
	res       *Result
	err       error
	estimated bool // Config.EstimatedQuality
}

func (l *loop) finish(j *Job, rec metrics.Record) {
	l.res.Records[j.Index] = rec
	j.done = true
	l.finished++
}

// admit hands decided jobs to their engines at now (rejected ones finish
// as failures), as the proxy forwards a request once it holds a slot.
func (l *loop) admit(now time.Time, js []*Job) {
	for _, j := range js {
		if j.Err != nil {
			l.finish(j, metrics.Record{Start: j.arrival.Sub(epoch()), E2E: now.Sub(j.arrival), Err: j.Err.Error()})
			continue
		}
		i := j.Instance
		if i < 0 || i >= len(l.engines) {
			l.err = fmt.Errorf("router admitted job %d on instance %d of %d", j.Index, i, len(l.engines))
			return
		}
		tk, err := l.engines[i].Submit(now, engine.Request{ID: j.Req.ID, Prompt: j.Item.Prompt, Task: j.Item.Task, PromptTokens: j.Req.PromptTokens,
			MaxTokens: j.Req.MaxTokens, OutputTokens: j.Item.OutputFor(l.w.Cluster.Instances[i].Model)})
		if err != nil {
			// The instance refused it (prompt too long): the proxy sees
			// a 400 and releases the slot.
			l.finish(j, metrics.Record{Start: j.arrival.Sub(epoch()), E2E: now.Sub(j.arrival), Err: err.Error()})
			l.admit(now, l.router.Release(now, j, routing.Outcome{Err: err}, nil))
			continue
		}
		j.ticket, j.submitted = tk, now
		l.live[i][j.Req.ID] = j
		l.liveCount++
	}
}

// event handles one engine event of instance i the way the proxy reports
// a stream: progress per token, release with the outcome at the end.
func (l *loop) event(i int, ev engine.Event) {
	j := l.live[i][ev.ID]
	if j == nil {
		return
	}
	switch ev.Kind {
	case engine.EventFirstToken:
		j.first, j.tokens = ev.At, ev.Tokens
		l.router.Progress(ev.At, j, ev.Tokens)
	case engine.EventToken:
		j.tokens = ev.Tokens
		l.router.Progress(ev.At, j, ev.Tokens)
	case engine.EventDone:
		delete(l.live[i], ev.ID)
		l.liveCount--
		l.finish(j, record(j, ev, l.w, l.estimated))
		l.admit(ev.At, l.router.Release(ev.At, j, routing.Outcome{
			PromptTokens: j.ticket.PromptTokens,
			OutputTokens: ev.Tokens,
			TTFT:         j.first.Sub(j.submitted),
			E2E:          ev.At.Sub(j.submitted),
		}, nil))
	}
}

type delivery struct {
	at   time.Time
	jobs []*Job
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(ts ...time.Time) time.Time {
	m := ts[0]
	for _, t := range ts[1:] {
		if t.Before(m) {
			m = t
		}
	}
	return m
}

// record is the client's view of a completed job: latencies from its
// arrival at the router, quality from the data's label of the served model
// (or the scheduler's prediction for it when estimated), cost at the
// instance's prices.
func record(j *Job, ev engine.Event, w *World, estimated bool) metrics.Record {
	in := &w.Cluster.Instances[j.Instance]
	r := metrics.Record{
		Start:        j.arrival.Sub(epoch()),
		TTFT:         j.first.Sub(j.arrival),
		E2E:          ev.At.Sub(j.arrival),
		PromptTokens: j.ticket.PromptTokens,
		OutputTokens: ev.Tokens,
		CostUSD:      in.CostUSD(float64(j.ticket.PromptTokens), float64(ev.Tokens)),
		Model:        in.Model,
		Instance:     in.ID,
		Tier:         in.Tier(),
		PredictedE2E: j.Decision.PredictedE2E,

		PredictedTTFT:   j.Decision.PredictedTTFT,
		PredictedTokens: j.Decision.PredictedOutputTokens,
	}
	if estimated {
		r.Quality, r.HasQuality = j.Decision.PredictedQuality, true
	} else {
		r.Quality, r.HasQuality = j.Item.Quality(in.Model)
	}
	return r
}
