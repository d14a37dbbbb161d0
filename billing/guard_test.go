package billing

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

// usd converts a literal dollar amount in tests.
func usd(t testing.TB, v float64) Nano {
	t.Helper()
	n, err := NanoFromUSD(v)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPricingBill(t *testing.T) {
	tests := []struct {
		name string
		p    Pricing
		ev   UsageEvent
		want Nano
	}{
		{"pass-through", DefaultPricing(), UsageEvent{Cost: 20_000_000, PromptTokens: 100}, 20_000_000},
		{"markup", Pricing{Markup: 1.5}, UsageEvent{Cost: 20_000_000}, 30_000_000},
		{"markup rounds once", Pricing{Markup: 1.2}, UsageEvent{Cost: 3}, 4}, // 3.6 → 4
		{"token price", Pricing{PerMTokUSD: 2}, UsageEvent{Cost: 500_000_000, PromptTokens: 400_000, OutputTokens: 100_000}, NanoPerUSD},
		{"both", Pricing{Markup: 2, PerMTokUSD: 1}, UsageEvent{Cost: 250_000_000, PromptTokens: 1_000_000}, 1_500_000_000},
		{"preset amount kept", Pricing{Markup: 9}, UsageEvent{Cost: NanoPerUSD, Billed: 700_000_000}, 700_000_000},
		{"negative tokens count 0", Pricing{PerMTokUSD: 1}, UsageEvent{PromptTokens: -5}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.p.Bill(&tt.ev)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Bill (-want +got):\n%s", diff)
			}
		})
	}
	for _, p := range []Pricing{{Markup: -1}, {Markup: math.NaN()}, {Markup: math.Inf(1)}, {PerMTokUSD: math.Inf(1)}, {PerMTokUSD: 1e308}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v validated", p)
		}
	}
	// A cost × markup beyond MaxNano is refused, not wrapped.
	if got, err := (Pricing{Markup: MaxMarkup}).Bill(&UsageEvent{Cost: MaxNano / 2}); !errors.Is(err, ErrBadAmount) || got != 0 {
		t.Errorf("overflowing Bill = %v, %v; want 0, ErrBadAmount", got, err)
	}
}

func TestPriceRefusesNonFinite(t *testing.T) {
	// The probe's case: price_in_per_mtok 1e308 makes the float cost +Inf.
	inf := (1e308*10 + 0*1e308) / 1e6 // +Inf, computed like routing.Instance.CostUSD
	tests := []struct {
		name       string
		ev         UsageEvent
		wantCost   Nano
		wantBilled Nano
		wantErr    bool
	}{
		{"finite float cost converted", UsageEvent{CostUSD: 0.000_000_123, PromptTokens: 10}, 123, 123 + 10, false},
		{"+Inf cost refused", UsageEvent{CostUSD: inf, PromptTokens: 10}, 0, 10, true},
		{"NaN cost refused", UsageEvent{CostUSD: math.NaN()}, 0, 0, true},
		{"negative cost refused", UsageEvent{CostUSD: -1}, 0, 0, true},
		{"huge cost refused", UsageEvent{CostUSD: 1e300}, 0, 0, true},
		{"negative integer cost refused", UsageEvent{Cost: -5}, 0, 0, true},
	}
	p := Pricing{Markup: 1, PerMTokUSD: 0.001} // 0.001 $/Mtok = 1 nano per token
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := tt.ev
			err := p.Price(&ev)
			if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrBadAmount)) {
				t.Fatalf("Price err = %v, want error %v (ErrBadAmount)", err, tt.wantErr)
			}
			if ev.Cost != tt.wantCost || ev.Billed != tt.wantBilled || ev.CostUSD != 0 {
				t.Errorf("cost %d billed %d costUSD %v, want %d %d 0", ev.Cost, ev.Billed, ev.CostUSD, tt.wantCost, tt.wantBilled)
			}
		})
	}
}

func TestTokenCost(t *testing.T) {
	tests := []struct {
		name        string
		in, out     int
		pIn, pOut   float64
		want        Nano
		wantRefused bool
	}{
		{"simple", 1000, 500, 0.2, 0.6, 200_000 + 300_000, false},
		{"rounds half up", 1, 0, 0.0005, 0, 1, false}, // 0.5 nano
		{"tiny stays below", 1, 0, 0.0004, 0, 0, false},
		{"large exact", 10_000_000, 10_000_000, 1e4, 1e4, 2e5 * NanoPerUSD, false},
		{"price 1e308 refused", 10, 10, 1e308, 0, 0, true},
		{"+Inf refused", 10, 10, 0, math.Inf(1), 0, true},
		{"NaN refused", 10, 10, math.NaN(), 0, 0, true},
		{"negative refused", 10, 10, -1, 0, 0, true},
		{"overflow refused", math.MaxInt, math.MaxInt, MaxUSD, MaxUSD, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TokenCost(tt.in, tt.out, tt.pIn, tt.pOut)
			if tt.wantRefused {
				if !errors.Is(err, ErrBadAmount) {
					t.Fatalf("TokenCost = %v, %v; want ErrBadAmount", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("TokenCost = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestNanoConversions(t *testing.T) {
	if got := usd(t, 0.1); got != 100_000_000 {
		t.Errorf("0.1 USD = %d nano", got)
	}
	if got := Nano(1_500_000_001).String(); got != "1.500000001" {
		t.Errorf("String = %q", got)
	}
	if got := Nano(-1).String(); got != "-0.000000001" {
		t.Errorf("String(-1) = %q", got)
	}
	if got := MaxNano.Add(1); got != MaxNano {
		t.Errorf("MaxNano+1 = %d, want saturation", got)
	}
	if got := Nano(math.MinInt64).Add(-1); got != math.MinInt64 {
		t.Errorf("MinInt64-1 = %d, want saturation", got)
	}
	if got := MaxNano.USD(); math.IsInf(got, 0) || got < 9.2e9 {
		t.Errorf("MaxNano.USD() = %v", got)
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -0.01, 1e10} {
		if _, err := NanoFromUSD(v); !errors.Is(err, ErrBadAmount) {
			t.Errorf("NanoFromUSD(%v) = %v, want ErrBadAmount", v, err)
		}
	}
	if got := BudgetFromUSD(math.Inf(1)); got != MaxNano {
		t.Errorf("BudgetFromUSD(+Inf) = %d", got)
	}
	if got := BudgetFromUSD(math.NaN()); got != 0 {
		t.Errorf("BudgetFromUSD(NaN) = %d", got)
	}
}

// TestMillionTinyRequestsSumExactly is issue 16 item 8's check: 10⁶
// requests of 1 nano-USD each (and 10⁶ of 0.1 µUSD through the float edge)
// add up to exactly the product, in the Guard as in the usage totals;
// float64 addition of the same amounts drifts.
func TestMillionTinyRequestsSumExactly(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	g := NewGuard(&fixedClock{now}, time.Hour)
	acc := NewAccumulator()
	p := DefaultPricing()
	var float float64
	const n = 1_000_000
	for i := range n {
		ev := UsageEvent{TenantID: "t", KeyID: "k", FinishedAt: now, CostUSD: 1e-7} // 100 nano
		if i%2 == 1 {
			ev = UsageEvent{TenantID: "t", KeyID: "k", FinishedAt: now, Cost: 1}
		}
		float += 1e-7
		if err := p.Price(&ev); err != nil {
			t.Fatal(err)
		}
		g.book(&ev)
		acc.Add(UsageSample{Cost: ev.Cost, Billed: ev.Billed})
	}
	want := Nano(n/2*100 + n/2*1)
	if got := g.Spent("t"); got != want {
		t.Errorf("guard spend = %d nano, want exactly %d", got, want)
	}
	row := acc.Rows()[0]
	if row.Cost != want || row.Billed != want {
		t.Errorf("usage totals cost %d billed %d, want exactly %d", row.Cost, row.Billed, want)
	}
	if float == 0.1 {
		t.Log("float64 happened to sum 10⁶ × 1e-7 exactly")
	} else {
		t.Logf("float64 sum of 10⁶ × 1e-7 = %.17g (≠ 0.1): why money is integers", float)
	}
}

func TestGuardCheck(t *testing.T) {
	now := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	clk := &fixedClock{now}
	g := NewGuard(clk, 72*time.Hour)
	g.book(&UsageEvent{TenantID: "t1", KeyID: "k1", FinishedAt: now, Billed: usd(t, 2)})
	g.load(PeriodStart(now), []PeriodSpend{{TenantID: "t1", KeyID: "k1", Billed: usd(t, 4)}})
	g.book(&UsageEvent{TenantID: "t1", KeyID: "k2", FinishedAt: now, Billed: usd(t, 3)})
	g.book(&UsageEvent{TenantID: "t1", KeyID: "k1", FinishedAt: now.AddDate(0, -1, 0), Billed: usd(t, 100)}) // last month: ignored
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
		if got := Percentile(append([]float64(nil), tt.xs...), tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tt.xs, tt.p, got, tt.want)
		}
	}
}
