package billing

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors of the billing domain. Use errors.Is; the typed errors
// below unwrap to them.
var (
	// ErrBudgetExceeded means a monthly budget (tenant or key) is spent.
	ErrBudgetExceeded = errors.New("budget exceeded")
	// ErrPaymentRequired means the tenant's subscription is unpaid past
	// the grace period.
	ErrPaymentRequired = errors.New("payment required")
	// ErrStripeDisabled means the operator has not configured Stripe.
	ErrStripeDisabled = errors.New("stripe is not configured on this server")
	// ErrNotFound means no billing record exists for the id.
	ErrNotFound = errors.New("not found")
	// ErrBadSignature means a webhook's Stripe-Signature did not verify.
	ErrBadSignature = errors.New("webhook signature verification failed")
	// ErrInvalid means a caller's input is malformed.
	ErrInvalid = errors.New("invalid input")
)

// Budget scopes named by BudgetError.Scope.
const (
	ScopeTenant = "tenant"
	ScopeKey    = "key"
)

// BudgetError says which monthly budget a request hit. It unwraps to
// ErrBudgetExceeded; the api maps it to 402.
type BudgetError struct {
	// Scope is ScopeTenant or ScopeKey.
	Scope string
	// ID is the tenant id or the key id.
	ID string
	// Limit is the budget and Spent the month's billed spend.
	Limit, Spent Nano
	// LimitUSD and SpentUSD are Limit and Spent in dollars, for messages
	// (set by the Guard; Error uses them when Limit is 0).
	LimitUSD float64
	SpentUSD float64
	// Period is the start of the month the spend belongs to.
	Period time.Time
}

// NewBudgetError returns the BudgetError of a scope whose spend reached
// its limit in the month starting at period, with the dollar fields set.
func NewBudgetError(scope, id string, limit, spent Nano, period time.Time) *BudgetError {
	return &BudgetError{Scope: scope, ID: id, Limit: limit, Spent: spent,
		LimitUSD: limit.USD(), SpentUSD: spent.USD(), Period: period}
}

func (e *BudgetError) Error() string {
	limit, spent := e.LimitUSD, e.SpentUSD
	if e.Limit != 0 {
		limit, spent = e.Limit.USD(), e.Spent.USD()
	}
	return fmt.Sprintf("%s monthly budget of %s reached (%s spent since %s)",
		e.Scope, FormatUSD(limit), FormatUSD(spent), e.Period.Format("2006-01-02"))
}

// Unwrap returns ErrBudgetExceeded.
func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }

// SuspendedError says the tenant's subscription is unpaid past the grace
// period. It unwraps to ErrPaymentRequired; the api maps it to 402.
type SuspendedError struct {
	TenantID string
	// Status is the Stripe subscription status ("past_due", "unpaid", …).
	Status string
	// Since is when the payment first failed.
	Since time.Time
}

func (e *SuspendedError) Error() string {
	return fmt.Sprintf("subscription payment overdue since %s (status %s): inference is suspended until the invoice is paid",
		e.Since.UTC().Format(time.RFC3339), e.Status)
}

// Unwrap returns ErrPaymentRequired.
func (e *SuspendedError) Unwrap() error { return ErrPaymentRequired }
