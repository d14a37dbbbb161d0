// Package latency predicts an instance's time per output token (TPOT) and
// time to first token (TTFT) from its load, per tier (model@gpu): an
// analytic linear model fitted online by recursive least squares, and
// optionally a gradient-boosted tree model trained offline with XGBoost
// and loaded with leaves. See README.md.
package latency

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/routebalance/routebalance/routing"
)

// NumFeatures is the length of a feature vector: see Features.
const NumFeatures = 6

// Features maps a Load to the regressors of the analytic models:
// [1, running, waiting, kv_usage, pending_decode_tokens/1000,
// prompt_tokens/1000]. The per-1000 scaling keeps the least-squares
// problem well conditioned.
func Features(l routing.Load) [NumFeatures]float64 {
	return [NumFeatures]float64{1, l.Running, l.Waiting, l.KVUsage, l.PendingDecodeTokens / 1000, l.PromptTokens / 1000}
}

// Prior is the starting point of a tier's analytic model: the
// coefficients over Features for TPOT and TTFT, in seconds.
type Prior struct {
	TPOT [NumFeatures]float64
	TTFT [NumFeatures]float64
}

// DefaultPrior is the documented prior of a tier nobody described: TPOT =
// 40 ms + 0.6 ms per running sequence + 0.2 ms per waiting request + 10 ms
// at full KV cache; TTFT = 60 ms + 20 ms per waiting request + 100 ms per
// 1000 prompt tokens + 1 ms per running sequence.
func DefaultPrior() Prior {
	return Prior{
		TPOT: [NumFeatures]float64{0.040, 0.0006, 0.0002, 0.010, 0, 0},
		TTFT: [NumFeatures]float64{0.060, 0.001, 0.020, 0, 0, 0.100},
	}
}

// LightPrior is a prior from a tier's light-load TPOT and the TPOT factor
// at a full batch of maxSeqs sequences (the cluster file's tpot_ms_light,
// tpot_load_factor, max_num_seqs), plus the TTFT overhead and prefill cost
// per 1000 prompt tokens, all in seconds.
func LightPrior(tpotLight, loadFactor float64, maxSeqs int, ttftOverhead, prefillPer1k float64) Prior {
	p := DefaultPrior()
	slope := 0.0
	if maxSeqs > 0 {
		slope = tpotLight * (loadFactor - 1) / float64(maxSeqs)
	}
	p.TPOT = [NumFeatures]float64{tpotLight, slope, 0, 0, 0, 0}
	p.TTFT = [NumFeatures]float64{ttftOverhead, 0, ttftOverhead + 2*tpotLight, 0, 0, prefillPer1k}
	return p
}

// Config tunes the models. The zero value of a field means its default.
type Config struct {
	// Forget is the RLS forgetting factor λ in (0, 1]: older observations
	// weigh λ^age (default 0.999, a memory of ~1000 observations).
	Forget float64
	// PriorVar is the initial RLS covariance P₀ = PriorVar·I. The prior
	// weighs about as much as 1/PriorVar observations with unit features,
	// so larger trusts data sooner (default 0.1: ~10 observations).
	PriorVar float64
	// MinTPOT and MinTTFT floor the predictions (defaults 1 ms and 5 ms).
	MinTPOT, MinTTFT float64
	// Default is the prior of tiers without their own (default
	// DefaultPrior()).
	Default *Prior
}

func (c Config) withDefaults() Config {
	if c.Forget == 0 {
		c.Forget = 0.999
	}
	if c.PriorVar == 0 {
		c.PriorVar = 0.1
	}
	if c.MinTPOT == 0 {
		c.MinTPOT = 0.001
	}
	if c.MinTTFT == 0 {
		c.MinTTFT = 0.005
	}
	if c.Default == nil {
		p := DefaultPrior()
		c.Default = &p
	}
	return c
}

// Validate reports whether the configuration is usable.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case !(c.Forget > 0 && c.Forget <= 1):
		return fmt.Errorf("latency: forget must be in (0, 1], got %g", c.Forget)
	case !(c.PriorVar > 0):
		return fmt.Errorf("latency: prior variance must be > 0, got %g", c.PriorVar)
	case c.MinTPOT < 0 || c.MinTTFT < 0:
		return errors.New("latency: minimum predictions must be ≥ 0")
	}
	return nil
}

// Predictor is a trained TPOT/TTFT model of one tier (e.g. an XGBoost
// ensemble). Predict returns seconds; ok=false means "no opinion" and the
// analytic model answers instead.
type Predictor interface {
	PredictTPOT(l routing.Load) (float64, bool)
	PredictTTFT(l routing.Load) (float64, bool)
}

// Models holds one latency model per tier. All methods are safe for
// concurrent use; unknown tiers start from Config.Default and learn from
// Observe.
type Models struct {
	cfg   Config
	mu    sync.RWMutex
	tiers map[string]*Tier
}

// New returns an empty set of models.
func New(cfg Config) (*Models, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Models{cfg: cfg.withDefaults(), tiers: map[string]*Tier{}}, nil
}

// Tier returns the model of a tier, creating it from the default prior.
// Hot loops may keep the pointer to skip the map lookup.
func (m *Models) Tier(tier string) *Tier {
	m.mu.RLock()
	t := m.tiers[tier]
	m.mu.RUnlock()
	if t != nil {
		return t
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t = m.tiers[tier]; t == nil {
		t = newTier(m.cfg, *m.cfg.Default)
		m.tiers[tier] = t
	}
	return t
}

// Bind returns the model of one tier as a routing.TierLatency, for callers
// that look a tier up once and predict many times; it sees later learning.
func (m *Models) Bind(tier string) routing.TierLatency { return m.Tier(tier) }

var _ routing.TierLatency = (*Tier)(nil)

// SetPrior resets a tier's analytic model to prior (keeping any trained
// predictor).
func (m *Models) SetPrior(tier string, p Prior) {
	t := m.Tier(tier)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tpot.reset(p.TPOT, m.cfg.PriorVar)
	t.ttft.reset(p.TTFT, m.cfg.PriorVar)
}

// SetPredictor attaches a trained model to a tier; nil detaches it.
func (m *Models) SetPredictor(tier string, p Predictor) {
	t := m.Tier(tier)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pred = p
}

// TPOT predicts seconds per output token of an instance of tier at load l.
func (m *Models) TPOT(tier string, l routing.Load) float64 { return m.Tier(tier).TPOT(l) }

// TTFT predicts seconds to the first token for a request placed on an
// instance of tier at load l.
func (m *Models) TTFT(tier string, l routing.Load) float64 { return m.Tier(tier).TTFT(l) }

// Observe folds one measurement into tier's analytic models: tpot and
// ttft in seconds, as observed for a request dispatched at load l. A
// non-positive or non-finite value is skipped (e.g. tpot of a one-token
// answer), so Observe(tier, l, tpot, 0) is a TPOT-only observation (the
// scheduler's non-streamed answers, which measure no first token).
func (m *Models) Observe(tier string, l routing.Load, tpot, ttft float64) {
	m.Tier(tier).Observe(l, tpot, ttft)
}

// Tier is the latency model of one tier.
type Tier struct {
	cfg  Config
	mu   sync.RWMutex
	tpot rls
	ttft rls
	pred Predictor
	n    int
}

func newTier(cfg Config, p Prior) *Tier {
	t := &Tier{cfg: cfg}
	t.tpot.reset(p.TPOT, cfg.PriorVar)
	t.ttft.reset(p.TTFT, cfg.PriorVar)
	return t
}

// TPOT predicts seconds per output token at load l.
func (t *Tier) TPOT(l routing.Load) float64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.pred != nil {
		if v, ok := t.pred.PredictTPOT(l); ok && v == v {
			return math.Max(v, t.cfg.MinTPOT)
		}
	}
	x := Features(l)
	return math.Max(t.tpot.predict(&x), t.cfg.MinTPOT)
}

// TTFT predicts seconds to the first token at load l.
func (t *Tier) TTFT(l routing.Load) float64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.pred != nil {
		if v, ok := t.pred.PredictTTFT(l); ok && v == v {
			return math.Max(v, t.cfg.MinTTFT)
		}
	}
	x := Features(l)
	return math.Max(t.ttft.predict(&x), t.cfg.MinTTFT)
}

// Analytic returns the analytic model's TPOT and TTFT at l, ignoring any
// trained predictor (for comparisons).
func (t *Tier) Analytic(l routing.Load) (tpot, ttft float64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	x := Features(l)
	return math.Max(t.tpot.predict(&x), t.cfg.MinTPOT), math.Max(t.ttft.predict(&x), t.cfg.MinTTFT)
}

// Coefficients returns the current analytic coefficients.
func (t *Tier) Coefficients() Prior {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return Prior{TPOT: t.tpot.theta, TTFT: t.ttft.theta}
}

// Observations returns how many observations the tier has folded in.
func (t *Tier) Observations() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.n
}

// Observe folds one measurement into the analytic models.
func (t *Tier) Observe(l routing.Load, tpot, ttft float64) {
	x := Features(l)
	for _, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if tpot > 0 && !math.IsInf(tpot, 0) {
		t.tpot.updateRel(&x, tpot, t.cfg.Forget)
	}
	if ttft > 0 && !math.IsInf(ttft, 0) {
		t.ttft.updateRel(&x, ttft, t.cfg.Forget)
	}
	t.n++
}

// rls is recursive least squares with exponential forgetting:
//
//	k = P x / (λ + xᵀ P x)
//	θ ← θ + k (y − xᵀ θ)
//	P ← (P − k xᵀ P) / λ
type rls struct {
	theta [NumFeatures]float64
	p     [NumFeatures][NumFeatures]float64
}

func (r *rls) reset(theta [NumFeatures]float64, v float64) {
	r.theta = theta
	r.p = [NumFeatures][NumFeatures]float64{}
	for i := range r.p {
		r.p[i][i] = v
	}
}

func (r *rls) predict(x *[NumFeatures]float64) float64 {
	var s float64
	for i, v := range x {
		s += r.theta[i] * v
	}
	return s
}

// updateRel is an update weighted by 1/s², s = max(y, ŷ/RelFloor) with ŷ
// the current prediction at x, so the fit minimises squared relative
// error Σ((y − θ·x)/y)² — the error that matters when predictions range
// from tens of milliseconds (light load) to seconds (queueing), and the
// one MAPE measures — except that a sample far below the prediction
// weighs as one at ŷ/relFloor, and no sample's relative error counts for
// more than relClip. Plain 1/y² gave a sample 30× below the
// prediction 900× the weight of an accurate one: on a loaded machine a
// few near-zero TPOTs (tokens delivered in one burst after a late first
// token; a non-streamed E2E barely above the TTFT̂ subtracted from it)
// dragged a tier's TPOT̂ to the MinTPOT floor (1 ms for a ~9 ms tier),
// and the what-if replay built on it predicted that tier 9× too fast. A
// tier truly faster than its prior still learns: every sample pulls down,
// each with bounded weight, and once ŷ is within RelFloor of y the
// weighting is 1/y² again.
func (r *rls) updateRel(x *[NumFeatures]float64, y, lambda float64) {
	s := y
	if f := r.predict(x) / relFloor; f > s {
		s = f
	}
	var xs [NumFeatures]float64
	for i, v := range x {
		xs[i] = v / s
	}
	r.updateClipped(&xs, y/s, lambda, relClip)
}

// relFloor bounds the weight of a sample below the prediction in
// updateRel: it weighs at most as one at ŷ/relFloor. relClip bounds the
// residual one sample moves θ by (Huber's M-estimator in RLS form): a
// relative error beyond ±relClip counts as ±relClip.
const (
	relFloor = 2
	relClip  = 0.5
)

func (r *rls) update(x *[NumFeatures]float64, y, lambda float64) {
	r.updateClipped(x, y, lambda, math.Inf(1))
}

// project keeps every load coefficient (all but the intercept) ≥ 0:
// TPOT and TTFT never fall as load or the prompt grows. Unconstrained,
// samples whose timing ran against the load (a loaded machine) fitted a
// negative slope, TPOT̂ fell to the MinTPOT floor as an instance filled,
// the scheduler sent it more and the slope fed on itself: in the demo one
// 51B instance took 102 of 300 requests at a TPOT̂ of 1 ms (≈ 20 ms
// true). A clamped coefficient is decoupled from the others (its
// covariance row and column zeroed, its variance kept), so later
// corrections go to the free coefficients instead of being spent on it
// again.
func (r *rls) project() {
	for i := 1; i < NumFeatures; i++ {
		if r.theta[i] >= 0 {
			continue
		}
		r.theta[i] = 0
		for j := range r.p {
			if j != i {
				r.p[i][j], r.p[j][i] = 0, 0
			}
		}
	}
}

func (r *rls) updateClipped(x *[NumFeatures]float64, y, lambda, clip float64) {
	var px [NumFeatures]float64
	for i := range px {
		for j := range x {
			px[i] += r.p[i][j] * x[j]
		}
	}
	den := lambda
	for i := range x {
		den += x[i] * px[i]
	}
	if !(den > 0) {
		return
	}
	err := math.Max(-clip, math.Min(clip, y-r.predict(x)))
	for i := range r.theta {
		// Projected onto θ ≥ 0: TPOT and TTFT never fall as load or the
		// prompt grows. Unconstrained, samples whose noise ran against
		// the load (a loaded machine's timing) fitted a negative slope,
		// TPOT̂ fell to the floor as the instance filled, the scheduler
		// sent it more and the slope fed on itself: one 51B instance of
		// the demo took 102 of 300 requests at a TPOT̂ of 1 ms.
		r.theta[i] += px[i] / den * err
	}
	// P is symmetric, so xᵀP = (Px)ᵀ.
	for i := range r.p {
		for j := range r.p[i] {
			r.p[i][j] = (r.p[i][j] - px[i]*px[j]/den) / lambda
		}
	}
	r.project()
	// Bound the covariance so a long quiet period with λ < 1 cannot blow
	// it up (covariance wind-up).
	var top float64
	for i := range r.p {
		top = math.Max(top, r.p[i][i])
	}
	if top > 1e6 {
		for i := range r.p {
			for j := range r.p[i] {
				r.p[i][j] *= 1e6 / top
			}
		}
	}
}
