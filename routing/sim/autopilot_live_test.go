package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
	"github.com/routebalance/routebalance/routing/schedule"
)

// recentTraffic records n requests on c1 over the span before now, newest
// first, and n more an hour earlier (outside any horizon).
func recentTraffic(now time.Time, n int, span time.Duration) *memTraffic {
	tr := &memTraffic{rows: map[string][]ObservedRequest{}}
	for i := n - 1; i >= 0; i-- {
		at := now.Add(-span + time.Duration(i)*span/time.Duration(n))
		tr.rows["c1"] = append(tr.rows["c1"], ObservedRequest{ID: fmt.Sprintf("r-%d", i), StartedAt: at, FinishedAt: at.Add(time.Second),
			PromptTokens: 200, OutputTokens: 120, TTFTMs: 100, E2EMs: 1000, PredictedQuality: 0.5})
	}
	for i := n - 1; i >= 0; i-- {
		at := now.Add(-time.Hour + time.Duration(i)*time.Second)
		tr.rows["old"] = append(tr.rows["old"], ObservedRequest{ID: fmt.Sprintf("o-%d", i), StartedAt: at, FinishedAt: at.Add(time.Second),
			PromptTokens: 200, OutputTokens: 120, TTFTMs: 100, E2EMs: 1000})
	}
	return tr
}

// TestLivePredictorReplaysRecentTraffic: every candidate up to the cap is
// replayed from the recorded traffic of the horizon; the quality corner
// is predicted better and dearer than the latency corner; a heavier live
// load predicts a longer p95 for the same weights; the candidates past
// the cap, a cluster without recent traffic and a spent budget give no
// prediction (OK false) rather than a guess.
func TestLivePredictorReplaysRecentTraffic(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	tr := recentTraffic(now, 60, 10*time.Second) // 6 req/s
	st := memState{}
	p := newTestPreviewer(t, PreviewDeps{Traffic: tr, State: st, Clock: &fixedClock{now}})
	lp := NewLivePredictor(LivePredictorConfig{MaxCandidates: 3, Budget: time.Hour}, p)
	cl := previewCluster()
	cands := []routing.Weights{{Quality: 0.34, Cost: 0.33, Latency: 0.33}, {Quality: 1}, {Latency: 1}, {Cost: 1}}
	got := lp.Predict(context.Background(), &cl, cands)
	if len(got) != 4 {
		t.Fatalf("%d predictions for 4 candidates", len(got))
	}
	for i, x := range got[:3] {
		if !x.OK || x.N != 60 || x.P95E2E <= 0 || x.P95TTFT <= 0 || x.Weights != cands[i] {
			t.Fatalf("candidate %d: %+v, want a replay of the 60 recent requests", i, x)
		}
	}
	if got[3].OK || got[3].Weights != cands[3] {
		t.Errorf("candidate past the cap: %+v, want OK false", got[3])
	}
	q, l := got[1], got[2]
	if !(q.Quality > l.Quality && q.MeanCostUSD > l.MeanCostUSD) {
		t.Errorf("quality corner %+v vs latency corner %+v: want better and dearer", q, l)
	}
	// Live load: the big instance full with a queue behind it.
	st["c1"] = []schedule.InstanceState{{ID: "i3", InFlight: 16, Running: 16, Waiting: 40, PendingTokens: 16 * 500, Served: 50}}
	loaded := lp.Predict(context.Background(), &cl, cands[1:2])
	if !loaded[0].OK || !(loaded[0].P95E2E > q.P95E2E) {
		t.Errorf("quality corner from a loaded fleet: p95 %v, from idle %v: want longer", loaded[0].P95E2E, q.P95E2E)
	}
	old := cl
	old.ID = "old"
	for _, x := range lp.Predict(context.Background(), &old, cands) {
		if x.OK {
			t.Errorf("no traffic in the horizon, yet a prediction %+v", x)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, x := range lp.Predict(ctx, &cl, cands) {
		if x.OK {
			t.Errorf("cancelled step, yet a prediction %+v", x)
		}
	}
	var _ autopilot.Predictor = lp
}
