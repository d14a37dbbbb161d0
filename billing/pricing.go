package billing

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Pricing is the operator's plan price: what a tenant is charged for one
// served request. The rule, computed in integers (Nano), is
//
//	billed = Cost × Markup + (PromptTokens + OutputTokens) × PerMTokUSD / 10⁶
//
// so an operator can resell instance time at a margin (Markup 1.2, PerMTokUSD
// 0), charge a flat token price (Markup 0, PerMTokUSD 0.5), or both. Markup
// is applied in millionths (1.2 → 1 200 000 / 10⁶) and the token price in
// Nano per million tokens, each product rounded once to the nearest
// nano-USD. An event that arrives with Billed already set (a caller with its
// own plan logic) keeps its amount.
type Pricing struct {
	// Markup multiplies the instance cost; default 1 (pass-through);
	// 0 … MaxMarkup.
	Markup float64
	// PerMTokUSD is a flat price per million tokens (input + output);
	// 0 … MaxUSD.
	PerMTokUSD float64
}

// MaxMarkup is the largest Markup Validate accepts.
const MaxMarkup = 1e6

// DefaultPricing passes the instance cost through unchanged.
func DefaultPricing() Pricing { return Pricing{Markup: 1} }

// Validate reports a negative, non-finite or too large price.
func (p Pricing) Validate() error {
	if math.IsNaN(p.Markup) || p.Markup < 0 || p.Markup > MaxMarkup {
		return fmt.Errorf("billing pricing: markup must be finite, ≥ 0 and ≤ %g, got %v", float64(MaxMarkup), p.Markup)
	}
	if _, err := NanoFromUSD(p.PerMTokUSD); err != nil {
		return fmt.Errorf("billing pricing: per-million-token price: %w", err)
	}
	return nil
}

// Bill returns the billed amount of ev under p: ev.Billed when the caller
// set it, else the rule above on ev.Cost and the tokens. A result beyond
// MaxNano, or a p that fails Validate, is refused with an error wrapping
// ErrBadAmount (and 0).
func (p Pricing) Bill(ev *UsageEvent) (Nano, error) {
	if ev.Billed > 0 {
		return ev.Billed, nil
	}
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadAmount, err)
	}
	markup := uint64(math.Round(p.Markup * 1e6))
	perMTok, _ := NanoFromUSD(p.PerMTokUSD) // checked by Validate
	c, ok := mulDiv(uint64(max(ev.Cost, 0)), markup, 1_000_000)
	if !ok {
		return 0, fmt.Errorf("%w: cost × markup overflows", ErrBadAmount)
	}
	tokens := uint64(max(ev.PromptTokens, 0)) + uint64(max(ev.OutputTokens, 0))
	t, ok := mulDiv(tokens, uint64(perMTok), 1_000_000)
	if !ok {
		return 0, fmt.Errorf("%w: token price overflows", ErrBadAmount)
	}
	if c > MaxNano-t {
		return 0, fmt.Errorf("%w: billed amount overflows", ErrBadAmount)
	}
	return c + t, nil
}

// Price settles ev's money in integers before it is metered: a deprecated
// float CostUSD is converted into Cost (when Cost is 0) and Billed is set
// with Bill. A refused amount — NaN, ±Inf, negative or huge, as a price of
// 1e308 per million tokens produces — is stored as 0 and reported in the
// returned error (wrapping ErrBadAmount); the event itself stays valid, so
// the request is still metered exactly once. CostUSD is 0 afterwards.
func (p Pricing) Price(ev *UsageEvent) error {
	var errs []error
	if ev.Cost < 0 {
		errs = append(errs, fmt.Errorf("cost: %w: got %d nano-USD", ErrBadAmount, int64(ev.Cost)))
		ev.Cost = 0
	}
	if ev.Cost == 0 && ev.CostUSD != 0 {
		c, err := NanoFromUSD(ev.CostUSD)
		if err != nil {
			errs = append(errs, fmt.Errorf("cost: %w", err))
		}
		ev.Cost = c
	}
	ev.CostUSD = 0
	if ev.Billed < 0 {
		errs = append(errs, fmt.Errorf("billed: %w: got %d nano-USD", ErrBadAmount, int64(ev.Billed)))
		ev.Billed = 0
	}
	b, err := p.Bill(ev)
	if err != nil {
		errs = append(errs, fmt.Errorf("billed: %w", err))
	}
	ev.Billed = b
	return errors.Join(errs...)
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
