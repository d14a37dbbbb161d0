package stripesync

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/billing/internal/billingtest"
	"github.com/routebalance/routebalance/billing/sqlitestore"
)

// FuzzHandleWebhook feeds the Stripe webhook handler arbitrary bodies,
// either with an arbitrary Stripe-Signature header or correctly signed
// (so the fuzzer reaches the event decoding behind the signature). It
// must never panic, must refuse every unsigned body, must answer only
// with the documented errors, and must apply a signed event at most once.
func FuzzHandleWebhook(f *testing.F) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	clk := billingtest.NewClock(now)
	st := sqlitestore.New(billingtest.SQLite(f))
	ctx := context.Background()
	if err := st.SetCustomer(ctx, "t1", "cus_1", now); err != nil {
		f.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SecretKey, cfg.WebhookSecret, cfg.APIBaseURL = "sk_test_fuzz", "whsec_fuzz", "http://127.0.0.1:1"
	sy, err := New(cfg, Deps{Accounts: st, Outbox: st, Usage: st, Guard: billing.NewGuard(clk, time.Hour), Clock: clk,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	ev := func(id, typ string, obj map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, "object": "event", "type": typ, "created": now.Unix(),
			"api_version": "2020-08-27", "data": map[string]any{"object": obj}})
		return b
	}
	for _, p := range [][]byte{
		ev("evt_1", "invoice.payment_failed", map[string]any{"id": "in_1", "object": "invoice", "customer": "cus_1"}),
		ev("evt_2", "invoice.paid", map[string]any{"id": "in_1", "object": "invoice", "customer": map[string]any{"id": "cus_1"}}),
		ev("evt_3", "customer.subscription.updated", map[string]any{"id": "sub_1", "object": "subscription", "customer": "cus_1",
			"status": "past_due", "current_period_end": now.Unix(), "metadata": map[string]string{"tenant_id": "t1"},
			"items": map[string]any{"object": "list", "data": []any{map[string]any{"price": map[string]any{"id": "price_1"}}}}}),
		ev("evt_4", "checkout.session.completed", map[string]any{"id": "cs_1", "client_reference_id": "t1", "customer": "cus_1", "subscription": "sub_1"}),
		ev("evt_5", "customer.subscription.deleted", map[string]any{"id": "sub_1", "customer": "cus_unknown"}),
		ev("evt_6", "invoice.paid", map[string]any{"customer": 7}),
		ev("", "invoice.paid", nil),
		[]byte(`{"id":"evt_7","type":"invoice.paid","data":null}`), []byte(`{`), []byte(``),
	} {
		f.Add(p, true, "")
		f.Add(p, false, "t=1764496800,v1=00")
	}
	sig := func(p []byte) string {
		return fmt.Sprintf("t=%d,v1=%s", now.Unix(), hex.EncodeToString(webhook.ComputeSignature(now, p, "whsec_fuzz")))
	}
	f.Fuzz(func(t *testing.T, payload []byte, signed bool, header string) {
		if signed {
			header = sig(payload)
		}
		applied, err := sy.HandleWebhook(ctx, payload, header)
		if err != nil {
			if !errors.Is(err, billing.ErrBadSignature) && !errors.Is(err, billing.ErrInvalid) {
				t.Fatalf("HandleWebhook error %v is neither ErrBadSignature nor ErrInvalid", err)
			}
			if signed && errors.Is(err, billing.ErrBadSignature) {
				t.Fatalf("a correctly signed body was refused as badly signed: %v", err)
			}
			return
		}
		if !signed && header != sig(payload) {
			t.Fatalf("HandleWebhook accepted a body with header %q it did not sign", header)
		}
		if applied {
			again, err := sy.HandleWebhook(ctx, payload, header)
			if err != nil || again {
				t.Fatalf("replaying an applied event: applied %v, %v; want false, nil", again, err)
			}
		}
	})
}
