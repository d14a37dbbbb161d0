package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/infra/vllmemu/demoset"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/routing/sim"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// WhatIfConfig bounds POST /api/v1/clusters/{id}/whatif; zero fields take
// the defaults of DefaultWhatIfConfig.
type WhatIfConfig struct {
	// Sim bounds one replay (requests, arrival rate or load, time limit).
	Sim sim.WhatIfConfig
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

// DefaultWhatIfConfig returns the defaults.
func DefaultWhatIfConfig() WhatIfConfig {
	return WhatIfConfig{Sim: sim.DefaultWhatIfConfig(), MinRecent: 20, CacheTTL: 30 * time.Second, CacheSize: 512}
}

// Validate reports negative settings.
func (c WhatIfConfig) Validate() error {
	if c.MinRecent < 0 || c.CacheTTL < 0 || c.CacheSize < 0 {
		return errors.New("what-if config: settings must be >= 0")
	}
	return nil
}

func (c WhatIfConfig) withDefaults() WhatIfConfig {
	d := DefaultWhatIfConfig()
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

// whatIf is the what-if preview's state: one replay at a time per process
// (sem), a small result cache and the parsed sample set.
type whatIf struct {
	cfg   WhatIfConfig
	deps  sim.WhatIfDeps
	clock routing.Clock
	sem   chan struct{}

	mu    sync.Mutex
	cache map[string]whatIfEntry

	sampleOnce sync.Once
	sample     []workload.Item
	sampleErr  error
	lengths    engine.OutputLengths
}

type whatIfEntry struct {
	at   time.Time
	cell sim.Cell
}

func newWhatIf(cfg WhatIfConfig, deps sim.WhatIfDeps, clock routing.Clock) *whatIf {
	if clock == nil {
		clock = routing.WallClock{}
	}
	return &whatIf{cfg: cfg.withDefaults(), deps: deps, clock: clock, sem: make(chan struct{}, 1), cache: map[string]whatIfEntry{}}
}

// sampleSet is the embedded synthetic demo set as a workload (prompts and
// tasks only: quality comes from the router's estimator, not its labels),
// and the reference cluster's output-length world model.
func (w *whatIf) sampleSet() ([]workload.Item, engine.OutputLengths, error) {
	w.sampleOnce.Do(func() {
		items, err := demoset.Items()
		if err != nil {
			w.sampleErr = fmt.Errorf("demo set: %w", err)
			return
		}
		for _, it := range items {
			w.sample = append(w.sample, workload.Item{ID: it.ID, Prompt: it.Prompt, Task: it.Task})
		}
		w.lengths = engine.ReferenceCluster().OutputLengths
	})
	return w.sample, w.lengths, w.sampleErr
}

// whatIfRequest is the body of POST /clusters/{id}/whatif (web/README.md).
type whatIfRequest struct {
	Weights         *routing.Weights      `json:"weights"`
	BaselineWeights *routing.Weights      `json:"baseline_weights"`
	Policy          *routing.PolicyConfig `json:"policy"`
	MaxRequests     *int                  `json:"max_requests"`
}

// whatIfMetrics is one replay's prediction.
type whatIfMetrics struct {
	MeanQuality float64 `json:"mean_quality"`
	MeanE2EMs   float64 `json:"mean_e2e_ms"`
	P95E2EMs    float64 `json:"p95_e2e_ms"`
	MeanTTFTMs  float64 `json:"mean_ttft_ms"`
	MeanCostUSD float64 `json:"mean_cost_usd"`
	// Completed and Failed count the replayed requests.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// ModelShare is the share of completed requests per served model.
	ModelShare map[string]float64 `json:"model_share"`
}

func metricsOf(c sim.Cell) *whatIfMetrics {
	return &whatIfMetrics{
		MeanQuality: c.Quality, MeanE2EMs: c.MeanE2E * 1e3, P95E2EMs: c.P95E2E * 1e3, MeanTTFTMs: c.MeanTTFT * 1e3,
		MeanCostUSD: c.CostPerRequest, Completed: c.Completed, Failed: c.Failed, ModelShare: c.ModelShare,
	}
}

// whatIfResponse is the answer (web/README.md).
type whatIfResponse struct {
	Source    string         `json:"source"`
	Requests  int            `json:"requests"`
	Predicted *whatIfMetrics `json:"predicted"`
	Baseline  *whatIfMetrics `json:"baseline,omitempty"`
	Policy    string         `json:"policy"`
	RateRPS   float64        `json:"rate_rps"`
	// Observed is the replayed traffic as it happened (source "observed").
	Observed *whatIfObserved `json:"observed,omitempty"`
	// Estimate says how the numbers were obtained.
	Estimate      string `json:"estimate"`
	QualitySource string `json:"quality_source"`
	Note          string `json:"note"`
}

const whatIfNote = "Model-based estimate: no GPU is measured. Each instance is emulated with engine parameters " +
	"derived from the router's latency model for its tier (TPOT and TTFT at light load, load factor at max_concurrency), " +
	"starting idle; quality is the router's own estimate for the model that served each request."

const whatIfObservedNote = "Replays this cluster's recent requests as recorded (prompt and output token counts) at their " +
	"observed arrival rate, on engines derived from the router's live latency models, starting idle; " +
	"for the weights the traffic was routed with, compare the prediction with the observed figures."

// whatif serves POST /api/v1/clusters/{id}/whatif.
func (s *Server) whatif(c *fiber.Ctx) error {
	var in whatIfRequest
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.Weights == nil {
		return badRequest("weights", "weights is required: {\"quality\",\"latency\",\"cost\"} on the simplex")
	}
	if err := validWeights("weights", *in.Weights); err != nil {
		return err
	}
	if in.BaselineWeights != nil {
		if err := validWeights("baseline_weights", *in.BaselineWeights); err != nil {
			return err
		}
	}
	w := s.whatIf
	n := w.cfg.Sim.MaxRequests
	if in.MaxRequests != nil {
		if *in.MaxRequests <= 0 {
			return badRequest("max_requests", "max_requests must be > 0, got %d", *in.MaxRequests)
		}
		n = min(n, *in.MaxRequests)
	}

	ctx, tid, id := c.UserContext(), tenantOf(c), c.Params("id")
	cl, err := s.deps.Tenants.Cluster(ctx, tid, id)
	if err != nil {
		return err
	}
	ins, err := s.deps.Tenants.Instances(ctx, tid, id)
	if err != nil {
		return err
	}
	rc := routing.Cluster{ID: cl.ID, TenantID: tid, Version: 1, Policy: cl.Policy}
	if in.Policy != nil {
		rc.Policy = *in.Policy
	}
	if rc.Policy.Name == "" {
		rc.Policy.Name = "routebalance"
	}
	if rc.Policy.Name == "oracle" {
		return badRequest("policy.name", "the oracle policy needs true labels and is for offline simulation only")
	}
	if _, err := schedule.NewRegistry().New(rc.Policy); err != nil {
		var fe *routing.FieldError
		if errors.As(err, &fe) {
			return badRequest("policy", "%s", fe.Msg)
		}
		return badRequest("policy", "%v", err)
	}
	version := cl.UpdatedAt
	var tiers []engine.Tier
	for i := range ins {
		version = maxT(version, ins[i].UpdatedAt)
		if ins[i].Disabled {
			continue
		}
		ri := ins[i].Routing()
		ri.APIKey = "" // never needed by a replay
		rc.Instances = append(rc.Instances, ri)
		tiers = append(tiers, sim.EngineTier(ri, w.deps.Latency, w.deps.Schedule.WithDefaults().DefaultMaxConcurrency))
	}
	if len(rc.Instances) == 0 {
		return badRequest("", "cluster %s has no enabled instances to simulate", id)
	}

	sample, lengths, err := w.sampleSet()
	if err != nil {
		return err
	}
	items, source := sample, "sample"
	obsItems, observed, err := s.observedTraffic(ctx, tid, id, n)
	if err != nil {
		return err
	}
	if observed != nil {
		items, source = obsItems, "observed"
	} else if s.recent != nil {
		if ps := s.recent.tenantPrompts(tid, n); len(ps) >= w.cfg.MinRecent {
			items, source = make([]workload.Item, len(ps)), "recent"
			for k, p := range ps {
				items[k] = workload.Item{ID: fmt.Sprintf("recent-%d", k), Prompt: p}
			}
		}
	}
	world, err := sim.NewWorldFrom(rc, tiers, lengths)
	if err != nil {
		return fmt.Errorf("what-if world: %w", err)
	}

	cfg := w.cfg.Sim
	cfg.MaxRequests = n
	newest := ""
	if observed != nil {
		cfg.Rate, newest, cfg.NoExplore = observed.RateRPS, observed.newest, true
	}
	// Start from the live router's per-instance state (what it has seen
	// each instance serve), when it has routed this cluster.
	if s.deps.State != nil {
		if st, ok := s.deps.State(id).([]schedule.InstanceState); ok {
			cfg.Served = make(map[string]int, len(st))
			for _, x := range st {
				cfg.Served[x.ID] = x.Served
			}
		}
	}
	key := func(wt routing.Weights) string {
		return fmt.Sprintf("%s|%s|%s|%d/%d|%v|%g|%g|%g|%s|%s|%d|%d|%.2f|%.2f|%.2f", tid, id, version.UTC().Format(time.RFC3339Nano),
			len(rc.Instances), len(ins), rc.Policy.Name, rc.Policy.Threshold, rc.Policy.Slack, rc.Policy.SwitchGain,
			source, newest, len(items), n, wt.Quality, wt.Latency, wt.Cost)
	}
	pred, err := w.run(ctx, key(*in.Weights), cfg, world, items, rc.Policy, *in.Weights)
	if err != nil {
		return whatIfError(err)
	}
	out := whatIfResponse{
		Source: source, Requests: pred.N, Predicted: metricsOf(pred), Policy: rc.Policy.Name, RateRPS: pred.Rate,
		Estimate: "model", QualitySource: "priors", Note: whatIfNote, Observed: observed,
	}
	if observed != nil {
		out.Note = whatIfObservedNote
	}
	if w.deps.Estimator != nil {
		out.QualitySource = "index"
	}
	if in.BaselineWeights != nil {
		base, err := w.run(ctx, key(*in.BaselineWeights), cfg, world, items, rc.Policy, *in.BaselineWeights)
		if err != nil {
			return whatIfError(err)
		}
		out.Baseline = metricsOf(base)
	}
	return c.JSON(out)
}

func maxT(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// validWeights checks a weight vector is on the simplex; the envelope's
// param names the offending field (e.g. "weights.cost").
func validWeights(field string, wt routing.Weights) error {
	if err := wt.Validate(); err != nil {
		var fe *routing.FieldError
		if errors.As(err, &fe) {
			return badRequest(strings.Replace(fe.Field, "weights", field, 1), "%s %s", strings.Replace(fe.Field, "weights", field, 1), fe.Msg)
		}
		return badRequest(field, "%s: %v", field, err)
	}
	return nil
}

// whatIfError maps a replay failure to a response: the time budget or a
// cancelled request is 503, a policy the scheduler rejects is 400.
func whatIfError(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return &httpError{status: http.StatusServiceUnavailable, typ: typeUnavailable, code: "whatif_timeout",
			msg: "the what-if replay did not finish within its time budget; try a smaller max_requests"}
	case errors.Is(err, workload.ErrEmpty):
		return badRequest("", "no prompts to replay")
	}
	var fe *routing.FieldError
	if errors.As(err, &fe) {
		return badRequest(fe.Field, "%s", fe.Msg)
	}
	return fmt.Errorf("what-if replay: %w", err)
}

// run replays once, reusing a cached result for the same key within the
// TTL. One replay runs at a time; others wait (or give up with ctx).
func (w *whatIf) run(ctx context.Context, key string, cfg sim.WhatIfConfig, world *sim.World, items []workload.Item, pol routing.PolicyConfig, wt routing.Weights) (sim.Cell, error) {
	now := w.clock.Now()
	w.mu.Lock()
	if e, ok := w.cache[key]; ok && now.Sub(e.at) < w.cfg.CacheTTL {
		w.mu.Unlock()
		return e.cell, nil
	}
	w.mu.Unlock()
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return sim.Cell{}, ctx.Err()
	}
	defer func() { <-w.sem }()
	cell, err := sim.WhatIf(ctx, cfg, w.deps, world, items, pol, wt)
	if err != nil {
		return cell, err
	}
	if math.IsNaN(cell.Quality) {
		cell.Quality = 0
	}
	w.mu.Lock()
	if len(w.cache) >= w.cfg.CacheSize {
		clear(w.cache)
	}
	w.cache[key] = whatIfEntry{at: now, cell: cell}
	w.mu.Unlock()
	return cell, nil
}

// tenantPrompts returns up to n of tenantID's most recent remembered
// prompts, newest first. It only reads the memory /v1/feedback keeps.
func (r *recentRequests) tenantPrompts(tenantID string, n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	if r.n == 0 {
		return nil
	}
	for k := 1; k <= r.n && len(out) < n; k++ {
		id := r.ring[(r.next-k+r.n)%r.n]
		if id == "" {
			break
		}
		if s, ok := r.byID[id]; ok && s.tenantID == tenantID && s.prompt != "" {
			out = append(out, s.prompt)
		}
	}
	return out
}
