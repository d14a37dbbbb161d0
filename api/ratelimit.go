package api

import (
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/routing/dispatch"
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

// RateLimiter applies the key's and the tenant's rate limits:
// dispatch.Limiter. A refusal with Unavailable set means the limits could
// not be checked (503). *limits.Limiter and *redislimit.Limiter implement
// it.
type RateLimiter = dispatch.Limiter

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
