package api

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/billing"
)

// usage answers GET /api/v1/usage?from=&to=&group_by=hour|day|model|instance|key
// with the tenant's ledger totals. from defaults to the start of the
// current month, to to now; both take RFC 3339 or YYYY-MM-DD.
func (s *Server) usage(c *fiber.Ctx) error {
	tenant, ok := s.billingTenant(c)
	if !ok {
		return nil
	}
	if s.deps.Usage == nil {
		return sendError(c, fiber.StatusServiceUnavailable, typeUnavailable, "billing_unavailable", "", "usage is not recorded on this server")
	}
	now := s.clock.Now().UTC()
	q := billing.UsageQuery{TenantID: tenant, From: billing.PeriodStart(now), To: now, GroupBy: c.Query("group_by")}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"from", &q.From}, {"to", &q.To}} {
		v := c.Query(p.name)
		if v == "" {
			continue
		}
		t, ok := parseUsageTime(v)
		if !ok {
			return sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_time", p.name,
				p.name+" must be an RFC 3339 time (2026-11-30T10:00:00Z) or a date (2026-11-30)")
		}
		*p.dst = t
	}
	switch q.GroupBy {
	case "", billing.GroupHour, billing.GroupDay, billing.GroupModel, billing.GroupInstance, billing.GroupKey:
	default:
		return sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_group_by", "group_by",
			"group_by must be one of hour, day, model, instance, key")
	}
	if !q.From.Before(q.To) {
		return sendError(c, fiber.StatusBadRequest, typeInvalidRequest, "invalid_range", "from", "from must be before to")
	}
	rep, err := s.deps.Usage.Usage(c.UserContext(), q)
	if err != nil {
		return s.sendBillingError(c, err)
	}
	return c.JSON(rep)
}
