// Package billing meters every served request and bills it: usage events,
// pricing, the batched durable ledger, spend caps and Stripe synchronisation.
package billing

import "time"

// UsageEvent is one served request, handed by the inference path to the
// meter exactly once per request (streams included, also those cut short).
// RequestID makes recording idempotent.
type UsageEvent struct {
	RequestID    string
	TenantID     string
	KeyID        string
	ClusterID    string
	InstanceID   string
	Model        string
	Policy       string
	PromptTokens int
	OutputTokens int
	// Cost is what the instance costs at its registered prices
	// (TokenCost of the request's tokens), in nano-USD.
	Cost Nano
	// Billed is what the tenant is charged under its plan, in nano-USD;
	// Meter.Record sets it with Pricing.Price unless the caller did.
	Billed Nano
	// CostUSD is the instance cost in dollars, from callers that price in
	// floating point.
	//
	// Deprecated: set Cost (see TokenCost). When Cost is 0, Pricing.Price
	// (called by Meter.Record) converts CostUSD into Cost — refusing NaN,
	// ±Inf, negative and huge values — and clears it; the ledger never
	// stores it.
	CostUSD float64 `json:",omitempty"`
	// PredictedQuality is the scheduler's Q̂ for the served model.
	PredictedQuality float64
	TTFT             time.Duration
	E2E              time.Duration
	// Status is "ok", "error", "cancelled", "budget" (stopped by a budget)
	// or "cached" (answered from the response cache: no instance, no cost).
	Status     string
	HTTPStatus int
	StartedAt  time.Time
	FinishedAt time.Time

	// The routing decision, kept for the request log (GET /api/v1/requests).

	// PredictedE2E is the scheduler's predicted end-to-end latency.
	PredictedE2E time.Duration
	// Preset is the resolved preset name ("custom" for own weights).
	Preset string
	// Weights are the weights the request was routed with.
	Weights Weights
	// Relaxed lists the filters relaxed because no instance passed them, in order.
	Relaxed []string
	// Attempts is how many instances were tried (2 after a fail-over).
	Attempts int
}

// Weights are the quality/cost/latency weights of one routed request.
type Weights struct {
	Quality float64 `json:"quality"`
	Cost    float64 `json:"cost"`
	Latency float64 `json:"latency"`
}
