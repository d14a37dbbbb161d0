package api

import (
	"context"
	"errors"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/billing"
)

// BillingService is what the billing endpoints need;
// *stripesync.Syncer implements it.
type BillingService interface {
	// Overview returns the tenant's plan, subscription and period usage.
	Overview(ctx context.Context, tenantID string) (billing.Overview, error)
	// Checkout returns the URL of a Stripe Checkout session.
	Checkout(ctx context.Context, tenantID, successURL, cancelURL string) (string, error)
	// HandleWebhook verifies and applies one Stripe webhook.
	HandleWebhook(ctx context.Context, payload []byte, sigHeader string) (bool, error)
}

// UsageReader answers GET /api/v1/usage; pgstore.Store and
// sqlitestore.Store implement it.
type UsageReader interface {
	Usage(ctx context.Context, q billing.UsageQuery) (billing.UsageReport, error)
}

// sendBillingRefusal writes 402 in OpenAI's envelope when err is a budget
// or payment refusal and reports whether it did; the codes match the
// inference path's (budget_exceeded, payment_required) and the message
// names the budget.
func sendBillingRefusal(c *fiber.Ctx, err error) (bool, error) {
	var (
		be *billing.BudgetError
		se *billing.SuspendedError
	)
	switch {
	case errors.As(err, &be):
		return true, sendError(c, fiber.StatusPaymentRequired, typeInsufficient, "budget_exceeded", "", err.Error())
	case errors.As(err, &se):
		return true, sendError(c, fiber.StatusPaymentRequired, typeInsufficient, "payment_required", "", err.Error())
	}
	return false, nil
}

// TenantFunc returns the tenant a management request acts as; ok is false
// for an unauthenticated request. Tests inject one; in service the JWT
// session check (requireSession) provides the tenant.
type TenantFunc func(c *fiber.Ctx) (tenantID string, ok bool)

// SignupHook is told about every new tenant; *stripesync.Syncer implements
// it by creating the Stripe customer.
type SignupHook interface {
	// TenantCreated is called once per sign-up, after the tenant exists.
	// It must be idempotent; its error does not fail the sign-up.
	TenantCreated(ctx context.Context, tenantID, name, email string) error
}

// afterSignup runs the sign-up hook with its own bound so a slow Stripe
// cannot hold the sign-up; a failure is logged (Checkout creates the
// customer later).
func (s *Server) afterSignup(ctx context.Context, tenantID, name, email string) {
	if s.deps.SignupHook == nil {
		return
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	if err := s.deps.SignupHook.TenantCreated(hctx, tenantID, name, email); err != nil {
		s.log.Warn("sign-up hook failed; the Stripe customer will be created at checkout",
			"tenant_id", tenantID, "err", err)
	}
}

// mountBillingWebhook registers the Stripe webhook before any auth
// middleware: Stripe authenticates with its signature, not a session.
func (s *Server) mountBillingWebhook(app *fiber.App) {
	app.Post("/api/v1/billing/webhook", s.billingWebhook)
}

// mountBilling registers the tenant's billing and usage endpoints behind
// the session check (or the injected BillingTenant).
func (s *Server) mountBilling(r fiber.Router) {
	a := authed{r: r, auth: s.requireSession}
	if s.deps.BillingTenant != nil {
		a.auth = func(c *fiber.Ctx) error { return c.Next() }
	}
	a.Get("/billing", s.billingOverview)
	a.Post("/billing/checkout", s.billingCheckout)
	a.Get("/usage", s.usage)
	a.Get("/usage.csv", s.usageCSV)
	a.Get("/requests", s.requests)
	a.Get("/requests.csv", s.requestsCSV)
}

// billingTenant resolves the caller's tenant or writes 401.
func (s *Server) billingTenant(c *fiber.Ctx) (string, bool) {
	if s.deps.BillingTenant != nil {
		if id, ok := s.deps.BillingTenant(c); ok && id != "" {
			return id, true
		}
	} else if id := tenantOf(c); id != "" {
		return id, true
	}
	_ = sendError(c, fiber.StatusUnauthorized, typeAuthentication, "unauthenticated", "",
		"sign in first: this endpoint needs a session token")
	return "", false
}

func (s *Server) billingOverview(c *fiber.Ctx) error {
	tenant, ok := s.billingTenant(c)
	if !ok {
		return nil
	}
	if s.deps.Billing == nil {
		return sendError(c, fiber.StatusServiceUnavailable, typeUnavailable, "billing_unavailable", "", "billing is not running on this server")
	}
	ov, err := s.deps.Billing.Overview(c.UserContext(), tenant)
	if err != nil {
		return s.sendBillingError(c, err)
	}
	return c.JSON(ov)
}

type checkoutRequest struct {
	SuccessURL string `json:"success_url"`
	CancelURL  string `json:"cancel_url"`
}

func (s *Server) billingCheckout(c *fiber.Ctx) error {
	tenant, ok := s.billingTenant(c)
	if !ok {
		return nil
	}
	if s.deps.Billing == nil {
		return sendError(c, fiber.StatusServiceUnavailable, typeUnavailable, "billing_unavailable", "", "billing is not running on this server")
	}
	var req checkoutRequest
	if len(c.Body()) > 0 {
		if err := c.BodyParser(&req); err != nil {
			return sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_json", "", "request body must be a JSON object with optional success_url and cancel_url")
		}
	}
	url, err := s.deps.Billing.Checkout(c.UserContext(), tenant, req.SuccessURL, req.CancelURL)
	if err != nil {
		return s.sendBillingError(c, err)
	}
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"url": url})
}

func (s *Server) billingWebhook(c *fiber.Ctx) error {
	if s.deps.Billing == nil {
		return sendError(c, fiber.StatusServiceUnavailable, typeUnavailable, "billing_unavailable", "", "billing is not running on this server")
	}
	applied, err := s.deps.Billing.HandleWebhook(c.UserContext(), c.Body(), c.Get("Stripe-Signature"))
	if err != nil {
		return s.sendBillingError(c, err)
	}
	return c.JSON(fiber.Map{"received": true, "applied": applied})
}

// sendBillingError maps billing's errors to HTTP in OpenAI's envelope:
// budget and payment refusals are 402 (the inference path uses it too).
func (s *Server) sendBillingError(c *fiber.Ctx, err error) error {
	if ok, werr := sendBillingRefusal(c, err); ok {
		return werr
	}
	switch {
	case errors.Is(err, billing.ErrStripeDisabled):
		return sendError(c, fiber.StatusServiceUnavailable, typeUnavailable, "stripe_not_configured", "", err.Error())
	case errors.Is(err, billing.ErrBadSignature):
		return sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_signature", "Stripe-Signature", err.Error())
	case errors.Is(err, billing.ErrInvalid):
		return sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_request", "", err.Error())
	case errors.Is(err, billing.ErrNotFound):
		return sendError(c, fiber.StatusNotFound, typeNotFound, "not_found", "", err.Error())
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return sendError(c, fiber.StatusServiceUnavailable, typeUnavailable, "timeout", "", "the request timed out")
	}
	s.log.Error("billing request failed", "path", c.Path(), "err", err)
	return sendError(c, fiber.StatusBadGateway, typeUpstream, "billing_backend_error", "", "billing backend failed; try again")
}

// parseUsageTime accepts RFC 3339 or YYYY-MM-DD (UTC midnight).
func parseUsageTime(v string) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t.UTC(), true
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, true
	}
	return time.Time{}, false
}
