package billing

import (
	"errors"
	"math"
	"time"
)

// Pricing is the operator's plan price: what a tenant is charged for one
// served request. The rule is
//
//	billed = CostUSD × Markup + (PromptTokens + OutputTokens) × PerMTokUSD / 1e6
//
// so an operator can resell instance time at a margin (Markup 1.2, PerMTokUSD
// 0), charge a flat token price (Markup 0, PerMTokUSD 0.5), or both. An event
// that arrives with BilledUSD already set (a caller with its own plan
// logic) keeps its amount.
type Pricing struct {
	// Markup multiplies the instance cost; default 1 (pass-through).
	Markup float64
	// PerMTokUSD is a flat price per million tokens (input + output).
	PerMTokUSD float64
}

// DefaultPricing passes the instance cost through unchanged.
func DefaultPricing() Pricing { return Pricing{Markup: 1} }

// Validate reports a negative or non-finite price.
func (p Pricing) Validate() error {
	for _, v := range []float64{p.Markup, p.PerMTokUSD} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return errors.New("billing pricing: markup and per-million-token price must be finite and ≥ 0")
		}
	}
	return nil
}

// Bill returns the billed amount of ev under p.
func (p Pricing) Bill(ev *UsageEvent) float64 {
	if ev.BilledUSD > 0 {
		return ev.BilledUSD
	}
	tokens := float64(ev.PromptTokens + ev.OutputTokens)
	return ev.CostUSD*p.Markup + tokens*p.PerMTokUSD/1e6
}

// Clock tells the time; routing.WallClock and test clocks satisfy it.
type Clock interface {
	Now() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// PeriodStart returns the start of the billing period containing t: the
// first instant of its calendar month in UTC.
func PeriodStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}
