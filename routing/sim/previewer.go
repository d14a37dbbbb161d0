package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/routing/sim/metrics"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// PreviewConfig bounds the what-if preview; zero fields take the defaults
// of DefaultPreviewConfig.
type PreviewConfig struct {
	// Sim bounds one replay (requests, arrival rate or load, time limit).
	Sim WhatIfConfig
	// MinRecent is how many recent prompts of the tenant the process must
	// hold before they are replayed instead of the sample set (default 20).
	MinRecent int
	// CacheTTL is how long a result is reused for the same cluster
	// configuration, policy, workload and weights rounded to 0.01
	// (default 30s).
	CacheTTL time.Duration
	// CacheSize caps the cached results (default 512; the cache is emptied
	// when full).
	CacheSize int
}

// DefaultPreviewConfig returns the defaults.
func DefaultPreviewConfig() PreviewConfig {
	return PreviewConfig{Sim: DefaultWhatIfConfig(), MinRecent: 20, CacheTTL: 30 * time.Second, CacheSize: 512}
}

// Validate reports negative settings.
func (c PreviewConfig) Validate() error {
	if c.MinRecent < 0 || c.CacheTTL < 0 || c.CacheSize < 0 {
		return errors.New("what-if config: settings must be >= 0")
	}
	return nil
}

func (c PreviewConfig) withDefaults() PreviewConfig {
	d := DefaultPreviewConfig()
	if c.Sim.MaxRequests <= 0 {
		c.Sim.MaxRequests = d.Sim.MaxRequests
	}
	if c.Sim.Rate == 0 && c.Sim.Load == 0 {
		c.Sim.Load = d.Sim.Load
	}
	if c.Sim.Timeout <= 0 {
		c.Sim.Timeout = d.Sim.Timeout
	}
	if c.Sim.Seed == 0 {
		c.Sim.Seed = d.Sim.Seed
	}
	if c.MinRecent == 0 {
		c.MinRecent = d.MinRecent
	}
	if c.CacheTTL == 0 {
		c.CacheTTL = d.CacheTTL
	}
	if c.CacheSize == 0 {
		c.CacheSize = d.CacheSize
	}
	return c
}

// ObservedRequest is one served request as the usage ledger recorded it.
type ObservedRequest struct {
	ID                     string
	StartedAt, FinishedAt  time.Time
	PromptTokens           int
	OutputTokens           int
	TTFTMs, E2EMs, CostUSD float64
	// PredictedQuality is the quality the router predicted when it routed
	// the request.
	PredictedQuality float64
}

// Traffic reads a tenant's recorded requests for the preview.
type Traffic interface {
	// ServedRequests returns up to n of tenantID's most recent successfully
	// served requests on clusterID that started in [from, to), newest
	// first. Called from request goroutines, concurrently.
	ServedRequests(ctx context.Context, tenantID, clusterID string, from, to time.Time, n int) ([]ObservedRequest, error)
}

// LiveState is the live scheduler's view of a cluster's instances
// (*schedule.Router satisfies it). Called concurrently; read-only.
type LiveState interface {
	// State returns every instance's live view, or nil when the router has
	// not seen the cluster.
	State(clusterID string) []schedule.InstanceState
}

// PreviewDeps are the Previewer's collaborators.
type PreviewDeps struct {
	// WhatIf holds the live router's estimators and scheduler
	// configuration, used read-only.
	WhatIf WhatIfDeps
	// Traffic reads the recorded requests (nil: no observed replay).
	Traffic Traffic
	// State is the live scheduler (nil: replays start as a new router).
	State LiveState
	// Sample is the workload replayed when neither recorded traffic nor
	// enough remembered prompts exist (the demo set; prompts and tasks).
	Sample []workload.Item
	// Lengths is the output-length world model for items without a
	// recorded length (zero: the reference cluster's).
	Lengths engine.OutputLengths
	// Clock reads the time for the observed window and the cache (nil:
	// the wall clock).
	Clock routing.Clock
}

// Observed-traffic replay: the preview replays the tenant's own recent
// requests on the cluster, as the ledger recorded them, at their observed
// arrival rate — so that, for the weights the traffic was routed with, the
// prediction can be held against what happened.
const (
	// observedWindow is how far back the replay looks for requests.
	observedWindow = 24 * time.Hour
	// minObserved is how many recorded requests (spanning a positive
	// time) a replay of observed traffic needs; fewer fall back to the
	// recent prompts or the sample set.
	minObserved = 10
)

const previewNote = "Model-based estimate: no GPU is measured. Each instance is emulated with engine parameters " +
	"derived from the router's latency model for its tier (TPOT and TTFT at light load, load factor at max_concurrency), " +
	"starting from the requests the router sees in flight now; quality is the router's own estimate for the model that served each request."

const previewObservedNote = "Replays this cluster's recent requests as recorded (prompt and output token counts) at their " +
	"observed arrival rate, on engines derived from the router's live latency models, starting from the requests in flight now; " +
	"for the weights the traffic was routed with, compare the prediction with the observed figures."

// Previewer answers what-if previews: it replays a cluster's recorded
// traffic (or the tenant's recent prompts, or the sample set) through a
// fresh schedule.Core on emulated engines, with the proposed weights and
// optionally a baseline. One replay runs at a time per Previewer; results
// are cached briefly. Safe for concurrent use.
type Previewer struct {
	cfg   PreviewConfig
	deps  PreviewDeps
	clock routing.Clock
	sem   chan struct{}

	mu    sync.Mutex
	cache map[string]previewEntry
}

type previewEntry struct {
	at   time.Time
	cell Cell
}

// NewPreviewer returns a Previewer; an invalid cfg is an error.
func NewPreviewer(cfg PreviewConfig, deps PreviewDeps) (*Previewer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Clock == nil {
		deps.Clock = routing.WallClock{}
	}
	if deps.Lengths.MedianTokensByTask == nil {
		deps.Lengths = engine.ReferenceCluster().OutputLengths
	}
	return &Previewer{cfg: cfg.withDefaults(), deps: deps, clock: deps.Clock, sem: make(chan struct{}, 1), cache: map[string]previewEntry{}}, nil
}

// Preview answers q. Bad input (a policy the scheduler rejects, a cluster
// without instances, nothing to replay) is a *routing.FieldError; a replay
// over its time budget or a cancelled ctx wraps context.DeadlineExceeded
// or context.Canceled.
func (p *Previewer) Preview(ctx context.Context, q routing.WhatIfQuery) (*routing.WhatIfResult, error) {
	if err := q.Weights.Validate(); err != nil {
		return nil, err
	}
	if q.Baseline != nil {
		if err := q.Baseline.Validate(); err != nil {
			return nil, err
		}
	}
	n := p.cfg.Sim.MaxRequests
	if q.MaxRequests < 0 {
		return nil, &routing.FieldError{Field: "max_requests", Msg: fmt.Sprintf("max_requests must be > 0, got %d", q.MaxRequests)}
	}
	if q.MaxRequests > 0 {
		n = min(n, q.MaxRequests)
	}
	pl, err := p.plan(ctx, q, n, observedWindow, false)
	if err != nil {
		return nil, err
	}
	rc, ids, source, newest, observed, live, liveKey := pl.cluster, pl.ids, pl.source, pl.newest, pl.observed, pl.live, pl.liveKey
	cfg, world, items := pl.cfg, pl.world, pl.items
	key := func(wt routing.Weights) string {
		return fmt.Sprintf("%s|%s|%s|%s|%v|%g|%g|%g|%s|%s|%d|%d|%.2f|%.2f|%.2f|%s", q.TenantID, rc.ID, q.Version,
			strings.Join(ids, ","), rc.Policy.Name, rc.Policy.Threshold, rc.Policy.Slack, rc.Policy.SwitchGain,
			source, newest, len(items), n, wt.Quality, wt.Latency, wt.Cost, liveKey)
	}
	pred, err := p.run(ctx, key(q.Weights), cfg, world, items, rc.Policy, q.Weights)
	if err != nil {
		return nil, err
	}
	out := &routing.WhatIfResult{
		Source: source, Requests: pred.N, Predicted: metricsOf(pred), Policy: rc.Policy.Name, RateRPS: pred.Rate,
		Estimate: "model", QualitySource: "priors", Note: previewNote, Observed: observed, Live: live,
	}
	if observed != nil {
		out.Note = previewObservedNote
	}
	if p.deps.WhatIf.Estimator != nil {
		out.QualitySource = "index"
	}
	if q.Baseline != nil {
		base, err := p.run(ctx, key(*q.Baseline), cfg, world, items, rc.Policy, *q.Baseline)
		if err != nil {
			return nil, err
		}
		out.Baseline = metricsOf(base)
	}
	return out, nil
}

// replayPlan is a prepared replay of a cluster: its engines, the workload
// and the bounds, from the recorded traffic (or the remembered prompts, or
// the sample set) and the live state.
type replayPlan struct {
	cluster  routing.Cluster
	ids      []string
	cfg      WhatIfConfig
	world    *World
	items    []workload.Item
	source   string
	newest   string
	observed *routing.WhatIfObserved
	live     *routing.WhatIfLive
	liveKey  string
}

// plan prepares the replay of q's cluster with up to n requests: the
// recorded ones that started in the last window, at their observed rate,
// else (unless observedOnly) the tenant's remembered prompts or the sample
// set at the configured load; engines from the live latency models; the
// live router's per-instance state. A cluster or policy the scheduler
// cannot run, or nothing to replay, is a *routing.FieldError.
func (p *Previewer) plan(ctx context.Context, q routing.WhatIfQuery, n int, window time.Duration, observedOnly bool) (*replayPlan, error) {
	rc, ids, err := replayCluster(q)
	if err != nil {
		return nil, err
	}
	items, source, observed, newest, err := p.workload(ctx, q, rc.ID, n, window, observedOnly)
	if err != nil {
		return nil, err
	}
	// Engines from the live latency models, asked at the traffic's mean
	// prompt size (EngineTierAt).
	meanPrompt := 0.0
	for k := range items {
		meanPrompt += float64(promptTokens(&items[k]))
	}
	meanPrompt /= float64(len(items))
	tiers := make([]engine.Tier, len(rc.Instances))
	for i := range rc.Instances {
		tiers[i] = EngineTierAt(rc.Instances[i], p.deps.WhatIf.Latency, p.deps.WhatIf.Schedule.WithDefaults().DefaultMaxConcurrency, meanPrompt)
	}
	world, err := NewWorldFrom(rc, tiers, p.deps.Lengths)
	if err != nil {
		return nil, fmt.Errorf("what-if world: %w", err)
	}

	cfg := p.cfg.Sim
	cfg.MaxRequests = n
	if observed != nil {
		cfg.Rate, cfg.NoExplore = observed.RateRPS, true
	}
	// Start from the live router's per-instance state: what it has seen
	// each instance serve, and the load each holds now.
	var live *routing.WhatIfLive
	liveKey := ""
	if p.deps.State != nil {
		live, liveKey = liveState(&cfg, p.deps.State.State(rc.ID), ids)
	}
	return &replayPlan{cluster: rc, ids: ids, cfg: cfg, world: world, items: items, source: source, newest: newest,
		observed: observed, live: live, liveKey: liveKey}, nil
}

// replayCluster is q's cluster as a replay runs it (default policy, no
// API keys), checked: a policy the scheduler rejects, the oracle, or no
// instances is a *routing.FieldError.
func replayCluster(q routing.WhatIfQuery) (routing.Cluster, []string, error) {
	rc := q.Cluster
	rc.TenantID, rc.Version = q.TenantID, 1
	if rc.Policy.Name == "" {
		rc.Policy.Name = "routebalance"
	}
	if rc.Policy.Name == "oracle" {
		return routing.Cluster{}, nil, &routing.FieldError{Field: "policy.name", Msg: "the oracle policy needs true labels and is for offline simulation only"}
	}
	if _, err := schedule.NewRegistry().New(rc.Policy); err != nil {
		var fe *routing.FieldError
		if errors.As(err, &fe) {
			return routing.Cluster{}, nil, &routing.FieldError{Field: "policy", Msg: fe.Msg}
		}
		return routing.Cluster{}, nil, &routing.FieldError{Field: "policy", Msg: err.Error()}
	}
	if len(rc.Instances) == 0 {
		return routing.Cluster{}, nil, &routing.FieldError{Msg: fmt.Sprintf("cluster %s has no enabled instances to simulate", rc.ID)}
	}
	rc.Instances = append([]routing.Instance(nil), rc.Instances...)
	ids := make([]string, len(rc.Instances))
	for i := range rc.Instances {
		rc.Instances[i].APIKey = "" // never needed by a replay
		ids[i] = rc.Instances[i].ID
	}
	return rc, ids, nil
}

// workload picks what a replay runs: up to n recorded requests of the
// cluster that started in the last window, else (unless observedOnly) the
// tenant's remembered prompts or the sample set.
func (p *Previewer) workload(ctx context.Context, q routing.WhatIfQuery, clusterID string, n int, window time.Duration, observedOnly bool) (items []workload.Item, source string, observed *routing.WhatIfObserved, newest string, err error) {
	items, source = p.deps.Sample, "sample"
	obsItems, observed, newest, err := p.observedTraffic(ctx, q.TenantID, clusterID, n, window, q.Prompts)
	if err != nil {
		return nil, "", nil, "", err
	}
	if observed != nil {
		items, source = obsItems, "observed"
	} else if observedOnly {
		return nil, "", nil, "", &routing.FieldError{Msg: "too little recorded traffic to replay"}
	} else if q.Prompts != nil {
		if ps := q.Prompts.TenantPrompts(q.TenantID, n); len(ps) >= p.cfg.MinRecent {
			items, source = make([]workload.Item, len(ps)), "recent"
			for k, pr := range ps {
				items[k] = workload.Item{ID: fmt.Sprintf("recent-%d", k), Prompt: pr}
			}
		}
	}
	if len(items) == 0 {
		return nil, "", nil, "", &routing.FieldError{Msg: "no prompts to replay"}
	}
	return items, source, observed, newest, nil
}

func metricsOf(c Cell) *routing.WhatIfMetrics {
	return &routing.WhatIfMetrics{
		MeanQuality: c.Quality, MeanE2EMs: c.MeanE2E * 1e3, P95E2EMs: c.P95E2E * 1e3, MeanTTFTMs: c.MeanTTFT * 1e3,
		MeanCostUSD: c.CostPerRequest, Completed: c.Completed, Failed: c.Failed, ModelShare: c.ModelShare,
	}
}

// run replays once, reusing a cached result for the same key within the
// TTL. One replay runs at a time; others wait (or give up with ctx).
func (p *Previewer) run(ctx context.Context, key string, cfg WhatIfConfig, world *World, items []workload.Item, pol routing.PolicyConfig, wt routing.Weights) (Cell, error) {
	now := p.clock.Now()
	p.mu.Lock()
	if e, ok := p.cache[key]; ok && now.Sub(e.at) < p.cfg.CacheTTL {
		p.mu.Unlock()
		return e.cell, nil
	}
	p.mu.Unlock()
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return Cell{}, ctx.Err()
	}
	defer func() { <-p.sem }()
	cell, err := WhatIf(ctx, cfg, p.deps.WhatIf, world, items, pol, wt)
	if errors.Is(err, workload.ErrEmpty) {
		return cell, &routing.FieldError{Msg: "no prompts to replay"}
	}
	if err != nil {
		return cell, err
	}
	if math.IsNaN(cell.Quality) {
		cell.Quality = 0
	}
	p.mu.Lock()
	if len(p.cache) >= p.cfg.CacheSize {
		clear(p.cache)
	}
	p.cache[key] = previewEntry{at: now, cell: cell}
	p.mu.Unlock()
	return cell, nil
}

// observedTraffic reads up to n of the tenant's most recent served
// requests on the cluster (the last window) and turns them into a
// replay workload: each item keeps the request's prompt-token count and
// its observed output length (for whichever model serves it in the
// replay) and, when the process still remembers it, its prompt (for the
// quality estimate). It returns nil when there is too little traffic;
// newest is the newest replayed request's id (part of the cache key).
func (p *Previewer) observedTraffic(ctx context.Context, tenantID, clusterID string, n int, window time.Duration, prompts routing.PromptMemory) (items []workload.Item, obs *routing.WhatIfObserved, newest string, err error) {
	if p.deps.Traffic == nil || n < minObserved {
		return nil, nil, "", nil
	}
	now := p.clock.Now().UTC()
	rows, err := p.deps.Traffic.ServedRequests(ctx, tenantID, clusterID, now.Add(-window), now.Add(time.Second), n)
	if err != nil {
		return nil, nil, "", fmt.Errorf("observed traffic: %w", err)
	}
	if len(rows) < minObserved {
		return nil, nil, "", nil
	}
	rows = slices.Clone(rows)
	slices.Reverse(rows) // oldest first
	first, last := rows[0].StartedAt, rows[len(rows)-1].StartedAt
	span := last.Sub(first).Seconds()
	if !(span > 0) {
		return nil, nil, "", nil
	}
	obs = &routing.WhatIfObserved{Requests: len(rows), WindowFrom: first, WindowTo: rows[len(rows)-1].FinishedAt,
		RateRPS: float64(len(rows)-1) / span}
	items = make([]workload.Item, len(rows))
	e2e := make([]float64, len(rows))
	for i, r := range rows {
		prompt := ""
		if prompts != nil {
			prompt = prompts.Prompt(tenantID, r.ID)
		}
		if prompt == "" {
			// No text kept: the quality estimate falls back to the
			// instances' priors for this item.
			prompt = "recorded request " + r.ID
		}
		items[i] = workload.Item{ID: r.ID, Prompt: prompt, PromptTokens: r.PromptTokens,
			OutputTokens: map[string]int{workload.AnyModel: max(r.OutputTokens, 1)}}
		e2e[i] = r.E2EMs
		obs.MeanE2EMs += r.E2EMs
		obs.MeanTTFTMs += r.TTFTMs
		obs.MeanCostUSD += r.CostUSD
		obs.MeanQuality += r.PredictedQuality
	}
	k := float64(len(rows))
	obs.MeanE2EMs /= k
	obs.MeanTTFTMs /= k
	obs.MeanCostUSD /= k
	obs.MeanQuality /= k
	sort.Float64s(e2e)
	obs.P95E2EMs = metrics.Percentile(e2e, 95)
	return items, obs, rows[len(rows)-1].ID, nil
}

// liveState copies the live scheduler's per-instance view into the replay:
// served counts (exploration state) and the load each replayed instance
// (ids) holds now — running = the scheduler's in flight, or the scraped
// running count when fresher and larger; its dead-reckoned pending decode
// tokens (scaled up when the scrape shows more running than its own);
// waiting = the scheduler's admission queue for it plus the scraped engine
// queue. It returns the summary and a cache-key part.
func liveState(cfg *WhatIfConfig, st []schedule.InstanceState, ids []string) (*routing.WhatIfLive, string) {
	if len(st) == 0 {
		return nil, ""
	}
	replayed := make(map[string]bool, len(ids))
	for _, id := range ids {
		replayed[id] = true
	}
	cfg.Served = make(map[string]int, len(st))
	cfg.Live = make(map[string]InitialLoad, len(st))
	sum := &routing.WhatIfLive{}
	var key strings.Builder
	for _, x := range st {
		cfg.Served[x.ID] = x.Served
		if !replayed[x.ID] {
			continue
		}
		run := x.InFlight
		if r := int(math.Round(x.Running)); r > run && !math.IsInf(x.Running, 0) {
			run = r
		}
		pend := 0.0
		if x.InFlight > 0 && x.PendingTokens > 0 && !math.IsInf(x.PendingTokens, 0) {
			pend = x.PendingTokens * float64(run) / float64(x.InFlight)
		}
		wait := max(x.Queue, 0) // held in the scheduler's admission queue for this instance
		if x.Waiting > 0 && !math.IsInf(x.Waiting, 0) {
			wait += int(math.Round(x.Waiting))
		}
		cfg.Live[x.ID] = InitialLoad{Running: run, PendingTokens: pend, Waiting: wait}
		sum.Instances++
		sum.InFlight += run
		sum.Waiting += wait
		sum.PendingTokens += pend
		fmt.Fprintf(&key, "%s:%d/%d/%.0f;", x.ID, run, wait, pend)
	}
	return sum, key.String()
}
