package schedule

import (
	"math"

	"github.com/routebalance/routebalance/routing"
)

// prediction is what the scheduler predicts for one request on one
// instance, in seconds and USD (README "Predictions").
type prediction struct {
	// TTFT is TTFT̂ at the load with the request placed.
	TTFT float64
	// Wait is the predicted admission-queue wait (0 below the cap).
	Wait float64
	// TPOT is TPOT̂ at the same load as TTFT (one more sequence running,
	// this request's prompt tokens).
	TPOT float64
	// Latency is T̂ = (TTFT + Wait + TPOT·L̂) × the tier's learnt bias
	// factor; Raw is the same without the factor.
	Latency, Raw float64
	// Cost is Ĉ = prompt·price_in + L̂·price_out.
	Cost float64
}

// predict is the pure prediction of T̂ and Ĉ for a request of prompt
// tokens and predicted output L on the instance whose local view is v.
// It reads only v and its latency model, so every policy, filter and the
// what-if see one formula.
//
// The queue wait is a renewal estimate of when a slot frees for the
// request: at the cap, the first of the b running sequences finishes after
// about (d/b)/b decode steps (d pending tokens, so d/b per sequence, and
// the soonest of b), and every request queued ahead must then run its own
// predicted tokens (Σ L̂ of the queue, b at a time). The old estimate,
// (q+1)·(d/b)/b steps, charged each queued request the *remaining* tokens
// of a running one instead of its own, about half of them, and
// under-predicted the saturated cheap tiers' E2E 1.8–2.7× (docs/benchmarks.md).
//
// TPOT̂ is asked at the load TTFT̂ is asked at, the one the lease records
// and Release hands to the online model: with the request's prompt tokens.
// (It was once computed per instance without them, so a model that had
// learnt a prompt coefficient was asked off its features and could answer
// its floor.)
func predict(v *slot, prompt, L float64) prediction {
	b := max(1, v.running)
	l := routing.Load{
		Running: v.running + 1, Waiting: v.waiting + float64(v.queue), KVUsage: v.kv,
		PendingDecodeTokens: v.pending, PromptTokens: prompt,
	}
	p := prediction{TTFT: v.lat.TTFT(l), TPOT: v.lat.TPOT(l)}
	if v.inflight >= v.cap {
		p.Wait = p.TPOT * (max(v.pending/b, 1)/b + v.queued/b)
	}
	p.Raw = p.TTFT + p.Wait + p.TPOT*L
	p.Latency = p.Raw
	if v.bias > 0 {
		p.Latency *= v.bias
	}
	p.Cost = v.inst.CostUSD(prompt, L)
	return p
}

// tierBias is one tier's online correction of T̂: the mean of
// observed / predicted E2E (both with the router's queue wait) over its
// successful releases, in log space (a ratio of 2 and one of ½ cancel),
// each sample clamped to [¼, 4] so one stalled request cannot swing it.
// The mean is cumulative for the first biasWindow samples and then
// exponential with weight 1/biasWindow, so it follows a tier whose
// behaviour drifts (load, a new engine version).
type tierBias struct {
	logMean float64
	n       int
}

// biasWindow is the effective number of releases the correction averages
// over once it is warm (a fixed design constant, not chosen per world).
const biasWindow = 200

// factor is the multiplier applied to T̂ (1 before any sample).
func (b *tierBias) factor() float64 {
	if b == nil || b.n == 0 {
		return 1
	}
	return math.Exp(b.logMean)
}

// observe adds one release: observed and predicted E2E in seconds.
func (b *tierBias) observe(observed, predicted float64) {
	if !(observed > 0) || !(predicted > 0) || math.IsInf(observed, 0) || math.IsInf(predicted, 0) {
		return
	}
	x := math.Log(min(max(observed/predicted, 0.25), 4))
	if b.n < biasWindow {
		b.n++
	}
	b.logMean += (x - b.logMean) / float64(b.n)
}

// lightService is the request's T̂ on an idle instance of v's tier: alone
// in the batch, nothing waiting, nothing pending (TTFT̂ + TPOT̂·L̂ at
// running 1 with its prompt). It is the latency scale of the "light"
// score (README "Score"): a second of waiting weighs the same against
// cost and quality at every load.
func lightService(v *slot, prompt, L float64) float64 {
	l := routing.Load{Running: 1, PromptTokens: prompt}
	return v.lat.TTFT(l) + v.lat.TPOT(l)*L
}
