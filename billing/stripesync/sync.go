package stripesync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/routebalance/routebalance/billing"
)

// AccountStore keeps billing accounts and applied webhook events.
// pgstore.Store and sqlitestore.Store implement it.
type AccountStore interface {
	Account(ctx context.Context, tenantID string) (billing.Account, error)
	Accounts(ctx context.Context) ([]billing.Account, error)
	// SetCustomer links the tenant to its Stripe customer; at (the
	// caller's clock) is the account's update time.
	SetCustomer(ctx context.Context, tenantID, customerID string, at time.Time) error
	// ApplyWebhook applies fn once per eventID, atomically with recording
	// it; at (the caller's clock) is when the event was received.
	ApplyWebhook(ctx context.Context, eventID, evType string, ref billing.AccountRef, at time.Time,
		fn func(a *billing.Account)) (billing.Account, bool, error)
}

// OutboxStore is the meter-event outbox.
type OutboxStore interface {
	// Aggregate stamps the rows it creates with now (created and first
	// due), so the injected clock, not the database's, decides when they
	// are sent.
	Aggregate(ctx context.Context, cutoff, now time.Time, unitUSD float64) (int, error)
	PendingOutbox(ctx context.Context, now time.Time, limit int) ([]billing.OutboxItem, error)
	MarkSent(ctx context.Context, id int64, at time.Time) error
	MarkFailed(ctx context.Context, id int64, msg string, next time.Time) error
}

// UsageReader reads the ledger for the billing overview.
type UsageReader interface {
	Usage(ctx context.Context, q billing.UsageQuery) (billing.UsageReport, error)
	OutboxStats(ctx context.Context, tenantID string) (sent, pending int, err error)
}

// Deps are the Syncer's collaborators; Log, Clock and HTTPClient may be nil.
type Deps struct {
	Accounts   AccountStore
	Outbox     OutboxStore
	Usage      UsageReader
	Guard      *billing.Guard
	Log        *slog.Logger
	Clock      billing.Clock
	HTTPClient *http.Client
}

// Syncer is the Stripe side of billing. Its methods are safe for
// concurrent use; Run owns the background work.
type Syncer struct {
	cfg Config
	d   Deps
	sc  *client.API // nil when Stripe is off
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// New builds a Syncer. With cfg.SecretKey empty it runs without Stripe:
// Overview says so, Checkout and the webhook return billing.ErrStripeDisabled.
func New(cfg Config, d Deps) (*Syncer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Accounts == nil || d.Outbox == nil || d.Usage == nil || d.Guard == nil {
		return nil, errors.New("stripesync: Accounts, Outbox, Usage and Guard are required")
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Clock == nil {
		d.Clock = wallClock{}
	}
	s := &Syncer{cfg: cfg, d: d}
	if cfg.Enabled() {
		hc := d.HTTPClient
		if hc == nil {
			hc = &http.Client{Timeout: cfg.RequestTimeout}
		}
		backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
			URL:               stripe.String(cfg.APIBaseURL),
			HTTPClient:        hc,
			MaxNetworkRetries: stripe.Int64(0), // the outbox retries, with its own backoff
			LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		})
		s.sc = client.New(string(cfg.SecretKey), &stripe.Backends{API: backend, Connect: backend, Uploads: backend})
	}
	return s, nil
}

// Enabled reports whether Stripe is configured.
func (s *Syncer) Enabled() bool { return s.sc != nil }

// TenantCreated is the sign-up hook: it creates the tenant's Stripe
// customer (name, email, metadata tenant_id) and stores its id. It is
// idempotent (a tenant that has a customer is left alone; the Stripe call
// carries an idempotency key) and a no-op without Stripe.
func (s *Syncer) TenantCreated(ctx context.Context, tenantID, name, email string) error {
	if !s.Enabled() {
		return nil
	}
	_, err := s.ensureCustomer(ctx, tenantID, name, email)
	return err
}

func (s *Syncer) ensureCustomer(ctx context.Context, tenantID, name, email string) (string, error) {
	a, err := s.d.Accounts.Account(ctx, tenantID)
	if err != nil && !errors.Is(err, billing.ErrNotFound) {
		return "", err
	}
	if a.StripeCustomerID != "" {
		return a.StripeCustomerID, nil
	}
	p := &stripe.CustomerParams{Metadata: map[string]string{"tenant_id": tenantID}}
	if name != "" {
		p.Name = stripe.String(name)
	}
	if email != "" {
		p.Email = stripe.String(email)
	}
	p.Context = ctx
	p.SetIdempotencyKey("rb-customer-" + tenantID)
	c, err := s.sc.Customers.New(p)
	if err != nil {
		return "", fmt.Errorf("stripe: create customer: %w", err)
	}
	if err := s.d.Accounts.SetCustomer(ctx, tenantID, c.ID, s.d.Clock.Now()); err != nil {
		return "", err
	}
	s.d.Log.Info("stripe customer created", slog.String("tenant", tenantID), slog.String("customer", c.ID))
	return c.ID, nil
}

// Checkout starts a Checkout session subscribing the tenant to the
// operator's metered price and returns its URL. Empty URLs take the
// configured defaults.
func (s *Syncer) Checkout(ctx context.Context, tenantID, successURL, cancelURL string) (string, error) {
	if !s.Enabled() {
		return "", billing.ErrStripeDisabled
	}
	if s.cfg.PriceID == "" {
		return "", fmt.Errorf("%w: no price id configured", billing.ErrStripeDisabled)
	}
	cus, err := s.ensureCustomer(ctx, tenantID, "", "")
	if err != nil {
		return "", err
	}
	if successURL == "" {
		successURL = s.cfg.SuccessURL
	}
	if cancelURL == "" {
		cancelURL = s.cfg.CancelURL
	}
	p := &stripe.CheckoutSessionParams{
		Mode:              stripe.String(string(stripe.CheckoutSessionModeSubscription)),
		Customer:          stripe.String(cus),
		ClientReferenceID: stripe.String(tenantID),
		LineItems:         []*stripe.CheckoutSessionLineItemParams{{Price: stripe.String(s.cfg.PriceID)}},
		SuccessURL:        stripe.String(successURL),
		CancelURL:         stripe.String(cancelURL),
		SubscriptionData: &stripe.CheckoutSessionSubscriptionDataParams{
			Metadata: map[string]string{"tenant_id": tenantID},
		},
	}
	p.Context = ctx
	sess, err := s.sc.CheckoutSessions.New(p)
	if err != nil {
		return "", fmt.Errorf("stripe: create checkout session: %w", err)
	}
	return sess.URL, nil
}

// Overview returns the tenant's plan, subscription state and this month's
// usage and spend. It works without Stripe (and says so).
func (s *Syncer) Overview(ctx context.Context, tenantID string) (billing.Overview, error) {
	now := s.d.Clock.Now()
	start := billing.PeriodStart(now)
	ov := billing.Overview{
		StripeConfigured: s.Enabled(),
		Plan:             "none",
		PeriodStart:      start,
		PeriodEnd:        start.AddDate(0, 1, 0),
		Suspended:        s.d.Guard.Suspended(tenantID),
	}
	ov.Spend = s.d.Guard.Spent(tenantID)
	ov.SpendUSD = ov.Spend.USD()
	a, err := s.d.Accounts.Account(ctx, tenantID)
	if err != nil && !errors.Is(err, billing.ErrNotFound) {
		return ov, err
	}
	ov.Plan, ov.CustomerID, ov.SubscriptionID = a.Plan(), a.StripeCustomerID, a.SubscriptionID
	ov.SubscriptionStatus, ov.CurrentPeriodEnd, ov.PastDueSince = a.SubscriptionStatus, a.CurrentPeriodEnd, a.PastDueSince
	rep, err := s.d.Usage.Usage(ctx, billing.UsageQuery{TenantID: tenantID, From: start, To: ov.PeriodEnd})
	if err != nil {
		return ov, err
	}
	ov.Usage = rep.Total
	if ov.MeterEventsSent, ov.MeterEventsPending, err = s.d.Usage.OutboxStats(ctx, tenantID); err != nil {
		return ov, err
	}
	switch {
	case !s.Enabled():
		ov.Message = "Stripe is not configured on this server: usage is metered and budgets are enforced, but nothing is billed."
	case ov.Suspended:
		ov.Message = "Payment is overdue past the grace period: inference is suspended until the open invoice is paid."
	case ov.Plan == "none":
		ov.Message = "No subscription yet: start one with POST /api/v1/billing/checkout."
	default:
		ov.Message = "Subscribed to the metered plan; usage is reported to Stripe hourly."
	}
	return ov, nil
}

// HandleWebhook verifies a Stripe webhook (payload and its
// Stripe-Signature header) and applies it once per event id. It returns
// whether this call changed state (false for a replay or an event type
// that needs nothing). A bad signature yields billing.ErrBadSignature.
func (s *Syncer) HandleWebhook(ctx context.Context, payload []byte, sigHeader string) (bool, error) {
	if !s.Enabled() || s.cfg.WebhookSecret == "" {
		return false, billing.ErrStripeDisabled
	}
	// stripe-go would judge the signature's age by the wall clock; the
	// Syncer's clock decides it instead, from the timestamp the HMAC covers.
	if err := webhook.ValidatePayloadIgnoringTolerance(payload, sigHeader, string(s.cfg.WebhookSecret)); err != nil {
		return false, fmt.Errorf("%w: %v", billing.ErrBadSignature, err)
	}
	signed, ok := signatureTime(sigHeader)
	if !ok {
		return false, fmt.Errorf("%w: no timestamp in the signature header", billing.ErrBadSignature)
	}
	if age := s.d.Clock.Now().Sub(signed); age > s.cfg.WebhookTolerance {
		return false, fmt.Errorf("%w: signature is %s old, more than the tolerance of %s", billing.ErrBadSignature,
			age.Round(time.Second), s.cfg.WebhookTolerance)
	}
	// Signed by Stripe: what fails from here is the event, not the
	// signature (found by FuzzHandleWebhook: a signed non-JSON body was
	// answered invalid_signature).
	ev, err := webhook.ConstructEventWithOptions(payload, sigHeader, string(s.cfg.WebhookSecret), webhook.ConstructEventOptions{
		IgnoreTolerance:          true,
		IgnoreAPIVersionMismatch: !s.cfg.StrictAPIVersion,
	})
	if err != nil {
		return false, fmt.Errorf("%w: %v", billing.ErrInvalid, err)
	}
	if ev.Data == nil || ev.ID == "" {
		return false, fmt.Errorf("%w: event without id or data", billing.ErrInvalid)
	}
	at := time.Unix(ev.Created, 0).UTC()
	ref, fn, err := effect(ev.Type, ev.Data.Raw, at)
	if err != nil {
		return false, err
	}
	if fn == nil {
		return false, nil
	}
	acct, applied, err := s.d.Accounts.ApplyWebhook(ctx, ev.ID, string(ev.Type), ref, s.d.Clock.Now(), fn)
	if errors.Is(err, billing.ErrNotFound) {
		s.d.Log.Warn("stripe webhook for an unknown customer ignored", slog.String("event", ev.ID),
			slog.String("type", string(ev.Type)), slog.String("customer", ref.CustomerID))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if applied {
		s.d.Guard.SetStanding(acct)
		s.d.Log.Info("stripe webhook applied", slog.String("event", ev.ID), slog.String("type", string(ev.Type)),
			slog.String("tenant", acct.TenantID), slog.String("status", acct.SubscriptionStatus))
	}
	return applied, nil
}

// signatureTime returns the signed timestamp of a Stripe-Signature header
// ("t=1495999758,v1=…"), read the way stripe-go reads it: comma-separated
// key=value pairs, the last t wins. ok is false without a valid t.
func signatureTime(header string) (time.Time, bool) {
	var (
		at time.Time
		ok bool
	)
	for _, pair := range strings.Split(header, ",") {
		k, v, found := strings.Cut(pair, "=")
		if !found || strings.Contains(v, "=") {
			return time.Time{}, false
		}
		if k != "t" {
			continue
		}
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, false
		}
		at, ok = time.Unix(sec, 0), true
	}
	return at, ok
}

// effect decodes the object of a subscription, invoice or checkout event
// into the account it names and the change to make; fn is nil for event
// types billing does not act on.
func effect(typ stripe.EventType, raw json.RawMessage, at time.Time) (billing.AccountRef, func(*billing.Account), error) {
	bad := func(err error) error { return fmt.Errorf("%w: %s object: %v", billing.ErrInvalid, typ, err) }
	switch typ {
	case "customer.subscription.created", "customer.subscription.updated", "customer.subscription.deleted",
		"customer.subscription.paused", "customer.subscription.resumed":
		var sub stripe.Subscription
		if err := json.Unmarshal(raw, &sub); err != nil {
			return billing.AccountRef{}, nil, bad(err)
		}
		ref := billing.AccountRef{TenantID: sub.Metadata["tenant_id"]}
		if sub.Customer != nil {
			ref.CustomerID = sub.Customer.ID
		}
		status := string(sub.Status)
		if typ == "customer.subscription.deleted" {
			status = string(stripe.SubscriptionStatusCanceled)
		}
		price := ""
		if sub.Items != nil && len(sub.Items.Data) > 0 && sub.Items.Data[0].Price != nil {
			price = sub.Items.Data[0].Price.ID
		}
		return ref, func(a *billing.Account) {
			if a.StripeCustomerID == "" {
				a.StripeCustomerID = ref.CustomerID
			}
			if stale(a, at) {
				return
			}
			a.SubscriptionID, a.SubscriptionStatus = sub.ID, status
			if price != "" {
				a.PriceID = price
			}
			if sub.CurrentPeriodEnd > 0 {
				a.CurrentPeriodEnd = time.Unix(sub.CurrentPeriodEnd, 0).UTC()
			}
			switch status {
			case "past_due", "unpaid":
				if a.PastDueSince.IsZero() {
					a.PastDueSince = at
				}
			default:
				a.PastDueSince = time.Time{}
			}
		}, nil
	case "invoice.payment_failed", "invoice.paid", "invoice.payment_succeeded":
		var inv stripe.Invoice
		if err := json.Unmarshal(raw, &inv); err != nil {
			return billing.AccountRef{}, nil, bad(err)
		}
		var ref billing.AccountRef
		if inv.Customer != nil {
			ref.CustomerID = inv.Customer.ID
		}
		if typ == "invoice.payment_failed" {
			return ref, func(a *billing.Account) {
				if stale(a, at) {
					return
				}
				if a.PastDueSince.IsZero() {
					a.PastDueSince = at
				}
			}, nil
		}
		return ref, func(a *billing.Account) {
			if stale(a, at) {
				return
			}
			a.PastDueSince = time.Time{}
			if a.SubscriptionStatus == "past_due" || a.SubscriptionStatus == "unpaid" {
				a.SubscriptionStatus = "active"
			}
		}, nil
	case "checkout.session.completed":
		var cs stripe.CheckoutSession
		if err := json.Unmarshal(raw, &cs); err != nil {
			return billing.AccountRef{}, nil, bad(err)
		}
		ref := billing.AccountRef{TenantID: cs.ClientReferenceID}
		if cs.Customer != nil {
			ref.CustomerID = cs.Customer.ID
		}
		if ref.TenantID == "" && ref.CustomerID == "" {
			return ref, nil, nil
		}
		return ref, func(a *billing.Account) {
			if a.StripeCustomerID == "" {
				a.StripeCustomerID = ref.CustomerID
			}
			if cs.Subscription != nil && cs.Subscription.ID != "" {
				a.SubscriptionID = cs.Subscription.ID
			}
		}, nil
	}
	return billing.AccountRef{}, nil, nil
}

// stale reports whether an event created at is older than the newest one
// already applied to a's subscription/payment state (Stripe does not
// deliver in order); otherwise it advances a.StateAt to at.
func stale(a *billing.Account, at time.Time) bool {
	if at.Before(a.StateAt) {
		return true
	}
	a.StateAt = at
	return false
}

// AggregateOnce moves every closed hour (before the start of the current
// hour) of unaggregated usage into the outbox; it returns the rows made.
func (s *Syncer) AggregateOnce(ctx context.Context) (int, error) {
	now := s.d.Clock.Now().UTC()
	return s.d.Outbox.Aggregate(ctx, now.Truncate(time.Hour), now, s.cfg.UnitUSD)
}

// DrainOnce sends every due outbox row to Stripe as a billing meter event
// (identifier and idempotency key = tenant + hour, so a retry of an
// accepted event is dropped by Stripe) and marks a row sent only after Stripe accepted it; a refused
// row is retried after MinBackoff·2^attempts (capped at MaxBackoff). It
// returns the number sent and the first error.
func (s *Syncer) DrainOnce(ctx context.Context) (int, error) {
	if !s.Enabled() {
		return 0, billing.ErrStripeDisabled
	}
	sent := 0
	var firstErr error
	for {
		now := s.d.Clock.Now()
		items, err := s.d.Outbox.PendingOutbox(ctx, now, 100)
		if err != nil {
			return sent, err
		}
		if len(items) == 0 {
			return sent, firstErr
		}
		progress := false
		for _, it := range items {
			err := s.send(ctx, it, now)
			if err == nil {
				if err := s.d.Outbox.MarkSent(ctx, it.ID, s.d.Clock.Now()); err != nil {
					return sent, err
				}
				sent++
				progress = true
				continue
			}
			if firstErr == nil {
				firstErr = err
			}
			next := now.Add(s.backoff(it.Attempts))
			s.d.Log.Warn("stripe meter event refused; will retry", slog.String("identifier", it.Identifier),
				slog.Int("attempt", it.Attempts+1), slog.Time("next", next), slog.Any("err", err))
			if err := s.d.Outbox.MarkFailed(ctx, it.ID, err.Error(), next); err != nil {
				return sent, err
			}
		}
		if !progress || len(items) < 100 {
			return sent, firstErr
		}
	}
}

func (s *Syncer) backoff(attempts int) time.Duration {
	d := s.cfg.MinBackoff
	for range attempts {
		d *= 2
		if d >= s.cfg.MaxBackoff {
			return s.cfg.MaxBackoff
		}
	}
	return d
}

func (s *Syncer) send(ctx context.Context, it billing.OutboxItem, now time.Time) error {
	ts := it.Hour.Add(time.Hour - time.Second)
	if ts.After(now) {
		ts = now
	}
	p := &stripe.BillingMeterEventParams{
		EventName:  stripe.String(s.cfg.MeterEventName),
		Identifier: stripe.String(it.Identifier),
		Payload: map[string]string{
			"stripe_customer_id": it.CustomerID,
			"value":              strconv.FormatInt(it.Value, 10),
		},
		Timestamp: stripe.Int64(ts.Unix()),
	}
	p.Context = ctx
	// The same key on every retry: Stripe answers a retry of a request it
	// already processed with the first answer instead of acting again.
	p.SetIdempotencyKey(it.Identifier)
	if _, err := s.sc.BillingMeterEvents.New(p); err != nil {
		return fmt.Errorf("stripe: meter event %s: %w", it.Identifier, err)
	}
	return nil
}

// RefreshStandings loads every account's payment standing into the Guard.
func (s *Syncer) RefreshStandings(ctx context.Context) error {
	accts, err := s.d.Accounts.Accounts(ctx)
	if err != nil {
		return err
	}
	for _, a := range accts {
		s.d.Guard.SetStanding(a)
	}
	return nil
}

// Run loads the payment standings, aggregates and drains once, then aggregates closed hours every
// AggregateEvery, drains the outbox every DrainEvery and reloads standings
// every RefreshEvery until ctx ends. Without Stripe it only waits for ctx.
func (s *Syncer) Run(ctx context.Context) error {
	if !s.Enabled() {
		<-ctx.Done()
		return nil
	}
	if err := s.RefreshStandings(ctx); err != nil {
		s.d.Log.Warn("billing: load payment standings", slog.Any("err", err))
	}
	if _, err := s.AggregateOnce(ctx); err != nil {
		s.d.Log.Warn("billing: aggregate usage into the outbox", slog.Any("err", err))
	}
	if _, err := s.DrainOnce(ctx); err != nil && ctx.Err() == nil {
		s.d.Log.Warn("billing: outbox drain incomplete", slog.Any("err", err))
	}
	agg := time.NewTicker(s.cfg.AggregateEvery)
	drain := time.NewTicker(s.cfg.DrainEvery)
	refresh := time.NewTicker(s.cfg.RefreshEvery)
	defer agg.Stop()
	defer drain.Stop()
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-agg.C:
			if n, err := s.AggregateOnce(ctx); err != nil {
				s.d.Log.Warn("billing: aggregate usage into the outbox", slog.Any("err", err))
			} else if n > 0 {
				s.d.Log.Info("billing: hourly usage queued for Stripe", slog.Int("meter_events", n))
			}
		case <-drain.C:
			if _, err := s.DrainOnce(ctx); err != nil && ctx.Err() == nil {
				s.d.Log.Warn("billing: outbox drain incomplete", slog.Any("err", err))
			}
		case <-refresh.C:
			if err := s.RefreshStandings(ctx); err != nil && ctx.Err() == nil {
				s.d.Log.Warn("billing: reload payment standings", slog.Any("err", err))
			}
		}
	}
}
