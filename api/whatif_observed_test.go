package api

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/pgstore"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/migrations/dbtest"
)

// TestWhatIfReplaysObservedTraffic: with enough recorded requests on the
// cluster, the preview replays them (source "observed") at their observed
// rate and reports what they got; another cluster's traffic is not used.
func TestWhatIfReplaysObservedTraffic(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		var st ledgerStore
		if db.Pool != nil {
			st = pgstore.New(db.Pool)
		} else {
			st = sqlitestore.New(db.SQLite)
		}
		e := newEnv(t, db, true, func(d *Deps) { d.Usage, d.Requests = st, st })
		tid, tok := signupTok(e, "obs@example.com")
		cid := mkCluster(t, e, tok, "prod")
		other := mkCluster(t, e, tok, "other")
		for _, c := range []string{cid, other} {
			if r := e.do("POST", "/api/v1/clusters/"+c+"/instances", tok, map[string]any{
				"base_url": "http://10.0.0.1:8000", "model": "small-1b", "gpu": "L4", "price_in_per_mtok": 0.1, "price_out_per_mtok": 0.2, "max_concurrency": 16,
			}); r.status != 201 {
				t.Fatalf("instance: %d %s", r.status, r.raw)
			}
		}
		path := "/api/v1/clusters/" + cid + "/whatif"
		w := map[string]any{"quality": 0.34, "latency": 0.33, "cost": 0.33}
		if r := e.do("POST", path, tok, map[string]any{"weights": w}); r.status != 200 || r.str("source") != "sample" || r.body["observed"] != nil {
			t.Fatalf("without traffic: %d %s", r.status, r.raw)
		}
		// 21 requests over 10 s on this cluster (2 req/s), 9 on the other.
		start := time.Now().UTC().Add(-time.Hour)
		var evs []billing.UsageEvent
		for i := 0; i < 30; i++ {
			c, at := cid, start.Add(time.Duration(i)*500*time.Millisecond)
			if i >= 21 {
				c, at = other, start.Add(time.Duration(i)*time.Second)
			}
			evs = append(evs, billing.UsageEvent{RequestID: fmt.Sprintf("o-%d", i), TenantID: tid, ClusterID: c, Model: "small-1b",
				Status: "ok", HTTPStatus: 200, PromptTokens: 100, OutputTokens: 50, E2E: 800 * time.Millisecond, TTFT: 90 * time.Millisecond,
				CostUSD: 0.00002, PredictedQuality: 0.5, StartedAt: at, FinishedAt: at.Add(800 * time.Millisecond)})
		}
		if _, err := st.Insert(context.Background(), evs); err != nil {
			t.Fatal(err)
		}
		r := e.do("POST", path, tok, map[string]any{"weights": w})
		if r.status != 200 || r.str("source") != "observed" {
			t.Fatalf("with traffic: %d %s", r.status, r.raw)
		}
		obs, _ := r.body["observed"].(map[string]any)
		if obs == nil || obs["requests"] != 21.0 || math.Abs(f(obs["rate_rps"])-2) > 1e-9 || f(r.body["rate_rps"]) != f(obs["rate_rps"]) ||
			obs["mean_e2e_ms"] != 800.0 || obs["mean_ttft_ms"] != 90.0 || obs["mean_predicted_quality"] != 0.5 {
			t.Errorf("observed: %v (rate_rps %v)", obs, r.body["rate_rps"])
		}
		if r.body["requests"] != 50.0 {
			t.Errorf("requests = %v: 21 recorded prompts are resampled to the replay minimum of 50", r.body["requests"])
		}
	})
}
