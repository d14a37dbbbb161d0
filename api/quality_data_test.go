package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/routebalance/routebalance/internal/testwait"
	"github.com/routebalance/routebalance/migrations/dbtest"
	"github.com/routebalance/routebalance/routing/quality"
	qualitysql "github.com/routebalance/routebalance/routing/quality/sqlstore"
)

func qualityLines(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			fmt.Fprintf(&b, `{"id":"r%d","prompt":"solve %d x + 1 = %d for x","scores":{"big":1,"small":0,"gpt-x":1}}`+"\n", i, i, 3*i)
		} else {
			fmt.Fprintf(&b, `{"id":"r%d","prompt":"a poem about the sea number %d","scores":{"big":1,"small":1}}`+"\n", i, i)
		}
	}
	return b.String()
}

// TestQualityDataEndpoints uploads, reads the status until built, rejects
// bad uploads with line numbers, hides another tenant's cluster and
// deletes, over a real store on SQLite.
func TestQualityDataEndpoints(t *testing.T) {
	db := dbtest.SQLite(t)
	qs, err := quality.New(quality.Config{Limits: quality.Limits{MaxBytes: 40 << 10}}, quality.Deps{Persist: qualitysql.NewSQLite(db)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); qs.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: db}, true, func(d *Deps) { d.QualityData = qs })
	_, tok, _ := e.signup("ada@example.com")
	_, other, _ := e.signup("bob@example.com")
	r := e.do("POST", "/api/v1/clusters", tok, map[string]any{"name": "prod"})
	cid := r.str("id")
	base := "/api/v1/clusters/" + cid + "/quality-data"

	if r := e.do("POST", base, tok, qualityLines(4)); r.status != http.StatusConflict {
		t.Errorf("upload to a cluster without instances: %d %s, want 409", r.status, r.raw)
	}
	for _, m := range []string{"big", "small"} {
		if r := e.do("POST", "/api/v1/clusters/"+cid+"/instances", tok, map[string]any{"base_url": "http://127.0.0.1:9", "model": m, "gpu": "L4"}); r.status != 201 {
			t.Fatalf("create instance: %d %s", r.status, r.raw)
		}
	}
	if r := e.do("GET", base, tok, nil); r.status != 200 || !strings.Contains(r.raw, `"status":"none"`) {
		t.Errorf("status before upload: %d %s", r.status, r.raw)
	}

	r = e.do("POST", base, tok, qualityLines(2)+"{\"prompt\":\"x\",\"scores\":{\"big\":2}}\n\nnot json\n")
	if r.status != 400 || !strings.Contains(r.raw, `{"line":3,"message":"score of \"big\" is 2, want a number in [0,1]"}`) ||
		!strings.Contains(r.raw, `{"line":5,"message":"not a JSON object"}`) || r.body["error_count"] != float64(2) {
		t.Errorf("bad lines: %d %s", r.status, r.raw)
	}
	r.envelope(t)
	if r := e.do("POST", base, tok, `{"prompt":"x","scores":{"gpt-x":1}}`); r.status != 400 || !strings.Contains(r.raw, `"gpt-x":1`) {
		t.Errorf("only unknown models: %d %s", r.status, r.raw)
	}
	if r := e.do("POST", base, other, qualityLines(4)); r.status != 404 {
		t.Errorf("another tenant's upload: %d %s, want 404", r.status, r.raw)
	}
	if r := e.do("POST", base, tok, strings.Repeat(qualityLines(2), 350)); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized upload: %d %.200s, want 413", r.status, r.raw)
	}

	r = e.do("POST", base, tok, qualityLines(300))
	if r.status != http.StatusAccepted || r.body["records"] != float64(300) || !strings.Contains(r.raw, `"unknown_models":{"gpt-x":150}`) {
		t.Fatalf("upload: %d %s", r.status, r.raw)
	}
	testwait.Until(t, "quality data built", func() bool {
		return strings.Contains(e.do("GET", base, tok, nil).raw, `"status":"ready"`)
	})
	r = e.do("GET", base, tok, nil)
	data, _ := r.body["data"].(map[string]any)
	if models, _ := data["models"].(map[string]any); models["big"] != float64(300) || data["validation_auc"] == nil || data["built_at"] == nil {
		t.Errorf("status: %s", r.raw)
	}
	if r := e.do("GET", base, other, nil); r.status != 404 {
		t.Errorf("another tenant's status: %d, want 404", r.status)
	}
	if r := e.do("DELETE", base, tok, nil); r.status != 204 {
		t.Errorf("delete: %d %s", r.status, r.raw)
	}
	if r := e.do("DELETE", base, tok, nil); r.status != 404 {
		t.Errorf("second delete: %d %s", r.status, r.raw)
	}
	if all, err := qualitysql.NewSQLite(db).All(context.Background()); err != nil || len(all) != 0 {
		t.Errorf("stored uploads after delete: %d, %v", len(all), err)
	}
}

// TestQualityJudgeEndpoints sets a cluster's judge through the API over
// a real Judge persisting on SQLite: validation, the model must be one the
// cluster serves, another tenant's cluster is 404, and the settings
// survive a new Judge on the same database.
func TestQualityJudgeEndpoints(t *testing.T) {
	db := dbtest.SQLite(t)
	store := qualitysql.NewSQLite(db)
	newJudge := func() *quality.Judge {
		return quality.NewJudge(quality.JudgeConfig{}, quality.JudgeDeps{Store: store, Learner: nopLearner{}})
	}
	j := newJudge()
	e := newEnv(t, dbtest.Engine{Name: "sqlite", SQLite: db}, true, func(d *Deps) { d.QualityJudge = j })
	_, tok, _ := e.signup("ada@example.com")
	_, other, _ := e.signup("bob@example.com")
	cid := e.do("POST", "/api/v1/clusters", tok, map[string]any{"name": "prod"}).str("id")
	if r := e.do("POST", "/api/v1/clusters/"+cid+"/instances", tok, map[string]any{"base_url": "http://127.0.0.1:9", "model": "big", "gpu": "L4"}); r.status != 201 {
		t.Fatalf("create instance: %d %s", r.status, r.raw)
	}
	path := "/api/v1/clusters/" + cid + "/quality-judge"
	if r := e.do("GET", path, tok, nil); r.status != 200 || !strings.Contains(r.raw, `"enabled":false`) {
		t.Errorf("judge before it is set: %d %s", r.status, r.raw)
	}
	for _, tc := range []struct {
		body  string
		param string
	}{
		{`{"enabled":true,"model":"big","sample_rate":1.5,"monthly_budget_usd":5}`, "sample_rate"},
		{`{"enabled":true,"model":"big","sample_rate":0.2,"monthly_budget_usd":0}`, "monthly_budget_usd"},
		{`{"enabled":true,"model":"","sample_rate":0.2,"monthly_budget_usd":5}`, "model"},
		{`{"enabled":true,"model":"gpt-x","sample_rate":0.2,"monthly_budget_usd":5}`, "model"},
		{`{"enabled":true,"model":"big","sample_rate":"all","monthly_budget_usd":5}`, "sample_rate"},
	} {
		r := e.do("PUT", path, tok, tc.body)
		if e, _ := r.body["error"].(map[string]any); r.status != 400 || e["param"] != tc.param {
			t.Errorf("PUT %s: %d %s, want 400 with param %s", tc.body, r.status, r.raw, tc.param)
		}
	}
	if r := e.do("PUT", path, other, `{"enabled":true,"model":"big","sample_rate":0.2,"monthly_budget_usd":5}`); r.status != 404 {
		t.Errorf("another tenant's PUT: %d, want 404", r.status)
	}
	r := e.do("PUT", path, tok, `{"enabled":true,"model":"big","sample_rate":0.2,"monthly_budget_usd":5}`)
	if r.status != 200 || !strings.Contains(r.raw, `"settings":{"enabled":true,"model":"big","sample_rate":0.2,"monthly_budget_usd":5}`) {
		t.Fatalf("PUT: %d %s", r.status, r.raw)
	}
	again := newJudge()
	if n, err := again.Restore(context.Background()); err != nil || n != 1 {
		t.Fatalf("restore: %d, %v", n, err)
	}
	if set, _ := again.Settings(cid); !set.Enabled || set.Model != "big" || set.SampleRate != 0.2 || set.MonthlyBudgetUSD != 5 {
		t.Errorf("restored settings %+v", set)
	}
}

type nopLearner struct{}

func (nopLearner) ObserveClusterQuality(string, string, string, float64) {}
