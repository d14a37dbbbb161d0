package main

import (
	"context"
	"fmt"
	"time"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/infra/vllmemu/demoset"
	"github.com/routebalance/routebalance/routing/sim"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// requestLog is the ledger's request log (billing's stores).
type requestLog interface {
	Requests(ctx context.Context, q billing.RequestQuery) (billing.RequestPage, error)
}

// ledgerTraffic reads the usage ledger's request log for the what-if
// preview (sim.Traffic).
type ledgerTraffic struct{ log requestLog }

var _ sim.Traffic = ledgerTraffic{}

// ServedRequests returns up to n (at most billing.MaxRequestLimit) of the
// tenant's newest "ok" requests on the cluster in [from, to).
func (l ledgerTraffic) ServedRequests(ctx context.Context, tenantID, clusterID string, from, to time.Time, n int) ([]sim.ObservedRequest, error) {
	page, err := l.log.Requests(ctx, billing.RequestQuery{
		TenantID: tenantID, ClusterID: clusterID, Status: "ok", From: from, To: to, Limit: min(n, billing.MaxRequestLimit),
	})
	if err != nil {
		return nil, err
	}
	out := make([]sim.ObservedRequest, len(page.Rows))
	for i, r := range page.Rows {
		out[i] = sim.ObservedRequest{ID: r.ID, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
			PromptTokens: int(r.PromptTokens), OutputTokens: int(r.OutputTokens),
			TTFTMs: r.TTFTMs, E2EMs: r.E2EMs, CostUSD: r.Cost.USD(), PredictedQuality: r.PredictedQuality}
	}
	return out, nil
}

// demoSample is the embedded synthetic demo set as a what-if workload
// (prompts and tasks only: quality comes from the router's estimator, not
// its labels).
func demoSample() ([]workload.Item, error) {
	items, err := demoset.Items()
	if err != nil {
		return nil, fmt.Errorf("demo set: %w", err)
	}
	out := make([]workload.Item, len(items))
	for i, it := range items {
		out[i] = workload.Item{ID: it.ID, Prompt: it.Prompt, Task: it.Task}
	}
	return out, nil
}
