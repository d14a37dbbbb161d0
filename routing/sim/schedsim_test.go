package sim

import (
	"context"
	"math"
	"testing"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/engine"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/routing/sim/metrics"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// twoModels is a world of a strong slow model and a weak fast one, one
// instance each, at most two sequences per instance.
const twoModels = `{"name":"two","tiers":[
 {"model":"strong","gpu":"g","tensor_parallel":1,"instances":1,"tpot_ms_light":20,"tpot_load_factor":2,"max_num_seqs":2,
  "ttft_overhead_ms":10,"prefill_ms_per_1k_prompt_tokens":0,"price_in_per_mtok":1,"price_out_per_mtok":1,"verbosity":1},
 {"model":"weak","gpu":"g","tensor_parallel":1,"instances":1,"tpot_ms_light":5,"tpot_load_factor":2,"max_num_seqs":2,
  "ttft_overhead_ms":10,"prefill_ms_per_1k_prompt_tokens":0,"price_in_per_mtok":0.1,"price_out_per_mtok":0.1,"verbosity":1}],
 "output_lengths":{"sigma":0.3,"median_tokens_by_task":{"default":20}},"calibration_targets":{}}`

func TestCoreRouterDrivesTheRealScheduler(t *testing.T) {
	f, err := engine.ParseCluster([]byte(twoModels))
	if err != nil {
		t.Fatal(err)
	}
	w := NewWorld(f)
	items := []workload.Item{
		{ID: "a", Prompt: "alpha question", Scores: map[string]float64{"strong": 1, "weak": 0}},
		{ID: "b", Prompt: "beta question", Scores: map[string]float64{"strong": 0, "weak": 1}},
	}
	for _, pol := range []string{schedule.PolicyShortestQueue, schedule.PolicyRoundRobin, schedule.PolicyOracle} {
		t.Run(pol, func(t *testing.T) {
			arm := Arm{Policy: routing.PolicyConfig{Name: pol}, Weights: routing.Weights{Quality: 1}}
			r, err := NewCoreRouter(schedule.DefaultConfig(), schedule.Deps{}, w, arm)
			if err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			// 40 req/s against two sequences per instance: the admission
			// queues fill and drain through Release.
			cfg.Rate, cfg.N, cfg.DecisionCost = 40, 200, 0
			res, err := Run(context.Background(), cfg, w, items, arm.Weights, r)
			if err != nil {
				t.Fatal(err)
			}
			c := Summarize(res, metrics.SLO{})
			if c.Completed != 200 || c.Failed != 0 {
				t.Fatalf("completed %d failed %d, want 200/0", c.Completed, c.Failed)
			}
			// In-flight counters return to zero once everything is released.
			for i := range w.Cluster.Instances {
				if n := r.core.Fleet().InFlight(r.members[i]); n != 0 {
					t.Errorf("instance %d in flight %d after the run, want 0", i, n)
				}
			}
			if pol == schedule.PolicyOracle && c.Quality != 1 {
				t.Errorf("oracle with w_q = 1 reached quality %v, want 1 (it reads the labels)", c.Quality)
			}
		})
	}
}

// TestOracleModesTellOnlyTheirHalf: each oracle mode overwrites exactly
// the half of the estimate it names and keeps the estimator's other half
// (and its memo, so online learning goes on).
func TestOracleModesTellOnlyTheirHalf(t *testing.T) {
	f, err := engine.ParseCluster([]byte(twoModels))
	if err != nil {
		t.Fatal(err)
	}
	w := NewWorld(f)
	models := []string{"strong", "weak"}
	it := &workload.Item{ID: "a", Prompt: "alpha question", Task: "default", Scores: map[string]float64{"strong": 1, "weak": 0}}
	req := &routing.Request{Prompt: it.Prompt}
	trueLen := make([]float64, len(models))
	for m, name := range models {
		n, ok := w.TrueLength(it.Prompt, it.Task, name)
		if !ok {
			t.Fatalf("no true length for %s", name)
		}
		trueLen[m] = float64(n)
	}
	// The world's task mean: median 20 × verbosity 1 × e^{0.3²/2}.
	taskMean := 20 * math.Exp(0.3*0.3/2)
	estimate := func() routing.PromptEstimate {
		var e routing.PromptEstimate
		e.Reset(len(models))
		for m := range models {
			e.Quality[m], e.Length[m], e.Source[m] = 0.4+0.1*float64(m), 777, routing.SourceIndex
			e.Hist[m].Add(777, 1)
		}
		e.Memo = 42
		return e
	}
	for _, tc := range []struct {
		mode          string
		wantQ, wantL  func(m int) float64
		wantMemo      uint64
		wantHistAtLen bool
	}{
		{OracleBoth, func(m int) float64 { return it.Scores[models[m]] }, func(m int) float64 { return trueLen[m] }, 0, true},
		{OracleLength, func(m int) float64 { return 0.4 + 0.1*float64(m) }, func(m int) float64 { return trueLen[m] }, 42, true},
		{OracleQuality, func(m int) float64 { return it.Scores[models[m]] }, func(int) float64 { return 777 }, 42, false},
		{OracleTaskLength, func(m int) float64 { return 0.4 + 0.1*float64(m) }, func(int) float64 { return taskMean }, 42, false},
	} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			o := &oracleLabels{w: w, items: map[*routing.Request]*workload.Item{req: it}, mode: tc.mode}
			e := estimate()
			if !o.TrueLabels(req, models, &e) {
				t.Fatal("TrueLabels = false for a labelled item")
			}
			for m := range models {
				if e.Quality[m] != tc.wantQ(m) {
					t.Errorf("%s: quality %v, want %v", models[m], e.Quality[m], tc.wantQ(m))
				}
				if math.Abs(e.Length[m]-tc.wantL(m)) > 1e-9 {
					t.Errorf("%s: length %v, want %v", models[m], e.Length[m], tc.wantL(m))
				}
				if tc.wantHistAtLen && e.Hist[m][routing.LengthBucket(trueLen[m])] != 1 {
					t.Errorf("%s: histogram %v, want all weight at the true length %v", models[m], e.Hist[m], trueLen[m])
				}
				if tc.mode == OracleTaskLength && e.Hist[m][routing.LengthBucket(777)] != 0 {
					t.Errorf("%s: histogram kept the estimator's weight at 777: %v", models[m], e.Hist[m])
				}
			}
			if e.Memo != tc.wantMemo {
				t.Errorf("memo %d, want %d", e.Memo, tc.wantMemo)
			}
			// An unlabelled prompt leaves the estimate alone.
			e2 := estimate()
			if o.TrueLabels(&routing.Request{Prompt: "other"}, models, &e2) || e2.Length[0] != 777 || e2.Quality[1] != 0.5 {
				t.Errorf("unlabelled prompt: TrueLabels changed the estimate: %+v", e2)
			}
		})
	}
}

func TestOracleVariantNames(t *testing.T) {
	arms := []Arm{{Policy: routing.PolicyConfig{Name: schedule.PolicyOracle}, Preset: "balanced"}}
	for _, mode := range []string{OracleLength, OracleQuality, OracleTaskLength} {
		a := arms[0]
		a.Ablation.Oracle = mode
		if got, want := a.Ablation.String(), "oracle-"+mode; got != want {
			t.Errorf("Ablation{Oracle: %q}.String() = %q, want %q", mode, got, want)
		}
	}
	if s := arms[0].Ablation.String(); s != "" {
		t.Errorf("full oracle's variant = %q, want empty", s)
	}
}
