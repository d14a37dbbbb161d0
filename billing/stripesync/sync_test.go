package stripesync_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/routebalance/routebalance/api"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/internal/billingtest"
	"github.com/routebalance/routebalance/billing/pgstore"
	"github.com/routebalance/routebalance/billing/sqlitestore"
	"github.com/routebalance/routebalance/billing/stripesync"
)

// store is everything the billing stores offer; both engines satisfy it.
type store interface {
	billing.Ledger
	stripesync.AccountStore
	stripesync.OutboxStore
	stripesync.UsageReader
}

// engines are the two store engines every store test runs on.
var engines = []string{"postgres", "sqlite"}

// newStore opens a fresh migrated store of the named engine.
func newStore(t *testing.T, engine string) store {
	t.Helper()
	if engine == "postgres" {
		return pgstore.New(billingtest.PG(t))
	}
	return sqlitestore.New(billingtest.SQLite(t))
}

// testBase is the fixed time the tests' fake clocks start from; the
// clock-shift guard (billingtest.RunShifted) also runs each test with it
// moved a year before and a year after the real date.
var testBase = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// eachEngineAndShift runs fn per engine and, inside, per clock shift of
// testBase, with a fresh store each time: Test…/postgres/fixed-2026-11-30.
func eachEngineAndShift(t *testing.T, fn func(t *testing.T, name string, s store, base time.Time)) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			billingtest.RunShifted(t, testBase, func(t *testing.T, base time.Time) {
				fn(t, engine+"-"+base.Format("2006"), newStore(t, engine), base)
			})
		})
	}
}

// recorder sits between the Syncer and stripe-mock and remembers what
// reached Stripe. loseNext makes it forward a meter event and then answer
// 502, as if the response were lost on the way back.
type recorder struct {
	target string

	mu        sync.Mutex
	meter     []meterCall
	customers int
	loseNext  int
}

type meterCall struct {
	Identifier, Customer, Value, IdempotencyKey string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	form, _ := url.ParseQuery(string(body))
	lose := false
	r.mu.Lock()
	switch req.URL.Path {
	case "/v1/billing/meter_events":
		r.meter = append(r.meter, meterCall{form.Get("identifier"), form.Get("payload[stripe_customer_id]"), form.Get("payload[value]"), req.Header.Get("Idempotency-Key")})
		if r.loseNext > 0 {
			r.loseNext--
			lose = true
		}
	case "/v1/customers":
		r.customers++
	}
	r.mu.Unlock()
	out, _ := http.NewRequestWithContext(req.Context(), req.Method, r.target+req.URL.RequestURI(), bytes.NewReader(body))
	out.Header = req.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	respBody, _ := io.ReadAll(resp.Body)
	if lose {
		http.Error(w, `{"error":{"message":"connection reset"}}`, http.StatusBadGateway)
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

func (r *recorder) calls() ([]meterCall, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]meterCall(nil), r.meter...), r.customers
}

func newRecorder(t *testing.T) (*recorder, string) {
	rec := &recorder{target: billingtest.StripeMock(t)}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

const whsec = "whsec_test_secret"

func config(base string) stripesync.Config {
	cfg := stripesync.DefaultConfig()
	cfg.SecretKey = "sk_test_123"
	cfg.WebhookSecret = whsec
	cfg.PriceID = "price_metered"
	cfg.APIBaseURL = base
	cfg.MinBackoff = time.Minute
	cfg.MaxBackoff = time.Hour
	// A guard against a hung call, not a speed check: stripe-mock checks
	// each request against its whole OpenAPI spec, which takes seconds on
	// a loaded 2-core machine. (The dead-Stripe cases are refused at once.)
	cfg.RequestTimeout = time.Minute
	return cfg
}

func newSyncer(t *testing.T, cfg stripesync.Config, s store, g *billing.Guard, clk billing.Clock) *stripesync.Syncer {
	t.Helper()
	sy, err := stripesync.New(cfg, stripesync.Deps{Accounts: s, Outbox: s, Usage: s, Guard: g, Clock: clk,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return sy
}

func TestCustomerOnSignup(t *testing.T) {
	rec, base := newRecorder(t)
	eachEngineAndShift(t, func(t *testing.T, name string, s store, at time.Time) {
		ctx := context.Background()
		clk := billingtest.NewClock(at)
		sy := newSyncer(t, config(base), s, billing.NewGuard(clk, time.Hour), clk)
		_, before := rec.calls()
		if err := sy.TenantCreated(ctx, "t-"+name, "Acme", "ops@acme.test"); err != nil {
			t.Fatal(err)
		}
		a, err := s.Account(ctx, "t-"+name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(a.StripeCustomerID, "cus_") {
			t.Errorf("customer id = %q, want cus_…", a.StripeCustomerID)
		}
		if !a.UpdatedAt.Equal(at) {
			t.Errorf("account updated at %v, want the clock's %v", a.UpdatedAt, at)
		}
		// Signing up again (a retried hook) keeps the customer and calls Stripe no more.
		if err := sy.TenantCreated(ctx, "t-"+name, "Acme", "ops@acme.test"); err != nil {
			t.Fatal(err)
		}
		b, _ := s.Account(ctx, "t-"+name)
		_, after := rec.calls()
		if b.StripeCustomerID != a.StripeCustomerID || after-before != 1 {
			t.Errorf("second sign-up: customer %q→%q, Stripe customer calls %d, want same id and 1 call",
				a.StripeCustomerID, b.StripeCustomerID, after-before)
		}
	})
	// Without Stripe the hook does nothing and says nothing is wrong.
	s := sqlitestore.New(billingtest.SQLite(t))
	off := stripesync.DefaultConfig()
	clk := billingtest.NewClock(testBase)
	sy := newSyncer(t, off, s, billing.NewGuard(clk, time.Hour), clk)
	if err := sy.TenantCreated(context.Background(), "t", "n", "e"); err != nil {
		t.Errorf("TenantCreated without Stripe = %v", err)
	}
	if _, err := sy.Checkout(context.Background(), "t", "", ""); !errors.Is(err, billing.ErrStripeDisabled) {
		t.Errorf("Checkout without Stripe = %v, want ErrStripeDisabled", err)
	}
	ov, err := sy.Overview(context.Background(), "t")
	if err != nil || ov.StripeConfigured || !strings.Contains(ov.Message, "not configured") {
		t.Errorf("Overview without Stripe = %+v, %v", ov, err)
	}
}

func TestOutboxDrainRetriesAndNeverDoubleReports(t *testing.T) {
	rec, base := newRecorder(t)
	eachEngineAndShift(t, func(t *testing.T, name string, s store, hour time.Time) {
		ctx := context.Background()
		tenant := "t-" + name
		clk := billingtest.NewClock(hour.Add(70 * time.Minute))
		guard := billing.NewGuard(clk, time.Hour)
		if err := s.SetCustomer(ctx, tenant, "cus_"+name, clk.Now()); err != nil {
			t.Fatal(err)
		}
		evs := []billing.UsageEvent{
			{RequestID: name + "-1", TenantID: tenant, Billed: 250_000_000, PromptTokens: 100, StartedAt: hour.Add(time.Minute), FinishedAt: hour.Add(time.Minute)},
			{RequestID: name + "-2", TenantID: tenant, Billed: 500_000_000, OutputTokens: 50, StartedAt: hour.Add(2 * time.Minute), FinishedAt: hour.Add(2 * time.Minute)},
			// the current (open) hour is not aggregated yet
			{RequestID: name + "-3", TenantID: tenant, Billed: 9 * billing.NanoPerUSD, StartedAt: hour.Add(65 * time.Minute), FinishedAt: hour.Add(65 * time.Minute)},
		}
		if _, err := s.Insert(ctx, evs); err != nil {
			t.Fatal(err)
		}

		// Stripe unreachable first: the row stays pending with a retry time.
		dead := newSyncer(t, config(billingtest.DeadURL(t)), s, guard, clk)
		if n, err := dead.AggregateOnce(ctx); err != nil || n != 1 {
			t.Fatalf("AggregateOnce = %d, %v; want 1 row", n, err)
		}
		if n, err := dead.DrainOnce(ctx); err == nil || n != 0 {
			t.Fatalf("DrainOnce to a dead port = %d, %v; want 0 and an error", n, err)
		}
		if p, _ := s.PendingOutbox(ctx, clk.Now(), 10); len(p) != 0 {
			t.Fatalf("row due again before its backoff: %+v", p)
		}

		live := newSyncer(t, config(base), s, guard, clk)
		clk.Set(clk.Now().Add(2 * time.Minute)) // past MinBackoff
		rec.mu.Lock()
		rec.loseNext = 1 // Stripe takes it but the answer is lost
		rec.mu.Unlock()
		if n, err := live.DrainOnce(ctx); err == nil || n != 0 {
			t.Fatalf("DrainOnce with a lost response = %d, %v; want 0 and an error", n, err)
		}
		clk.Set(clk.Now().Add(5 * time.Minute)) // past 2×MinBackoff
		if n, err := live.DrainOnce(ctx); err != nil || n != 1 {
			t.Fatalf("DrainOnce = %d, %v; want 1 sent", n, err)
		}
		// Nothing left: draining and aggregating again report nothing new.
		if n, err := live.DrainOnce(ctx); err != nil || n != 0 {
			t.Fatalf("second DrainOnce = %d, %v; want 0", n, err)
		}
		if n, err := live.AggregateOnce(ctx); err != nil || n != 0 {
			t.Fatalf("second AggregateOnce = %d, %v; want 0", n, err)
		}

		// A late event of the closed hour goes out as a supplement with its own identifier.
		late := billing.UsageEvent{RequestID: name + "-4", TenantID: tenant, Billed: 125_000_000, StartedAt: hour.Add(50 * time.Minute), FinishedAt: hour.Add(50 * time.Minute)}
		if _, err := s.Insert(ctx, []billing.UsageEvent{late}); err != nil {
			t.Fatal(err)
		}
		if n, err := live.AggregateOnce(ctx); err != nil || n != 1 {
			t.Fatalf("AggregateOnce after a late event = %d, %v; want 1", n, err)
		}
		if n, err := live.DrainOnce(ctx); err != nil || n != 1 {
			t.Fatalf("DrainOnce of the supplement = %d, %v; want 1", n, err)
		}

		calls, _ := rec.calls()
		var mine []meterCall
		for _, c := range calls {
			if c.Customer == "cus_"+name {
				mine = append(mine, c)
			}
		}
		id := billing.OutboxIdentifier(tenant, hour, 1)
		want := []meterCall{
			{id, "cus_" + name, "750000", id}, // reached Stripe, answer lost
			{id, "cus_" + name, "750000", id}, // retried with the same identifier and key: Stripe keeps one
			{billing.OutboxIdentifier(tenant, hour, 2), "cus_" + name, "125000", billing.OutboxIdentifier(tenant, hour, 2)},
		}
		if diff := cmp.Diff(want, mine); diff != "" {
			t.Errorf("meter events that reached Stripe (-want +got):\n%s", diff)
		}
		sent, pending, err := s.OutboxStats(ctx, tenant)
		if err != nil || sent != 2 || pending != 0 {
			t.Errorf("outbox sent %d pending %d (%v), want 2 and 0", sent, pending, err)
		}
	})
}

func TestCheckout(t *testing.T) {
	_, base := newRecorder(t)
	billingtest.RunShifted(t, testBase, func(t *testing.T, at time.Time) {
		s := sqlitestore.New(billingtest.SQLite(t))
		clk := billingtest.NewClock(at)
		sy := newSyncer(t, config(base), s, billing.NewGuard(clk, time.Hour), clk)
		u, err := sy.Checkout(context.Background(), "t1", "https://app.test/ok", "https://app.test/cancel")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(u, "https://") {
			t.Errorf("checkout url = %q", u)
		}
		if a, err := s.Account(context.Background(), "t1"); err != nil || a.StripeCustomerID == "" {
			t.Errorf("checkout did not create the customer first: %+v, %v", a, err)
		}
	})
}

// event builds a Stripe event JSON.
func event(id, typ string, created time.Time, object map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": typ, "created": created.Unix(), "api_version": "2020-08-27",
		"data": map[string]any{"object": object},
	})
	return b
}

func sign(payload []byte, secret string, at time.Time) string {
	return fmt.Sprintf("t=%d,v1=%s", at.Unix(), hex.EncodeToString(webhook.ComputeSignature(at, payload, secret)))
}

type webhookReply struct {
	Received bool `json:"received"`
	Applied  bool `json:"applied"`
	Error    *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func postWebhook(t *testing.T, srv *api.Server, payload []byte, sig string) (int, webhookReply) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/api/v1/billing/webhook", bytes.NewReader(payload))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Stripe-Signature", sig)
	resp, err := srv.App().Test(req, 10000)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r webhookReply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("webhook reply: %v", err)
	}
	return resp.StatusCode, r
}

func TestWebhooks(t *testing.T) {
	_, base := newRecorder(t)
	eachEngineAndShift(t, func(t *testing.T, name string, s store, now time.Time) {
		ctx := context.Background()
		clk := billingtest.NewClock(now)
		const grace = 72 * time.Hour
		guard := billing.NewGuard(clk, grace)
		sy := newSyncer(t, config(base), s, guard, clk)
		srv := api.New(api.Config{}, api.Deps{Billing: sy, Usage: s,
			BillingTenant: func(c *fiber.Ctx) (string, bool) { return c.Get("X-Test-Tenant"), c.Get("X-Test-Tenant") != "" }})
		if err := s.SetCustomer(ctx, "t1", "cus_w_"+name, now); err != nil {
			t.Fatal(err)
		}
		failed := event("evt_fail_"+name, "invoice.payment_failed", now, map[string]any{
			"id": "in_1", "object": "invoice", "customer": "cus_w_" + name, "status": "open"})

		// Wrong secret and tampered body are refused with 400.
		if code, r := postWebhook(t, srv, failed, sign(failed, "whsec_wrong", now)); code != 400 || r.Error == nil || r.Error.Code != "invalid_signature" {
			t.Errorf("wrong secret: %d %+v, want 400 invalid_signature", code, r)
		}
		tampered := bytes.Replace(failed, []byte("open"), []byte("paid"), 1)
		if code, _ := postWebhook(t, srv, tampered, sign(failed, whsec, now)); code != 400 {
			t.Errorf("tampered body: status %d, want 400", code)
		}
		// The signature's age is judged by the Syncer's clock: older than
		// the tolerance is refused, however the real clock compares.
		stale := sign(failed, whsec, now.Add(-stripesync.DefaultConfig().WebhookTolerance-time.Second))
		if code, r := postWebhook(t, srv, failed, stale); code != 400 || r.Error == nil || r.Error.Code != "invalid_signature" {
			t.Errorf("signature older than the tolerance: %d %+v, want 400 invalid_signature", code, r)
		}
		if a, err := s.Account(ctx, "t1"); err != nil || !a.PastDueSince.IsZero() {
			t.Fatalf("a refused webhook changed the account: %+v %v", a, err)
		}

		// Signed: applied once; the replay is acknowledged with no effect.
		if code, r := postWebhook(t, srv, failed, sign(failed, whsec, now)); code != 200 || !r.Applied {
			t.Fatalf("signed payment_failed: %d %+v, want 200 applied", code, r)
		}
		if code, r := postWebhook(t, srv, failed, sign(failed, whsec, now)); code != 200 || r.Applied {
			t.Errorf("replayed payment_failed: %d %+v, want 200 not applied", code, r)
		}
		a, _ := s.Account(ctx, "t1")
		if !a.PastDueSince.Equal(now) {
			t.Errorf("past due since %v, want %v", a.PastDueSince, now)
		}
		if err := guard.Check(billing.Limits{TenantID: "t1"}); err != nil {
			t.Errorf("within the grace period: Check = %v, want nil", err)
		}
		clk.Set(now.Add(grace + time.Minute))
		if err := guard.Check(billing.Limits{TenantID: "t1"}); !errors.Is(err, billing.ErrPaymentRequired) {
			t.Errorf("past the grace period: Check = %v, want ErrPaymentRequired", err)
		}

		// Paying restores service; replaying the old failure must not suspend again.
		paid := event("evt_paid_"+name, "invoice.paid", now.Add(grace), map[string]any{
			"id": "in_1", "object": "invoice", "customer": "cus_w_" + name, "status": "paid"})
		if code, r := postWebhook(t, srv, paid, sign(paid, whsec, clk.Now())); code != 200 || !r.Applied {
			t.Fatalf("invoice.paid: %d %+v", code, r)
		}
		if code, r := postWebhook(t, srv, failed, sign(failed, whsec, clk.Now())); code != 200 || r.Applied {
			t.Errorf("late replay of payment_failed: %d %+v, want 200 not applied", code, r)
		}
		if err := guard.Check(billing.Limits{TenantID: "t1"}); err != nil {
			t.Errorf("after payment: Check = %v, want nil", err)
		}

		// Subscription events set the plan state shown by GET /api/v1/billing.
		end := now.Add(30 * 24 * time.Hour)
		sub := event("evt_sub_"+name, "customer.subscription.updated", now.Add(grace+time.Minute), map[string]any{
			"id": "sub_1", "object": "subscription", "customer": "cus_w_" + name, "status": "active",
			"current_period_end": end.Unix(), "metadata": map[string]string{},
			"items": map[string]any{"object": "list", "data": []any{map[string]any{"id": "si_1", "object": "subscription_item",
				"price": map[string]any{"id": "price_metered", "object": "price"}}}}})
		if code, r := postWebhook(t, srv, sub, sign(sub, whsec, clk.Now())); code != 200 || !r.Applied {
			t.Fatalf("subscription.updated: %d %+v", code, r)
		}
		// Stripe does not deliver in order: an older update arriving late changes nothing.
		old := event("evt_sub_old_"+name, "customer.subscription.updated", now.Add(time.Hour), map[string]any{
			"id": "sub_1", "object": "subscription", "customer": "cus_w_" + name, "status": "past_due", "metadata": map[string]string{}})
		if code, _ := postWebhook(t, srv, old, sign(old, whsec, clk.Now())); code != 200 {
			t.Fatalf("late subscription.updated: %d", code)
		}
		req := httptest.NewRequest(http.MethodGet, "/api/v1/billing", nil)
		req.Header.Set("X-Test-Tenant", "t1")
		resp, err := srv.App().Test(req, 10000)
		if err != nil {
			t.Fatal(err)
		}
		var ov billing.Overview
		if err := json.NewDecoder(resp.Body).Decode(&ov); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /api/v1/billing: %d %v", resp.StatusCode, err)
		}
		resp.Body.Close()
		got := []any{ov.StripeConfigured, ov.Plan, ov.SubscriptionID, ov.SubscriptionStatus, ov.CurrentPeriodEnd.Unix(), ov.Suspended}
		if diff := cmp.Diff([]any{true, "metered", "sub_1", "active", end.Unix(), false}, got); diff != "" {
			t.Errorf("overview (-want +got):\n%s", diff)
		}
	})
}
