package tenants

import (
	"context"
	"time"
)

// The Service keeps its records through these interfaces; tenants/sqlstore
// implements all of them for Postgres and SQLite. They are split by record
// so each stays small; Store is their union. Every method that takes a
// tenant id scopes its query by it, so another tenant's id yields
// ErrNotFound. Every mutation of keys, clusters, instances or settings
// increments the tenant's ConfigVersion in the same transaction.

// AccountStore keeps tenants and their users.
type AccountStore interface {
	// CreateAccount stores a new tenant, its first user and default
	// settings atomically; a taken email is ErrConflict.
	CreateAccount(ctx context.Context, t Tenant, u User, s Settings) error
	// UserByEmail finds a user by normalised email.
	UserByEmail(ctx context.Context, email string) (User, error)
	// Tenant returns a tenant with its current ConfigVersion.
	Tenant(ctx context.Context, id string) (Tenant, error)
}

// KeyStore keeps API keys by their SHA-256 hash.
type KeyStore interface {
	CreateKey(ctx context.Context, k Key, hash string) error
	Keys(ctx context.Context, tenantID string) ([]Key, error)
	Key(ctx context.Context, tenantID, id string) (Key, error)
	// KeyByHash finds any tenant's key by hash, revoked keys included.
	KeyByHash(ctx context.Context, hash string) (Key, error)
	// UpdateKey writes name, cluster, preset, weights, SLO and revocation.
	UpdateKey(ctx context.Context, k Key) error
	// TouchKeys sets last_used_at of many keys in one round trip; ids that
	// no longer exist are ignored.
	TouchKeys(ctx context.Context, used map[string]time.Time) error
}

// ClusterStore keeps clusters.
type ClusterStore interface {
	CreateCluster(ctx context.Context, c Cluster) error
	Clusters(ctx context.Context, tenantID string) ([]Cluster, error)
	Cluster(ctx context.Context, tenantID, id string) (Cluster, error)
	// UpdateCluster writes name, policy and updated_at.
	UpdateCluster(ctx context.Context, c Cluster) error
	// DeleteCluster removes a cluster and its instances; keys bound to it
	// and a default_cluster_id naming it are cleared.
	DeleteCluster(ctx context.Context, tenantID, id string) error
}

// InstanceStore keeps instances; the upstream key only in sealed form.
type InstanceStore interface {
	CreateInstance(ctx context.Context, tenantID string, in Instance) error
	Instances(ctx context.Context, tenantID, clusterID string) ([]Instance, error)
	Instance(ctx context.Context, tenantID, clusterID, id string) (Instance, error)
	// UpdateInstance writes every field of in (located by tenant, cluster
	// and id).
	UpdateInstance(ctx context.Context, tenantID string, in Instance) error
	DeleteInstance(ctx context.Context, tenantID, clusterID, id string) error
}

// SettingsStore keeps each tenant's routing defaults.
type SettingsStore interface {
	Settings(ctx context.Context, tenantID string) (Settings, error)
	PutSettings(ctx context.Context, tenantID string, s Settings) error
}

// Store is everything the Service needs from storage.
type Store interface {
	AccountStore
	KeyStore
	ClusterStore
	InstanceStore
	SettingsStore
	SessionStore
}
