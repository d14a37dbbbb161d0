package billing

import (
	"sync"
	"time"
)

// Guard is the spend-control check the inference path runs before
// routing. It keeps the current month's spend per tenant and per key in
// memory (loaded from the ledger when the meter starts, updated by every
// Record) and the payment standing of each tenant (loaded from the
// accounts table, updated by webhooks), so Check costs no database round
// trip. Safe for concurrent use.
type Guard struct {
	clock Clock
	grace time.Duration

	mu     sync.RWMutex
	period time.Time          // month the spend maps belong to
	tenant map[string]float64 // tenant id → billed USD this period
	key    map[string]float64 // key id → billed USD this period
	// overdue maps a tenant to the account whose payment is overdue.
	overdue map[string]Account
}

// NewGuard returns a Guard with no spend. grace is how long a tenant whose
// payment failed keeps being served; clock may be nil for wall time.
func NewGuard(clock Clock, grace time.Duration) *Guard {
	if clock == nil {
		clock = wallClock{}
	}
	return &Guard{
		clock:   clock,
		grace:   grace,
		period:  PeriodStart(clock.Now()),
		tenant:  map[string]float64{},
		key:     map[string]float64{},
		overdue: map[string]Account{},
	}
}

// Limits are the monthly budgets that apply to one request; 0 means none.
type Limits struct {
	TenantID string
	KeyID    string
	// TenantMonthlyUSD is tenants.Settings.SLO.MonthlyBudgetUSD of the tenant.
	TenantMonthlyUSD float64
	// KeyMonthlyUSD is the key's own SLO.MonthlyBudgetUSD override.
	KeyMonthlyUSD float64
}

// Check returns a *SuspendedError when the tenant's payment is overdue past
// the grace period, a *BudgetError when the tenant's or the key's spend
// this month has reached its budget, else nil. The inference path calls it
// before routing; it never touches the database.
func (g *Guard) Check(l Limits) error {
	now := g.clock.Now()
	g.mu.RLock()
	defer g.mu.RUnlock()
	if a, ok := g.overdue[l.TenantID]; ok && now.Sub(a.PastDueSince) >= g.grace {
		return &SuspendedError{TenantID: l.TenantID, Status: a.SubscriptionStatus, Since: a.PastDueSince}
	}
	period := PeriodStart(now)
	var tSpent, kSpent float64
	if period.Equal(g.period) {
		tSpent, kSpent = g.tenant[l.TenantID], g.key[l.KeyID]
	}
	if l.KeyMonthlyUSD > 0 && l.KeyID != "" && kSpent >= l.KeyMonthlyUSD {
		return &BudgetError{Scope: ScopeKey, ID: l.KeyID, LimitUSD: l.KeyMonthlyUSD, SpentUSD: kSpent, Period: period}
	}
	if l.TenantMonthlyUSD > 0 && tSpent >= l.TenantMonthlyUSD {
		return &BudgetError{Scope: ScopeTenant, ID: l.TenantID, LimitUSD: l.TenantMonthlyUSD, SpentUSD: tSpent, Period: period}
	}
	return nil
}

// Spent returns the tenant's billed spend in the current month.
func (g *Guard) Spent(tenantID string) float64 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !PeriodStart(g.clock.Now()).Equal(g.period) {
		return 0
	}
	return g.tenant[tenantID]
}

// add books usd (negative to take a duplicate back out) for a request that
// finished at t. Spend of an older month is ignored; a newer month starts
// a fresh period.
func (g *Guard) add(tenantID, keyID string, t time.Time, usd float64) {
	p := PeriodStart(t)
	g.mu.Lock()
	defer g.mu.Unlock()
	if p.Before(g.period) {
		return
	}
	if p.After(g.period) {
		g.rollLocked(p)
	}
	g.tenant[tenantID] += usd
	if keyID != "" {
		g.key[keyID] += usd
	}
}

func (g *Guard) rollLocked(p time.Time) {
	g.period = p
	g.tenant = map[string]float64{}
	g.key = map[string]float64{}
}

// PeriodSpend is the ledger's billed total for one tenant and key since a
// period start.
type PeriodSpend struct {
	TenantID string
	KeyID    string
	USD      float64
}

// load adds the ledger's totals for period to what Record has booked so
// far (events recorded before the flusher started are not in the ledger
// yet, so adding is exact).
func (g *Guard) load(period time.Time, rows []PeriodSpend) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if period.After(g.period) {
		g.rollLocked(period)
	}
	if !period.Equal(g.period) {
		return
	}
	for _, r := range rows {
		g.tenant[r.TenantID] += r.USD
		if r.KeyID != "" {
			g.key[r.KeyID] += r.USD
		}
	}
}

// SetStanding records a tenant's payment standing (from the accounts table
// or a webhook): an account with PastDueSince set is overdue.
func (g *Guard) SetStanding(a Account) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if a.PastDueSince.IsZero() {
		delete(g.overdue, a.TenantID)
		return
	}
	g.overdue[a.TenantID] = a
}

// Suspended reports whether Check would refuse the tenant for non-payment.
func (g *Guard) Suspended(tenantID string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	a, ok := g.overdue[tenantID]
	return ok && g.clock.Now().Sub(a.PastDueSince) >= g.grace
}
