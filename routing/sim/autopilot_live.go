package sim

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
)

// LivePredictorConfig bounds the live autopilot's replays; zero fields
// take the defaults.
type LivePredictorConfig struct {
	// Horizon is how far back the recorded traffic a replay repeats
	// reaches (default 30 s), at most MaxRequests of its newest requests
	// (default 200).
	Horizon     time.Duration
	MaxRequests int
	// MaxCandidates caps the candidates replayed per step (default 13, all
	// of one step without a cost target); Candidates lists the current
	// weights first, so they are always replayed.
	MaxCandidates int
	// Budget bounds the wall time of one step's replays together (default
	// 1 s); candidates not replayed within it have no prediction.
	Budget time.Duration
}

// WithDefaults fills the zero fields.
func (c LivePredictorConfig) WithDefaults() LivePredictorConfig {
	if c.Horizon <= 0 {
		c.Horizon = 30 * time.Second
	}
	if c.MaxRequests <= 0 {
		c.MaxRequests = 200
	}
	if c.MaxCandidates <= 0 {
		c.MaxCandidates = 13
	}
	if c.Budget <= 0 {
		c.Budget = time.Second
	}
	return c
}

// LivePredictor is the model-predictive part of the live autopilot
// (autopilot.Predictor): for each candidate weight vector it replays the
// cluster's recent recorded traffic (the what-if preview's ledger reader,
// the last Horizon, at its observed arrival rate) through a fresh
// schedule.Core on engines derived from the live latency models, starting
// from the load the live scheduler holds on each instance now — the
// what-if preview's machinery (Previewer), without its cache. It runs on
// the controller's goroutine, never on the request path; replays share
// the Previewer's one-at-a-time slot with the what-if API, so however
// many controllers run, replays use at most one core.
type LivePredictor struct {
	cfg     LivePredictorConfig
	p       *Previewer
	prompts atomic.Pointer[routing.PromptMemory]
}

var _ autopilot.Predictor = (*LivePredictor)(nil)

// NewLivePredictor returns a predictor replaying through p.
func NewLivePredictor(cfg LivePredictorConfig, p *Previewer) *LivePredictor {
	return &LivePredictor{cfg: cfg.WithDefaults(), p: p}
}

// SetPrompts gives the replays the inference path's memory of recent
// prompts (for the quality estimate of each replayed request); without
// it a replayed request's quality is the instances' priors.
func (lp *LivePredictor) SetPrompts(m routing.PromptMemory) {
	if m != nil {
		lp.prompts.Store(&m)
	}
}

// Predict replays the recent traffic of cl once per candidate (at most
// MaxCandidates, within Budget) and returns one prediction per candidate;
// those not replayed (no recorded traffic, budget spent, a failed replay)
// have OK false.
func (lp *LivePredictor) Predict(ctx context.Context, cl *routing.Cluster, cands []routing.Weights) []autopilot.Prediction {
	out := make([]autopilot.Prediction, len(cands))
	for i, w := range cands {
		out[i].Weights = w
	}
	if cl == nil || len(cands) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, lp.cfg.Budget)
	defer cancel()
	q := routing.WhatIfQuery{TenantID: cl.TenantID, Cluster: *cl}
	if m := lp.prompts.Load(); m != nil {
		q.Prompts = *m
	}
	pl, err := lp.p.plan(ctx, q, lp.cfg.MaxRequests, lp.cfg.Horizon, true)
	if err != nil {
		return out
	}
	for i := range cands[:min(len(cands), lp.cfg.MaxCandidates)] {
		p, err := lp.replay(ctx, pl, cands[i])
		if err != nil {
			break // budget spent or cancelled: the rest stay unpredicted
		}
		out[i] = p
	}
	return out
}

// errNoSlot is returned when the step's budget ends waiting for the
// Previewer's replay slot.
var errNoSlot = errors.New("autopilot replay: no replay slot within the budget")

func (lp *LivePredictor) replay(ctx context.Context, pl *replayPlan, w routing.Weights) (autopilot.Prediction, error) {
	select {
	case lp.p.sem <- struct{}{}:
	case <-ctx.Done():
		return autopilot.Prediction{}, errNoSlot
	}
	defer func() { <-lp.p.sem }()
	cfg := pl.cfg
	if dl, ok := ctx.Deadline(); ok {
		cfg.Timeout = min(cfg.Timeout, time.Until(dl))
	}
	if cfg.Timeout <= 0 {
		return autopilot.Prediction{}, context.DeadlineExceeded
	}
	res, _, err := whatIfRun(ctx, cfg, lp.p.deps.WhatIf, pl.world, pl.items, pl.cluster.Policy, w)
	if err != nil {
		return autopilot.Prediction{}, fmt.Errorf("autopilot replay: %w", err)
	}
	if ctx.Err() != nil {
		return autopilot.Prediction{}, ctx.Err()
	}
	return predictionOf(res, nil, w), nil
}
