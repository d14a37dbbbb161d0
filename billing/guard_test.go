package billing

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

func TestPricingBill(t *testing.T) {
	tests := []struct {
		name string
		p    Pricing
		ev   UsageEvent
		want float64
	}{
		{"pass-through", DefaultPricing(), UsageEvent{CostUSD: 0.02, PromptTokens: 100}, 0.02},
		{"markup", Pricing{Markup: 1.5}, UsageEvent{CostUSD: 0.02}, 0.03},
		{"token price", Pricing{PerMTokUSD: 2}, UsageEvent{CostUSD: 0.5, PromptTokens: 400_000, OutputTokens: 100_000}, 1},
		{"both", Pricing{Markup: 2, PerMTokUSD: 1}, UsageEvent{CostUSD: 0.25, PromptTokens: 1_000_000}, 1.5},
		{"preset amount kept", Pricing{Markup: 9}, UsageEvent{CostUSD: 1, BilledUSD: 0.7}, 0.7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Bill(&tt.ev)
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(func(a, b float64) bool { return abs(a-b) < 1e-12 })); diff != "" {
				t.Errorf("Bill (-want +got):\n%s", diff)
			}
		})
	}
	if err := (Pricing{Markup: -1}).Validate(); err == nil {
		t.Error("negative markup validated")
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func TestGuardCheck(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	clk := &fixedClock{now}
	g := NewGuard(clk, 72*time.Hour)
	g.book(&UsageEvent{TenantID: "t1", KeyID: "k1", FinishedAt: now, BilledUSD: 2})
	g.load(PeriodStart(now), []PeriodSpend{{TenantID: "t1", KeyID: "k1", USD: 4}})
	g.book(&UsageEvent{TenantID: "t1", KeyID: "k2", FinishedAt: now, BilledUSD: 3})
	g.book(&UsageEvent{TenantID: "t1", KeyID: "k1", FinishedAt: now.AddDate(0, -1, 0), BilledUSD: 100}) // last month: ignored
	g.SetStanding(Account{TenantID: "late", SubscriptionStatus: "past_due", PastDueSince: now.Add(-73 * time.Hour)})
	g.SetStanding(Account{TenantID: "grace", SubscriptionStatus: "past_due", PastDueSince: now.Add(-time.Hour)})

	tests := []struct {
		name      string
		l         Limits
		wantScope string // "" = allowed
		wantSusp  bool
	}{
		{"no budgets", Limits{TenantID: "t1", KeyID: "k1"}, "", false},
		{"tenant under", Limits{TenantID: "t1", KeyID: "k1", TenantMonthlyUSD: 10}, "", false},
		{"tenant reached", Limits{TenantID: "t1", KeyID: "k2", TenantMonthlyUSD: 9}, ScopeTenant, false},
		{"key reached", Limits{TenantID: "t1", KeyID: "k1", TenantMonthlyUSD: 100, KeyMonthlyUSD: 5}, ScopeKey, false},
		{"other key under", Limits{TenantID: "t1", KeyID: "k2", KeyMonthlyUSD: 5}, "", false},
		{"overdue past grace", Limits{TenantID: "late"}, "", true},
		{"overdue within grace", Limits{TenantID: "grace"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := g.Check(tt.l)
			var be *BudgetError
			var se *SuspendedError
			switch {
			case tt.wantSusp:
				if !errors.As(err, &se) || !errors.Is(err, ErrPaymentRequired) {
					t.Fatalf("Check = %v, want SuspendedError", err)
				}
			case tt.wantScope != "":
				if !errors.As(err, &be) || !errors.Is(err, ErrBudgetExceeded) {
					t.Fatalf("Check = %v, want BudgetError", err)
				}
				if be.Scope != tt.wantScope {
					t.Errorf("scope = %q, want %q", be.Scope, tt.wantScope)
				}
			case err != nil:
				t.Fatalf("Check = %v, want nil", err)
			}
		})
	}

	// A new month starts from zero.
	clk.t = time.Date(2026, 12, 1, 0, 0, 1, 0, time.UTC)
	if err := g.Check(Limits{TenantID: "t1", TenantMonthlyUSD: 1}); err != nil {
		t.Errorf("new month: Check = %v, want nil", err)
	}
	if got := g.Spent("t1"); got != 0 {
		t.Errorf("new month spend = %v, want 0", got)
	}
	// Paying clears the suspension.
	g.SetStanding(Account{TenantID: "late", SubscriptionStatus: "active"})
	if err := g.Check(Limits{TenantID: "late"}); err != nil {
		t.Errorf("after payment: Check = %v", err)
	}
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{nil, 0.95, 0},
		{[]float64{5}, 0.95, 5},
		{[]float64{1, 2, 3, 4, 5}, 0.5, 3},
		{[]float64{10, 20}, 0.95, 19.5},
		{[]float64{4, 1, 3, 2}, 1, 4},
	}
	for _, tt := range tests {
		if got := Percentile(append([]float64(nil), tt.xs...), tt.p); abs(got-tt.want) > 1e-9 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tt.xs, tt.p, got, tt.want)
		}
	}
}
