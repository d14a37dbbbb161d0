package billing

import (
	"sync"
	"time"
)

// Guard is the spend-control check the inference path runs before
// routing. It keeps the current month's billed spend per tenant and per
// key in memory as two parts: what the ledger holds (loaded when the meter
// starts, reloaded every Config.SpendRefresh so replicas see each other's
// spend, and advanced by every batch this process writes) plus what this
// process has recorded but not yet written. Check therefore costs no
// database round trip. It also holds each tenant's payment standing
// (loaded from the accounts table, updated by webhooks). Safe for
// concurrent use.
type Guard struct {
	clock Clock
	grace time.Duration

	mu      sync.RWMutex
	period  time.Time // month the spend maps belong to
	ledger  spend     // in the ledger (last load + this process's writes since)
	pending spend     // recorded here, not yet written
	// overdue maps a tenant to the account whose payment is overdue.
	overdue map[string]Account
}

// spend is billed nano-USD per tenant and per key.
type spend struct {
	tenant map[string]Nano
	key    map[string]Nano
}

func newSpend() spend { return spend{tenant: map[string]Nano{}, key: map[string]Nano{}} }

func (s spend) add(tenantID, keyID string, n Nano) {
	s.tenant[tenantID] = s.tenant[tenantID].Add(n)
	if keyID != "" {
		s.key[keyID] = s.key[keyID].Add(n)
	}
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
		ledger:  newSpend(),
		pending: newSpend(),
		overdue: map[string]Account{},
	}
}

// Limits are the monthly budgets that apply to one request; 0 means none.
type Limits struct {
	TenantID string
	KeyID    string
	// TenantMonthly is the tenant's monthly budget
	// (tenants.Settings.SLO.MonthlyBudgetUSD, see BudgetFromUSD).
	TenantMonthly Nano
	// KeyMonthly is the key's own monthly budget override.
	KeyMonthly Nano
	// TenantMonthlyUSD is the tenant's budget in dollars.
	//
	// Deprecated: set TenantMonthly; used (through BudgetFromUSD) only
	// when TenantMonthly is 0.
	TenantMonthlyUSD float64
	// KeyMonthlyUSD is the key's budget in dollars.
	//
	// Deprecated: set KeyMonthly; used only when KeyMonthly is 0.
	KeyMonthlyUSD float64
}

// BudgetFromUSD converts a configured budget in dollars (a JSON setting)
// to Nano: 0, negative and NaN mean no budget; a budget beyond MaxUSD
// (+Inf included) is MaxNano, which no spend reaches.
func BudgetFromUSD(usd float64) Nano {
	switch {
	case !(usd > 0): // also NaN
		return 0
	case usd > MaxUSD:
		return MaxNano
	}
	n, _ := NanoFromUSD(usd)
	return n
}

// Budgets returns l's budgets in Nano, converting the deprecated fields
// (0 = no budget).
func (l Limits) Budgets() (tenant, key Nano) {
	tenant, key = l.TenantMonthly, l.KeyMonthly
	if tenant == 0 {
		tenant = BudgetFromUSD(l.TenantMonthlyUSD)
	}
	if key == 0 {
		key = BudgetFromUSD(l.KeyMonthlyUSD)
	}
	return tenant, key
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
	var tSpent, kSpent Nano
	if period.Equal(g.period) {
		tSpent = g.ledger.tenant[l.TenantID].Add(g.pending.tenant[l.TenantID])
		kSpent = g.ledger.key[l.KeyID].Add(g.pending.key[l.KeyID])
	}
	tBudget, kBudget := l.Budgets()
	if kBudget > 0 && l.KeyID != "" && kSpent >= kBudget {
		return NewBudgetError(ScopeKey, l.KeyID, kBudget, kSpent, period)
	}
	if tBudget > 0 && tSpent >= tBudget {
		return NewBudgetError(ScopeTenant, l.TenantID, tBudget, tSpent, period)
	}
	return nil
}

// Spent returns the tenant's billed spend in the current month.
func (g *Guard) Spent(tenantID string) Nano {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !PeriodStart(g.clock.Now()).Equal(g.period) {
		return 0
	}
	return g.ledger.tenant[tenantID].Add(g.pending.tenant[tenantID])
}

// inPeriodLocked reports whether a request that finished at t counts in
// the current period, starting a new period when t is in a later month.
func (g *Guard) inPeriodLocked(t time.Time) bool {
	p := PeriodStart(t)
	if p.Before(g.period) {
		return false
	}
	if p.After(g.period) {
		g.rollLocked(p)
	}
	return true
}

func (g *Guard) rollLocked(p time.Time) {
	g.period = p
	g.ledger, g.pending = newSpend(), newSpend()
}

// book adds a recorded, not yet written request.
func (g *Guard) book(ev *UsageEvent) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inPeriodLocked(ev.FinishedAt) {
		g.pending.add(ev.TenantID, ev.KeyID, ev.Billed)
	}
}

// settle moves a written request out of pending (when booked) and, when
// stored counts it into the ledger part. A duplicate (booked, not stored)
// just leaves pending.
func (g *Guard) settle(ev *UsageEvent, booked, stored bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.inPeriodLocked(ev.FinishedAt) {
		return
	}
	if booked {
		g.pending.add(ev.TenantID, ev.KeyID, -ev.Billed)
	}
	if stored {
		g.ledger.add(ev.TenantID, ev.KeyID, ev.Billed)
	}
}

// PeriodSpend is the ledger's billed total for one tenant and key since a
// period start.
type PeriodSpend struct {
	TenantID string
	KeyID    string
	Billed   Nano
}

// load replaces the ledger part with the ledger's totals for period. The
// meter calls it with no write of its own in flight (Meter.loadMu), so
// every batch this process committed is either in rows or settled after.
func (g *Guard) load(period time.Time, rows []PeriodSpend) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if period.After(g.period) {
		g.rollLocked(period)
	}
	if !period.Equal(g.period) {
		return
	}
	g.ledger = newSpend()
	for _, r := range rows {
		g.ledger.add(r.TenantID, r.KeyID, r.Billed)
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
