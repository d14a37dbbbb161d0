// Package stripesync connects billing to Stripe (stripe-go v76): a
// customer per tenant on sign-up, Checkout sessions for the operator's
// metered price, hourly usage reported as billing meter events through an
// outbox, and signed webhooks that keep each tenant's plan state. See
// ../README.md for the flow.
package stripesync

import (
	"errors"
	"log/slog"
	"net/url"
	"time"

	"github.com/routebalance/routebalance/billing"
)

// Secret is a credential that prints redacted.
type Secret string

// String returns "[redacted]" for a set secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// LogValue keeps the secret out of logs.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Config is the operator's Stripe configuration. An empty SecretKey turns
// Stripe off: the service then meters and caps spend without billing.
type Config struct {
	// SecretKey is the Stripe API key (sk_live_…/sk_test_…).
	SecretKey Secret
	// WebhookSecret is the endpoint's signing secret (whsec_…); without it
	// the webhook endpoint refuses every call.
	WebhookSecret Secret
	// PriceID is the metered price tenants subscribe to in Checkout.
	PriceID string
	// MeterEventName is the event_name of the operator's Stripe meter.
	MeterEventName string
	// APIBaseURL is Stripe's API origin; tests point it at stripe-mock.
	APIBaseURL string
	// UnitUSD is what one unit of the meter's value is worth: the value
	// sent is round(billed / UnitUSD), computed in nano-USD integers, so
	// UnitUSD must be at least 1e-9. The default 0.000001 reports
	// micro-dollars; price the meter at $0.000001 per unit.
	UnitUSD float64
	// AggregateEvery is how often closed hours are moved to the outbox.
	AggregateEvery time.Duration
	// DrainEvery is how often the outbox is sent.
	DrainEvery time.Duration
	// RefreshEvery is how often payment standings are reloaded from the
	// database (so replicas see webhooks another replica received).
	RefreshEvery time.Duration
	// MinBackoff and MaxBackoff bound the delay before an outbox row that
	// Stripe refused is tried again (doubling per attempt).
	MinBackoff, MaxBackoff time.Duration
	// SuccessURL and CancelURL are where Checkout sends the user back
	// when the request does not name them.
	SuccessURL, CancelURL string
	// WebhookTolerance is the largest accepted age of a signed webhook.
	WebhookTolerance time.Duration
	// StrictAPIVersion rejects webhooks whose API version differs from
	// stripe-go's; by default a mismatch is tolerated.
	StrictAPIVersion bool
	// RequestTimeout bounds each call to Stripe.
	RequestTimeout time.Duration
}

// DefaultConfig returns the defaults (Stripe off until SecretKey is set).
func DefaultConfig() Config {
	return Config{
		MeterEventName:   "routebalance_usage",
		APIBaseURL:       "https://api.stripe.com",
		UnitUSD:          0.000001,
		AggregateEvery:   time.Hour,
		DrainEvery:       time.Minute,
		RefreshEvery:     time.Minute,
		MinBackoff:       time.Second,
		MaxBackoff:       time.Hour,
		SuccessURL:       "http://localhost:8080/#/billing?checkout=success",
		CancelURL:        "http://localhost:8080/#/billing?checkout=cancel",
		WebhookTolerance: 5 * time.Minute,
		RequestTimeout:   20 * time.Second,
	}
}

// Enabled reports whether Stripe is configured.
func (c Config) Enabled() bool { return c.SecretKey != "" }

// Validate reports unusable settings.
func (c Config) Validate() error {
	switch {
	case !(c.UnitUSD >= 1e-9) || c.UnitUSD > billing.MaxUSD:
		return errors.New("stripesync: UnitUSD must be between 1e-9 and 9e9")
	case c.AggregateEvery <= 0 || c.DrainEvery <= 0 || c.RefreshEvery <= 0:
		return errors.New("stripesync: AggregateEvery, DrainEvery and RefreshEvery must be > 0")
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return errors.New("stripesync: need 0 < MinBackoff ≤ MaxBackoff")
	case c.RequestTimeout <= 0 || c.WebhookTolerance <= 0:
		return errors.New("stripesync: RequestTimeout and WebhookTolerance must be > 0")
	}
	if !c.Enabled() {
		return nil
	}
	if c.MeterEventName == "" {
		return errors.New("stripesync: MeterEventName is required with Stripe")
	}
	if u, err := url.Parse(c.APIBaseURL); err != nil || u.Scheme == "" || u.Host == "" {
		return errors.New("stripesync: APIBaseURL must be an absolute URL")
	}
	return nil
}
