package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/routebalance/routebalance/routing"
)

// Previewer answers the what-if preview: routing/sim.Previewer, built and
// injected by cmd/routebalance. Preview is called from request goroutines,
// concurrently; bad input is a *routing.FieldError, a replay over its time
// budget wraps context.DeadlineExceeded.
type Previewer interface {
	Preview(ctx context.Context, q routing.WhatIfQuery) (*routing.WhatIfResult, error)
}

// whatIfRequest is the body of POST /clusters/{id}/whatif (web/README.md).
type whatIfRequest struct {
	Weights         *routing.Weights      `json:"weights"`
	BaselineWeights *routing.Weights      `json:"baseline_weights"`
	Policy          *routing.PolicyConfig `json:"policy"`
	MaxRequests     *int                  `json:"max_requests"`
}

// whatif serves POST /api/v1/clusters/{id}/whatif: it checks the body,
// reads the tenant's cluster and asks the Previewer.
func (s *Server) whatif(c *fiber.Ctx) error {
	var in whatIfRequest
	if err := decodeJSON(c, &in); err != nil {
		return err
	}
	if in.Weights == nil {
		return badRequest("weights", "weights is required: {\"quality\",\"latency\",\"cost\"} on the simplex")
	}
	if err := validWeights("weights", *in.Weights); err != nil {
		return err
	}
	if in.BaselineWeights != nil {
		if err := validWeights("baseline_weights", *in.BaselineWeights); err != nil {
			return err
		}
	}
	q := routing.WhatIfQuery{Weights: *in.Weights, Baseline: in.BaselineWeights}
	if in.MaxRequests != nil {
		if *in.MaxRequests <= 0 {
			return badRequest("max_requests", "max_requests must be > 0, got %d", *in.MaxRequests)
		}
		q.MaxRequests = *in.MaxRequests
	}
	if s.deps.WhatIf == nil {
		return &httpError{status: http.StatusServiceUnavailable, typ: typeUnavailable, code: "whatif_unavailable",
			msg: "the what-if preview is not configured on this server"}
	}

	ctx, tid, id := c.UserContext(), tenantOf(c), c.Params("id")
	cl, err := s.deps.Tenants.Cluster(ctx, tid, id)
	if err != nil {
		return err
	}
	ins, err := s.deps.Tenants.Instances(ctx, tid, id)
	if err != nil {
		return err
	}
	q.TenantID, q.Cluster = tid, routing.Cluster{ID: cl.ID, TenantID: tid, Policy: cl.Policy}
	if in.Policy != nil {
		q.Cluster.Policy = *in.Policy
	}
	version := cl.UpdatedAt
	for i := range ins {
		version = maxT(version, ins[i].UpdatedAt)
		if !ins[i].Disabled {
			q.Cluster.Instances = append(q.Cluster.Instances, ins[i].Routing())
		}
	}
	q.Version = fmt.Sprintf("%s/%d", version.UTC().Format(time.RFC3339Nano), len(ins))
	if s.recent != nil {
		q.Prompts = s.recent
	}
	res, err := s.deps.WhatIf.Preview(ctx, q)
	if err != nil {
		return whatIfError(err)
	}
	return c.JSON(res)
}

func maxT(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// validWeights checks a weight vector is on the simplex; the envelope's
// param names the offending field (e.g. "weights.cost").
func validWeights(field string, wt routing.Weights) error {
	if err := wt.Validate(); err != nil {
		var fe *routing.FieldError
		if errors.As(err, &fe) {
			return badRequest(strings.Replace(fe.Field, "weights", field, 1), "%s %s", strings.Replace(fe.Field, "weights", field, 1), fe.Msg)
		}
		return badRequest(field, "%s: %v", field, err)
	}
	return nil
}

// whatIfError maps a replay failure to a response: the time budget or a
// cancelled request is 503, bad input (a policy the scheduler rejects, no
// instance, nothing to replay) is 400.
func whatIfError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &httpError{status: http.StatusServiceUnavailable, typ: typeUnavailable, code: "whatif_timeout",
			msg: "the what-if replay did not finish within its time budget; try a smaller max_requests"}
	}
	var fe *routing.FieldError
	if errors.As(err, &fe) {
		return badRequest(fe.Field, "%s", fe.Msg)
	}
	return fmt.Errorf("what-if replay: %w", err)
}

// TenantPrompts returns up to n of tenantID's most recent remembered
// prompts, newest first (routing.PromptMemory, read by the what-if
// preview). It only reads the memory /v1/feedback keeps.
func (r *recentRequests) TenantPrompts(tenantID string, n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	if r.n == 0 {
		return nil
	}
	for k := 1; k <= r.n && len(out) < n; k++ {
		id := r.ring[(r.next-k+r.n)%r.n]
		if id == "" {
			break
		}
		if s, ok := r.byID[id]; ok && s.tenantID == tenantID && s.prompt != "" {
			out = append(out, s.prompt)
		}
	}
	return out
}

// Prompt returns the remembered prompt of one of tenantID's requests, or
// "" (routing.PromptMemory).
func (r *recentRequests) Prompt(tenantID, id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.byID[id]; ok && s.tenantID == tenantID {
		return s.prompt
	}
	return ""
}
