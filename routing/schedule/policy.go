package schedule

import (
	"fmt"
	"math"
	"sort"

	"github.com/routebalance/routebalance/routing"
)

// Policy names (routing's, the one list of them).
const (
	PolicyRouteBalance  = routing.PolicyRouteBalance
	PolicyRoundRobin    = routing.PolicyRoundRobin
	PolicyShortestQueue = routing.PolicyShortestQueue
	PolicyQualityOnly   = routing.PolicyQualityOnly
	PolicyThreshold     = routing.PolicyThreshold
	PolicyChimera       = routing.PolicyChimera
	PolicyOracle        = routing.PolicyOracle
)

// Candidate is one instance that survived the filters for one request,
// with every prediction the policies choose from. The framework fills it;
// a policy only reads it.
type Candidate struct {
	// Index is the instance's position in the cluster's instance list.
	Index int
	// Model is the index of the instance's model in the cluster's model list.
	Model int
	// Quality is Q̂[r,m(i)] in [0,1].
	Quality float64
	// Tokens is L̂[r,m(i)], clamped to the request's max_tokens.
	Tokens float64
	// Cost is Ĉ[r,i] in USD; CostNorm is Cost / max over candidates.
	Cost, CostNorm float64
	// Latency is T̂[r,i] in seconds (TTFT + queue wait + decode);
	// LatencyNorm is Latency / max over candidates.
	Latency, LatencyNorm float64
	// Raw is Latency without the tier's learnt bias factor.
	Raw float64
	// QualityTerm, CostTerm and LatencyTerm are the score's normalised
	// terms, higher is better, 1 for the best candidate (see Config.Score
	// and Score): in [0,1] except the "light" and "relative" latency
	// terms, negative for a candidate slower than the fastest by more than
	// the scale (its idle-instance T̂, or the fastest's T̂).
	QualityTerm, CostTerm, LatencyTerm float64
	// TTFT, TPOT and Wait are the parts of Latency, in seconds.
	TTFT, TPOT, Wait float64
	// Light is the request's T̂ on an idle instance of the tier (set only
	// under the "light" score, its latency scale).
	Light float64
	// Load is the instance's in-flight plus queued requests in the local
	// view (including the picks earlier in the same batch).
	Load int

	fail    uint8 // soft filters failed
	explore bool  // exploring instance scored as the fastest
}

// Policy chooses one instance among a request's candidates. Pick is called
// by the cluster's owner goroutine only (never concurrently for one policy
// value), with len(c) ≥ 1; it returns an index into c. A Policy may keep
// per-cluster state (a round-robin cursor); it must not retain c.
type Policy interface {
	Pick(r *routing.Request, w routing.Weights, c []Candidate) int
}

// Constructor builds a policy for one cluster from its configuration.
type Constructor func(cfg routing.PolicyConfig) (Policy, error)

// Registry maps policy names to constructors. It is a value: build one with
// NewRegistry, add to it with Register, pass it in Deps.
type Registry struct {
	ctors map[string]Constructor
}

// NewRegistry returns a registry holding every built-in policy:
// routebalance, round-robin, shortest-queue, quality-only, threshold,
// chimera and oracle.
func NewRegistry() *Registry {
	r := &Registry{ctors: map[string]Constructor{}}
	r.Register(PolicyRouteBalance, func(routing.PolicyConfig) (Policy, error) { return &RouteBalance{}, nil })
	r.Register(PolicyOracle, func(routing.PolicyConfig) (Policy, error) { return &RouteBalance{}, nil })
	r.Register(PolicyRoundRobin, func(routing.PolicyConfig) (Policy, error) { return &RoundRobin{}, nil })
	r.Register(PolicyShortestQueue, func(routing.PolicyConfig) (Policy, error) { return &ShortestQueue{}, nil })
	r.Register(PolicyQualityOnly, func(routing.PolicyConfig) (Policy, error) { return &QualityOnly{}, nil })
	r.Register(PolicyThreshold, func(c routing.PolicyConfig) (Policy, error) { return NewThreshold(c.Threshold) })
	r.Register(PolicyChimera, func(c routing.PolicyConfig) (Policy, error) { return NewChimera(c.Slack, c.SwitchGain) })
	return r
}

// Register adds or replaces the constructor of a policy name.
func (r *Registry) Register(name string, c Constructor) { r.ctors[name] = c }

// Names returns the registered policy names, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.ctors))
	for n := range r.ctors {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// New builds the named policy; an unknown name is a *routing.FieldError.
func (r *Registry) New(cfg routing.PolicyConfig) (Policy, error) {
	c, ok := r.ctors[cfg.Name]
	if !ok {
		return nil, &routing.FieldError{Field: "policy", Msg: fmt.Sprintf("unknown policy %q (want one of %v)", cfg.Name, r.Names())}
	}
	p, err := c(cfg)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", cfg.Name, err)
	}
	return p, nil
}

// Score is the fused score of a candidate whose terms are normalised over
// the request's candidates: S = w_q·QualityTerm + w_c·CostTerm +
// w_l·LatencyTerm. With Config.Score "light" (default) the quality and
// cost terms are the candidate's position between the worst (0) and the
// best (1) candidate and the latency term is 1 − (T̂ − minT̂)/T̂₀, T̂₀ the
// least idle-instance T̂ of the candidates (1 for the fastest, negative
// beyond minT̂ + T̂₀); "relative" is the same with T̂₀ = minT̂; with "range" all three
// are positions between worst and best; with "paper" it is DESIGN §3.1's
// S = w_q·Q̂ + w_c·(1 − Ĉ/maxĈ) + w_l·(1 − T̂/maxT̂). See README "Score".
func Score(w routing.Weights, c *Candidate) float64 {
	return w.Quality*c.QualityTerm + w.Cost*c.CostTerm + w.Latency*c.LatencyTerm
}

// RouteBalance picks the candidate with the highest fused Score; among
// equal scores the least-loaded, then the fastest (so with w_q = 1 it is
// quality-only's choice). The oracle policy is the same choice over true
// labels.
type RouteBalance struct{}

// Pick returns the argmax of Score.
func (*RouteBalance) Pick(_ *routing.Request, w routing.Weights, c []Candidate) int {
	best, bestS := 0, math.Inf(-1)
	for k := range c {
		s := Score(w, &c[k])
		switch {
		case s > bestS+scoreTie:
		case s >= bestS-scoreTie && (c[k].Load < c[best].Load || (c[k].Load == c[best].Load && c[k].Latency < c[best].Latency)):
		default:
			continue
		}
		best, bestS = k, s
	}
	return best
}

// scoreTie is the score difference below which two candidates are equal.
const scoreTie = 1e-12

// RoundRobin cycles over the cluster's instances, model-blind and
// load-blind, skipping those filtered out.
type RoundRobin struct{ next int }

// Pick returns the first candidate at or after the cursor (wrapping).
func (p *RoundRobin) Pick(_ *routing.Request, _ routing.Weights, c []Candidate) int {
	k := firstFrom(c, p.next)
	p.next = c[k].Index + 1
	return k
}

// firstFrom returns the position in c (sorted by Index) of the first
// candidate with Index ≥ from, wrapping to 0.
func firstFrom(c []Candidate, from int) int {
	for k := range c {
		if c[k].Index >= from {
			return k
		}
	}
	return 0
}

// ShortestQueue picks the candidate with the fewest in-flight plus queued
// requests; ties are broken round-robin.
type ShortestQueue struct{ next int }

// Pick returns the least-loaded candidate, the first at or after the
// cursor among equals.
func (p *ShortestQueue) Pick(_ *routing.Request, _ routing.Weights, c []Candidate) int {
	minLoad := math.MaxInt
	for k := range c {
		minLoad = min(minLoad, c[k].Load)
	}
	best := -1
	for k := range c {
		if c[k].Load != minLoad {
			continue
		}
		if best < 0 {
			best = k // the wrap-around choice
		}
		if c[k].Index >= p.next {
			best = k
			break
		}
	}
	p.next = c[best].Index + 1
	return best
}

// leastLoaded returns the candidate of model m with the lowest load, then
// the lowest predicted latency.
func leastLoaded(c []Candidate, m int) int {
	best := -1
	for k := range c {
		if c[k].Model != m {
			continue
		}
		if best < 0 || c[k].Load < c[best].Load || (c[k].Load == c[best].Load && c[k].Latency < c[best].Latency) {
			best = k
		}
	}
	return best
}

// QualityOnly picks the model with the highest predicted quality, then its
// least-loaded replica (Avengers-Pro-like).
type QualityOnly struct{}

// Pick returns the least-loaded replica of the best-quality model.
func (*QualityOnly) Pick(_ *routing.Request, _ routing.Weights, c []Candidate) int {
	best := 0
	for k := range c {
		if c[k].Quality > c[best].Quality {
			best = k
		}
	}
	return leastLoaded(c, c[best].Model)
}

// Threshold picks the cheapest model whose predicted quality reaches T
// (BEST-Route-like), then its least-loaded replica; when no model reaches
// T it takes the best-quality one.
type Threshold struct{ T float64 }

// NewThreshold returns a threshold policy; t must lie in [0,1].
func NewThreshold(t float64) (*Threshold, error) {
	if t < 0 || t > 1 || math.IsNaN(t) {
		return nil, &routing.FieldError{Field: "policy.threshold", Msg: fmt.Sprintf("must be in [0,1], got %v", t)}
	}
	return &Threshold{T: t}, nil
}

// Pick returns the least-loaded replica of the cheapest good-enough model.
func (p *Threshold) Pick(_ *routing.Request, _ routing.Weights, c []Candidate) int {
	best := -1
	for k := range c {
		if c[k].Quality < p.T {
			continue
		}
		if best < 0 || c[k].Cost < c[best].Cost {
			best = k
		}
	}
	if best < 0 {
		best = 0
		for k := range c {
			if c[k].Quality > c[best].Quality {
				best = k
			}
		}
	}
	return leastLoaded(c, c[best].Model)
}

// Chimera takes, among the candidates whose predicted latency is within
// slack Tau of the fastest (T̂ ≤ (1+τ)·min T̂), the one with the highest
// predicted quality — but switches away from the fastest only for a
// quality gain above SwitchGain (Δs).
type Chimera struct{ Tau, SwitchGain float64 }

// NewChimera returns a Chimera policy; τ ≥ 0 and Δs ≥ 0. A zero τ defaults
// to 0.5 (the Chimera paper's slack is a fraction of the fastest delay).
func NewChimera(tau, gain float64) (*Chimera, error) {
	if tau < 0 || gain < 0 || math.IsNaN(tau) || math.IsNaN(gain) {
		return nil, &routing.FieldError{Field: "policy", Msg: fmt.Sprintf("chimera slack and switch gain must be >= 0, got %v and %v", tau, gain)}
	}
	if tau == 0 {
		tau = 0.5
	}
	return &Chimera{Tau: tau, SwitchGain: gain}, nil
}

// Pick applies the slack rule.
func (p *Chimera) Pick(_ *routing.Request, _ routing.Weights, c []Candidate) int {
	fast := 0
	for k := range c {
		if c[k].Latency < c[fast].Latency {
			fast = k
		}
	}
	limit := (1 + p.Tau) * c[fast].Latency
	best := fast
	for k := range c {
		if c[k].Latency <= limit && (c[k].Quality > c[best].Quality || (c[k].Quality == c[best].Quality && c[k].Latency < c[best].Latency)) {
			best = k
		}
	}
	if c[best].Quality-c[fast].Quality <= p.SwitchGain {
		return fast
	}
	return best
}

// Interface guards.
var (
	_ Policy = (*RouteBalance)(nil)
	_ Policy = (*RoundRobin)(nil)
	_ Policy = (*ShortestQueue)(nil)
	_ Policy = (*QualityOnly)(nil)
	_ Policy = (*Threshold)(nil)
	_ Policy = (*Chimera)(nil)
)
