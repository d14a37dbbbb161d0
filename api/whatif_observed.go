package api

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/routebalance/routebalance/billing"
	"github.com/routebalance/routebalance/routing/sim/workload"
)

// Observed-traffic replay: the what-if preview replays the tenant's own
// recent requests on the cluster, as the ledger recorded them, at their
// observed arrival rate — so that, for the weights the traffic was routed
// with, the prediction can be held against what happened.
const (
	// observedWindow is how far back the replay looks for requests.
	observedWindow = 24 * time.Hour
	// minObserved is how many recorded requests (spanning a positive
	// time) a replay of observed traffic needs; fewer fall back to the
	// recent prompts or the sample set.
	minObserved = 10
)

// whatIfObserved describes the replayed traffic as it happened: the
// window it spans, its arrival rate and what it got.
type whatIfObserved struct {
	Requests   int       `json:"requests"`
	WindowFrom time.Time `json:"window_from"`
	WindowTo   time.Time `json:"window_to"`
	// RateRPS is (requests − 1) ÷ (last start − first start): the rate the
	// replay offers (Poisson arrivals at that mean).
	RateRPS     float64 `json:"rate_rps"`
	MeanE2EMs   float64 `json:"mean_e2e_ms"`
	P95E2EMs    float64 `json:"p95_e2e_ms"`
	MeanTTFTMs  float64 `json:"mean_ttft_ms"`
	MeanCostUSD float64 `json:"mean_cost_usd"`
	// MeanQuality is the mean of the quality predicted when each request
	// was routed (no ground truth is observed).
	MeanQuality float64 `json:"mean_predicted_quality"`
	// newest is the newest replayed request's id (cache key).
	newest string
}

// observedTraffic reads up to n of the tenant's most recent served
// requests on the cluster (last observedWindow) and turns them into a
// replay workload: each item keeps the request's prompt-token count and
// its observed output length (for whichever model serves it in the
// replay) and, when the process still remembers it, its prompt (for the
// quality estimate). It returns nil when there is too little traffic.
func (s *Server) observedTraffic(ctx context.Context, tenantID, clusterID string, n int) ([]workload.Item, *whatIfObserved, error) {
	if s.deps.Requests == nil || n < minObserved {
		return nil, nil, nil
	}
	now := s.clock.Now().UTC()
	page, err := s.deps.Requests.Requests(ctx, billing.RequestQuery{
		TenantID: tenantID, ClusterID: clusterID, Status: "ok",
		From: now.Add(-observedWindow), To: now.Add(time.Second), Limit: min(n, billing.MaxRequestLimit),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("observed traffic: %w", err)
	}
	rows := page.Rows
	if len(rows) < minObserved {
		return nil, nil, nil
	}
	slices.Reverse(rows) // oldest first
	first, last := rows[0].StartedAt, rows[len(rows)-1].StartedAt
	span := last.Sub(first).Seconds()
	if !(span > 0) {
		return nil, nil, nil
	}
	obs := &whatIfObserved{Requests: len(rows), WindowFrom: first, WindowTo: rows[len(rows)-1].FinishedAt,
		RateRPS: float64(len(rows)-1) / span, newest: rows[len(rows)-1].ID}
	items := make([]workload.Item, len(rows))
	e2e := make([]float64, len(rows))
	for i, r := range rows {
		prompt := ""
		if s.recent != nil {
			prompt = s.recent.prompt(tenantID, r.ID)
		}
		if prompt == "" {
			// No text kept: the quality estimate falls back to the
			// instances' priors for this item.
			prompt = "recorded request " + r.ID
		}
		items[i] = workload.Item{ID: r.ID, Prompt: prompt, PromptTokens: int(r.PromptTokens),
			OutputTokens: map[string]int{workload.AnyModel: max(int(r.OutputTokens), 1)}}
		e2e[i] = r.E2EMs
		obs.MeanE2EMs += r.E2EMs
		obs.MeanTTFTMs += r.TTFTMs
		obs.MeanCostUSD += r.CostUSD
		obs.MeanQuality += r.PredictedQuality
	}
	k := float64(len(rows))
	obs.MeanE2EMs /= k
	obs.MeanTTFTMs /= k
	obs.MeanCostUSD /= k
	obs.MeanQuality /= k
	obs.P95E2EMs = billing.Percentile(e2e, 0.95)
	return items, obs, nil
}

// prompt returns the remembered prompt of one of tenantID's requests, or "".
func (r *recentRequests) prompt(tenantID, id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.byID[id]; ok && s.tenantID == tenantID {
		return s.prompt
	}
	return ""
}
