package schedule_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/estimate"
	"github.com/routebalance/routebalance/routing/latency"
	"github.com/routebalance/routebalance/routing/schedule"
)

// The estimators implement the interfaces the scheduler declares.
var (
	_ schedule.Estimator       = (*estimate.KNN)(nil)
	_ schedule.LengthObserver  = (*estimate.KNN)(nil)
	_ schedule.LatencyModel    = (*latency.Models)(nil)
	_ schedule.LatencyObserver = (*latency.Models)(nil)
	_ schedule.TierLatency     = (*latency.Tier)(nil)
	_ schedule.TierBinder      = (*latency.Models)(nil)
)

// TestWithRealEstimators routes with the real KNN estimator (built-in
// embedder) and latency models: hard prompts, where only the big model is
// good, go to it; easy prompts, where both are good, go to the cheap one;
// completed requests teach the latency model.
func TestWithRealEstimators(t *testing.T) {
	ctx := context.Background()
	var recs []estimate.Record
	for k := range 40 {
		recs = append(recs,
			estimate.Record{ID: fmt.Sprint("h", k), Prompt: fmt.Sprintf("prove the theorem about prime number %d using modular arithmetic and induction", k),
				Scores: map[string]float64{"big": 0.9, "small": 0.2}, OutputTokens: map[string]float64{"big": 400, "small": 300}},
			estimate.Record{ID: fmt.Sprint("e", k), Prompt: fmt.Sprintf("say hello to my friend number %d and wish a nice day", k),
				Scores: map[string]float64{"big": 0.85, "small": 0.85}, OutputTokens: map[string]float64{"big": 20, "small": 20}})
	}
	emb, err := estimate.NewBuiltin(estimate.DefaultBuiltinConfig())
	if err != nil {
		t.Fatal(err)
	}
	knn, err := estimate.Build(ctx, recs, estimate.Config{}, estimate.BuildOptions{Embedder: emb})
	if err != nil {
		t.Fatal(err)
	}
	lat, err := latency.New(latency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := &routing.Cluster{ID: "c", Version: 1, Instances: []routing.Instance{
		{ID: "big-0", Model: "big", GPU: "h100", PriceInPerMTok: 3, PriceOutPerMTok: 10},
		{ID: "small-0", Model: "small", GPU: "a10", PriceInPerMTok: 0.1, PriceOutPerMTok: 0.3},
	}}
	core, err := schedule.NewCore(schedule.Config{}, schedule.Deps{Estimator: knn, Latency: lat}, c)
	if err != nil {
		t.Fatal(err)
	}
	w := routing.Weights{Quality: 0.6, Cost: 0.3, Latency: 0.1}
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		prompt string
		want   string
	}{
		{"prove the theorem about prime number 977 using modular arithmetic and induction", "big-0"},
		{"say hello to my friend number 977 and wish a nice day", "small-0"},
	} {
		tk := &schedule.Ticket{Req: &routing.Request{ID: tc.prompt, Prompt: tc.prompt, PromptTokens: 20, Weights: w}, Notify: func(*schedule.Ticket) {}}
		core.Assign(ctx, now, []*schedule.Ticket{tk})
		if tk.Err != nil {
			t.Fatal(tk.Err)
		}
		if got := tk.Decision.Instance.ID; got != tc.want {
			t.Errorf("%q: chose %s (Q̂ %.2f, source %s), want %s", tc.prompt, got, tk.Decision.PredictedQuality, tk.Decision.QualitySource, tc.want)
		}
		if tk.Decision.QualitySource != routing.SourceIndex {
			t.Errorf("%q: quality source %s, want index", tc.prompt, tk.Decision.QualitySource)
		}
		core.Release(now, tk, routing.Outcome{PromptTokens: 20, OutputTokens: 50, TTFT: 80 * time.Millisecond, E2E: 80*time.Millisecond + 49*30*time.Millisecond})
	}
	if n := lat.Tier("big@h100").Observations() + lat.Tier("small@a10").Observations(); n != 2 {
		t.Errorf("latency observations = %d, want 2 (one per completed request)", n)
	}
}
