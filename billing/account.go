package billing

import (
	"strconv"
	"time"
)

// Account is a tenant's billing record: its Stripe customer and the state
// of its subscription as the webhooks last reported it.
type Account struct {
	TenantID         string `json:"tenant_id"`
	StripeCustomerID string `json:"stripe_customer_id,omitempty"`
	SubscriptionID   string `json:"subscription_id,omitempty"`
	// SubscriptionStatus is Stripe's status: active, trialing, past_due,
	// unpaid, canceled, incomplete… ("" when never subscribed).
	SubscriptionStatus string `json:"subscription_status,omitempty"`
	PriceID            string `json:"price_id,omitempty"`
	// CurrentPeriodEnd is the end of the paid subscription period.
	CurrentPeriodEnd time.Time `json:"current_period_end,omitzero"`
	// PastDueSince is when a payment first failed and has stayed unpaid;
	// zero while in good standing.
	PastDueSince time.Time `json:"past_due_since,omitzero"`
	// StateAt is when the newest Stripe event applied to the subscription
	// or payment state was created; older events arriving late are ignored.
	StateAt   time.Time `json:"-"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Plan names the tenant's plan as shown to users: "metered" with an active
// (or trialing/past-due) subscription, else "none".
func (a Account) Plan() string {
	switch a.SubscriptionStatus {
	case "active", "trialing", "past_due", "unpaid":
		return "metered"
	}
	return "none"
}

// OutboxItem is one meter event waiting to be sent to Stripe: a tenant's
// billed usage in one hour. Seq > 1 marks a supplement for events that
// reached the ledger after the hour was first aggregated.
type OutboxItem struct {
	ID         int64
	TenantID   string
	CustomerID string
	Hour       time.Time
	Seq        int
	// Identifier is unique per (tenant, hour, seq); Stripe uses it to drop
	// a retried event it has already accepted.
	Identifier string
	Requests   int64
	Tokens     int64
	// Billed is the group's billed amount in nano-USD.
	Billed Nano
	// Value is Billed in the operator's meter unit (rounded half up).
	Value    int64
	Attempts int
}

// OutboxIdentifier builds the meter-event identifier of a tenant's hour.
func OutboxIdentifier(tenantID string, hour time.Time, seq int) string {
	id := "rb-" + tenantID + "-" + hour.UTC().Format("2006010215")
	if seq > 1 {
		id += "-" + strconv.Itoa(seq)
	}
	return id
}

// AccountRef names the account a Stripe event is about: by customer id,
// or by tenant id when the event carries one (checkout's
// client_reference_id, customer metadata).
type AccountRef struct {
	TenantID   string
	CustomerID string
}

// Overview is what GET /api/v1/billing shows a tenant: its plan and
// subscription state, this month's usage and spend, and whether the
// operator has configured Stripe at all.
type Overview struct {
	StripeConfigured bool `json:"stripe_configured"`
	// Message explains the state in a sentence (e.g. that Stripe is not
	// configured on this server).
	Message            string    `json:"message"`
	Plan               string    `json:"plan"`
	CustomerID         string    `json:"stripe_customer_id,omitempty"`
	SubscriptionID     string    `json:"subscription_id,omitempty"`
	SubscriptionStatus string    `json:"subscription_status"`
	CurrentPeriodEnd   time.Time `json:"current_period_end,omitzero"`
	PastDueSince       time.Time `json:"past_due_since,omitzero"`
	// Suspended is true while inference answers 402 for non-payment.
	Suspended   bool      `json:"suspended"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	// Usage is the ledger's total for the period.
	Usage UsageRow `json:"usage"`
	// Spend is the billed spend the budget check sees (includes events
	// not yet written to the ledger), in nano-USD; SpendUSD the same in
	// dollars.
	Spend    Nano    `json:"spend_nano_usd"`
	SpendUSD float64 `json:"spend_usd"`
	// MeterEventsSent and MeterEventsPending count the tenant's hourly
	// meter events reported to Stripe and waiting in the outbox.
	MeterEventsSent    int `json:"meter_events_sent"`
	MeterEventsPending int `json:"meter_events_pending"`
}
