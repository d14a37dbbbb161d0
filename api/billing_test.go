package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/go-cmp/cmp"
	_ "modernc.org/sqlite"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/migrations/dbtest"
)

// billingSQLite is a billing ledger on a fresh migrated SQLite database.
func billingSQLite(t *testing.T) *sqlitestore.Store {
	t.Helper()
	return sqlitestore.New(dbtest.SQLite(t))
}

func headerTenant(c *fiber.Ctx) (string, bool) {
	return c.Get("X-Test-Tenant"), c.Get("X-Test-Tenant") != ""
}

func doJSON(t *testing.T, app *fiber.App, method, path, tenant string, out any) int {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	if tenant != "" {
		req.Header.Set("X-Test-Tenant", tenant)
	}
	resp, err := app.Test(req, 10000)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s %s: decode: %v", method, path, err)
	}
	return resp.StatusCode
}

// runMeter starts a real meter over store with a fresh guard; it stops
// (flushing) when the test ends.
func runMeter(t *testing.T, store billing.Ledger) (*billing.Meter, *billing.Guard) {
	t.Helper()
	guard := billing.NewGuard(nil, time.Hour)
	cfg := billing.DefaultConfig()
	cfg.SpillDir = t.TempDir()
	m, err := billing.NewMeter(cfg, store, guard, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m, guard
}

// TestSpendCapIs402 meters real events (SQLite ledger) past a tenant and a
// key budget and checks the guard's refusal maps to 402 in OpenAI's
// envelope, naming the budget that was hit.
func TestSpendCapIs402(t *testing.T) {
	store := billingSQLite(t)
	m, guard := runMeter(t, store)
	for i := range 4 { // $4 on key k1, $1 on k2
		key := "k1"
		if i == 3 {
			key = "k2"
		}
		m.Record(billing.UsageEvent{RequestID: fmt.Sprint("r", i), TenantID: "t1", KeyID: key, CostUSD: 1, Status: "ok"})
	}
	srv := New(Config{}, Deps{})
	app := fiber.New() // the server's own catch-all serves the dashboard
	limits := map[string]billing.Limits{
		"tenant": {TenantID: "t1", KeyID: "k2", TenantMonthlyUSD: 4, KeyMonthlyUSD: 10},
		"key":    {TenantID: "t1", KeyID: "k1", TenantMonthlyUSD: 100, KeyMonthlyUSD: 3},
		"ok":     {TenantID: "t1", KeyID: "k2", TenantMonthlyUSD: 100, KeyMonthlyUSD: 3},
	}
	// Stand-in for the inference handler: check before routing, map the refusal.
	app.Get("/check/:case", func(c *fiber.Ctx) error {
		if err := guard.Check(limits[c.Params("case")]); err != nil {
			return srv.sendBillingError(c, err)
		}
		return c.JSON(fiber.Map{"ok": true})
	})
	tests := []struct {
		name     string
		wantCode int
		wantErr  string
	}{
		{"tenant", http.StatusPaymentRequired, "budget_exceeded"},
		{"key", http.StatusPaymentRequired, "budget_exceeded"},
		{"ok", http.StatusOK, ""},
	}
	for _, tt := range tests {
		var body errorBody
		status := doJSON(t, app, http.MethodGet, "/check/"+tt.name, "", &body)
		var code string
		if body.Error.Code != nil {
			code = *body.Error.Code
		}
		if diff := cmp.Diff([]any{tt.wantCode, tt.wantErr}, []any{status, code}); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
		if tt.wantErr != "" && (body.Error.Type != typeInsufficient || !strings.HasPrefix(body.Error.Message, tt.name+" monthly budget")) {
			t.Errorf("%s: envelope %+v, want type %s and a message", tt.name, body.Error, typeInsufficient)
		}
	}

	// A tenant suspended for non-payment is refused the same way.
	guard.SetStanding(billing.Account{TenantID: "late", SubscriptionStatus: "unpaid", PastDueSince: time.Now().Add(-2 * time.Hour)})
	limits["late"] = billing.Limits{TenantID: "late"}
	var body errorBody
	if status := doJSON(t, app, http.MethodGet, "/check/late", "", &body); status != 402 || body.Error.Code == nil || *body.Error.Code != "payment_required" {
		t.Errorf("suspended tenant: %d %+v, want 402 payment_required", status, body.Error)
	}
}

func TestUsageEndpoint(t *testing.T) {
	store := billingSQLite(t)
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var evs []billing.UsageEvent
	for i, model := range []string{"a", "a", "b"} {
		at := base.Add(time.Duration(i) * 40 * time.Minute)
		evs = append(evs, billing.UsageEvent{RequestID: fmt.Sprint("u", i), TenantID: "t1", Model: model, InstanceID: "i1",
			PromptTokens: 10, OutputTokens: 10, Cost: billing.NanoPerUSD / 2, Billed: billing.NanoPerUSD, E2E: 100 * time.Millisecond, StartedAt: at, FinishedAt: at})
	}
	evs = append(evs, billing.UsageEvent{RequestID: "other", TenantID: "t2", Model: "a", Billed: 50 * billing.NanoPerUSD, StartedAt: base, FinishedAt: base})
	if _, err := store.Insert(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	srv := New(Config{}, Deps{Usage: store, BillingTenant: headerTenant})
	app := srv.App()

	var rep billing.UsageReport
	if status := doJSON(t, app, http.MethodGet, "/api/v1/usage?from=2026-11-30&to=2026-12-01&group_by=model", "t1", &rep); status != 200 {
		t.Fatalf("status %d", status)
	}
	got := map[string][2]float64{}
	for _, r := range rep.Rows {
		got[r.Group] = [2]float64{float64(r.Requests), r.BilledUSD}
	}
	if diff := cmp.Diff(map[string][2]float64{"a": {2, 2}, "b": {1, 1}}, got); diff != "" {
		t.Errorf("rows by model (-want +got):\n%s", diff)
	}
	if rep.Total.Requests != 3 || rep.Total.Tokens != 60 || rep.Total.MeanE2EMs != 100 {
		t.Errorf("total %+v, want 3 requests, 60 tokens, 100 ms mean latency (t2's row must not leak)", rep.Total)
	}

	tests := []struct {
		path, tenant string
		wantStatus   int
		wantParam    string
	}{
		{"/api/v1/usage?group_by=week", "t1", 400, "group_by"},
		{"/api/v1/usage?from=yesterday", "t1", 400, "from"},
		{"/api/v1/usage?from=2026-12-02&to=2026-12-01", "t1", 400, "from"},
		{"/api/v1/usage", "", 401, ""},
	}
	for _, tt := range tests {
		var body errorBody
		status := doJSON(t, app, http.MethodGet, tt.path, tt.tenant, &body)
		param := ""
		if body.Error.Param != nil {
			param = *body.Error.Param
		}
		if status != tt.wantStatus || param != tt.wantParam || body.Error.Message == "" {
			t.Errorf("%s: %d param %q %+v, want %d param %q with a message", tt.path, status, param, body.Error, tt.wantStatus, tt.wantParam)
		}
	}
}
