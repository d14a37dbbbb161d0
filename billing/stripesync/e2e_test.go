package stripesync_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/routebalance/routebalance/api"
	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/internal/billingtest"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/tenants"
	"github.com/routebalance/routebalance/tenants/sqlstore"
)

func call(t *testing.T, srv *api.Server, method, path, token string, body any, out any) int {
	t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req := httptest.NewRequest(method, path, rd)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.App().Test(req, 20000)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: decode: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

// TestSignupMeterUsageAndStripe is the whole path on SQLite: sign-up
// through the API creates the Stripe customer, metered requests show in
// GET /api/v1/usage and GET /api/v1/billing (session-authenticated), and
// after the hourly aggregation they reach stripe-mock as one meter event.
func TestSignupMeterUsageAndStripe(t *testing.T) {
	rec, base := newRecorder(t)
	billingtest.RunShifted(t, testBase.Add(25*time.Minute), func(t *testing.T, now time.Time) {
		signupMeterUsageAndStripe(t, rec, base, now)
	})
}

// signupMeterUsageAndStripe is TestSignupMeterUsageAndStripe with every
// clock (sessions, tenants, meter, guard, Syncer, usage range) at now.
func signupMeterUsageAndStripe(t *testing.T, rec *recorder, base string, now time.Time) {
	clk := billingtest.NewClock(now)
	db := billingtest.SQLite(t)
	bs := sqlitestore.New(db)
	ctx := context.Background()

	sess, err := tenants.NewSessions(tenants.DefaultSessionConfig([]byte(strings.Repeat("s", 32))), clk)
	if err != nil {
		t.Fatal(err)
	}
	sealer, err := tenants.NewSealer([]byte(strings.Repeat("e", 32)))
	if err != nil {
		t.Fatal(err)
	}
	tcfg := tenants.DefaultConfig()
	tcfg.Password.MemoryKiB, tcfg.Password.Time = 8*1024, 1
	svc, err := tenants.NewService(tcfg, tenants.Deps{Store: sqlstore.NewSQLite(db), Sessions: sess, Sealer: sealer, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}

	guard := billing.NewGuard(clk, 72*time.Hour)
	sy := newSyncer(t, config(base), bs, guard, clk)
	srv := api.New(api.Config{}, api.Deps{Tenants: svc, Billing: sy, Usage: bs, SignupHook: sy,
		Inference: api.InferenceDeps{Clock: clk}})

	var tok struct {
		TenantID     string `json:"tenant_id"`
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
	}
	if code := call(t, srv, http.MethodPost, "/api/v1/signup", "", map[string]string{
		"email": "ada@example.com", "password": "analytical-engine-1", "name": "Ada"}, &tok); code != http.StatusCreated {
		t.Fatalf("signup: %d", code)
	}
	acct, err := bs.Account(ctx, tok.TenantID)
	if err != nil || !strings.HasPrefix(acct.StripeCustomerID, "cus_") {
		t.Fatalf("no Stripe customer after sign-up: %+v, %v", acct, err)
	}

	cfg := billing.DefaultConfig()
	cfg.SpillDir = t.TempDir()
	cfg.Pricing = billing.Pricing{Markup: 1.5}
	m, err := billing.NewMeter(cfg, bs, guard, nil, clk)
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Run(mctx) }()
	for i := range 5 {
		m.Record(billing.UsageEvent{RequestID: fmt.Sprint("e2e-", i), TenantID: tok.TenantID, KeyID: "k1", Model: "llama",
			InstanceID: "i1", PromptTokens: 100, OutputTokens: 20, CostUSD: 0.002, E2E: 300 * time.Millisecond,
			TTFT: 50 * time.Millisecond, Status: "ok", HTTPStatus: 200})
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var rep billing.UsageReport
	q := fmt.Sprintf("/api/v1/usage?from=%s&to=%s&group_by=model", now.Add(-time.Hour).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	if code := call(t, srv, http.MethodGet, q, tok.AccessToken, nil, &rep); code != 200 {
		t.Fatalf("usage: %d", code)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Group != "llama" || rep.Rows[0].Requests != 5 || rep.Rows[0].Tokens != 600 {
		t.Fatalf("usage rows = %+v, want one llama row with 5 requests and 600 tokens", rep.Rows)
	}
	if got := rep.Total.Billed; got != 15_000_000 || rep.Total.BilledUSD != 0.015 {
		t.Errorf("billed = %d nano (%v USD), want exactly 5 × 0.002 × 1.5 = 0.015", got, rep.Total.BilledUSD)
	}
	// Without from/to the range is the clock's month so far (a minute on:
	// the meter stamped the events with the clock's now, and to is exclusive).
	clk.Set(now.Add(time.Minute))
	var month billing.UsageReport
	if code := call(t, srv, http.MethodGet, "/api/v1/usage", tok.AccessToken, nil, &month); code != 200 || month.Total.Requests != 5 {
		t.Errorf("usage of the current month: %d, %d requests, want 200 and 5", code, month.Total.Requests)
	}
	if code := call(t, srv, http.MethodGet, "/api/v1/usage", "", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("usage without a session: %d, want 401", code)
	}

	// The next hour: aggregation and drain report one meter event.
	clk.Set(now.Truncate(time.Hour).Add(time.Hour + time.Minute))
	if n, err := sy.AggregateOnce(ctx); err != nil || n != 1 {
		t.Fatalf("AggregateOnce = %d, %v", n, err)
	}
	if n, err := sy.DrainOnce(ctx); err != nil || n != 1 {
		t.Fatalf("DrainOnce = %d, %v", n, err)
	}
	calls, _ := rec.calls()
	id := billing.OutboxIdentifier(tok.TenantID, now.Truncate(time.Hour), 1)
	want := meterCall{id, acct.StripeCustomerID, "15000", id}
	found := 0
	for _, c := range calls {
		if c.Customer == acct.StripeCustomerID {
			found++
			if c != want {
				t.Errorf("meter event %+v, want %+v", c, want)
			}
		}
	}
	if found != 1 {
		t.Errorf("meter events for the tenant = %d, want 1", found)
	}

	// The access token (15 min) expired while the clock moved to the next
	// hour; the dashboard refreshes it, as the session's clock says.
	if code := call(t, srv, http.MethodGet, "/api/v1/billing", tok.AccessToken, nil, nil); code != http.StatusUnauthorized {
		t.Errorf("billing overview with an expired access token: %d, want 401", code)
	}
	if code := call(t, srv, http.MethodPost, "/api/v1/refresh", "", map[string]string{"refresh_token": tok.RefreshToken}, &tok); code != 200 {
		t.Fatalf("refresh: %d", code)
	}
	var ov billing.Overview
	if code := call(t, srv, http.MethodGet, "/api/v1/billing", tok.AccessToken, nil, &ov); code != 200 {
		t.Fatalf("billing overview: %d", code)
	}
	if !ov.StripeConfigured || ov.CustomerID != acct.StripeCustomerID || ov.MeterEventsSent != 1 || ov.Usage.Requests != 5 {
		t.Errorf("overview = %+v", ov)
	}
	var co struct {
		URL string `json:"url"`
	}
	if code := call(t, srv, http.MethodPost, "/api/v1/billing/checkout", tok.AccessToken, nil, &co); code != http.StatusCreated || !strings.HasPrefix(co.URL, "https://") {
		t.Errorf("checkout: %d %+v", code, co)
	}
}
