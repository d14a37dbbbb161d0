package api

import (
	"context"
	"encoding/csv"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/pgstore"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/migrations/dbtest"
)

type ledgerStore interface {
	billing.Ledger
	UsageReader
	RequestReader
}

// ledgerFor is the billing store of the engine's database.
func ledgerFor(db dbtest.Engine) ledgerStore {
	if db.Pool != nil {
		return pgstore.New(db.Pool)
	}
	return sqlitestore.New(db.SQLite)
}

// TestRequestLogAPI checks GET /api/v1/requests (tenant scope, filters,
// cursor paging, key names), its CSV twin and /usage.csv on both engines,
// with sessions from the real tenants service.
func TestRequestLogAPI(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.Engine) {
		st := ledgerFor(db)
		e := newEnv(t, db, true, func(d *Deps) { d.Usage, d.Requests = st, st })
		tidA, tokA := signupTok(e, "log-a@example.com")
		tidB, tokB := signupTok(e, "log-b@example.com")
		r := e.do("POST", "/api/v1/keys", tokA, map[string]any{"name": "backend"})
		kid := r.str("id")

		base := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second)
		var evs []billing.UsageEvent
		for i := 0; i < 7; i++ {
			model := "small"
			if i%3 == 0 {
				model = "big"
			}
			status := "ok"
			if i == 4 {
				status = "error"
			}
			at := base.Add(time.Duration(i) * time.Minute)
			evs = append(evs, billing.UsageEvent{
				RequestID: "req-" + string(rune('a'+i)), TenantID: tidA, KeyID: kid, Model: model, InstanceID: "inst-" + model,
				Policy: "routebalance", PromptTokens: 10 + i, OutputTokens: 20, Cost: 1_000_000, Billed: 2_000_000,
				PredictedQuality: 0.6, TTFT: 50 * time.Millisecond, E2E: 400 * time.Millisecond, Status: status, HTTPStatus: 200,
				StartedAt: at, FinishedAt: at.Add(400 * time.Millisecond), PredictedE2E: 380 * time.Millisecond,
				Preset: "balanced", Weights: billing.Weights{Quality: 1.0 / 3, Cost: 1.0 / 3, Latency: 1.0 / 3},
				Relaxed: []string{"ttft"}, Attempts: 1,
			})
		}
		evs = append(evs, billing.UsageEvent{RequestID: "other", TenantID: tidB, Model: "big", Status: "ok", StartedAt: base, FinishedAt: base})
		if _, err := st.Insert(context.Background(), evs); err != nil {
			t.Fatal(err)
		}
		from := url.QueryEscape(base.Add(-time.Minute).Format(time.RFC3339))

		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			r := e.do("GET", "/api/v1/requests?limit=3&from="+from+"&cursor="+url.QueryEscape(cursor), tokA, nil)
			if r.status != 200 || r.body["object"] != "list" {
				t.Fatalf("page %d: %d %s", pages, r.status, r.raw)
			}
			for _, x := range r.body["data"].([]any) {
				row := x.(map[string]any)
				got = append(got, row["id"].(string))
				if row["key_name"] != "backend" || row["preset"] != "balanced" || row["attempts"] != 1.0 ||
					row["predicted_e2e_ms"] != 380.0 || row["weights"] == nil || len(row["relaxed"].([]any)) != 1 {
					t.Errorf("row: %v", row)
				}
				for _, k := range []string{"id", "started_at", "key_id", "key_name", "model", "instance_id", "status", "http_status",
					"prompt_tokens", "output_tokens", "ttft_ms", "e2e_ms", "cost_usd", "predicted_quality", "predicted_e2e_ms",
					"preset", "weights", "relaxed", "attempts"} {
					if _, ok := row[k]; !ok {
						t.Errorf("row lacks %q", k)
					}
				}
			}
			cursor, _ = r.body["next_cursor"].(string)
			if cursor == "" {
				break
			}
			if pages > 5 {
				t.Fatal("cursor never ends")
			}
		}
		if d := cmp.Diff([]string{"req-g", "req-f", "req-e", "req-d", "req-c", "req-b", "req-a"}, got); d != "" {
			t.Errorf("newest first (-want +got):\n%s", d)
		}

		r = e.do("GET", "/api/v1/requests?model=big&from="+from, tokA, nil)
		if n := len(r.body["data"].([]any)); r.status != 200 || n != 3 {
			t.Errorf("model filter: %d rows %s", n, r.raw)
		}
		r = e.do("GET", "/api/v1/requests?status=error&key_id="+kid+"&from="+from, tokA, nil)
		if n := len(r.body["data"].([]any)); r.status != 200 || n != 1 {
			t.Errorf("status+key filter: %d rows %s", n, r.raw)
		}
		r = e.do("GET", "/api/v1/requests?from="+from, tokB, nil)
		if n := len(r.body["data"].([]any)); n != 1 || strings.Contains(r.raw, "req-") {
			t.Errorf("tenant B sees %d rows: %s", n, r.raw)
		}

		for _, bad := range []string{"limit=0", "limit=501", "limit=x", "status=weird", "cursor=%25%25", "from=yesterday", "from=2026-12-02&to=2026-12-01"} {
			r := e.do("GET", "/api/v1/requests?"+bad, tokA, nil)
			if r.status != 400 {
				t.Errorf("%s: %d %s", bad, r.status, r.raw)
				continue
			}
			r.envelope(t)
		}
		if r := e.do("GET", "/api/v1/requests", "", nil); r.status != 401 {
			t.Errorf("no session: %d", r.status)
		}

		r = e.do("GET", "/api/v1/requests.csv?model=small&from="+from, tokA, nil)
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/csv") {
			t.Fatalf("csv: %d %s %s", r.status, r.header.Get("Content-Type"), r.raw)
		}
		recs, err := csv.NewReader(strings.NewReader(r.raw)).ReadAll()
		if err != nil || len(recs) != 5 || recs[0][0] != "id" || recs[1][0] != "req-f" || recs[1][4] != "backend" {
			t.Errorf("requests.csv: %v %q", err, recs)
		}

		r = e.do("GET", "/api/v1/usage.csv?group_by=model&from="+from, tokA, nil)
		recs, err = csv.NewReader(strings.NewReader(r.raw)).ReadAll()
		want := [][]string{{"model", "requests"}, {"big", "3"}, {"small", "4"}, {"total", "7"}}
		var head [][]string
		for _, rec := range recs {
			head = append(head, rec[:2])
		}
		if err != nil || r.status != 200 || !cmp.Equal(want, head) {
			t.Errorf("usage.csv: %d %v %q", r.status, err, recs)
		}
		r = e.do("GET", "/api/v1/usage.csv?group_by=key&from="+from, tokA, nil)
		if recs, _ = csv.NewReader(strings.NewReader(r.raw)).ReadAll(); len(recs) != 3 || recs[0][1] != "key_name" || recs[1][1] != "backend" {
			t.Errorf("usage.csv by key: %q", recs)
		}
		if r := e.do("GET", "/api/v1/usage.csv?group_by=week", tokA, nil); r.status != 400 {
			t.Errorf("usage.csv bad group: %d", r.status)
		}
	})
}

func TestFillPreset(t *testing.T) {
	for _, c := range []struct {
		preset string
		w      *billing.Weights
		want   string
	}{
		{"", &billing.Weights{Quality: 0.8, Cost: 0.1, Latency: 0.1}, "quality"},
		{"", &billing.Weights{Quality: 1.0 / 3, Cost: 1.0 / 3, Latency: 1.0 / 3}, "balanced"},
		{"", &billing.Weights{Quality: 0.5, Cost: 0.25, Latency: 0.25}, "custom"},
		{"cost", &billing.Weights{Quality: 0.5, Cost: 0.25, Latency: 0.25}, "cost"},
		{"", nil, ""},
	} {
		r := billing.RequestRow{Preset: c.preset, Weights: c.w}
		if fillPreset(&r); r.Preset != c.want {
			t.Errorf("%q %+v: preset %q, want %q", c.preset, c.w, r.Preset, c.want)
		}
	}
}
