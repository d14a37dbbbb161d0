package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/fleet"
)

// Config holds the scheduler's settings. Zero fields take the defaults of
// DefaultConfig (WithDefaults); Validate rejects values out of range.
type Config struct {
	// Fleet configures live instance state, scraping and health.
	Fleet fleet.Config
	// DefaultPolicy is used when neither the cluster nor the request names
	// one (default "routebalance").
	DefaultPolicy string
	// DefaultMaxConcurrency caps in-flight requests on an instance whose
	// MaxConcurrency is 0 (default 64).
	DefaultMaxConcurrency int
	// MaxQueue bounds each instance's admission queue (default 1024).
	MaxQueue int
	// AgingPassOvers lifts a queued request one starvation level each time
	// it has been passed over this many times (default 8).
	AgingPassOvers int
	// Batch controls batch formation.
	Batch BatchConfig
	// Confidence is the quantile of the output-length histogram used by the
	// end-to-end SLO filter (default 0.9).
	Confidence float64
	// DefaultOutputTokens is L̂ when no estimator is configured (default 256).
	DefaultOutputTokens float64
	// DefaultQualityPrior is Q̂ of a model whose instances set no
	// QualityPrior (default 0.5).
	DefaultQualityPrior float64
	// Prior latency model used when no latency model is configured:
	// TPOT = PriorTPOT + PriorTPOTPerSeq·running,
	// TTFT = PriorTTFT + PriorPrefillPerToken·prompt tokens.
	PriorTPOT            time.Duration
	PriorTPOTPerSeq      time.Duration
	PriorTTFT            time.Duration
	PriorPrefillPerToken time.Duration
	// StickyTTL is how long a workflow's first-stage choice is remembered
	// after its last stage (default 10 min); StickyMax bounds the number of
	// workflows remembered (default 100000).
	StickyTTL time.Duration
	StickyMax int
	// ExploreConcurrency is how many requests an exploring instance takes at
	// once while it is preferred (default 1).
	ExploreConcurrency int
	// IdleAfter retires a cluster's goroutines and scraper after this long
	// without requests and with nothing in flight (default 10 min).
	IdleAfter time.Duration
	// Score selects the normalisation of the fused score (README "Score"):
	// "light" (default: quality and cost as the candidate's position
	// between the worst and the best candidate of the request, latency as
	// the excess over the fastest candidate in units of the request's
	// service time on an idle instance, so a second weighs the same at
	// every load), "relative" (latency excess in units of the fastest
	// candidate's own T̂), "range"
	// (all three as positions between worst and best) or "paper" (Q̂ raw,
	// cost and latency as 1 − x/max, DESIGN §3.1).
	Score string
	// Binding says when a queued request is bound to its instance (README
	// "Admission queue"): "early" (default) keeps every queued request on
	// the instance it was decided for; "late" lets a slot that frees on an
	// instance with an empty queue take the best queued request of another
	// instance of the same offer (model, kind and prices). Late binding
	// changed nothing beyond noise on validation (README), so it is off.
	Binding string
	// Bias turns the per-tier online correction of T̂ on ("on") or off
	// ("off", default): each tier learns the mean ratio of observed to
	// predicted E2E (queue wait included) from its successful releases and
	// T̂ is multiplied by it (README "Predictions"). It lost on validation
	// (README), so it is off.
	Bias string
}

// Bias settings.
const (
	BiasOn  = "on"
	BiasOff = "off"
)

// Bindings.
const (
	BindingLate  = "late"
	BindingEarly = "early"
)

// Score normalisations.
const (
	ScoreRelative = "relative"
	ScoreRange    = "range"
	ScorePaper    = "paper"
	ScoreLight    = "light"
)

// BatchConfig controls how waiting requests are grouped into batches.
type BatchConfig struct {
	// MinBatch and MaxBatch bound the adaptive batch limit, which grows
	// linearly from MinBatch (no instance busy) to MaxBatch (every instance
	// at capacity). Defaults 4 and 64.
	MinBatch int
	MaxBatch int
	// Fixed, when > 0, replaces the adaptive limit by a constant.
	Fixed int
	// NoAdaptive turns adaptive sizing off: the limit is MaxBatch.
	NoAdaptive bool
	// NoLPT turns longest-predicted-output-first ordering off: a batch is
	// assigned in arrival order.
	NoLPT bool
}

// Limit returns the batch limit when busyShare (in [0,1]) of the healthy
// instances are at capacity.
func (b BatchConfig) Limit(busyShare float64) int {
	if b.Fixed > 0 {
		return b.Fixed
	}
	if b.NoAdaptive {
		return b.MaxBatch
	}
	busyShare = min(max(busyShare, 0), 1)
	return b.MinBatch + int(float64(b.MaxBatch-b.MinBatch)*busyShare+0.5)
}

// DefaultConfig returns the defaults described on Config's fields.
func DefaultConfig() Config {
	return Config{
		Fleet:                 fleet.DefaultConfig(),
		DefaultPolicy:         PolicyRouteBalance,
		DefaultMaxConcurrency: 64,
		MaxQueue:              1024,
		AgingPassOvers:        8,
		Batch:                 BatchConfig{MinBatch: 4, MaxBatch: 64},
		Confidence:            0.9,
		DefaultOutputTokens:   256,
		DefaultQualityPrior:   0.5,
		PriorTPOT:             20 * time.Millisecond,
		PriorTPOTPerSeq:       200 * time.Microsecond,
		PriorTTFT:             50 * time.Millisecond,
		PriorPrefillPerToken:  100 * time.Microsecond,
		StickyTTL:             10 * time.Minute,
		StickyMax:             100000,
		ExploreConcurrency:    1,
		IdleAfter:             10 * time.Minute,
		Score:                 ScoreLight,
		Binding:               BindingEarly,
		Bias:                  BiasOff,
	}
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	c.Fleet = c.Fleet.WithDefaults()
	setS := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	setI := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setF := func(p *float64, v float64) {
		if *p == 0 {
			*p = v
		}
	}
	setD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setS(&c.DefaultPolicy, d.DefaultPolicy)
	setI(&c.DefaultMaxConcurrency, d.DefaultMaxConcurrency)
	setI(&c.MaxQueue, d.MaxQueue)
	setI(&c.AgingPassOvers, d.AgingPassOvers)
	setI(&c.Batch.MinBatch, d.Batch.MinBatch)
	setI(&c.Batch.MaxBatch, d.Batch.MaxBatch)
	setF(&c.Confidence, d.Confidence)
	setF(&c.DefaultOutputTokens, d.DefaultOutputTokens)
	setF(&c.DefaultQualityPrior, d.DefaultQualityPrior)
	setD(&c.PriorTPOT, d.PriorTPOT)
	setD(&c.PriorTPOTPerSeq, d.PriorTPOTPerSeq)
	setD(&c.PriorTTFT, d.PriorTTFT)
	setD(&c.PriorPrefillPerToken, d.PriorPrefillPerToken)
	setD(&c.StickyTTL, d.StickyTTL)
	setI(&c.StickyMax, d.StickyMax)
	setI(&c.ExploreConcurrency, d.ExploreConcurrency)
	setD(&c.IdleAfter, d.IdleAfter)
	setS(&c.Score, d.Score)
	setS(&c.Binding, d.Binding)
	setS(&c.Bias, d.Bias)
	return c
}

// Validate reports settings out of range (after WithDefaults).
func (c Config) Validate() error {
	var errs []error
	if err := c.Fleet.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.DefaultMaxConcurrency < 0 || c.MaxQueue < 0 || c.AgingPassOvers < 0 {
		errs = append(errs, errors.New("schedule: max concurrency, max queue and aging pass-overs must be >= 0"))
	}
	if c.Batch.MinBatch < 0 || c.Batch.MaxBatch < c.Batch.MinBatch || c.Batch.Fixed < 0 {
		errs = append(errs, fmt.Errorf("schedule: batch limits must satisfy 0 <= min (%d) <= max (%d), fixed >= 0", c.Batch.MinBatch, c.Batch.MaxBatch))
	}
	if c.Score != ScoreRelative && c.Score != ScoreRange && c.Score != ScorePaper && c.Score != ScoreLight {
		errs = append(errs, fmt.Errorf("schedule: score must be %q, %q, %q or %q, got %q", ScoreLight, ScoreRelative, ScoreRange, ScorePaper, c.Score))
	}
	if c.Bias != BiasOn && c.Bias != BiasOff {
		errs = append(errs, fmt.Errorf("schedule: bias must be %q or %q, got %q", BiasOn, BiasOff, c.Bias))
	}
	if c.Binding != BindingLate && c.Binding != BindingEarly {
		errs = append(errs, fmt.Errorf("schedule: binding must be %q or %q, got %q", BindingLate, BindingEarly, c.Binding))
	}
	if c.Confidence < 0 || c.Confidence > 1 {
		errs = append(errs, fmt.Errorf("schedule: confidence must be in (0,1], got %v", c.Confidence))
	}
	if c.DefaultOutputTokens < 0 || c.DefaultQualityPrior < 0 || c.DefaultQualityPrior > 1 {
		errs = append(errs, errors.New("schedule: default output tokens must be >= 0 and default quality prior in [0,1]"))
	}
	if c.PriorTPOT < 0 || c.PriorTPOTPerSeq < 0 || c.PriorTTFT < 0 || c.PriorPrefillPerToken < 0 || c.StickyTTL < 0 || c.StickyMax < 0 {
		errs = append(errs, errors.New("schedule: prior latencies, sticky TTL and sticky max must be >= 0"))
	}
	if c.ExploreConcurrency < 0 || c.IdleAfter < 0 {
		errs = append(errs, errors.New("schedule: explore concurrency and idle-after must be >= 0"))
	}
	return errors.Join(errs...)
}

// Estimator predicts quality, output length and its histogram for a batch
// of prompts over a cluster's models. The scheduler calls it once per batch
// from the cluster's owner goroutine; out[j] is for prompts[j] and holds
// len(models) entries afterwards (implementations call out[j].Reset).
// Models with no knowledge get priors[m] and routing.SourcePrior.
// (*estimate.KNN) implements it.
type Estimator interface {
	Estimate(ctx context.Context, prompts []string, models []string, priors []float64, out []routing.PromptEstimate) error
}

// ClusterBinder is optional on an Estimator: ForCluster returns the
// estimator of one cluster's requests (its own quality knowledge in front
// of the shared one). NewCore binds once per cluster and uses the result
// for the core's life, so the bound estimator must see later changes of
// the cluster's knowledge itself. The result may implement the observer
// interfaces below; the binder's own Estimate is not called by a bound
// core. (*quality.Store), adapted in cmd, provides it.
type ClusterBinder interface {
	ForCluster(clusterID string) Estimator
}

// LatencyModel predicts the time per output token and the time to first
// token, in seconds, of an instance of a tier (routing.Instance.Tier) at a
// load. Called for every candidate of every batch; must be safe for
// concurrent use. (*latency.Models) implements it.
type LatencyModel interface {
	TPOT(tier string, l routing.Load) float64
	TTFT(tier string, l routing.Load) float64
}

// TierBinder is optional on a LatencyModel: Bind returns the model of one
// tier, so the per-candidate calls skip looking the tier up. The scheduler
// binds each instance when a cluster version is loaded and keeps the
// result for the version's life, so a bound model must see later learning.
// (*latency.Models) can provide it as
// func (m *Models) Bind(tier string) routing.TierLatency { return m.Tier(tier) }.
type TierBinder interface {
	Bind(tier string) routing.TierLatency
}

// TierLatency is the latency model of one tier (routing.TierLatency).
type TierLatency = routing.TierLatency

// boundTier adapts a LatencyModel without Bind to TierLatency.
type boundTier struct {
	m    LatencyModel
	tier string
}

func (b *boundTier) TPOT(l routing.Load) float64 { return b.m.TPOT(b.tier, l) }
func (b *boundTier) TTFT(l routing.Load) float64 { return b.m.TTFT(b.tier, l) }

func bindTier(m LatencyModel, tier string) TierLatency {
	if b, ok := m.(TierBinder); ok {
		return b.Bind(tier)
	}
	return &boundTier{m: m, tier: tier}
}

// LengthObserver learns actual output lengths; the scheduler calls it when
// a request completes successfully. Optional on the Estimator.
type LengthObserver interface {
	ObserveLength(prompt, model string, tokens int)
}

// MemoLengthObserver is LengthObserver for a decided request: memo is the
// Decision.EstimateMemo of its estimate, so the estimator reuses the
// embedding and neighbours it computed for the decision instead of
// recomputing them; it falls back to the prompt when the memo expired.
// Optional on the Estimator and preferred over LengthObserver.
// (*estimate.KNN) implements it.
type MemoLengthObserver interface {
	ObserveLengthMemo(memo uint64, prompt, model string, tokens int)
}

// LatencyObserver learns measured latency at the load the request was
// admitted under. Optional on the LatencyModel.
type LatencyObserver interface {
	Observe(tier string, l routing.Load, tpot, ttft float64)
}

// Labels gives the true quality and output length of a request on each
// model; only the oracle policy reads it (simulation). It reports false
// when it has no labels for the request.
type Labels interface {
	TrueLabels(req *routing.Request, models []string, out *routing.PromptEstimate) bool
}

// Deps are the scheduler's collaborators. Every field is optional.
type Deps struct {
	// Clock tells the time (default routing.WallClock).
	Clock routing.Clock
	// Stopwatch returns a monotonic reading used only to measure decision
	// compute time (default: wall-clock time since the router was built).
	Stopwatch func() time.Duration
	Logger    *slog.Logger
	// Estimator predicts Q̂/L̂; nil uses the instance priors and
	// Config.DefaultOutputTokens.
	Estimator Estimator
	// Latency predicts TPOT/TTFT; nil uses the prior in Config.
	Latency LatencyModel
	// Labels feeds the oracle policy (simulation only).
	Labels Labels
	// Policies builds policies by name; nil uses NewRegistry().
	Policies *Registry
	// HTTPClient is used by scrapers and probes (default: a client with
	// Config.Fleet.ScrapeTimeout).
	HTTPClient *http.Client
	// NoScrape disables /metrics scraping and /health probes (simulation
	// and tests that drive fleet state themselves).
	NoScrape bool
}

func (d Deps) withDefaults(cfg Config) Deps {
	if d.Clock == nil {
		d.Clock = routing.WallClock{}
	}
	if d.Stopwatch == nil {
		start := time.Now()
		d.Stopwatch = func() time.Duration { return time.Since(start) }
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Estimator == nil {
		d.Estimator = priorEstimator{tokens: cfg.DefaultOutputTokens}
	}
	if d.Latency == nil {
		d.Latency = priorLatency{cfg: cfg}
	}
	if d.Policies == nil {
		d.Policies = NewRegistry()
	}
	if d.HTTPClient == nil {
		d.HTTPClient = &http.Client{Timeout: cfg.Fleet.ScrapeTimeout}
	}
	return d
}

// priorEstimator is the estimator of last resort: every model gets its
// prior quality and a constant output length.
type priorEstimator struct{ tokens float64 }

func (p priorEstimator) Estimate(_ context.Context, prompts []string, models []string, priors []float64, out []routing.PromptEstimate) error {
	for j := range prompts {
		out[j].Reset(len(models))
		for m := range models {
			out[j].Quality[m] = priors[m]
			out[j].Length[m] = p.tokens
			out[j].Source[m] = routing.SourcePrior
		}
	}
	return nil
}

// priorLatency is the latency model of last resort (see Config).
type priorLatency struct{ cfg Config }

func (p priorLatency) TPOT(_ string, l routing.Load) float64 {
	return p.cfg.PriorTPOT.Seconds() + p.cfg.PriorTPOTPerSeq.Seconds()*l.Running
}

func (p priorLatency) TTFT(_ string, l routing.Load) float64 {
	return p.cfg.PriorTTFT.Seconds() + p.cfg.PriorPrefillPerToken.Seconds()*l.PromptTokens
}
