package tenants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/routebalance/routebalance/routing"
)

// keyCache maps API-key hashes to resolved principals. Any change to a
// tenant drops that tenant's entries and bumps gen; a load that started
// before a change (older gen) is not cached, so a revoke racing a cache
// miss cannot resurrect the key.
type keyCache struct {
	ttl time.Duration
	max int

	mu  sync.RWMutex
	gen uint64
	m   map[[32]byte]cacheEntry // by SHA-256 of the secret

	// observers are told about every invalidation (Service.Observe).
	observers atomic.Pointer[[]ChangeObserver]
}

type cacheEntry struct {
	p       *Principal
	expires time.Time
}

func newKeyCache(ttl time.Duration, max int) *keyCache {
	return &keyCache{ttl: ttl, max: max, m: map[[32]byte]cacheEntry{}}
}

func (c *keyCache) get(hash [32]byte, now time.Time) (*Principal, uint64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.m[hash]
	if ok && now.Before(e.expires) {
		return e.p, c.gen
	}
	return nil, c.gen
}

func (c *keyCache) put(hash [32]byte, p *Principal, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if len(c.m) >= c.max {
		for h, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, h)
			}
		}
		for h := range c.m {
			if len(c.m) < c.max {
				break
			}
			delete(c.m, h)
		}
	}
	c.m[hash] = cacheEntry{p: p, expires: now.Add(c.ttl)}
}

func (c *keyCache) invalidateTenant(tenantID string) {
	c.mu.Lock()
	c.gen++
	for h, e := range c.m {
		if e.p.Tenant.ID == tenantID {
			delete(c.m, h)
		}
	}
	c.mu.Unlock()
	if obs := c.observers.Load(); obs != nil {
		for _, o := range *obs {
			o.TenantChanged(tenantID)
		}
	}
}

func (c *keyCache) invalidateAll() {
	c.mu.Lock()
	c.gen++
	clear(c.m)
	c.mu.Unlock()
	if obs := c.observers.Load(); obs != nil {
		for _, o := range *obs {
			o.AllChanged()
		}
	}
}

// InvalidateTenant drops the tenant's cached key resolutions; serve calls
// it when another replica reports a change (sqlstore.Store.Watch).
func (s *Service) InvalidateTenant(tenantID string) { s.cache.invalidateTenant(tenantID) }

// InvalidateAll drops every cached key resolution (after changes may have
// been missed).
func (s *Service) InvalidateAll() { s.cache.invalidateAll() }

// ResolveKey turns an API key secret into the Principal it acts as. Malformed,
// unknown and revoked keys are ErrUnauthorized. Results are cached in memory
// (Config.KeyCacheTTL); any change made through this Service to the key's
// tenant (revoke, key, cluster, instance or settings update) drops the cached
// value at once. The returned Principal is shared: callers must not modify it.
// Each call records the key as used; last_used_at is written in batches by Run.
func (s *Service) ResolveKey(ctx context.Context, secret string) (*Principal, error) {
	if !WellFormedKey(secret) {
		return nil, fmt.Errorf("malformed API key: %w", ErrUnauthorized)
	}
	sum := sha256.Sum256([]byte(secret))
	now := s.clock.Now()
	p, gen := s.cache.get(sum, now)
	if p == nil {
		var err error
		p, err = s.loadPrincipal(ctx, hex.EncodeToString(sum[:]))
		if err != nil {
			return nil, err
		}
		s.cache.put(sum, p, gen, now)
	}
	s.touch(p.Key.ID, now)
	return p, nil
}

func (s *Service) loadPrincipal(ctx context.Context, hash string) (*Principal, error) {
	k, err := s.store.KeyByHash(ctx, hash)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("unknown API key: %w", ErrUnauthorized)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve key: %w", err)
	}
	if k.RevokedAt != nil {
		return nil, fmt.Errorf("revoked API key: %w", ErrUnauthorized)
	}
	t, err := s.store.Tenant(ctx, k.TenantID)
	if err != nil {
		return nil, fmt.Errorf("resolve key tenant: %w", err)
	}
	st, err := s.store.Settings(ctx, k.TenantID)
	if err != nil {
		return nil, fmt.Errorf("resolve key settings: %w", err)
	}
	p := &Principal{Tenant: t, Key: k, Version: t.ConfigVersion, Settings: effectiveSettings(st, k)}
	clusterID := k.ClusterID
	if clusterID == "" {
		clusterID = st.DefaultClusterID
	}
	if clusterID == "" {
		cs, err := s.store.Clusters(ctx, k.TenantID)
		if err != nil {
			return nil, fmt.Errorf("resolve key clusters: %w", err)
		}
		if len(cs) == 1 {
			clusterID = cs[0].ID
		}
		p.UnchosenClusters = len(cs)
	}
	if clusterID != "" {
		c, err := s.store.Cluster(ctx, k.TenantID, clusterID)
		if err != nil {
			return nil, fmt.Errorf("resolve key cluster: %w", err)
		}
		ins, err := s.store.Instances(ctx, k.TenantID, clusterID)
		if err != nil {
			return nil, fmt.Errorf("resolve key instances: %w", err)
		}
		for i := range ins {
			if ins[i].APIKey, err = s.OpenAPIKey(ins[i]); err != nil {
				return nil, err
			}
			ins[i].SealedAPIKey = nil
		}
		p.Cluster, p.Instances = &c, ins
		p.routing, _ = p.buildRoutingCluster()
	}
	return p, nil
}

// effectiveSettings lays the key's overrides over the tenant's settings:
// a key preset (with its weights) replaces the tenant's, a key SLO replaces
// the per-request budgets; the monthly budget is always the tenant's.
func effectiveSettings(st Settings, k Key) Settings {
	if k.Preset != "" && k.Weights != nil {
		st.Preset, st.Weights = k.Preset, *k.Weights
	}
	if k.SLO != nil {
		monthly := st.SLO.MonthlyBudgetUSD
		st.SLO = *k.SLO
		st.SLO.MonthlyBudgetUSD = monthly
	}
	if k.ClusterID != "" {
		st.DefaultClusterID = k.ClusterID
	}
	return st
}

func (s *Service) touch(keyID string, now time.Time) {
	s.touchMu.Lock()
	s.touched[keyID] = now
	s.touchMu.Unlock()
}

// FlushKeyUsage writes the pending last_used_at updates in one round trip.
// On failure the updates are kept for the next flush (unless newer ones
// replaced them).
func (s *Service) FlushKeyUsage(ctx context.Context) error {
	s.touchMu.Lock()
	batch := s.touched
	s.touched = map[string]time.Time{}
	s.touchMu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	for id, t := range batch {
		batch[id] = t.UTC().Truncate(time.Microsecond)
	}
	if err := s.store.TouchKeys(ctx, batch); err != nil {
		s.touchMu.Lock()
		for id, t := range batch {
			if _, newer := s.touched[id]; !newer {
				s.touched[id] = t
			}
		}
		s.touchMu.Unlock()
		return fmt.Errorf("flush key usage: %w", err)
	}
	return nil
}

// Run writes key usage every Config.TouchInterval until ctx is done, then
// flushes once more (bounded by 5 s) and returns nil.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.TouchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := s.FlushKeyUsage(fctx); err != nil {
				s.log.Error("final key usage flush failed", slog.Any("err", err))
			}
			return nil
		case <-t.C:
			if err := s.FlushKeyUsage(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("key usage flush failed", slog.Any("err", err))
			}
		}
	}
}

// buildRoutingCluster converts the principal once so the hot path does not
// allocate.
func (p *Principal) buildRoutingCluster() (*routing.Cluster, bool) {
	if p.Cluster == nil {
		return nil, false
	}
	rc := &routing.Cluster{
		ID:        p.Cluster.ID,
		TenantID:  p.Tenant.ID,
		Version:   p.Version,
		Policy:    p.Cluster.Policy,
		Instances: make([]routing.Instance, 0, len(p.Instances)),
	}
	for i := range p.Instances {
		rc.Instances = append(rc.Instances, p.Instances[i].Routing())
	}
	return rc, true
}
