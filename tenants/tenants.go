// Package tenants owns tenants, users, API keys, clusters, instances and the
// routing settings (preset, weights, SLOs) of each tenant, together with
// password hashing, JWT sessions and API-key hashing.
//
// The types here are the domain values; storage engines live in
// sub-packages and satisfy the Store interfaces declared by their consumers.
package tenants

import (
	"errors"
	"fmt"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
)

// Domain errors. ErrNotFound is also what another tenant's id yields.
// Validation problems are *routing.FieldError values naming the field.
var (
	// ErrNotFound means no such record exists for the calling tenant.
	ErrNotFound = errors.New("not found")
	// ErrConflict means a unique value (an email) is already taken.
	ErrConflict = errors.New("already exists")
	// ErrUnauthorized means the credentials (password, token, API key) are
	// wrong, expired or revoked. Its message never says which.
	ErrUnauthorized = errors.New("unauthorized")
)

// Tenant is one customer account.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// ConfigVersion grows by at least one on every change to the tenant's
	// keys, clusters, instances or settings.
	ConfigVersion int64 `json:"-"`
}

// User is a person who logs in to a tenant's account.
type User struct {
	ID       string
	TenantID string
	Email    string
	// PasswordHash is the PHC-formatted argon2id hash (see HashPassword).
	PasswordHash string
	CreatedAt    time.Time
}

// Settings are a tenant's routing defaults.
type Settings struct {
	DefaultClusterID string          `json:"default_cluster_id"`
	Preset           string          `json:"preset"` // quality|latency|cost|balanced|custom
	Weights          routing.Weights `json:"weights"`
	SLO              SLO             `json:"slo"`
	// Limits are the tenant's rate limits (the key's own are Key.Limits).
	Limits Limits `json:"limits"`
}

// SLO is the JSON form of routing.SLO, in milliseconds and USD.
type SLO struct {
	TTFTMs               float64 `json:"ttft_ms"`
	TPOTMs               float64 `json:"tpot_ms"`
	E2EMs                float64 `json:"e2e_ms"`
	MaxCostUSDPerRequest float64 `json:"max_cost_usd_per_request"`
	MonthlyBudgetUSD     float64 `json:"monthly_budget_usd"`
	// P95E2EMs and P95TTFTMs are the targets of the autopilot preset
	// (routing/autopilot): 95th percentiles over 10 s windows, not
	// per-request budgets; max_cost_usd_per_request is its cost target.
	P95E2EMs  float64 `json:"p95_e2e_ms,omitempty"`
	P95TTFTMs float64 `json:"p95_ttft_ms,omitempty"`
}

// AutopilotTargets returns the autopilot targets s holds; ok is false
// when it sets no p95 target.
func (s SLO) AutopilotTargets() (autopilot.Targets, bool) {
	t := autopilot.Targets{P95E2E: time.Duration(s.P95E2EMs * float64(time.Millisecond)), P95TTFT: time.Duration(s.P95TTFTMs * float64(time.Millisecond)), MaxCostUSD: s.MaxCostUSDPerRequest}
	return t, t.Validate() == nil
}

// Routing converts s to the scheduler's SLO.
func (s SLO) Routing() routing.SLO {
	return routing.SLO{
		TTFT:       time.Duration(s.TTFTMs * float64(time.Millisecond)),
		TPOT:       time.Duration(s.TPOTMs * float64(time.Millisecond)),
		E2E:        time.Duration(s.E2EMs * float64(time.Millisecond)),
		MaxCostUSD: s.MaxCostUSDPerRequest,
	}
}

// Key is an API key's stored record; the secret itself is never stored.
type Key struct {
	ID         string     `json:"id"`
	TenantID   string     `json:"-"`
	Name       string     `json:"name"`
	Prefix     string     `json:"prefix"`
	ClusterID  string     `json:"cluster_id,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	// Optional per-key routing overrides.
	Preset  string           `json:"preset,omitempty"`
	Weights *routing.Weights `json:"weights,omitempty"`
	SLO     *SLO             `json:"slo,omitempty"`
	// Limits are the key's own rate limits, enforced besides the tenant's.
	Limits Limits `json:"limits"`
}

// Cluster is a named set of instances owned by one tenant.
type Cluster struct {
	ID        string               `json:"id"`
	TenantID  string               `json:"-"`
	Name      string               `json:"name"`
	Policy    routing.PolicyConfig `json:"policy"`
	CreatedAt time.Time            `json:"created_at"`
	UpdatedAt time.Time            `json:"updated_at"`
}

// Instance is one registered inference server. APIKey holds the decrypted
// upstream credential when loaded for routing and is never serialised.
type Instance struct {
	ID              string  `json:"id"`
	ClusterID       string  `json:"cluster_id"`
	BaseURL         string  `json:"base_url"`
	Model           string  `json:"model"`
	GPU             string  `json:"gpu"`
	TensorParallel  int     `json:"tensor_parallel"`
	PriceInPerMTok  float64 `json:"price_in_per_mtok"`
	PriceOutPerMTok float64 `json:"price_out_per_mtok"`
	MaxConcurrency  int     `json:"max_concurrency"`
	QualityPrior    float64 `json:"quality_prior"`
	Disabled        bool    `json:"disabled"`
	// Kind is "chat" (chat and text completions, the default) or
	// "embedding" (/v1/embeddings); requests are only routed to
	// instances of their kind.
	Kind      routing.Kind   `json:"kind"`
	HasAPIKey bool           `json:"has_api_key"`
	APIKey    routing.Secret `json:"-"`
	// SealedAPIKey is the upstream key encrypted with AES-256-GCM (see
	// Sealer); it is what the stores keep. Empty when there is no key.
	SealedAPIKey []byte    `json:"-"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// Principal is who an inference request acts as, resolved from its API key:
// the tenant, the key, the cluster to route on (with its instances and
// decrypted upstream keys) and the effective routing defaults (key settings
// over tenant settings).
type Principal struct {
	Tenant    Tenant
	Key       Key
	Cluster   *Cluster   // nil when the tenant has no cluster, or several and none chosen
	Instances []Instance // the cluster's instances
	// UnchosenClusters is, when Cluster is nil, how many clusters the
	// tenant has: 0, or more than one with neither the key bound to one nor
	// a default_cluster_id (see NoClusterReason).
	UnchosenClusters int
	// Version changes when the cluster, its instances or the settings change.
	Version int64
	// Settings are the effective defaults: the key's preset, weights, SLO
	// and cluster over the tenant's.
	Settings Settings

	routing *routing.Cluster
}

// RoutingCluster returns the principal's cluster and instances as the
// scheduler's value (built once per resolved principal and shared: do not
// modify it); ok is false when the tenant has no cluster to route on.
func (p *Principal) RoutingCluster() (c *routing.Cluster, ok bool) {
	if p.routing != nil {
		return p.routing, true
	}
	return p.buildRoutingCluster()
}

// NoClusterReason says why a principal without a cluster cannot route, and
// how to fix it: register a cluster, or choose one of several.
func (p *Principal) NoClusterReason() string {
	if p.UnchosenClusters > 1 {
		return fmt.Sprintf("this API key's tenant has %d clusters and none is chosen: bind the key to one "+
			"(PATCH /api/v1/keys/{id} {\"cluster_id\"}) or set a default (PUT /api/v1/settings {\"default_cluster_id\"})", p.UnchosenClusters)
	}
	return "this API key's tenant has no cluster; register one with POST /api/v1/clusters"
}

// Routing converts in to the scheduler's instance value.
func (in *Instance) Routing() routing.Instance {
	return routing.Instance{
		ID:              in.ID,
		BaseURL:         in.BaseURL,
		Model:           in.Model,
		GPU:             in.GPU,
		TensorParallel:  in.TensorParallel,
		PriceInPerMTok:  in.PriceInPerMTok,
		PriceOutPerMTok: in.PriceOutPerMTok,
		MaxConcurrency:  in.MaxConcurrency,
		QualityPrior:    in.QualityPrior,
		APIKey:          in.APIKey,
		Disabled:        in.Disabled,
		Kind:            in.Kind,
	}
}
