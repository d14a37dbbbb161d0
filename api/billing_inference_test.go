package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing/dispatch/dispatchtest"
	"github.com/routebalance/routebalance/tenants"
)

// TestInferenceSpendCap meters real events (SQLite ledger) for a tenant
// and checks that /v1/chat/completions answers 402 in OpenAI's envelope,
// naming the budget that was hit, without reaching the router.
func TestInferenceSpendCap(t *testing.T) {
	store := billingSQLite(t)
	m, guard := runMeter(t, store)

	over := principal("t1", []tenants.Instance{inst("i1", "http://127.0.0.1:1", "m")})
	over.Settings.SLO.MonthlyBudgetUSD = 2
	keyOver := principal("t2", []tenants.Instance{inst("i1", "http://127.0.0.1:1", "m")})
	keyOver.Settings.SLO.MonthlyBudgetUSD = 100
	keyOver.Key.SLO = &tenants.SLO{MonthlyBudgetUSD: 0.5}
	for i, p := range []*tenants.Principal{over, over, keyOver} {
		m.Record(billing.UsageEvent{RequestID: fmt.Sprint("spend-", i), TenantID: p.Tenant.ID, KeyID: p.Key.ID, CostUSD: 1, Status: "ok"})
	}

	router := &dispatchtest.Router{Inner: newTestRouter()}
	keys := &keyTable{keys: map[string]*tenants.Principal{"k-over": over, "k-keyover": keyOver}, revoked: map[string]bool{}}
	s := New(Config{BodyLimit: 1 << 20}, Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Inference: InferenceDeps{Keys: keys, Router: router, Meter: m, Spend: guard}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.App().Listener(ln) }()
	t.Cleanup(func() { _ = s.App().ShutdownWithTimeout(5 * time.Second) })

	for _, tt := range []struct{ key, wantMsg string }{
		{"k-over", "tenant monthly budget of $2.00 reached"},
		{"k-keyover", "key monthly budget of $0.50 reached"},
	} {
		cl := openai.NewClient(option.WithBaseURL("http://"+ln.Addr().String()+"/v1/"), option.WithAPIKey(tt.key), option.WithMaxRetries(0))
		_, err := cl.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model:    "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("%s: err = %v, want an API error", tt.key, err)
		}
		if apiErr.StatusCode != 402 || apiErr.Code != "budget_exceeded" || apiErr.Type != typeInsufficient || !strings.HasPrefix(apiErr.Message, tt.wantMsg) {
			t.Errorf("%s: status %d code %q type %q message %q; want 402 budget_exceeded %s %q…", tt.key, apiErr.StatusCode, apiErr.Code, apiErr.Type, apiErr.Message, typeInsufficient, tt.wantMsg)
		}
	}
	if g, _, _ := router.Counts(); g != 0 || len(router.Requests()) != 0 {
		t.Errorf("refused requests reached the router: %d routed", len(router.Requests()))
	}
}
