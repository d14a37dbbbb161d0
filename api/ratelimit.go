package api

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/proxy"
	"github.com/routebalance/routebalance/tenants/limits"
)

// OpenAI's rate-limit response headers.
const (
	hdrLimitRequests     = "x-ratelimit-limit-requests"
	hdrRemainingRequests = "x-ratelimit-remaining-requests"
	hdrResetRequests     = "x-ratelimit-reset-requests"
	hdrLimitTokens       = "x-ratelimit-limit-tokens"
	hdrRemainingTokens   = "x-ratelimit-remaining-tokens"
	hdrResetTokens       = "x-ratelimit-reset-tokens"
	errCodeRateLimited   = "rate_limit_exceeded"
	// errCodeLimiterUnavailable: the shared limiter's Redis is down and it
	// fails closed.
	errCodeLimiterUnavailable = "rate_limiter_unavailable"
)

// RateLimiter applies the key's and the tenant's rate limits, charging one
// request and tokens (estimated prompt + max_tokens); when ok the caller
// holds the Ticket until the request ends and releases it once. A refusal
// with Unavailable set means the limits could not be checked (503). Safe
// for concurrent use; *limits.Limiter and *redislimit.Limiter implement it.
type RateLimiter interface {
	Admit(tenantID string, tl limits.Limits, keyID string, kl limits.Limits, tokens int64) (t limits.Ticket, st limits.Status, r limits.Refusal, ok bool)
}

// newLimiter makes the process-wide limiter of the inference API.
func newLimiter(clock routing.Clock, log *slog.Logger) *limits.Limiter {
	l, err := limits.New(limits.Config{}, clock)
	if err != nil { // the zero Config is valid; this cannot happen
		log.Error("rate limiter", slog.String("error", err.Error()))
		panic(err)
	}
	return l
}

// admitLimits applies the key's and the tenant's rate limits to x (whose
// principal and body are set), charging one request and the estimated
// prompt tokens plus max_tokens. It sets the x-ratelimit-* headers; on
// refusal it writes the 429 and returns refused. An admitted request holds
// x.limit until releaseLimits.
func (h *inference) admitLimits(c *fiber.Ctx, x *exchange) (refused bool, _ error) {
	p := x.p
	cost := int64(x.body.promptTokens) + int64(x.body.maxTokens)
	t, st, r, ok := h.limiter.Admit(p.Tenant.ID, p.Settings.Limits.Limiter(), p.Key.ID, p.Key.Limits.Limiter(), cost)
	setRateHeaders(c, st)
	if ok {
		x.limit = t
		return false, nil
	}
	secs := int64((r.RetryAfter + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	c.Set(fiber.HeaderRetryAfter, strconv.FormatInt(secs, 10))
	if r.Unavailable {
		return true, sendError(c, http.StatusServiceUnavailable, typeServer, errCodeLimiterUnavailable, "", r.Message())
	}
	return true, sendError(c, http.StatusTooManyRequests, typeRateLimit, errCodeRateLimited, "", r.Message())
}

// observeLimits records the tokens the request actually used, so the
// release corrects the tokens-per-minute charge.
func (x *exchange) observeLimits(res *proxy.Result) {
	if res != nil {
		x.limit.Observe(int64(res.Outcome.PromptTokens) + int64(res.Outcome.OutputTokens))
	}
}

// releaseLimits frees the request's concurrency slots; only the first call
// counts.
func (x *exchange) releaseLimits() { x.limit.Release() }

// setRateHeaders writes OpenAI's x-ratelimit-* headers for the tighter of
// the key's and tenant's limits; a kind neither limits gets no headers.
func setRateHeaders(c *fiber.Ctx, st limits.Status) {
	if st.HasRequests {
		c.Set(hdrLimitRequests, strconv.FormatInt(st.LimitRequests, 10))
		c.Set(hdrRemainingRequests, strconv.FormatInt(st.RemainingRequests, 10))
		c.Set(hdrResetRequests, resetString(st.ResetRequests))
	}
	if st.HasTokens {
		c.Set(hdrLimitTokens, strconv.FormatInt(st.LimitTokens, 10))
		c.Set(hdrRemainingTokens, strconv.FormatInt(st.RemainingTokens, 10))
		c.Set(hdrResetTokens, resetString(st.ResetTokens))
	}
}

// resetString formats a reset time the way OpenAI does ("1s", "6m0s",
// "250ms"), rounded up to the millisecond.
func resetString(d time.Duration) string {
	if r := d.Round(time.Millisecond); r < d {
		d = r + time.Millisecond
	} else {
		d = r
	}
	return d.String()
}
