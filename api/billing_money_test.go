package api

import (
	"encoding/json"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/stripesync"
	"github.com/routebalance/routebalance/routing"
)

// TestPoisonedPriceKeepsUsageAndBillingUp is issue 16 item 1's regression
// (the meter's part): an instance priced at 1e308 USD per million tokens
// makes the request's float cost +Inf. Before integer money the ledger
// stored +Inf and GET /api/v1/usage and /api/v1/billing answered 500
// ("json: unsupported value: +Inf") for the tenant from then on. Now the
// meter refuses the amount (metered as 0, counted in Stats().Refused), the
// request is still metered exactly once, and both endpoints answer 200
// with finite numbers.
func TestPoisonedPriceKeepsUsageAndBillingUp(t *testing.T) {
	store := billingSQLite(t)
	m, guard := runMeter(t, store)
	poisoned := routing.Instance{ID: "i-bad", PriceInPerMTok: 1e308, PriceOutPerMTok: 1e308}
	fair := routing.Instance{ID: "i-ok", PriceInPerMTok: 0.5, PriceOutPerMTok: 1.5}
	now := time.Now()
	for i, in := range []routing.Instance{poisoned, fair} {
		cost := in.CostUSD(1000, 1000)
		if i == 0 && !math.IsInf(cost, 1) {
			t.Fatalf("the poisoned price costs %v, want +Inf (the probe's case)", cost)
		}
		m.Record(billing.UsageEvent{RequestID: in.ID, TenantID: "t1", InstanceID: in.ID, Model: "m",
			PromptTokens: 1000, OutputTokens: 1000, CostUSD: cost, Status: "ok", HTTPStatus: 200,
			StartedAt: now, FinishedAt: now})
	}
	deadline := time.Now().Add(20 * time.Second)
	for m.Stats().Written < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("meter stats %+v: want 2 written", m.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := m.Stats(); st.Refused != 1 || st.Written != 2 {
		t.Errorf("stats %+v: want 2 written (each request once), 1 refused", st)
	}

	sy, err := stripesync.New(stripesync.DefaultConfig(), stripesync.Deps{Accounts: store, Outbox: store, Usage: store, Guard: guard})
	if err != nil {
		t.Fatal(err)
	}
	app := New(Config{}, Deps{Usage: store, Billing: sy, BillingTenant: headerTenant}).App()
	const want = billing.Nano(2_000_000) // 1000 tokens at $0.5/M + 1000 at $1.5/M = $0.002
	var rep billing.UsageReport
	if status := doJSON(t, app, http.MethodGet, "/api/v1/usage?group_by=instance", "t1", &rep); status != 200 {
		t.Fatalf("GET /api/v1/usage = %d, want 200", status)
	}
	if rep.Total.Requests != 2 || rep.Total.Cost != want || rep.Total.CostUSD != 0.002 {
		t.Errorf("usage total %+v: want 2 requests, cost exactly %d nano ($0.002)", rep.Total, want)
	}
	var ov billing.Overview
	if status := doJSON(t, app, http.MethodGet, "/api/v1/billing", "t1", &ov); status != 200 {
		t.Fatalf("GET /api/v1/billing = %d, want 200", status)
	}
	if ov.Spend != want || ov.Usage.Billed != want {
		t.Errorf("billing overview spend %d, usage billed %d; want %d", ov.Spend, ov.Usage.Billed, want)
	}
	if _, err := json.Marshal(ov); err != nil {
		t.Errorf("overview does not marshal: %v", err)
	}
}
