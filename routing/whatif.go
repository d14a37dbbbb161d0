package routing

import "time"

// WhatIfQuery is one what-if preview question (POST
// /api/v1/clusters/{id}/whatif): replay recent traffic on a registered
// cluster with other weights. The api fills it from the request and the
// tenant's registration; routing/sim.Previewer answers it.
type WhatIfQuery struct {
	// TenantID owns the cluster; only its traffic and prompts are read.
	TenantID string
	// Cluster is the registered cluster: its enabled instances (API keys
	// are never needed and may be blank) and its policy, or the policy to
	// try instead.
	Cluster Cluster
	// Version identifies the cluster's configuration (it changes whenever
	// the cluster or one of its instances does): results are cached per
	// version.
	Version string
	// Weights are the weights to preview; Baseline, when set, is replayed
	// too for comparison.
	Weights  Weights
	Baseline *Weights
	// MaxRequests lowers the previewer's cap on replayed requests (0: the
	// cap).
	MaxRequests int
	// Prompts is the inference path's memory of recent prompts (nil when
	// none is kept).
	Prompts PromptMemory
}

// PromptMemory is the inference path's bounded memory of recent prompts,
// read by the what-if preview. Implementations are safe for concurrent use.
type PromptMemory interface {
	// TenantPrompts returns up to n of the tenant's most recent remembered
	// prompts, newest first.
	TenantPrompts(tenantID string, n int) []string
	// Prompt returns the remembered prompt of one of the tenant's
	// requests, or "" when it is not remembered.
	Prompt(tenantID, requestID string) string
}

// WhatIfResult is a what-if preview's answer (web/README.md documents the
// JSON).
type WhatIfResult struct {
	// Source is the replayed traffic: "observed" (the cluster's recorded
	// requests), "recent" (the tenant's remembered prompts) or "sample"
	// (the demo set).
	Source    string         `json:"source"`
	Requests  int            `json:"requests"`
	Predicted *WhatIfMetrics `json:"predicted"`
	Baseline  *WhatIfMetrics `json:"baseline,omitempty"`
	Policy    string         `json:"policy"`
	// RateRPS is the replay's arrival rate.
	RateRPS float64 `json:"rate_rps"`
	// Observed is the replayed traffic as it happened (source "observed").
	Observed *WhatIfObserved `json:"observed,omitempty"`
	// Live is the live state the replay started from (absent when the
	// scheduler has not routed the cluster yet: the replay starts idle).
	Live *WhatIfLive `json:"live,omitempty"`
	// Estimate says how the numbers were obtained ("model").
	Estimate string `json:"estimate"`
	// QualitySource is "index" (a KNN index) or "priors".
	QualitySource string `json:"quality_source"`
	Note          string `json:"note"`
}

// WhatIfMetrics is one replay's prediction.
type WhatIfMetrics struct {
	MeanQuality float64 `json:"mean_quality"`
	MeanE2EMs   float64 `json:"mean_e2e_ms"`
	P95E2EMs    float64 `json:"p95_e2e_ms"`
	MeanTTFTMs  float64 `json:"mean_ttft_ms"`
	MeanCostUSD float64 `json:"mean_cost_usd"`
	// Completed and Failed count the replayed requests.
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// ModelShare is the share of completed requests per served model.
	ModelShare map[string]float64 `json:"model_share"`
}

// WhatIfObserved describes the replayed traffic as it happened: the
// window it spans, its arrival rate and what it got.
type WhatIfObserved struct {
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
}

// WhatIfLive is the live load a replay started from, summed over the
// cluster's replayed instances.
type WhatIfLive struct {
	// Instances is how many of the replayed instances the live scheduler
	// reported.
	Instances int `json:"instances"`
	// InFlight is the requests running on the instances (the scheduler's
	// own in flight, or the scraped running count when fresher and larger)
	// and Waiting the requests queued for them (the scheduler's admission
	// queues and the engines' scraped queues): the replay's engines start
	// with that many requests.
	InFlight int `json:"in_flight"`
	Waiting  int `json:"waiting"`
	// PendingTokens is the decode tokens the running requests still have
	// to generate (the scheduler's dead reckoning).
	PendingTokens float64 `json:"pending_tokens"`
}
