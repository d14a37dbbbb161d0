package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/sim/metrics"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// AutopilotConfig runs the autopilot controller (routing/autopilot) inside
// a simulated cell: every Interval it reads the observed window, replays
// the recent traffic through the simulator from the current fleet state
// for each candidate weight vector, and sets the weights of the requests
// that arrive next.
type AutopilotConfig struct {
	Targets autopilot.Targets
	Params  autopilot.Params
	// Interval is the control interval (default 5 s of virtual time).
	Interval time.Duration
	// Window is the feedback window (default 20 s, chosen on validation).
	Window time.Duration
	// Horizon is how much recent traffic each replay repeats (default
	// 10 s), at most MaxReplay arrivals (default 400, the most recent).
	Horizon   time.Duration
	MaxReplay int
	// NoPredict turns the model-predictive part off (feedback only).
	NoPredict bool
	// Start is the weights before the first step (default balanced).
	Start routing.Weights
	// ReplayWorld selects the replays' engines: "derived" (default) from
	// the live latency model (EngineTier, as a live router has to), or
	// "world" the simulated world's own engines (a perfect engine model).
	ReplayWorld string
}

// WithDefaults fills the zero fields.
func (c AutopilotConfig) WithDefaults() AutopilotConfig {
	if c.Interval == 0 {
		c.Interval = 5 * time.Second
	}
	if c.Window == 0 {
		c.Window = 20 * time.Second
	}
	if c.Horizon == 0 {
		c.Horizon = 10 * time.Second
	}
	if c.MaxReplay == 0 {
		c.MaxReplay = 400
	}
	if c.Params.MaxStep == 0 {
		c.Params = autopilot.DefaultParams()
	}
	if c.Start == (routing.Weights{}) {
		c.Start, _ = routing.PresetWeights(routing.PresetBalanced)
	}
	return c
}

// Validate reports settings that cannot run.
func (c AutopilotConfig) Validate() error {
	if err := c.Targets.Validate(); err != nil {
		return err
	}
	if err := c.Params.Validate(); err != nil {
		return err
	}
	if c.ReplayWorld != "" && c.ReplayWorld != "derived" && c.ReplayWorld != "world" {
		return fmt.Errorf("autopilot: replay world must be derived or world, got %q", c.ReplayWorld)
	}
	if c.Interval <= 0 || c.Window <= 0 || c.Horizon <= 0 || c.MaxReplay <= 0 {
		return errors.New("autopilot: interval, window, horizon and max replay must be > 0")
	}
	return c.Start.Validate()
}

// AutopilotStep is one control step as results.json carries it.
type AutopilotStep struct {
	T       float64         `json:"t_s"`
	Weights routing.Weights `json:"weights"`
	Action  string          `json:"action"`
	Reason  string          `json:"reason"`
	// ObservedRatio is the feedback window's worst p95 / target (-1: too
	// few requests); PredictedRatio and PredictedQuality the chosen
	// candidate's prediction (-1: none used).
	ObservedRatio    float64 `json:"observed_ratio"`
	PredictedRatio   float64 `json:"predicted_ratio"`
	PredictedQuality float64 `json:"predicted_quality"`
	Candidates       int     `json:"candidates"`
	// ReplayWallMs is the wall-clock time of the step's replays.
	ReplayWallMs float64 `json:"replay_wall_ms"`
}

// AutopilotTrace is the controller's record of one cell.
type AutopilotTrace struct {
	TargetP95E2EMs  float64         `json:"target_p95_e2e_ms,omitempty"`
	TargetP95TTFTMs float64         `json:"target_p95_ttft_ms,omitempty"`
	MaxCostUSD      float64         `json:"max_cost_usd_per_request,omitempty"`
	Steps           []AutopilotStep `json:"steps"`
	// MaxStep is the largest |Δw| of any weight between two steps;
	// SignChanges counts reversals of the quality weight's direction.
	MaxStep     float64 `json:"max_step"`
	SignChanges int     `json:"sign_changes"`
}

// driver runs the controller inside one cell.
type driver struct {
	cfg   AutopilotConfig
	state autopilot.State
	live  *CoreRouter
	world *World
	arm   Arm
	trace AutopilotTrace
	prev  routing.Weights
	sign  int
}

func newDriver(cfg AutopilotConfig, live *CoreRouter, w *World, arm Arm) *driver {
	d := &driver{cfg: cfg, state: autopilot.NewState(cfg.Start), live: live, world: w, arm: arm, prev: cfg.Start}
	d.trace.TargetP95E2EMs = float64(cfg.Targets.P95E2E) / 1e6
	d.trace.TargetP95TTFTMs = float64(cfg.Targets.P95TTFT) / 1e6
	d.trace.MaxCostUSD = cfg.Targets.MaxCostUSD
	return d
}

func (d *driver) control() *Control { return &Control{Interval: d.cfg.Interval, Step: d.step} }

func (d *driver) step(ctx context.Context, v *View) routing.Weights {
	win := Feedback(v, d.cfg.Window, d.cfg.Interval)
	cands := autopilot.Candidates(d.state, d.cfg.Targets, d.cfg.Params)
	var preds []autopilot.Prediction
	t0 := time.Now()
	if !d.cfg.NoPredict {
		preds = d.predict(ctx, v, cands)
	}
	wall := time.Since(t0)
	next, dec := autopilot.Decide(d.state, d.cfg.Targets, []autopilot.Window{win}, preds, d.cfg.Params)
	d.state = next
	st := AutopilotStep{T: v.Now.Seconds(), Weights: next.Weights, Action: dec.Action, Reason: dec.Reason, ObservedRatio: -1,
		PredictedRatio: -1, PredictedQuality: -1, Candidates: len(cands), ReplayWallMs: float64(wall) / 1e6}
	if !math.IsNaN(dec.Ratio) {
		st.ObservedRatio = dec.Ratio
	}
	if dec.Chosen >= 0 {
		p := preds[dec.Chosen]
		st.PredictedRatio = predRatio(d.cfg.Targets, p.P95E2E, p.P95TTFT)
		st.PredictedQuality = p.Quality
	}
	d.trace.Steps = append(d.trace.Steps, st)
	d.trace.MaxStep = math.Max(d.trace.MaxStep, autopilot.Step(d.prev, next.Weights))
	if dq := next.Weights.Quality - d.prev.Quality; math.Abs(dq) > 1e-9 {
		s := 1
		if dq < 0 {
			s = -1
		}
		if d.sign != 0 && s != d.sign {
			d.trace.SignChanges++
		}
		d.sign = s
	}
	d.prev = next.Weights
	return next.Weights
}

func predRatio(t autopilot.Targets, e2e, ttft time.Duration) float64 {
	r := 0.0
	if t.P95E2E > 0 {
		r = float64(e2e) / float64(t.P95E2E)
	}
	if t.P95TTFT > 0 {
		r = math.Max(r, float64(ttft)/float64(t.P95TTFT))
	}
	return r
}

// Feedback is what a live controller observes at v.Now over the last
// width: the larger of (a) the percentiles of the requests that completed
// in it and (b) a lower bound over the requests that arrived in it, where
// a request still in flight counts with its age so far (an overloaded
// window shows before its requests complete); and the arrival rates over
// width and over its last interval.
func Feedback(v *View, width, interval time.Duration) autopilot.Window {
	from := v.Now - width
	var arrived, recent int
	var (
		doneE2E, doneTTFT, arrE2E, arrTTFT []float64
		cost                               float64
		nCost                              int
		qsum                               float64
		nq                                 int
	)
	v.Each(func(j *JobView) {
		if j.Arrival >= from {
			arrived++
		}
		if j.Arrival >= v.Now-interval {
			recent++
		}
		if j.Done {
			r := j.Record
			e2e, ttft := float64(r.E2E), float64(r.TTFT)
			if !r.OK() {
				e2e, ttft = math.Inf(1), math.Inf(1)
			}
			if j.Arrival+r.E2E >= from {
				doneE2E, doneTTFT = append(doneE2E, e2e), append(doneTTFT, ttft)
				if r.OK() {
					cost += r.CostUSD
					nCost++
					if r.HasQuality {
						qsum += r.Quality
						nq++
					}
				}
			}
			if j.Arrival >= from {
				arrE2E, arrTTFT = append(arrE2E, e2e), append(arrTTFT, ttft)
			}
			return
		}
		if j.Arrival < from {
			// in flight since before the window: it would show as
			// completed in the window at least this late
			age := float64(v.Now - j.Arrival)
			doneE2E = append(doneE2E, age)
			ttft := age
			if j.FirstToken > 0 {
				ttft = float64(j.FirstToken)
			}
			doneTTFT = append(doneTTFT, ttft)
			return
		}
		age := float64(v.Now - j.Arrival)
		arrE2E = append(arrE2E, age)
		if j.FirstToken > 0 {
			arrTTFT = append(arrTTFT, float64(j.FirstToken))
		} else {
			arrTTFT = append(arrTTFT, age)
		}
	})
	p95 := func(x []float64) float64 {
		if len(x) == 0 {
			return 0
		}
		slices.Sort(x)
		return metrics.Percentile(x, 95)
	}
	w := autopilot.Window{N: max(len(doneE2E), len(arrE2E))}
	if span := min(width, v.Now); span > 0 && interval > 0 { // the run may be younger than the window
		w.Rate, w.RecentRate = float64(arrived)/span.Seconds(), float64(recent)/min(interval, span).Seconds()
	}
	w.P95E2E = dur(math.Max(p95(doneE2E), p95(arrE2E)))
	w.P95TTFT = dur(math.Max(p95(doneTTFT), p95(arrTTFT)))
	if nCost > 0 {
		w.MeanCostUSD = cost / float64(nCost)
	}
	if nq > 0 {
		w.Quality = qsum / float64(nq)
	}
	return w
}

func dur(ns float64) time.Duration {
	if math.IsInf(ns, 1) || ns > math.MaxInt64/2 {
		return time.Duration(math.MaxInt64 / 2)
	}
	return time.Duration(ns)
}

// predict replays the recent traffic from the current state once per
// candidate: the requests running now are preloaded on their engines with
// the output the scheduler predicted for them still to come, the ones
// waiting arrive at once (their age added to their latency), and the
// arrivals of the last Horizon arrive again at their offsets (the
// persistence forecast of the next interval). The replay's engines are
// derived from the live latency model (EngineTier), its estimators are
// the live ones read-only, quality is the scheduler's own estimate, and
// decisions cost no virtual time.
func (d *driver) predict(ctx context.Context, v *View, cands []routing.Weights) []autopilot.Prediction {
	rep := &Replay{}
	var ages []time.Duration
	from := v.Now - d.cfg.Horizon
	var recent []*workload.Item
	var recentAt []time.Duration
	v.Each(func(j *JobView) {
		switch {
		case j.Running:
			out := int(math.Round(j.PredictedTokens)) - j.Tokens
			rep.Preload = append(rep.Preload, Preload{Instance: j.Instance, Prompt: j.Item.Prompt, Task: j.Item.Task, PromptTokens: j.PromptTokens, OutputTokens: max(out, 1)})
		case !j.Done:
			rep.Items, rep.At = append(rep.Items, *j.Item), append(rep.At, 0)
			ages = append(ages, v.Now-j.Arrival)
		}
		if j.Arrival >= from {
			recent, recentAt = append(recent, j.Item), append(recentAt, j.Arrival-from)
		}
	})
	if k := len(recent) - d.cfg.MaxReplay; k > 0 {
		recent, recentAt = recent[k:], recentAt[k:]
		base := recentAt[0]
		for i := range recentAt {
			recentAt[i] -= base
		}
	}
	for i, it := range recent {
		rep.Items, rep.At = append(rep.Items, *it), append(rep.At, recentAt[i])
		ages = append(ages, 0)
	}
	out := make([]autopilot.Prediction, len(cands))
	if len(rep.Items) == 0 {
		return out
	}
	world, err := d.replayWorld(v)
	if err != nil {
		return out
	}
	for i, w := range cands {
		out[i] = d.replay(ctx, world, rep, ages, w)
	}
	return out
}

// replaySeed draws the replays' output lengths: a different seed from the
// world's, so a replay knows the length distribution, not each prompt's
// true length.
const replaySeed = 0x7e91a7

// replayWorld derives the replay's engines from the live latency model
// (EngineTier) and each tier's verbosity from what was served: Σ observed
// output tokens ÷ Σ the length model's draw at verbosity 1 for the same
// prompts (1 for a tier that served nothing yet).
func (d *driver) replayWorld(v *View) (*World, error) {
	if d.cfg.ReplayWorld == "world" {
		return d.world, nil
	}
	deps := d.live.deps
	lengths := d.world.File.OutputLengths
	obs := make([]float64, len(d.world.Cluster.Instances))
	base := make([]float64, len(obs))
	v.Each(func(j *JobView) {
		if !j.Done || !j.Record.OK() || j.Instance < 0 || j.Instance >= len(obs) {
			return
		}
		obs[j.Instance] += float64(j.Record.OutputTokens)
		base[j.Instance] += float64(lengths.Natural(j.Item.Prompt, j.Record.Model, j.Item.Task, 1, replaySeed))
	})
	// pool per tier (model@gpu): instances of a tier share a verbosity
	byTier := map[string][2]float64{}
	for i, in := range d.world.Cluster.Instances {
		x := byTier[in.Tier()]
		byTier[in.Tier()] = [2]float64{x[0] + obs[i], x[1] + base[i]}
	}
	tiers := make([]engine.Tier, len(d.world.Cluster.Instances))
	for i, in := range d.world.Cluster.Instances {
		tiers[i] = EngineTier(in, deps.Latency, d.live.cfg.WithDefaults().DefaultMaxConcurrency)
		if x := byTier[in.Tier()]; x[1] > 0 && x[0] > 0 {
			tiers[i].Verbosity = x[0] / x[1]
		}
	}
	w, err := NewWorldFrom(d.world.Cluster, tiers, lengths)
	if err != nil {
		return nil, err
	}
	w.Seed = replaySeed
	return w, nil
}

func (d *driver) replay(ctx context.Context, world *World, rep *Replay, ages []time.Duration, w routing.Weights) autopilot.Prediction {
	p := autopilot.Prediction{Weights: w}
	deps := d.live.deps
	sdeps := deps
	sdeps.Labels = noLabels{}
	if deps.Estimator != nil {
		sdeps.Estimator = readOnlyEstimator{deps.Estimator}
	}
	if deps.Latency != nil {
		sdeps.Latency = readOnlyLatency{deps.Latency}
	}
	r, err := NewCoreRouter(d.live.cfg, sdeps, world, Arm{Policy: d.arm.Policy, Weights: w})
	if err != nil {
		return p
	}
	defer r.Close()
	explored := d.live.cfg.WithDefaults().Fleet.ExploreRequests
	for _, in := range world.Cluster.Instances {
		r.SeedServed(in.ID, explored)
	}
	cfg := Config{Burstiness: 1, DecisionCost: 0, ScrapeInterval: 250 * time.Millisecond, EstimatedQuality: true, Replay: rep}
	res, err := Run(ctx, cfg, world, nil, w, r)
	if err != nil {
		return p
	}
	return predictionOf(res, ages, w)
}

// predictionOf summarises a replay as the controller's Prediction: the
// p95 E2E and TTFT of its requests (record i's latency plus ages[i] when
// ages is given: how long it had waited before the replay; a failed
// request counts as infinitely late), and the mean cost and predicted
// quality of the completed ones. OK is false when none completed.
func predictionOf(res *Result, ages []time.Duration, w routing.Weights) autopilot.Prediction {
	p := autopilot.Prediction{Weights: w}
	var e2e, ttft []float64
	var qsum, cost float64
	var nq, n int
	for i := range res.Records {
		rec := &res.Records[i]
		if !rec.OK() {
			e2e, ttft = append(e2e, math.Inf(1)), append(ttft, math.Inf(1))
			continue
		}
		var age time.Duration
		if i < len(ages) {
			age = ages[i]
		}
		e2e = append(e2e, float64(rec.E2E+age))
		ttft = append(ttft, float64(rec.TTFT+age))
		cost += rec.CostUSD
		n++
		if rec.HasQuality {
			qsum += rec.Quality
			nq++
		}
	}
	if n == 0 {
		return p
	}
	slices.Sort(e2e)
	slices.Sort(ttft)
	p.OK, p.N = true, len(e2e)
	p.P95E2E, p.P95TTFT = dur(metrics.Percentile(e2e, 95)), dur(metrics.Percentile(ttft, 95))
	p.MeanCostUSD = cost / float64(n)
	if nq > 0 {
		p.Quality = qsum / float64(nq)
	}
	return p
}

// Window is one window of a run with a rate profile, as results.json
// carries it: the requests that arrived in [t_start, t_start + width).
type Window struct {
	TStart  float64 `json:"t_start_s"`
	Rate    float64 `json:"rate"`
	N       int     `json:"n"`
	P95E2E  float64 `json:"p95_e2e_s"`
	P95TTFT float64 `json:"p95_ttft_s"`
	Quality float64 `json:"quality"`
	// TargetMet: the window's p95s are within the --slo targets (a failed
	// request counts as infinitely late).
	TargetMet bool `json:"target_met"`
	// Weights are the mean weights its requests carried.
	Weights routing.Weights `json:"weights"`
}

// Windows cuts a run into windows of width by arrival time over the
// profile's span and judges each against targets.
func Windows(res *Result, p workload.Profile, width time.Duration, t autopilot.Targets) []Window {
	span := p.Duration()
	n := int((span + width - 1) / width)
	type acc struct {
		e2e, ttft []float64
		q         float64
		nq        int
		w         routing.Weights
	}
	accs := make([]acc, n)
	for i := range res.Records {
		r := &res.Records[i]
		k := int(r.Start / width)
		if k < 0 || k >= n {
			continue
		}
		a := &accs[k]
		e2e, ttft := r.E2E.Seconds(), r.TTFT.Seconds()
		if !r.OK() {
			e2e, ttft = math.Inf(1), math.Inf(1)
		} else if r.HasQuality {
			a.q += r.Quality
			a.nq++
		}
		a.e2e, a.ttft = append(a.e2e, e2e), append(a.ttft, ttft)
		if i < len(res.Weights) {
			w := res.Weights[i]
			a.w.Quality += w.Quality
			a.w.Cost += w.Cost
			a.w.Latency += w.Latency
		}
	}
	out := make([]Window, n)
	for k := range accs {
		a := &accs[k]
		start := time.Duration(k) * width
		win := Window{TStart: start.Seconds(), Rate: p.RateAt(start), N: len(a.e2e)}
		if len(a.e2e) > 0 {
			slices.Sort(a.e2e)
			slices.Sort(a.ttft)
			win.P95E2E, win.P95TTFT = metrics.Percentile(a.e2e, 95), metrics.Percentile(a.ttft, 95)
			m := float64(len(a.e2e))
			win.Weights = routing.Weights{Quality: a.w.Quality / m, Cost: a.w.Cost / m, Latency: a.w.Latency / m}
		}
		if a.nq > 0 {
			win.Quality = a.q / float64(a.nq)
		}
		win.TargetMet = (t.P95E2E == 0 || win.P95E2E <= t.P95E2E.Seconds()) && (t.P95TTFT == 0 || win.P95TTFT <= t.P95TTFT.Seconds())
		if math.IsInf(win.P95E2E, 1) {
			win.P95E2E = -1 // JSON has no infinity: -1 marks a failed window
		}
		if math.IsInf(win.P95TTFT, 1) {
			win.P95TTFT = -1
		}
		out[k] = win
	}
	return out
}

// Attainment is the fraction of windows (with requests) whose target was
// met.
func Attainment(ws []Window) float64 {
	var met, n int
	for _, w := range ws {
		if w.N == 0 {
			continue
		}
		n++
		if w.TargetMet {
			met++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(met) / float64(n)
}
