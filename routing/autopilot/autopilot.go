// Package autopilot chooses the scheduler's weight vector from a tenant's
// SLO targets ("p95 E2E under 3 s, as good as possible, at most $X per
// request"). The controller is a pure function: Candidates proposes the
// weight vectors one control step may reach from the current state, the
// caller predicts each (a what-if replay of recent traffic through the
// simulator), and Decide picks the next weights from the targets, the
// observed windows and those predictions. Nothing here blocks, sleeps or
// reads a clock; live.go runs it on a goroutine beside the request path.
//
// README.md has the control law.
package autopilot

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// PresetAutopilot is the preset name that hands the weights to the
// controller.
const PresetAutopilot = "autopilot"

// Targets are what a tenant asks for. A zero field is no target; at least
// one latency target must be set.
type Targets struct {
	// P95E2E bounds the 95th percentile of end-to-end latency.
	P95E2E time.Duration `json:"p95_e2e_ms"`
	// P95TTFT bounds the 95th percentile of time to first token.
	P95TTFT time.Duration `json:"p95_ttft_ms"`
	// MaxCostUSD bounds the mean cost per request.
	MaxCostUSD float64 `json:"max_cost_usd_per_request"`
}

// Validate reports targets the controller cannot steer to.
func (t Targets) Validate() error {
	if t.P95E2E < 0 || t.P95TTFT < 0 {
		return errors.New("p95 targets must be > 0")
	}
	if t.P95E2E == 0 && t.P95TTFT == 0 {
		return errors.New("set p95_e2e_ms and/or p95_ttft_ms")
	}
	if math.IsNaN(t.MaxCostUSD) || math.IsInf(t.MaxCostUSD, 0) || t.MaxCostUSD < 0 {
		return fmt.Errorf("max_cost_usd_per_request must be a number >= 0, got %v", t.MaxCostUSD)
	}
	return nil
}

// Key names the target set (one controller per cluster and key).
func (t Targets) Key() string {
	return t.String()
}

// Window is what was observed over one window of traffic.
type Window struct {
	// N is the number of requests the percentiles are over.
	N int `json:"n"`
	// P95E2E and P95TTFT are the observed 95th percentiles.
	P95E2E  time.Duration `json:"p95_e2e"`
	P95TTFT time.Duration `json:"p95_ttft"`
	// MeanCostUSD is the mean cost per completed request.
	MeanCostUSD float64 `json:"mean_cost_usd"`
	// Quality is the mean served quality (observed or estimated).
	Quality float64 `json:"quality"`
	// Rate is the arrival rate over the window and RecentRate over its
	// last control interval, in requests per second (0: not known); a
	// RecentRate above (1 + Params.Rise) × Rate is a rising load.
	Rate       float64 `json:"rate,omitempty"`
	RecentRate float64 `json:"recent_rate,omitempty"`
}

// Prediction is what a candidate weight vector is predicted to give over
// the next interval (a replay of recent traffic from the current state).
type Prediction struct {
	Weights routing.Weights `json:"weights"`
	// OK is false when the prediction failed (timeout, no traffic); the
	// candidate is then judged on feedback only.
	OK          bool          `json:"ok"`
	P95E2E      time.Duration `json:"p95_e2e"`
	P95TTFT     time.Duration `json:"p95_ttft"`
	MeanCostUSD float64       `json:"mean_cost_usd"`
	Quality     float64       `json:"quality"`
	// N is how many requests the replay ran (0: not known).
	N int `json:"n,omitempty"`
}

// Params are the controller's constants (chosen on a validation split;
// routing/autopilot/README.md).
type Params struct {
	// Steps are the transfer sizes the candidates try; each must be in
	// (0, MaxStep].
	Steps []float64
	// MaxStep bounds |Δw| of every weight per step (the fallback's size).
	MaxStep float64
	// Margin: a candidate is feasible when its predicted p95 ≤ (1 −
	// Margin) × target (and its cost ≤ the cost target).
	Margin float64
	// Band: when the observed ratio (p95 / target) is above 1 − Band the
	// controller holds instead of spending headroom (hysteresis).
	Band float64
	// Dwell is how many intervals after a latency-ward step before a
	// quality-ward step is allowed again (hysteresis in time).
	Dwell int
	// MinGain is the predicted quality gain a move toward quality must
	// bring over holding.
	MinGain float64
	// MinWindow is the fewest requests a window needs to be trusted as
	// feedback.
	MinWindow int
	// Confirm: an observed miss falls back only when the prediction of the
	// current weights does not say they meet the target with Margin (a
	// miss the current weights are predicted to clear is a backlog
	// draining, which more latency weight does not speed up); without a
	// prediction it always falls back.
	Confirm bool
	// Persist is how many consecutive steps must observe a miss before
	// the fallback (1: at the first; a window's p95 over a few dozen
	// requests is noisy), except on a rising load, which falls back at
	// once. 0 counts as 1.
	Persist int
	// Rise is the feed-forward on the observed arrival rate: the latest
	// window's RecentRate ≥ (1 + Rise) × Rate is a rising load, on which
	// an observed miss falls back at once; with Rise > 0 a predicted miss
	// of the current weights (rule 3) is acted on only on a rising load
	// (at a steady rate the feedback is the better forecast: the replay's
	// p95 is off by ×0.7–2.4). 0 turns the feed-forward off.
	Rise float64
}

// DefaultParams returns the constants chosen on the validation split
// (README.md "Constants").
func DefaultParams() Params {
	return Params{Steps: []float64{0.05, 0.1, 0.2}, MaxStep: 0.2, Margin: 0.6, Band: 0.4, Dwell: 2, MinGain: 0.002, MinWindow: 20, Persist: 2, Rise: 0.5}
}

// Validate reports constants that break the guarantees (bounded step).
func (p Params) Validate() error {
	if !(p.MaxStep > 0 && p.MaxStep <= 1) {
		return fmt.Errorf("max step must be in (0, 1], got %v", p.MaxStep)
	}
	if len(p.Steps) == 0 {
		return errors.New("no candidate steps")
	}
	for _, s := range p.Steps {
		if !(s > 0 && s <= p.MaxStep) {
			return fmt.Errorf("step %v outside (0, max step %v]", s, p.MaxStep)
		}
	}
	if !(p.Margin >= 0 && p.Margin < 1) || !(p.Band >= 0 && p.Band < 1) || p.Dwell < 0 || !(p.MinGain >= 0) || p.MinWindow < 0 {
		return errors.New("margin and band must be in [0, 1), dwell, min gain and min window >= 0")
	}
	if p.Persist < 0 || !(p.Rise >= 0) || math.IsInf(p.Rise, 0) {
		return errors.New("persist and rise must be >= 0")
	}
	return nil
}

// State is the controller's memory between steps.
type State struct {
	// Weights are the weights in force.
	Weights routing.Weights `json:"weights"`
	// SinceBack counts intervals since the last latency-ward step
	// (large when there was none).
	SinceBack int `json:"since_back"`
	// Misses counts the consecutive steps that observed a miss.
	Misses int `json:"misses"`
}

// NewState starts at w with no recent fallback.
func NewState(w routing.Weights) State { return State{Weights: w, SinceBack: math.MaxInt32} }

// Actions a Decision reports.
const (
	ActionHold     = "hold"
	ActionQuality  = "toward-quality"
	ActionFallback = "fallback"       // observed miss: the largest latency-ward step
	ActionPredict  = "predicted-miss" // predictions say the current weights will miss
	ActionCost     = "toward-cost"
	ActionProbe    = "probe" // headroom, flat predictions: the largest feasible step toward quality
)

// Decision is one control step's outcome.
type Decision struct {
	Weights routing.Weights `json:"weights"`
	Action  string          `json:"action"`
	Reason  string          `json:"reason"`
	// Ratio is the observed worst p95 / target of the feedback window (NaN
	// when no window had MinWindow requests).
	Ratio float64 `json:"ratio"`
	// Chosen is the index of the chosen candidate's prediction (-1: none
	// was used).
	Chosen int `json:"chosen"`
}

// Move is one candidate: a transfer of Amount from one weight to another.
type Move struct {
	From, To string
	Amount   float64
}

const (
	wQuality = "quality"
	wCost    = "cost"
	wLatency = "latency"
)

// Candidates returns the weight vectors one step from s may reach: s's own
// weights first (hold), then transfers of each step size toward quality
// (from latency, from cost), toward latency (from quality, from cost) and,
// with a cost target, toward cost (from quality, from latency). Every
// candidate stays on the simplex and differs from s.Weights by at most
// MaxStep in every weight. Duplicates are dropped.
func Candidates(s State, t Targets, p Params) []routing.Weights {
	out := []routing.Weights{s.Weights}
	moves := []Move{}
	for _, a := range p.Steps {
		moves = append(moves, Move{wLatency, wQuality, a}, Move{wCost, wQuality, a}, Move{wQuality, wLatency, a}, Move{wCost, wLatency, a})
		if t.MaxCostUSD > 0 {
			moves = append(moves, Move{wQuality, wCost, a}, Move{wLatency, wCost, a})
		}
	}
	for _, m := range moves {
		w, ok := apply(s.Weights, m, p.MaxStep)
		if !ok {
			continue
		}
		dup := false
		for _, o := range out {
			if near(o, w) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, w)
		}
	}
	return out
}

// apply transfers min(m.Amount, w[m.From], maxStep) from one weight to
// another; ok is false when nothing moves.
func apply(w routing.Weights, m Move, maxStep float64) (routing.Weights, bool) {
	from, to := field(&w, m.From), field(&w, m.To)
	a := math.Min(math.Min(m.Amount, *from), maxStep)
	if a < 1e-9 {
		return w, false
	}
	*from -= a
	*to += a
	return clean(w), true
}

func field(w *routing.Weights, name string) *float64 {
	switch name {
	case wQuality:
		return &w.Quality
	case wCost:
		return &w.Cost
	}
	return &w.Latency
}

// clean keeps the weights non-negative and summing to 1 (latency takes
// the float dust).
func clean(w routing.Weights) routing.Weights {
	w.Quality, w.Cost = math.Max(0, w.Quality), math.Max(0, w.Cost)
	w.Latency = math.Max(0, 1-w.Quality-w.Cost)
	return w
}

func near(a, b routing.Weights) bool {
	return math.Abs(a.Quality-b.Quality) < 1e-9 && math.Abs(a.Cost-b.Cost) < 1e-9 && math.Abs(a.Latency-b.Latency) < 1e-9
}

// Step is the largest |Δ| over the three weights from a to b.
func Step(a, b routing.Weights) float64 {
	return math.Max(math.Abs(a.Quality-b.Quality), math.Max(math.Abs(a.Cost-b.Cost), math.Abs(a.Latency-b.Latency)))
}

// ratio is the worst p95 / target over the set latency targets (NaN when
// none is set).
func ratio(t Targets, e2e, ttft time.Duration) float64 {
	r := math.NaN()
	if t.P95E2E > 0 {
		r = float64(e2e) / float64(t.P95E2E)
	}
	if t.P95TTFT > 0 {
		x := float64(ttft) / float64(t.P95TTFT)
		if math.IsNaN(r) || x > r {
			r = x
		}
	}
	return r
}

// Observed is the feedback ratio: the worst p95 / target of the latest
// window with at least MinWindow requests (windows oldest first), and its
// mean cost; NaN and -1 when none qualifies.
func Observed(t Targets, windows []Window, p Params) (ratio_ float64, cost float64) {
	for i := len(windows) - 1; i >= 0; i-- {
		w := windows[i]
		if w.N >= max(p.MinWindow, 1) {
			return ratio(t, w.P95E2E, w.P95TTFT), w.MeanCostUSD
		}
	}
	return math.NaN(), -1
}

// Decide is the control law (README.md): from the state, the targets, the
// observed windows (oldest first) and the predictions of Candidates (preds
// may be shorter, or carry OK false, when predictions are unavailable), it
// returns the next state and the decision. It never moves any weight by
// more than p.MaxStep.
func Decide(s State, t Targets, windows []Window, preds []Prediction, p Params) (State, Decision) {
	obs, obsCost := Observed(t, windows, p)
	dc := decider{t: t, p: p, preds: preds, cur: s.Weights, obs: obs, up: Rising(windows, p)}
	d := Decision{Weights: s.Weights, Action: ActionHold, Ratio: obs, Chosen: -1}
	next := s
	if next.SinceBack < math.MaxInt32 {
		next.SinceBack++
	}
	next.Misses = 0
	if obs > 1 {
		next.Misses = s.Misses + 1
	}
	if len(preds) > 0 && preds[0].OK && near(preds[0].Weights, dc.cur) {
		dc.hold = &preds[0]
	}
	// 1. Observed miss: the safe fallback (held while unconfirmed).
	if obs > 1 {
		return dc.observedMiss(next, d)
	}
	// 1b. Feed-forward: a rising load without headroom (inside the band)
	// falls back before the window shows the miss.
	if dc.up && obs > 1-p.Band {
		return dc.observedMiss(next, d)
	}
	// 2. Cost over its target (latency met): step toward cost.
	if t.MaxCostUSD > 0 && obsCost > t.MaxCostUSD {
		if w, ok := apply(dc.cur, Move{wQuality, wCost, p.MaxStep}, p.MaxStep); ok {
			next.Weights = w
			d.Weights, d.Action = w, ActionCost
			d.Reason = fmt.Sprintf("observed cost %.3g > target %.3g USD", obsCost, t.MaxCostUSD)
			return next, d
		}
	}
	// 3. Predicted miss of the current weights (with the feed-forward:
	// on a rising load only).
	if dc.hold != nil && dc.ratio(*dc.hold) > 1 && (p.Rise == 0 || dc.up) {
		return dc.predictedMiss(next, d)
	}
	// 4. Hysteresis: close to the target, or just after a fallback, hold.
	if obs > 1-p.Band {
		d.Reason = fmt.Sprintf("observed p95 at %.2f× target, inside the band", obs)
		return next, d
	}
	if next.SinceBack <= p.Dwell {
		d.Reason = fmt.Sprintf("dwell: %d interval(s) since the last latency-ward step", next.SinceBack)
		return next, d
	}
	if dc.hold == nil {
		return dc.feedbackOnly(next, d)
	}
	return dc.headroom(next, d)
}

// decider holds one Decide call's inputs.
type decider struct {
	t     Targets
	p     Params
	preds []Prediction
	cur   routing.Weights
	obs   float64
	up    bool        // a rising load (Rising)
	hold  *Prediction // the prediction of the current weights, if any
}

func (dc *decider) ratio(x Prediction) float64 { return ratio(dc.t, x.P95E2E, x.P95TTFT) }

func (dc *decider) feasible(x Prediction) bool {
	return x.OK && dc.ratio(x) <= 1-dc.p.Margin && (dc.t.MaxCostUSD <= 0 || x.MeanCostUSD <= dc.t.MaxCostUSD)
}

// Rising says whether the latest window with MinWindow requests shows a
// rising load: RecentRate ≥ (1 + Rise) × Rate (never with Rise 0).
func Rising(windows []Window, p Params) bool {
	if p.Rise <= 0 {
		return false
	}
	for i := len(windows) - 1; i >= 0; i-- {
		if w := windows[i]; w.N >= max(p.MinWindow, 1) {
			return w.Rate > 0 && w.RecentRate >= (1+p.Rise)*w.Rate
		}
	}
	return false
}

// observedMiss is rule 1 (and 1b, a rising load inside the band): the
// largest step toward latency, from quality or from cost, whichever the
// predictions say is faster (quality without them); held while a miss is
// not yet confirmed (Persist, unless the load is rising) or, with
// Confirm, predicted to clear.
func (dc *decider) observedMiss(next State, d Decision) (State, Decision) {
	obs, p := dc.obs, dc.p
	if p.Confirm && dc.hold != nil && dc.ratio(*dc.hold) <= 1-p.Margin {
		d.Reason = fmt.Sprintf("observed p95 at %.2f× target, current weights predicted at %.2f×: backlog, hold", obs, dc.ratio(*dc.hold))
		return next, d
	}
	if persist := max(p.Persist, 1); !dc.up && next.Misses < persist {
		d.Reason = fmt.Sprintf("observed p95 at %.2f× target, miss %d of %d before the fallback", obs, next.Misses, persist)
		return next, d
	}
	var best routing.Weights
	found, bestIdx, bestR := false, -1, math.Inf(1)
	for _, from := range []string{wQuality, wCost} {
		w, ok := apply(dc.cur, Move{from, wLatency, p.MaxStep}, p.MaxStep)
		if !ok {
			continue
		}
		r, idx := math.Inf(1), -1
		for i, x := range dc.preds {
			if x.OK && near(x.Weights, w) {
				r, idx = dc.ratio(x), i
			}
		}
		if !found || r < bestR {
			best, found, bestIdx, bestR = w, true, idx, r
		}
	}
	next.SinceBack = 0
	if !found {
		d.Reason = fmt.Sprintf("observed p95 at %.2f× target, no latency weight left to add", obs)
		return next, d
	}
	next.Weights = best
	d.Weights, d.Action, d.Chosen = best, ActionFallback, bestIdx
	d.Reason = fmt.Sprintf("observed p95 at %.2f× target", obs)
	if dc.up {
		d.Reason += ", load rising"
	}
	return next, d
}

// predictedMiss is rule 3: the best feasible latency-ward candidate, else
// the one with the lowest predicted ratio.
func (dc *decider) predictedMiss(next State, d Decision) (State, Decision) {
	idx, bestQ, bestR := -1, math.Inf(-1), math.Inf(1)
	for i, x := range dc.preds {
		if i == 0 || !x.OK || x.Weights.Latency <= dc.cur.Latency {
			continue
		}
		if dc.feasible(x) && x.Quality > bestQ {
			idx, bestQ = i, x.Quality
		}
	}
	if idx < 0 {
		for i, x := range dc.preds {
			if i > 0 && x.OK && x.Weights.Latency > dc.cur.Latency && dc.ratio(x) < bestR {
				idx, bestR = i, dc.ratio(x)
			}
		}
	}
	if idx < 0 {
		d.Reason = "current weights predicted to miss; no latency-ward candidate"
		return next, d
	}
	next.Weights, next.SinceBack = dc.preds[idx].Weights, 0
	d.Weights, d.Action, d.Chosen = dc.preds[idx].Weights, ActionPredict, idx
	d.Reason = fmt.Sprintf("current weights predicted at %.2f× target", dc.ratio(*dc.hold))
	return next, d
}

// feedbackOnly is rule 7 (no replay of the current weights): with
// observed headroom, the smallest step toward quality, from latency (else
// cost).
func (dc *decider) feedbackOnly(next State, d Decision) (State, Decision) {
	if dc.obs < 1-dc.p.Band && len(dc.p.Steps) > 0 {
		small := slices.Min(dc.p.Steps)
		for _, from := range []string{wLatency, wCost} {
			if w, ok := apply(dc.cur, Move{from, wQuality, small}, dc.p.MaxStep); ok {
				next.Weights = w
				d.Weights, d.Action = w, ActionProbe
				d.Reason = fmt.Sprintf("observed p95 at %.2f× target, no prediction: %.2f toward quality", dc.obs, Step(dc.cur, w))
				return next, d
			}
		}
	}
	d.Reason = "no prediction of the current weights"
	return next, d
}

// headroom is rules 5 and 6: the feasible candidate toward quality with
// the best predicted quality if it beats holding by MinGain, else (a
// plateau: the scores can be flat in w over a stretch, e.g. while the
// latency term still dominates every prompt, so small steps alone would
// never leave it) the largest feasible step toward quality predicted no
// worse.
func (dc *decider) headroom(next State, d Decision) (State, Decision) {
	hold, cur, p := dc.hold, dc.cur, dc.p
	idx := -1
	bestQ := hold.Quality + p.MinGain
	for i, x := range dc.preds {
		if i == 0 || !dc.feasible(x) || x.Weights.Quality <= cur.Quality {
			continue
		}
		if x.Quality > bestQ {
			idx, bestQ = i, x.Quality
		}
	}
	action := ActionQuality
	if idx < 0 {
		bestStep, bestR := 0.0, math.Inf(1)
		for i, x := range dc.preds {
			if i == 0 || !dc.feasible(x) || x.Weights.Quality <= cur.Quality || x.Quality < hold.Quality-p.MinGain {
				continue
			}
			st, r := Step(cur, x.Weights), dc.ratio(x)
			if st > bestStep+1e-9 || (math.Abs(st-bestStep) <= 1e-9 && r < bestR) {
				idx, bestStep, bestR = i, st, r
			}
		}
		action = ActionProbe
	}
	if idx < 0 {
		d.Reason = "no feasible candidate toward quality"
		return next, d
	}
	next.Weights = dc.preds[idx].Weights
	d.Weights, d.Action, d.Chosen = dc.preds[idx].Weights, action, idx
	d.Reason = fmt.Sprintf("predicted quality %.4f → %.4f at %.2f× target", hold.Quality, dc.preds[idx].Quality, dc.ratio(dc.preds[idx]))
	return next, d
}

// ParseTargets reads "p95_e2e_ms=3000,p95_ttft_ms=800,max_cost_usd_per_request=0.002"
// (any subset with at least one latency target; keys once each). The
// result is validated.
func ParseTargets(s string) (Targets, error) {
	var t Targets
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return Targets{}, fmt.Errorf("expected key=value pairs like p95_e2e_ms=3000, got %q", part)
		}
		k = strings.ToLower(strings.TrimSpace(k))
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return Targets{}, fmt.Errorf("value of %q is not a finite number", k)
		}
		if seen[k] {
			return Targets{}, fmt.Errorf("target %q given twice", k)
		}
		seen[k] = true
		switch k {
		case "p95_e2e_ms", "p95_ttft_ms":
			if !(f > 0) || f > maxTargetMs {
				return Targets{}, fmt.Errorf("%s must be in (0, %d] ms, got %v", k, maxTargetMs, f)
			}
			d := time.Duration(f * float64(time.Millisecond))
			if k == "p95_e2e_ms" {
				t.P95E2E = d
			} else {
				t.P95TTFT = d
			}
		case "max_cost_usd_per_request":
			if f < 0 {
				return Targets{}, fmt.Errorf("max_cost_usd_per_request must be >= 0, got %v", f)
			}
			t.MaxCostUSD = f
		default:
			return Targets{}, fmt.Errorf("unknown target %q (want p95_e2e_ms, p95_ttft_ms, max_cost_usd_per_request)", k)
		}
	}
	return t, t.Validate()
}

// maxTargetMs bounds a latency target (one day).
const maxTargetMs = 86_400_000

// String formats t the way ParseTargets reads it.
func (t Targets) String() string {
	var parts []string
	if t.P95E2E > 0 {
		parts = append(parts, "p95_e2e_ms="+strconv.FormatFloat(float64(t.P95E2E)/1e6, 'g', -1, 64))
	}
	if t.P95TTFT > 0 {
		parts = append(parts, "p95_ttft_ms="+strconv.FormatFloat(float64(t.P95TTFT)/1e6, 'g', -1, 64))
	}
	if t.MaxCostUSD > 0 {
		parts = append(parts, "max_cost_usd_per_request="+strconv.FormatFloat(t.MaxCostUSD, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// ParseParams reads constants over the defaults, e.g.
// "margin=0.1,band=0.3,dwell=1,persist=2,rise=0.5,min_gain=0.001,steps=0.1/0.2,max_step=0.2,min_window=20"
// (keys once each); the result is validated.
func ParseParams(s string) (Params, error) {
	p := DefaultParams()
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok {
			return Params{}, fmt.Errorf("expected key=value pairs like margin=0.1, got %q", part)
		}
		if seen[k] {
			return Params{}, fmt.Errorf("constant %q given twice", k)
		}
		seen[k] = true
		num := func(dst *float64) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("value of %q is not a finite number", k)
			}
			*dst = f
			return nil
		}
		integer := func(dst *int) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("value of %q is not an integer", k)
			}
			*dst = n
			return nil
		}
		var err error
		switch k {
		case "margin":
			err = num(&p.Margin)
		case "band":
			err = num(&p.Band)
		case "min_gain":
			err = num(&p.MinGain)
		case "max_step":
			err = num(&p.MaxStep)
		case "dwell":
			err = integer(&p.Dwell)
		case "persist":
			err = integer(&p.Persist)
		case "rise":
			err = num(&p.Rise)
		case "min_window":
			err = integer(&p.MinWindow)
		case "confirm":
			p.Confirm, err = strconv.ParseBool(v)
			if err != nil {
				err = fmt.Errorf("value of %q is not a boolean", k)
			}
		case "steps":
			p.Steps = nil
			for _, x := range strings.Split(v, "/") {
				f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
				if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
					return Params{}, fmt.Errorf("steps: want numbers separated by /, got %q", v)
				}
				p.Steps = append(p.Steps, f)
			}
		default:
			return Params{}, fmt.Errorf("unknown constant %q (want margin, band, dwell, persist, rise, min_gain, steps, max_step, min_window, confirm)", k)
		}
		if err != nil {
			return Params{}, err
		}
	}
	return p, p.Validate()
}
