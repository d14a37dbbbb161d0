package sim

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/routing/sim/metrics"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// oneTier is a world of one tier of n instances whose every answer is
// exactly 100 tokens (fixed by the items).
func oneTier(n int) (*engine.ClusterFile, []workload.Item) {
	f := &engine.ClusterFile{Name: "t", Tiers: []engine.Tier{{Model: "m", GPU: "g", TensorParallel: 1, Instances: n,
		TPOTMsLight: 20, TPOTLoadFactor: 3, MaxNumSeqs: 10, TTFTOverheadMs: 50, Verbosity: 1}}}
	return f, []workload.Item{{ID: "1", Prompt: "p", OutputTokens: map[string]int{"m": 100}}}
}

// TestFluidBoundOneInstance checks the closed form: one instance at λ
// req/s makes x = 100·λ tokens/s and holds b = x·t0/(1 − x·t0·(f−1)/B).
func TestFluidBoundOneInstance(t *testing.T) {
	f, items := oneTier(1)
	for _, rate := range []float64{0.5, 1, 1.5} {
		x := 100 * rate
		b := x * 0.02 / (1 - x*0.02*2/10)
		got := FluidBound(f, 1, items, rate)
		if want := b / rate; math.Abs(got.Decode-want) > 1e-9 {
			t.Errorf("λ=%v: decode %v, want %v", rate, got.Decode, want)
		}
		if math.Abs(got.E2E-got.Decode-0.05) > 1e-12 || math.Abs(got.Shares[0]-1) > 1e-9 {
			t.Errorf("λ=%v: E2E %v decode %v shares %v", rate, got.E2E, got.Decode, got.Shares)
		}
	}
	// Capacity: B/(t0·f) = 10/0.06 tokens/s = 1.67 req/s of 100 tokens.
	if got := FluidBound(f, 1, items, 1.7); !math.IsInf(got.E2E, 1) {
		t.Errorf("above capacity: E2E %v, want +Inf", got.E2E)
	}
}

// TestFluidBoundSplitsEvenly: identical instances share the load equally
// (the convex optimum), so n instances at nλ give one instance's bound
// at λ; and the bound grows with the rate.
func TestFluidBoundSplitsEvenly(t *testing.T) {
	f1, items := oneTier(1)
	f3, _ := oneTier(3)
	one, three := FluidBound(f1, 1, items, 1), FluidBound(f3, 1, items, 3)
	if math.Abs(one.Decode-three.Decode) > 1e-6 {
		t.Errorf("3 instances at λ=3: %v, want one instance's %v at λ=1", three.Decode, one.Decode)
	}
	prev := 0.0
	for _, rate := range []float64{0.5, 1, 2, 3, 4} {
		b := FluidBound(f3, 1, items, rate)
		if !(b.Decode > prev) {
			t.Errorf("λ=%v: decode %v not above %v", rate, b.Decode, prev)
		}
		prev = b.Decode
	}
}

// TestFluidBoundPrefersTheCheapTier: at a light rate the whole load goes
// to the tier of the least t0·n̄; as the rate grows the other tier takes
// a share, and the bound never beats either tier alone.
func TestFluidBoundPrefersTheCheapTier(t *testing.T) {
	f := &engine.ClusterFile{Name: "t", Tiers: []engine.Tier{
		{Model: "fast", GPU: "g", TensorParallel: 1, Instances: 1, TPOTMsLight: 10, TPOTLoadFactor: 3, MaxNumSeqs: 8, TTFTOverheadMs: 40, Verbosity: 1},
		{Model: "slow", GPU: "g", TensorParallel: 1, Instances: 1, TPOTMsLight: 40, TPOTLoadFactor: 2, MaxNumSeqs: 32, TTFTOverheadMs: 60, Verbosity: 1},
	}}
	items := []workload.Item{{ID: "1", Prompt: "p", OutputTokens: map[string]int{workload.AnyModel: 50}}}
	light := FluidBound(f, 1, items, 0.1)
	if light.Shares[0] != 1 || math.Abs(light.E2E-(light.Decode+0.04)) > 1e-12 {
		t.Errorf("light: shares %v E2E %v", light.Shares, light.E2E)
	}
	heavy := FluidBound(f, 1, items, 10)
	if !(heavy.Shares[1] > 0) || math.Abs(heavy.Shares[0]+heavy.Shares[1]-1) > 1e-9 {
		t.Errorf("heavy: shares %v, want both tiers used, summing to 1", heavy.Shares)
	}
}

// boundWorld: two tiers of two instances, batch-sensitive decode.
const boundWorld = `{"name":"bound","tiers":[
 {"model":"big","gpu":"g","tensor_parallel":1,"instances":2,"tpot_ms_light":30,"tpot_load_factor":2.5,"max_num_seqs":8,
  "ttft_overhead_ms":40,"prefill_ms_per_1k_prompt_tokens":50,"price_in_per_mtok":1,"price_out_per_mtok":1,"verbosity":1.2},
 {"model":"small","gpu":"g","tensor_parallel":1,"instances":2,"tpot_ms_light":15,"tpot_load_factor":3,"max_num_seqs":8,
  "ttft_overhead_ms":30,"prefill_ms_per_1k_prompt_tokens":30,"price_in_per_mtok":0.1,"price_out_per_mtok":0.1,"verbosity":0.8}],
 "output_lengths":{"sigma":0.6,"median_tokens_by_task":{"default":40,"long":120}},"calibration_targets":{}}`

// TestFluidBoundHoldsInTheEngine runs the real scheduler over the real
// engines and checks that no policy's mean E2E falls under the bound —
// the bound's TPOT model is the engine's. Rates up to 70 % of the fluid
// capacity; the oracle, which reads each prompt's true length per model,
// is left out on purpose.
func TestFluidBoundHoldsInTheEngine(t *testing.T) {
	f, err := engine.ParseCluster([]byte(boundWorld))
	if err != nil {
		t.Fatal(err)
	}
	var items []workload.Item
	for k := range 300 {
		task := "default"
		if k%4 == 0 {
			task = "long"
		}
		items = append(items, workload.Item{ID: fmt.Sprint(k), Prompt: fmt.Sprintf("question number %d about something", k), Task: task,
			Scores: map[string]float64{"big": 1, "small": float64(k % 2)}})
	}
	w := NewWorld(f)
	for _, rate := range []float64{2, 4, 6} { // the fluid capacity is ≈ 8.7 req/s
		b := FluidBound(f, w.Seed, items, rate)
		for _, pol := range []string{schedule.PolicyShortestQueue, schedule.PolicyRoundRobin, schedule.PolicyRouteBalance} {
			arm := Arm{Policy: routing.PolicyConfig{Name: pol}}
			r, err := NewCoreRouter(schedule.DefaultConfig(), schedule.Deps{}, w, arm)
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.Rate, cfg.N, cfg.DecisionCost, cfg.Seed = rate, 1500, 0, 3
			res, err := Run(context.Background(), cfg, w, items, arm.Weights, r)
			if err != nil {
				t.Fatal(err)
			}
			c := Summarize(res, metrics.SLO{})
			t.Logf("λ=%v %s: mean E2E %.3f s, bound %.3f s", rate, pol, c.MeanE2E, b.E2E)
			if c.MeanE2E < b.E2E {
				t.Errorf("λ=%v %s: mean E2E %.3f s under the fluid bound %.3f s", rate, pol, c.MeanE2E, b.E2E)
			}
		}
	}
}
