package api

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/infra/vllmemu/demoset"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing/sim"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// withPreviewer wires the what-if preview as cmd/routebalance does, with
// the demo set as its sample and no ledger (no observed replay; that path
// is tested in routing/sim and cmd/routebalance).
func withPreviewer(t *testing.T) func(*Deps) {
	t.Helper()
	items, err := demoset.Items()
	if err != nil {
		t.Fatal(err)
	}
	sample := make([]workload.Item, len(items))
	for i, it := range items {
		sample[i] = workload.Item{ID: it.ID, Prompt: it.Prompt, Task: it.Task}
	}
	p, err := sim.NewPreviewer(sim.PreviewConfig{}, sim.PreviewDeps{Sample: sample})
	if err != nil {
		t.Fatal(err)
	}
	return func(d *Deps) { d.WhatIf = p }
}

// TestWhatIf replays the sample workload against a registered two-model
// cluster: the quality corner must predict at least the quality and the
// cost of the cost corner (it buys the better, dearer model), another
// tenant's cluster is 404 and weights off the simplex are 400.
func TestWhatIf(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		e := newEnv(t, db, true, withPreviewer(t))
		_, tokA := signupTok(e, "wa@example.com")
		_, tokB := signupTok(e, "wb@example.com")

		cid := mkCluster(t, e, tokA, "prod")
		cidB := mkCluster(t, e, tokB, "other")
		for _, in := range []map[string]any{
			{"base_url": "http://10.0.0.1:8000", "model": "small-1b", "gpu": "L4", "price_in_per_mtok": 0.05, "price_out_per_mtok": 0.1, "max_concurrency": 32, "quality_prior": 0.35},
			{"base_url": "http://10.0.0.3:8000", "model": "small-1b", "gpu": "L4", "price_in_per_mtok": 0.05, "price_out_per_mtok": 0.1, "max_concurrency": 32, "quality_prior": 0.35},
			{"base_url": "http://10.0.0.2:8000", "model": "big-70b", "gpu": "H100", "price_in_per_mtok": 2, "price_out_per_mtok": 6, "max_concurrency": 16, "quality_prior": 0.8},
		} {
			if r := e.do("POST", "/api/v1/clusters/"+cid+"/instances", tokA, in); r.status != 201 {
				t.Fatalf("create instance: %d %s", r.status, r.raw)
			}
		}

		path := "/api/v1/clusters/" + cid + "/whatif"
		q := map[string]any{"quality": 0.8, "latency": 0.1, "cost": 0.1}
		c := map[string]any{"quality": 0.1, "latency": 0.1, "cost": 0.8}
		rq := e.do("POST", path, tokA, map[string]any{"weights": q, "baseline_weights": c, "max_requests": 120})
		if rq.status != 200 {
			t.Fatalf("whatif: %d %s", rq.status, rq.raw)
		}
		if rq.str("source") != "sample" || rq.body["requests"] != float64(120) {
			t.Errorf("source/requests = %v/%v, want sample/120", rq.body["source"], rq.body["requests"])
		}
		pred, _ := rq.body["predicted"].(map[string]any)
		base, _ := rq.body["baseline"].(map[string]any)
		if pred == nil || base == nil {
			t.Fatalf("missing predicted/baseline: %s", rq.raw)
		}
		for _, m := range []map[string]any{pred, base} {
			for _, k := range []string{"mean_quality", "mean_e2e_ms", "p95_e2e_ms", "mean_ttft_ms", "mean_cost_usd"} {
				if v, ok := m[k].(float64); !ok || v <= 0 {
					t.Errorf("%s = %v, want a positive number", k, m[k])
				}
			}
			if m["p95_e2e_ms"].(float64) < m["mean_e2e_ms"].(float64)*0.5 {
				t.Errorf("p95 %v implausibly below mean %v", m["p95_e2e_ms"], m["mean_e2e_ms"])
			}
		}
		if pred["mean_quality"].(float64) < base["mean_quality"].(float64) {
			t.Errorf("quality corner quality %v < cost corner %v", pred["mean_quality"], base["mean_quality"])
		}
		if pred["mean_cost_usd"].(float64) < base["mean_cost_usd"].(float64) {
			t.Errorf("quality corner cost %v < cost corner %v", pred["mean_cost_usd"], base["mean_cost_usd"])
		}
		// The corners really differ: each prefers its own model.
		ps, _ := pred["model_share"].(map[string]any)
		bs, _ := base["model_share"].(map[string]any)
		if f(ps["big-70b"]) <= f(bs["big-70b"]) {
			t.Errorf("big-70b share: quality corner %v, cost corner %v", ps["big-70b"], bs["big-70b"])
		}
		t.Logf("quality corner %v; cost corner %v", pred, base)

		// The same question again is answered from the cache, identically.
		if r2 := e.do("POST", path, tokA, map[string]any{"weights": q, "baseline_weights": c, "max_requests": 120}); r2.raw != rq.raw {
			t.Errorf("repeat differs:\n%s\n%s", r2.raw, rq.raw)
		}

		// Deleting the big model is seen at once (not served from the cache).
		var list struct {
			Data []struct{ ID, Model string } `json:"data"`
		}
		if err := json.Unmarshal([]byte(e.do("GET", "/api/v1/clusters/"+cid+"/instances", tokA, nil).raw), &list); err != nil {
			t.Fatal(err)
		}
		for _, in := range list.Data {
			if in.Model == "big-70b" {
				if r := e.do("DELETE", "/api/v1/clusters/"+cid+"/instances/"+in.ID, tokA, nil); r.status != 204 {
					t.Fatalf("delete: %d %s", r.status, r.raw)
				}
			}
		}
		r3 := e.do("POST", path, tokA, map[string]any{"weights": q, "max_requests": 120})
		if s3, _ := r3.body["predicted"].(map[string]any)["model_share"].(map[string]any); r3.status != 200 || s3["big-70b"] != nil {
			t.Errorf("after deleting big-70b: %d %s", r3.status, r3.raw)
		}

		for _, tc := range []struct {
			name, path, tok string
			body            any
			status          int
			param           string
		}{
			{"cross-tenant", "/api/v1/clusters/" + cidB + "/whatif", tokA, map[string]any{"weights": q}, 404, ""},
			{"no token", path, "", map[string]any{"weights": q}, 401, ""},
			{"off simplex", path, tokA, map[string]any{"weights": map[string]any{"quality": 0.5, "latency": 0.5, "cost": 0.5}}, 400, "weights"},
			{"negative", path, tokA, map[string]any{"weights": map[string]any{"quality": 1.2, "latency": -0.2, "cost": 0}}, 400, "weights.latency"},
			{"bad baseline", path, tokA, map[string]any{"weights": q, "baseline_weights": map[string]any{"quality": 0.2}}, 400, "baseline_weights"},
			{"missing", path, tokA, map[string]any{}, 400, "weights"},
			{"max_requests", path, tokA, map[string]any{"weights": q, "max_requests": 0}, 400, "max_requests"},
			{"policy", path, tokA, map[string]any{"weights": q, "policy": map[string]any{"name": "nope"}}, 400, "policy"},
			{"empty cluster", "/api/v1/clusters/" + cidB + "/whatif", tokB, map[string]any{"weights": q}, 400, ""},
			{"oracle", path, tokA, map[string]any{"weights": q, "policy": map[string]any{"name": "oracle"}}, 400, "policy.name"},
		} {
			r := e.do("POST", tc.path, tc.tok, tc.body)
			if r.status != tc.status {
				t.Errorf("%s: status %d, want %d: %s", tc.name, r.status, tc.status, r.raw)
				continue
			}
			r.envelope(t)
			if tc.param != "" {
				if p, _ := r.body["error"].(map[string]any)["param"].(string); p != tc.param {
					t.Errorf("%s: param %q, want %q", tc.name, p, tc.param)
				}
			}
		}
	})
}

// TestWhatIfRecent replays the tenant's own recent prompts once the
// process remembers enough of them, and never another tenant's.
func TestWhatIfRecent(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		e := newEnv(t, db, true, withPreviewer(t))
		tidA, tokA := signupTok(e, "ra@example.com")
		tidB, _ := signupTok(e, "rb@example.com")
		cid := mkCluster(t, e, tokA, "prod")
		if r := e.do("POST", "/api/v1/clusters/"+cid+"/instances", tokA, map[string]any{"base_url": "http://10.0.0.1:8000", "model": "m", "gpu": "L4", "max_concurrency": 8}); r.status != 201 {
			t.Fatalf("create instance: %d %s", r.status, r.raw)
		}
		rec := newRecentRequests(100, 64)
		e.srv.recent = rec
		body := map[string]any{"weights": map[string]any{"quality": 1, "latency": 0, "cost": 0}}
		path := "/api/v1/clusters/" + cid + "/whatif"
		for i := range 30 {
			rec.add(fmt.Sprintf("b%d", i), servedRequest{tenantID: tidB, model: "m", prompt: "other tenant"})
		}
		for i := range 19 {
			rec.add(fmt.Sprintf("a%d", i), servedRequest{tenantID: tidA, model: "m", prompt: fmt.Sprintf("question %d about tax law", i)})
		}
		if r := e.do("POST", path, tokA, body); r.status != 200 || r.str("source") != "sample" {
			t.Fatalf("19 recent prompts: %d source %q, want sample: %s", r.status, r.str("source"), r.raw)
		}
		rec.add("a19", servedRequest{tenantID: tidA, model: "m", prompt: "one more"})
		r := e.do("POST", path, tokA, body)
		if r.status != 200 || r.str("source") != "recent" {
			t.Fatalf("20 recent prompts: %d source %q, want recent: %s", r.status, r.str("source"), r.raw)
		}
		if got := len(rec.TenantPrompts(tidA, 1000)); got != 20 {
			t.Errorf("tenantPrompts = %d, want 20", got)
		}
		if got := rec.TenantPrompts(tidA, 2); !cmp.Equal(got, []string{"one more", "question 18 about tax law"}) {
			t.Errorf("newest first: %q", got)
		}
	})
}

// TestWhatIfUnconfigured: without a Previewer the endpoint answers 503 in
// the error envelope.
func TestWhatIfUnconfigured(t *testing.T) {
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: dbtest.SQLite(t)}, true, nil)
	_, tok := signupTok(e, "nw@example.com")
	cid := mkCluster(t, e, tok, "prod")
	r := e.do("POST", "/api/v1/clusters/"+cid+"/whatif", tok, map[string]any{"weights": map[string]any{"quality": 1, "latency": 0, "cost": 0}})
	if r.status != 503 {
		t.Fatalf("status %d, want 503: %s", r.status, r.raw)
	}
	r.envelope(t)
}

func f(v any) float64 { x, _ := v.(float64); return x }

func signupTok(e *testEnv, email string) (string, string) {
	id, tok, _ := e.signup(email)
	return id, tok
}

func mkCluster(t *testing.T, e *testEnv, tok, name string) string {
	t.Helper()
	r := e.do("POST", "/api/v1/clusters", tok, map[string]any{"name": name})
	if r.status != 201 {
		t.Fatalf("create cluster: %d %s", r.status, r.raw)
	}
	return r.str("id")
}
