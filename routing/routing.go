// Package routing holds the vocabulary shared by every part of the routing
// path: requests, instances, weights, SLOs, estimates, decisions and outcomes.
//
// It has no behaviour beyond validation and small arithmetic on those values;
// the estimators (routing/estimate), live fleet state (routing/fleet), the
// scheduler and its policies (routing/schedule), the upstream proxy
// (routing/proxy) and the simulator (routing/sim) all speak these types.
package routing

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Errors that separate "this request was rejected" from "the system failed".
// Callers test them with errors.Is; the api package maps them to HTTP.
var (
	// ErrUnknownModel means the request named a model no instance of the
	// cluster serves.
	ErrUnknownModel = errors.New("unknown model")
	// ErrNoHealthyInstance means every candidate instance is ejected or
	// disabled.
	ErrNoHealthyInstance = errors.New("no healthy instance")
	// ErrModelDisabled means every instance of the requested model (of
	// the request's kind, every one for auto) is disabled by the
	// cluster's owner. It wraps ErrNoHealthyInstance (a disabled instance
	// is one the scheduler may not use), so callers that only ask for
	// that still see it; the api answers it 403 model_disabled and
	// telemetry counts it as reason="model_disabled".
	ErrModelDisabled = fmt.Errorf("model disabled: %w", ErrNoHealthyInstance)
	// ErrNoCapacity means every candidate is saturated and its admission
	// queue is full.
	ErrNoCapacity = errors.New("no capacity")
	// ErrClosed means the scheduler was stopped while the request waited.
	ErrClosed = errors.New("scheduler closed")
)

// Clock tells the time. The live service uses the wall clock; the
// discrete-event simulator injects a virtual one.
type Clock interface {
	Now() time.Time
}

// WallClock is the Clock of the real world.
type WallClock struct{}

// Now returns time.Now().
func (WallClock) Now() time.Time { return time.Now() }

// Priority is a request's class in admission queues: lower values are served
// first.
type Priority int8

// Priority classes.
const (
	PriorityHigh   Priority = 0
	PriorityNormal Priority = 1
	PriorityLow    Priority = 2
)

// String returns "high", "normal" or "low".
func (p Priority) String() string {
	switch p {
	case PriorityHigh:
		return "high"
	case PriorityLow:
		return "low"
	default:
		return "normal"
	}
}

// ParsePriority reads "high", "normal", "low" (also "vip" and "batch").
// The empty string is PriorityNormal.
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "", "normal":
		return PriorityNormal, nil
	case "high", "vip":
		return PriorityHigh, nil
	case "low", "batch":
		return PriorityLow, nil
	}
	return PriorityNormal, &FieldError{Field: "priority", Msg: "must be high, normal or low, got " + quote(s)}
}

// SLO is a set of latency and cost budgets for one request. A zero field
// means "no budget".
type SLO struct {
	TTFT       time.Duration `json:"ttft_ms"`
	TPOT       time.Duration `json:"tpot_ms"`
	E2E        time.Duration `json:"e2e_ms"`
	MaxCostUSD float64       `json:"max_cost_usd_per_request"`
}

// Request is one inference request as the scheduler sees it.
type Request struct {
	// ID is unique per request (the api's request id).
	ID string
	// Prompt is the text the quality and length estimators embed: the chat
	// messages' contents joined, or the completion prompt.
	Prompt string
	// PromptTokens is the estimated number of input tokens.
	PromptTokens int
	// MaxTokens is the client's max_tokens, 0 when absent.
	MaxTokens int
	// Model restricts the candidates to one served model; "" or "auto" means
	// any model of the cluster.
	Model string
	// Weights steer the fused score; they lie on the simplex.
	Weights Weights
	// SLO holds the latency and per-request cost budgets.
	SLO SLO
	// BudgetUSD is a per-request spend budget (X-RouteBalance-Budget-USD);
	// 0 means none. It filters candidates and clamps MaxTokens.
	BudgetUSD float64
	// QualityFloor rejects candidates whose predicted quality is below it;
	// 0 disables the filter.
	QualityFloor float64
	// Priority is the admission class.
	Priority Priority
	// Workflow groups the stages of one agentic workflow for stickiness.
	Workflow string
	// Policy overrides the cluster's policy for this request (experiments);
	// "" uses the cluster's.
	Policy string
	// Exclude lists instance IDs that must not be chosen (fail-over after a
	// connection failure).
	Exclude []string
	// Arrival is when the request reached the router.
	Arrival time.Time
	// Kind is what the request needs served: "" or KindChat (chat and
	// text completions) or KindEmbedding (/v1/embeddings). The scheduler
	// only considers instances of the same kind.
	Kind Kind
}

// Budget is the request's per-request cost budget in USD: the smaller of
// BudgetUSD and SLO.MaxCostUSD that is set, 0 for none. The scheduler
// filters and clamps by it and the proxy stops a stream at it.
func (r *Request) Budget() float64 {
	b := r.BudgetUSD
	if s := r.SLO.MaxCostUSD; s > 0 && (b <= 0 || s < b) {
		b = s
	}
	return b
}

// AnyModel reports whether the request may be served by any model.
func (r *Request) AnyModel() bool { return r.Model == "" || r.Model == "auto" }

// Kind is what an instance serves (and what a request needs): chat and
// text completions, or embeddings. The empty Kind is KindChat.
type Kind string

// The instance kinds.
const (
	KindChat      Kind = "chat"
	KindEmbedding Kind = "embedding"
)

// Embedding reports whether k is KindEmbedding.
func (k Kind) Embedding() bool { return k == KindEmbedding }

// ParseKind reads "chat" or "embedding"; the empty string is KindChat.
func ParseKind(s string) (Kind, error) {
	switch Kind(s) {
	case "", KindChat:
		return KindChat, nil
	case KindEmbedding:
		return KindEmbedding, nil
	}
	return KindChat, &FieldError{Field: "kind", Msg: "must be chat or embedding, got " + quote(s)}
}

// Instance is the static description of one registered inference server.
type Instance struct {
	ID             string
	BaseURL        string
	Model          string // served model name
	GPU            string
	TensorParallel int
	// Prices in USD per one million tokens.
	PriceInPerMTok  float64
	PriceOutPerMTok float64
	// MaxConcurrency caps requests in flight on the instance; 0 = no cap set
	// by the operator (the scheduler then uses its default).
	MaxConcurrency int
	// QualityPrior is the predicted quality of this model for prompts the
	// quality index has no labels for (default 0.5).
	QualityPrior float64
	// APIKey is the upstream credential, decrypted; never logged.
	APIKey Secret
	// Disabled instances are never chosen.
	Disabled bool
	// Kind is what the instance serves ("" = KindChat): chat requests are
	// never routed to an embedding instance, nor embeddings to a chat one.
	Kind Kind
}

// Tier names the latency class of an instance: its model on its GPU type.
func (in *Instance) Tier() string { return in.Model + "@" + in.GPU }

// CostUSD is what the instance charges for the given token counts.
func (in *Instance) CostUSD(promptTokens, outputTokens float64) float64 {
	return (promptTokens*in.PriceInPerMTok + outputTokens*in.PriceOutPerMTok) / 1e6
}

// Cluster is one tenant's set of instances and how it is routed.
// Version changes whenever anything in it changes, so schedulers can detect
// a new configuration cheaply.
type Cluster struct {
	ID        string
	TenantID  string
	Version   int64
	Policy    PolicyConfig
	Instances []Instance
}

// PolicyConfig selects a policy and its parameters.
type PolicyConfig struct {
	// Name is one of routebalance (default), round-robin, shortest-queue,
	// quality-only, threshold, chimera, oracle (simulation only).
	Name string `json:"name"`
	// Threshold is the quality threshold t of the threshold policy.
	Threshold float64 `json:"threshold,omitempty"`
	// Slack is Chimera's delay slack τ as a fraction of the fastest delay.
	Slack float64 `json:"slack,omitempty"`
	// SwitchGain is Chimera's Δs: minimal quality gain to switch model.
	SwitchGain float64 `json:"switch_gain,omitempty"`
}

// Secret is a string that never prints itself.
type Secret string

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// LogValue redacts the secret in slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText redacts the secret in encoders that use it.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret itself, for the one place that must send it.
func (s Secret) Reveal() string { return string(s) }
