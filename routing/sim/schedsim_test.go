package sim

import (
	"context"
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
