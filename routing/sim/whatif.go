package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/latency"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// NewWorldFrom builds a World for a registered cluster: instance i of c is
// served by an engine with tiers[i] (one instance per tier entry), output
// lengths from lengths. The cluster is used as given (IDs, models, prices,
// max concurrency); only its instance list is copied.
func NewWorldFrom(c routing.Cluster, tiers []engine.Tier, lengths engine.OutputLengths) (*World, error) {
	if len(c.Instances) == 0 {
		return nil, errors.New("cluster has no instances")
	}
	if len(tiers) != len(c.Instances) {
		return nil, fmt.Errorf("%d tiers for %d instances", len(tiers), len(c.Instances))
	}
	// One tier entry per instance: several instances of one model@gpu
	// stay separate entries (a cluster file would merge them, so the file
	// as a whole is not validated, only each tier and the lengths).
	f := &engine.ClusterFile{Name: c.ID, OutputLengths: lengths}
	if err := f.OutputLengths.Validate(); err != nil {
		return nil, err
	}
	for i := range tiers {
		t := tiers[i]
		t.Instances = 1
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("instance %s: %w", c.Instances[i].ID, err)
		}
		f.Tiers = append(f.Tiers, t)
	}
	c.Instances = append([]routing.Instance(nil), c.Instances...)
	w := &World{File: f, Cluster: c, Seed: 1}
	for i := range f.Tiers {
		w.specs = append(w.specs, engine.InstanceSpec{Index: i, ID: c.Instances[i].ID, Tier: &f.Tiers[i]})
	}
	return w, nil
}

// EngineTier derives an emulated engine's parameters for a registered
// instance from what the router's latency model predicts for its tier
// (model@gpu), since there is no GPU to measure:
//
//   - tpot_ms_light = TPOT̂(running = 1);
//   - tpot_load_factor = TPOT̂(running = max_num_seqs) / TPOT̂(running = 1), at least 1;
//   - ttft_overhead_ms = TTFT̂(idle, empty prompt);
//   - prefill_ms_per_1k_prompt_tokens = TTFT̂(1000 prompt tokens) − TTFT̂(empty prompt), at least 0;
//   - max_num_seqs = the instance's max_concurrency (defaultSeqs when 0);
//   - prices from the instance, verbosity 1, vLLM's default KV sizing.
//
// lat nil uses latency.DefaultPrior for every tier. EngineTierAt asks the
// model at the prompt size of the traffic instead.
func EngineTier(in routing.Instance, lat schedule.LatencyModel, defaultSeqs int) engine.Tier {
	return EngineTierAt(in, lat, defaultSeqs, 0)
}

// EngineTierAt is EngineTier asking the latency model where it has data:
// at the mean prompt size p of the replayed traffic (p > 0). A model fitted
// online on traffic whose prompts all have about p tokens knows TPOT̂ and
// TTFT̂ near p, but its intercept and its prompt slope trade off against
// each other, so TPOT̂ at an empty prompt or TTFT̂ at 1,000 tokens can be
// far off (TPOT̂ clamped at its floor, or a prefill of seconds). So:
//
//   - tpot_ms_light = TPOT̂(running = 1, p); the load factor as above, at p;
//   - prefill_ms_per_1k = 1000 × (TTFT̂(2p) − TTFT̂(p/2)) / (1.5 p), at least 0
//     (the slope over the range around p);
//   - ttft_overhead_ms = TTFT̂(idle, p) − prefill(p) (the slope is lowered
//     when that would be negative), so the engine's idle TTFT at p is the
//     model's.
//
// With p ≤ 0 it is EngineTier.
func EngineTierAt(in routing.Instance, lat schedule.LatencyModel, defaultSeqs int, p float64) engine.Tier {
	if lat == nil {
		m, _ := latency.New(latency.Config{}) // the zero Config is valid
		lat = m
	}
	seqs := in.MaxConcurrency
	if seqs <= 0 {
		seqs = max(defaultSeqs, 1)
	}
	if !(p > 0) || math.IsInf(p, 0) {
		p = 0
	}
	tier := in.Tier()
	light := lat.TPOT(tier, routing.Load{Running: 1, PromptTokens: p})
	full := lat.TPOT(tier, routing.Load{Running: float64(seqs), PromptTokens: p})
	var t0, prefill float64 // overhead and prefill per 1k tokens, seconds
	if p == 0 {
		t0 = lat.TTFT(tier, routing.Load{})
		prefill = lat.TTFT(tier, routing.Load{PromptTokens: 1000}) - t0
	} else {
		at := lat.TTFT(tier, routing.Load{PromptTokens: p})
		prefill = 1000 * (lat.TTFT(tier, routing.Load{PromptTokens: 2 * p}) - lat.TTFT(tier, routing.Load{PromptTokens: p / 2})) / (1.5 * p)
		if !(prefill >= 0) || math.IsInf(prefill, 0) {
			prefill = 0
		}
		if at >= 0 && prefill*p/1000 > at {
			prefill = 1000 * at / p // no negative overhead: all of TTFT̂(p) is prefill
		}
		t0 = at - prefill*p/1000
	}
	factor := 1.0
	if light > 0 && full > light && !math.IsInf(full, 0) {
		factor = full / light
	}
	if !(light > 0) || math.IsInf(light, 0) {
		light = latency.DefaultPrior().TPOT[0]
	}
	if !(t0 >= 0) || math.IsInf(t0, 0) {
		t0 = 0
	}
	if !(prefill >= 0) || math.IsInf(prefill, 0) {
		prefill = 0
	}
	return engine.Tier{
		Model:                      in.Model,
		GPU:                        in.GPU,
		TensorParallel:             max(in.TensorParallel, 1),
		Instances:                  1,
		TPOTMsLight:                light * 1e3,
		TPOTLoadFactor:             factor,
		MaxNumSeqs:                 seqs,
		TTFTOverheadMs:             t0 * 1e3,
		PrefillMsPer1kPromptTokens: prefill * 1e3,
		PriceInPerMTok:             in.PriceInPerMTok,
		PriceOutPerMTok:            in.PriceOutPerMTok,
		Verbosity:                  1,
	}
}

// WhatIfConfig bounds one what-if replay.
type WhatIfConfig struct {
	// MaxRequests caps the replayed requests (default 300).
	MaxRequests int
	// Rate is the replay's arrival rate in req/s (Poisson); 0 derives it
	// from the world: Load × WorldCapacity.
	Rate float64
	// Load is the fraction of the world's estimated capacity the replay
	// offers when Rate is 0 (default 0.5).
	Load float64
	// Timeout bounds one replay's wall-clock time (default 800ms).
	Timeout time.Duration
	// Seed fixes the prompt sample and arrivals (default 1).
	Seed uint64
	// Served is the live per-instance state the replay starts from: how
	// many requests the live router has seen each instance (by id) serve,
	// so instances it has explored are not explored again; absent ids
	// start as new instances.
	Served map[string]int
	// NoExplore starts every instance as explored: exploration (a few
	// requests to each new instance before its latency model is trusted)
	// is the live router's start-up transient, and an unexplored tier's
	// latency is only its prior, so a replay of steady traffic skips it.
	NoExplore bool
	// Live is the load each instance (by id) holds now, as the live
	// scheduler sees it: the replay's engines start with it instead of
	// idle. Absent ids start idle.
	Live map[string]InitialLoad
}

// DefaultWhatIfConfig returns 300 requests at half the world's capacity
// within 800 ms.
func DefaultWhatIfConfig() WhatIfConfig {
	return WhatIfConfig{MaxRequests: 300, Load: 0.5, Timeout: 800 * time.Millisecond, Seed: 1}
}

// Validate reports settings that cannot run.
func (c WhatIfConfig) Validate() error {
	if c.MaxRequests <= 0 || c.Timeout <= 0 || !(c.Rate >= 0) || math.IsInf(c.Rate, 0) {
		return fmt.Errorf("what-if config: max requests and timeout must be positive, rate >= 0")
	}
	if c.Rate == 0 && !(c.Load > 0 && c.Load <= 1) {
		return fmt.Errorf("what-if config: load must be in (0, 1], got %v", c.Load)
	}
	return nil
}

// whatIfPromptTokens is the prompt size the capacity estimate assumes.
const whatIfPromptTokens = 200

// WorldCapacity estimates the request rate the world's engines sustain:
// Σ over instances of max_num_seqs ÷ (L × TPOT(max_num_seqs/2) + TTFT
// overhead + prefill of a 200-token prompt), with L the world model's
// default median output length times the tier's verbosity.
func WorldCapacity(w *World) float64 {
	med := w.File.OutputLengths.MedianTokensByTask[engine.DefaultTask]
	var cap float64
	for _, s := range w.specs {
		t := s.Tier
		l := med * max(t.Verbosity, 0.01)
		per := l*t.TPOT(max(t.MaxNumSeqs/2, 1)).Seconds() + t.Overhead().Seconds() + t.Prefill(whatIfPromptTokens).Seconds()
		if per > 0 {
			cap += float64(t.MaxNumSeqs) / per
		}
	}
	return cap
}

// WhatIfDeps are the live router's estimators, used read-only: the replay
// never teaches them (the wrappers hide their Observe methods).
type WhatIfDeps struct {
	// Estimator is the quality/length estimator (nil: instance priors).
	Estimator schedule.Estimator
	// Latency is the TPOT/TTFT model (nil: latency.DefaultPrior).
	Latency schedule.LatencyModel
	// Schedule is the scheduler's configuration.
	Schedule schedule.Config
}

// readOnlyEstimator exposes Estimate only, so the Core cannot call
// ObserveLength on the live index.
type readOnlyEstimator struct{ e schedule.Estimator }

func (r readOnlyEstimator) Estimate(ctx context.Context, prompts, models []string, priors []float64, out []routing.PromptEstimate) error {
	return r.e.Estimate(ctx, prompts, models, priors, out)
}

// readOnlyLatency exposes the predictions only, so the Core cannot call
// Observe on the live latency models.
type readOnlyLatency struct{ m schedule.LatencyModel }

func (r readOnlyLatency) TPOT(tier string, l routing.Load) float64 { return r.m.TPOT(tier, l) }
func (r readOnlyLatency) TTFT(tier string, l routing.Load) float64 { return r.m.TTFT(tier, l) }

// WhatIf replays items through a fresh schedule.Core for world with the
// policy and weights, and summarises the run. Quality is the scheduler's
// own predicted quality of each served model (Config.EstimatedQuality);
// decisions cost no virtual time, so the same inputs give the same answer.
func WhatIf(ctx context.Context, cfg WhatIfConfig, deps WhatIfDeps, w *World, items []workload.Item, policy routing.PolicyConfig, weights routing.Weights) (Cell, error) {
	res, rate, err := whatIfRun(ctx, cfg, deps, w, items, policy, weights)
	if err != nil {
		return Cell{}, err
	}
	c := Summarize(res, DefaultGoodput())
	c.Policy, c.Weights, c.Rate = policy.Name, weights.String(), rate
	return c, nil
}

// whatIfRun is WhatIf's replay: the run's records and its arrival rate.
func whatIfRun(ctx context.Context, cfg WhatIfConfig, deps WhatIfDeps, w *World, items []workload.Item, policy routing.PolicyConfig, weights routing.Weights) (*Result, float64, error) {
	if err := cfg.Validate(); err != nil {
		return nil, 0, err
	}
	if err := weights.Validate(); err != nil {
		return nil, 0, err
	}
	if len(items) == 0 {
		return nil, 0, workload.ErrEmpty
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	sdeps := schedule.Deps{}
	if deps.Estimator != nil {
		sdeps.Estimator = readOnlyEstimator{deps.Estimator}
	}
	if deps.Latency != nil {
		sdeps.Latency = readOnlyLatency{deps.Latency}
	}
	// Labels: an empty oracle, so the oracle policy (simulation only) has
	// no truth to read here and falls back like an unlabelled prompt.
	sdeps.Labels = noLabels{}
	r, err := NewCoreRouter(deps.Schedule, sdeps, w, Arm{Policy: policy, Weights: weights})
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	explored := deps.Schedule.WithDefaults().Fleet.ExploreRequests
	for _, in := range w.Cluster.Instances {
		n := cfg.Served[in.ID]
		if cfg.NoExplore {
			n = max(n, explored)
		}
		r.SeedServed(in.ID, n)
	}
	rate := cfg.Rate
	if rate == 0 {
		rate = cfg.Load * WorldCapacity(w)
	}
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, 0, fmt.Errorf("cannot derive an arrival rate for the cluster (capacity %v)", WorldCapacity(w))
	}
	run := Config{
		Rate: rate, Burstiness: 1, N: min(cfg.MaxRequests, max(len(items), 1)), Seed: cfg.Seed,
		DecisionCost: 0, ScrapeInterval: 250 * time.Millisecond, EstimatedQuality: true,
	}
	if len(items) < cfg.MaxRequests && len(items) < 50 {
		run.N = min(cfg.MaxRequests, 50) // too few prompts: resample with replacement
	}
	if len(cfg.Live) > 0 {
		// Start from the live load: the same sampled items and Poisson
		// arrivals as without it, as a Replay with the live requests
		// preloaded on the engines.
		loads := make([]InitialLoad, len(w.Cluster.Instances))
		for i, in := range w.Cluster.Instances {
			loads[i] = cfg.Live[in.ID]
		}
		pre, err := preloads(w, loads)
		if err != nil {
			return nil, 0, err
		}
		run.Replay = &Replay{Items: workload.Sample(items, run.N, run.Seed), At: workload.Arrivals(run.N, run.Rate, run.Burstiness, run.Seed), Preload: pre}
	}
	res, err := Run(ctx, run, w, items, weights, r)
	if err != nil {
		return nil, 0, err
	}
	return res, rate, nil
}

type noLabels struct{}

func (noLabels) TrueLabels(*routing.Request, []string, *routing.PromptEstimate) bool { return false }
