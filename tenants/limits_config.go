package tenants

import (
	"context"
	"fmt"

	"github.com/routebalance/routebalance/tenants/limits"
)

// Limits are rate limits of a tenant (in its Settings) or of one API key:
// requests per minute, tokens (prompt + output) per minute and requests in
// flight at once. 0 means unlimited. A request must pass both its key's and
// its tenant's limits (see tenants/limits).
type Limits struct {
	RPM            int64 `json:"rpm"`
	TPM            int64 `json:"tpm"`
	MaxConcurrency int64 `json:"max_concurrency"`
}

// Limiter converts l to the limiter's value.
func (l Limits) Limiter() limits.Limits {
	return limits.Limits{RPM: l.RPM, TPM: l.TPM, MaxConcurrency: l.MaxConcurrency}
}

// checkLimits rejects negative limits, naming the field.
func checkLimits(field string, l Limits) error {
	switch {
	case l.RPM < 0:
		return fieldErr(field+".rpm", "must be a non-negative integer (0 = unlimited)")
	case l.TPM < 0:
		return fieldErr(field+".tpm", "must be a non-negative integer (0 = unlimited)")
	case l.MaxConcurrency < 0:
		return fieldErr(field+".max_concurrency", "must be a non-negative integer (0 = unlimited)")
	}
	return nil
}

// settingsLimits validates the limits of a settings update, or returns the
// tenant's current ones when the update has none.
func (s *Service) settingsLimits(ctx context.Context, tenantID string, in *Limits) (Limits, error) {
	if in != nil {
		return *in, checkLimits("limits", *in)
	}
	cur, err := s.store.Settings(ctx, tenantID)
	if err != nil {
		return Limits{}, fmt.Errorf("current limits: %w", err)
	}
	return cur.Limits, nil
}
