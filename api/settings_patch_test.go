package api

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/migrations/dbtest"
)

// TestPatchSettings checks PATCH /api/v1/settings as a partial update
// (absent fields, also inside slo and limits, keep their saved values)
// against PUT's full replacement, on both engines.
func TestPatchSettings(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		e := newEnv(t, db, true, nil)
		_, tok := signupTok(e, "patch@example.com")
		cid := mkCluster(t, e, tok, "prod")
		type step struct {
			name   string
			method string
			body   any
			status int
			want   map[string]any // checked on GET /settings after the step
		}
		w := func(q, c, l float64) map[string]any { return map[string]any{"quality": q, "cost": c, "latency": l} }
		slo := func(ttft, tpot, e2e, cost, budget float64) map[string]any {
			return map[string]any{"ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e, "max_cost_usd_per_request": cost, "monthly_budget_usd": budget}
		}
		lim := func(rpm, tpm, conc float64) map[string]any {
			return map[string]any{"rpm": rpm, "tpm": tpm, "max_concurrency": conc}
		}
		steps := []step{
			{"put full", "PUT", map[string]any{"default_cluster_id": cid, "preset": "latency", "slo": map[string]any{"ttft_ms": 800, "monthly_budget_usd": 50}, "limits": map[string]any{"rpm": 100, "tpm": 5000}}, 200,
				map[string]any{"default_cluster_id": cid, "preset": "latency", "weights": w(0.1, 0.1, 0.8), "slo": slo(800, 0, 0, 0, 50), "limits": lim(100, 5000, 0)}},
			{"patch one slo field", "PATCH", map[string]any{"slo": map[string]any{"e2e_ms": 3000}}, 200,
				map[string]any{"default_cluster_id": cid, "preset": "latency", "weights": w(0.1, 0.1, 0.8), "slo": slo(800, 0, 3000, 0, 50), "limits": lim(100, 5000, 0)}},
			{"patch preset only", "PATCH", map[string]any{"preset": "cost"}, 200,
				map[string]any{"default_cluster_id": cid, "preset": "cost", "weights": w(0.1, 0.8, 0.1), "slo": slo(800, 0, 3000, 0, 50), "limits": lim(100, 5000, 0)}},
			{"patch weights only", "PATCH", map[string]any{"weights": w(0.5, 0.25, 0.25)}, 200,
				map[string]any{"default_cluster_id": cid, "preset": "custom", "weights": w(0.5, 0.25, 0.25), "slo": slo(800, 0, 3000, 0, 50), "limits": lim(100, 5000, 0)}},
			{"patch custom keeps weights", "PATCH", map[string]any{"preset": "custom", "slo": map[string]any{"ttft_ms": 0}}, 200,
				map[string]any{"default_cluster_id": cid, "preset": "custom", "weights": w(0.5, 0.25, 0.25), "slo": slo(0, 0, 3000, 0, 50), "limits": lim(100, 5000, 0)}},
			{"patch one limit", "PATCH", map[string]any{"limits": map[string]any{"max_concurrency": 4}}, 200,
				map[string]any{"default_cluster_id": cid, "preset": "custom", "weights": w(0.5, 0.25, 0.25), "slo": slo(0, 0, 3000, 0, 50), "limits": lim(100, 5000, 4)}},
			{"bad patch changes nothing", "PATCH", map[string]any{"slo": map[string]any{"e2e_ms": 10, "tpot_ms": -1}}, 400,
				map[string]any{"default_cluster_id": cid, "preset": "custom", "weights": w(0.5, 0.25, 0.25), "slo": slo(0, 0, 3000, 0, 50), "limits": lim(100, 5000, 4)}},
			{"bad weights", "PATCH", map[string]any{"weights": w(0.5, 0.5, 0.5)}, 400,
				map[string]any{"default_cluster_id": cid, "preset": "custom", "weights": w(0.5, 0.25, 0.25), "slo": slo(0, 0, 3000, 0, 50), "limits": lim(100, 5000, 4)}},
			{"empty patch", "PATCH", map[string]any{}, 200,
				map[string]any{"default_cluster_id": cid, "preset": "custom", "weights": w(0.5, 0.25, 0.25), "slo": slo(0, 0, 3000, 0, 50), "limits": lim(100, 5000, 4)}},
			{"clear default cluster", "PATCH", map[string]any{"default_cluster_id": ""}, 200,
				map[string]any{"default_cluster_id": "", "preset": "custom", "weights": w(0.5, 0.25, 0.25), "slo": slo(0, 0, 3000, 0, 50), "limits": lim(100, 5000, 4)}},
			// PUT stays a full replacement: an absent slo is no SLO (limits
			// absent keep theirs, as documented).
			{"put replaces", "PUT", map[string]any{"preset": "quality"}, 200,
				map[string]any{"default_cluster_id": "", "preset": "quality", "weights": w(0.8, 0.1, 0.1), "slo": slo(0, 0, 0, 0, 0), "limits": lim(100, 5000, 4)}},
			{"put slo only is 400", "PUT", map[string]any{"slo": map[string]any{"ttft_ms": 800}}, 400,
				map[string]any{"default_cluster_id": "", "preset": "quality", "weights": w(0.8, 0.1, 0.1), "slo": slo(0, 0, 0, 0, 0), "limits": lim(100, 5000, 4)}},
			{"patch slo only works", "PATCH", map[string]any{"slo": map[string]any{"ttft_ms": 800}}, 200,
				map[string]any{"default_cluster_id": "", "preset": "quality", "weights": w(0.8, 0.1, 0.1), "slo": slo(800, 0, 0, 0, 0), "limits": lim(100, 5000, 4)}},
		}
		for _, st := range steps {
			r := e.do(st.method, "/api/v1/settings", tok, st.body)
			if r.status != st.status {
				t.Fatalf("%s: %d %s", st.name, r.status, r.raw)
			}
			if st.status != 200 {
				r.envelope(t)
			}
			got := e.do("GET", "/api/v1/settings", tok, nil).body
			if d := cmp.Diff(st.want, got); d != "" {
				t.Fatalf("%s: settings (-want +got):\n%s", st.name, d)
			}
		}
		for _, bad := range []string{`[]`, `{"slo":{"ttft_ms":"fast"}}`, `{"preset":"fastest"}`, `{"default_cluster_id":"nope"}`} {
			if r := e.do("PATCH", "/api/v1/settings", tok, bad); r.status != 400 {
				t.Errorf("PATCH %s: %d %s", bad, r.status, r.raw)
			} else {
				r.envelope(t)
			}
		}
	})
}
