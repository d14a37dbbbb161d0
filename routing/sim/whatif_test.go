package sim

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/infra/vllmemu/demoset"
	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// whatIfWorld is the reference cluster's registration (13 instances) with
// engines derived from the default latency prior, and the demo prompts.
func whatIfWorld(t testing.TB) (*World, []workload.Item) {
	t.Helper()
	ref := engine.ReferenceCluster()
	c := NewWorld(ref).Cluster
	for i := range c.Instances {
		// Dearer models are better, as in the reference world.
		c.Instances[i].QualityPrior = 0.3 + 0.1*c.Instances[i].PriceOutPerMTok
	}
	var tiers []engine.Tier
	for _, in := range c.Instances {
		tiers = append(tiers, EngineTier(in, nil, 64))
	}
	w, err := NewWorldFrom(c, tiers, ref.OutputLengths)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := demoset.Items()
	if err != nil {
		t.Fatal(err)
	}
	var items []workload.Item
	for _, it := range ds {
		items = append(items, workload.Item{ID: it.ID, Prompt: it.Prompt, Task: it.Task})
	}
	return w, items
}

func TestWhatIfCorners(t *testing.T) {
	w, items := whatIfWorld(t)
	cfg := DefaultWhatIfConfig()
	cfg.Timeout = 1 << 40 // no wall-clock limit in tests
	pol := routing.PolicyConfig{Name: "routebalance"}
	q, err := WhatIf(context.Background(), cfg, WhatIfDeps{}, w, items, pol, routing.Weights{Quality: 0.8, Latency: 0.1, Cost: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	c, err := WhatIf(context.Background(), cfg, WhatIfDeps{}, w, items, pol, routing.Weights{Quality: 0.1, Latency: 0.1, Cost: 0.8})
	if err != nil {
		t.Fatal(err)
	}
	if n := min(300, len(items)); q.N != n || q.Completed != n || c.Completed != n {
		t.Errorf("n/completed = %d/%d/%d, want %d", q.N, q.Completed, c.Completed, n)
	}
	if q.Quality < c.Quality || q.CostPerRequest < c.CostPerRequest {
		t.Errorf("quality corner (q %.3f, $%.6f) vs cost corner (q %.3f, $%.6f)", q.Quality, q.CostPerRequest, c.Quality, c.CostPerRequest)
	}
	t.Logf("rate %.2f req/s; quality corner q=%.3f e2e=%.0fms p95=%.0fms $%.6f wall %.0fms; cost corner q=%.3f e2e=%.0fms p95=%.0fms $%.6f wall %.0fms",
		q.Rate, q.Quality, q.MeanE2E*1e3, q.P95E2E*1e3, q.CostPerRequest, q.WallS*1e3, c.Quality, c.MeanE2E*1e3, c.P95E2E*1e3, c.CostPerRequest, c.WallS*1e3)
	again, err := WhatIf(context.Background(), cfg, WhatIfDeps{}, w, items, pol, routing.Weights{Quality: 0.8, Latency: 0.1, Cost: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	again.WallS, q.WallS = 0, 0
	again.DecisionMeanUs, again.DecisionP99Us, again.DecisionPerReqUs = q.DecisionMeanUs, q.DecisionP99Us, q.DecisionPerReqUs
	if d := cmp.Diff(q, again); d != "" {
		t.Errorf("replay not reproducible (-first +again):\n%s", d)
	}
}

func TestEngineTierFromPrior(t *testing.T) {
	tr := EngineTier(routing.Instance{Model: "m", GPU: "g", MaxConcurrency: 0, PriceInPerMTok: 1, PriceOutPerMTok: 2}, nil, 64)
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	// latency.DefaultPrior: TPOT 40 ms + 0.6 ms per running sequence; TTFT
	// 60 ms + 100 ms per 1000 prompt tokens.
	want := engine.Tier{Model: "m", GPU: "g", TensorParallel: 1, Instances: 1, TPOTMsLight: 40.6, TPOTLoadFactor: (40 + 0.6*64) / 40.6,
		MaxNumSeqs: 64, TTFTOverheadMs: 60, PrefillMsPer1kPromptTokens: 100, PriceInPerMTok: 1, PriceOutPerMTok: 2, Verbosity: 1}
	if d := cmp.Diff(want, tr, cmp.Comparer(func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 })); d != "" {
		t.Errorf("tier (-want +got):\n%s", d)
	}
}

func BenchmarkWhatIf(b *testing.B) {
	w, items := whatIfWorld(b)
	cfg := DefaultWhatIfConfig()
	cfg.Timeout = 1 << 40
	for b.Loop() {
		if _, err := WhatIf(context.Background(), cfg, WhatIfDeps{}, w, items, routing.PolicyConfig{Name: "routebalance"}, routing.Weights{Quality: 0.6, Latency: 0.2, Cost: 0.2}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestWhatIfRecordedLengths: a replay of recorded traffic keeps each
// item's recorded prompt and output token counts (whoever serves it), at
// the given rate; longer recorded outputs take longer.
func TestWhatIfRecordedLengths(t *testing.T) {
	w, _ := whatIfWorld(t)
	cfg := DefaultWhatIfConfig()
	cfg.Timeout = 1 << 40
	cfg.Rate, cfg.NoExplore = 2, true
	pol := routing.PolicyConfig{Name: "routebalance"}
	wt := routing.Weights{Quality: 1.0 / 3, Latency: 1.0 / 3, Cost: 1.0 / 3}
	recorded := func(out int) []workload.Item {
		items := make([]workload.Item, 60)
		for i := range items {
			items[i] = workload.Item{ID: fmt.Sprint(i), Prompt: fmt.Sprintf("recorded request %d", i), PromptTokens: 300,
				OutputTokens: map[string]int{workload.AnyModel: out}}
		}
		return items
	}
	short, err := WhatIf(context.Background(), cfg, WhatIfDeps{}, w, recorded(20), pol, wt)
	if err != nil {
		t.Fatal(err)
	}
	long, err := WhatIf(context.Background(), cfg, WhatIfDeps{}, w, recorded(200), pol, wt)
	if err != nil {
		t.Fatal(err)
	}
	if short.Rate != 2 || short.N != 60 || short.Completed != 60 {
		t.Errorf("rate/n/completed = %v/%d/%d, want 2/60/60", short.Rate, short.N, short.Completed)
	}
	// 10× the decode tokens: at light load E2E grows several fold.
	if !(long.MeanE2E > 4*short.MeanE2E) {
		t.Errorf("mean E2E with 200 recorded output tokens %.3fs, with 20 %.3fs: recorded lengths not used", long.MeanE2E, short.MeanE2E)
	}
	it := workload.Item{OutputTokens: map[string]int{"m": 5, workload.AnyModel: 9}}
	if it.OutputFor("m") != 5 || it.OutputFor("other") != 9 || (&workload.Item{}).OutputFor("m") != 0 {
		t.Error("OutputFor")
	}
}

// collinearModel is a latency model fitted on traffic whose prompts all
// have about 25 tokens, as an online least-squares fit can end up: right
// near 25 tokens (TPOT 10 ms + 1 ms per running sequence, TTFT 15 ms),
// with an intercept and a prompt slope that trade off against each other
// (TPOT̂ 0 at an empty prompt, TTFT̂ −35 ms at an empty prompt and ~2 s at
// 1,000 tokens).
type collinearModel struct{}

func (collinearModel) TPOT(_ string, l routing.Load) float64 {
	return max(0.010+0.001*(l.Running-1)+0.4*(l.PromptTokens-25)/1000, 0.001)
}

func (collinearModel) TTFT(_ string, l routing.Load) float64 {
	return 0.015 + 2.0*(l.PromptTokens-25)/1000
}

// TestEngineTierAtAsksWhereTheModelHasData: asked at an empty prompt the
// collinear model gives a 1 ms light TPOT and a 2 s prefill per 1k tokens;
// asked at the traffic's 25 tokens the engine reproduces the model there:
// TPOT̂ 10 ms at one sequence and 17 ms at max_num_seqs = 8 (load factor
// 1.7), idle TTFT 15 ms (no negative overhead).
func TestEngineTierAtAsksWhereTheModelHasData(t *testing.T) {
	in := routing.Instance{Model: "m", GPU: "g", MaxConcurrency: 8}
	off := EngineTier(in, collinearModel{}, 64)
	if off.TPOTMsLight > 1.001 || off.PrefillMsPer1kPromptTokens < 1900 {
		t.Fatalf("EngineTier at an empty prompt: light %.2f ms, prefill %.0f ms/1k: the test model no longer shows the problem", off.TPOTMsLight, off.PrefillMsPer1kPromptTokens)
	}
	tr := EngineTierAt(in, collinearModel{}, 64, 25)
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-6 }
	ttft := tr.Overhead().Seconds() + tr.Prefill(25).Seconds()
	if !near(tr.TPOTMsLight, 10) || !near(tr.TPOTLoadFactor, 1.7) || math.Abs(ttft-0.015) > 1e-6 || tr.TTFTOverheadMs < 0 {
		t.Errorf("EngineTierAt(25): light %v ms, load factor %v, idle TTFT at 25 tokens %v s (overhead %v ms, prefill %v ms/1k); want 10 ms, 1.7, 15 ms",
			tr.TPOTMsLight, tr.TPOTLoadFactor, ttft, tr.TTFTOverheadMs, tr.PrefillMsPer1kPromptTokens)
	}
}
