package redisspend

import (
	"context"
	"errors"

	"github.com/routebalance/routebalance/billing"
)

// Checker is the spend check Guard wraps (*billing.Guard): payment
// standing and this replica's own view of the budgets.
type Checker interface {
	Check(l billing.Limits) error
}

// Guard is the budget check of a replica when spend is shared: the inner
// check first (a suspended tenant, or a budget spent in this replica's own
// view), then the budgets against the shared month totals. It satisfies
// the same one-method Check as *billing.Guard.
type Guard struct {
	inner    Checker
	counters *Counters
}

// NewGuard wraps inner with the shared counters.
func NewGuard(inner Checker, c *Counters) *Guard { return &Guard{inner: inner, counters: c} }

// Check returns inner's error, else a *billing.BudgetError when the shared
// spend of the key or the tenant this month has reached its budget. When
// Redis cannot be read it returns nil (fail open: the inner check was this
// replica's view) or an error matching ErrUnavailable (fail closed); a
// request without any budget never reads Redis.
func (g *Guard) Check(l billing.Limits) error {
	return g.CheckContext(context.Background(), l)
}

// CheckContext is Check bounded by ctx as well as Config.Timeout.
func (g *Guard) CheckContext(ctx context.Context, l billing.Limits) error {
	if err := g.inner.Check(l); err != nil {
		return err
	}
	tBudget, kBudget := l.Budgets()
	keyBudget := kBudget > 0 && l.KeyID != ""
	if tBudget <= 0 && !keyBudget {
		return nil
	}
	keyID := ""
	if keyBudget {
		keyID = l.KeyID
	}
	tn, kn, err := g.counters.Spent(ctx, l.TenantID, keyID)
	if err != nil {
		if g.counters.cfg.Fail == FailClosed {
			return err
		}
		return nil
	}
	period := billing.PeriodStart(g.counters.clock.Now())
	if keyBudget && billing.Nano(kn) >= kBudget {
		return billing.NewBudgetError(billing.ScopeKey, l.KeyID, kBudget, billing.Nano(kn), period)
	}
	if tBudget > 0 && billing.Nano(tn) >= tBudget {
		return billing.NewBudgetError(billing.ScopeTenant, l.TenantID, tBudget, billing.Nano(tn), period)
	}
	return nil
}

// IsUnavailable reports whether err is the fail-closed refusal.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// Recorder is the meter Meter wraps (*billing.Meter).
type Recorder interface {
	Record(ev billing.UsageEvent)
}

// Meter records each usage event with the inner meter and adds its billed
// amount to the shared counters. It prices the event first with the same
// Pricing the inner meter uses (an event whose Billed is set keeps it),
// so the shared and the ledger's amounts agree.
type Meter struct {
	inner    Recorder
	counters *Counters
	pricing  billing.Pricing
}

// NewMeter wraps inner; pricing must be the inner meter's.
func NewMeter(inner Recorder, c *Counters, pricing billing.Pricing) *Meter {
	return &Meter{inner: inner, counters: c, pricing: pricing}
}

// Record prices ev, records it with the inner meter and counts its billed
// amount in the shared spend of its tenant and key. It never blocks.
func (m *Meter) Record(ev billing.UsageEvent) {
	_ = m.pricing.Price(&ev) // a refused amount counts 0, as in the ledger; the inner meter logs it
	m.inner.Record(ev)
	m.counters.Add(ev.FinishedAt, ev.TenantID, ev.KeyID, int64(ev.Billed))
}
