package sim

import (
	"math"

	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// Bound is the fluid lower bound of the mean E2E at one arrival rate
// (FluidBound): no router that does not know, per request, which model
// would answer it more briefly can serve the workload faster on average.
type Bound struct {
	Rate float64
	// E2E is the bound in seconds: Decode plus the least TTFT overhead.
	E2E float64
	// Decode is the least mean time a request spends in a decode batch.
	Decode float64
	// Shares is the request share per tier (file order) at the optimum.
	Shares []float64
}

// FluidBound is the least mean E2E a router can reach at rate req/s on
// the world f with prompts drawn uniformly from items, in the fluid limit
// (no burstiness, no variance of lengths or arrivals, every batch exactly
// at its mean size, prefill free).
//
// An instance of tier k that runs b sequences at once makes b / TPOT_k(b)
// tokens per second, TPOT_k(b) = t0·(1 + (f − 1)·b/B) (engine.Tier.TPOT);
// to make x tokens per second it must hold b_k(x) = x·t0 / (1 − x·t0·(f − 1)/B)
// sequences (x ≤ B/(t0·f)). A request sent to tier k brings its mean
// output on that model, n̄_k (the world's exact lengths, averaged over the
// prompts), so λ_k req/s cost x = λ_k·n̄_k. By Little's law the mean time
// in a batch is Σ_i b_i / λ; the bound minimises it over every split of
// λ into per-instance rates λ_i — which routing cannot beat: whatever it
// knows about a prompt's task or difficulty, it moves token mass between
// models only at the models' mean lengths. (The oracle policy beats it: it
// sends each prompt to the model whose hash-seeded answer is shortest.)
// b_i is convex in λ_i, so the optimum equalises the marginal cost
// db_i/dλ_i (bisection on it). E2E adds the smallest ttft_overhead_ms of
// any tier. The bound is +Inf above the cluster's token capacity.
func FluidBound(f *engine.ClusterFile, seed uint64, items []workload.Item, rate float64) Bound {
	type inst struct {
		tier        int
		t0, k, xmax float64 // TPOT at one sequence (s), t0·(f−1)/B, the most tokens/s
		n           float64 // mean output tokens of a request on the tier's model
	}
	var ins []inst
	overhead := math.Inf(1)
	for ti, t := range f.Tiers {
		if t.IsEmbedding() {
			continue
		}
		n := 0.0
		for j := range items {
			it := &items[j]
			if o := it.OutputFor(t.Model); o > 0 {
				n += float64(o)
			} else {
				n += float64(f.OutputLengths.Natural(it.Prompt, t.Model, it.Task, t.Verbosity, seed))
			}
		}
		if len(items) > 0 {
			n /= float64(len(items))
		}
		t0 := t.TPOTMsLight / 1e3
		for range t.Instances {
			ins = append(ins, inst{tier: ti, t0: t0, k: t0 * (t.TPOTLoadFactor - 1) / float64(t.MaxNumSeqs),
				xmax: float64(t.MaxNumSeqs) / (t0 * t.TPOTLoadFactor), n: n})
		}
		overhead = min(overhead, t.TTFTOverheadMs/1e3)
	}
	out := Bound{Rate: rate, E2E: math.Inf(1), Decode: math.Inf(1), Shares: make([]float64, len(f.Tiers))}
	if len(ins) == 0 || !(rate > 0) {
		return out
	}
	// rateAt is instance i's request rate when the marginal cost is mu
	// (seconds of batch residence per extra req/s): 0 while its marginal
	// at no load, n·t0, exceeds mu, else the x solving
	// n·t0/(1 − k·x)² = mu, capped at its capacity.
	rateAt := func(i *inst, mu float64) float64 {
		c := i.n * i.t0
		if !(i.n > 0) || c >= mu {
			return 0
		}
		x := i.xmax
		if i.k > 0 {
			x = min(x, (1-math.Sqrt(c/mu))/i.k)
		}
		return x / i.n
	}
	total := func(mu float64) float64 {
		s := 0.0
		for i := range ins {
			s += rateAt(&ins[i], mu)
		}
		return s
	}
	capacity := 0.0
	for i := range ins {
		if ins[i].n > 0 {
			capacity += ins[i].xmax / ins[i].n
		}
	}
	if rate >= capacity {
		return out
	}
	lo, hi := 0.0, 1.0
	for total(hi) < rate {
		hi *= 2
	}
	for range 200 {
		mid := (lo + hi) / 2
		if total(mid) < rate {
			lo = mid
		} else {
			hi = mid
		}
	}
	// Interpolate between the two sides so the rates sum to rate exactly
	// (a tier with load factor 1 jumps from 0 to its capacity at one mu).
	tl, th := total(lo), total(hi)
	theta := 1.0
	if th > tl {
		theta = (rate - tl) / (th - tl)
	}
	sumB := 0.0
	for i := range ins {
		in := &ins[i]
		l := rateAt(in, lo) + theta*(rateAt(in, hi)-rateAt(in, lo))
		x := l * in.n
		sumB += x * in.t0 / (1 - x*in.k)
		out.Shares[in.tier] += l / rate
	}
	out.Decode = sumB / rate
	out.E2E = out.Decode + overhead
	return out
}
