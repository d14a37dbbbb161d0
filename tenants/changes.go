package tenants

import (
	"context"
	"errors"
	"fmt"

	"github.com/routebalance/routebalance/routing"
)

// ChangeObserver is told, after the fact, about changes to tenants'
// configuration: every key, cluster, instance or settings change made
// through the Service, and every change another replica reports
// (InvalidateTenant, InvalidateAll). The scheduler's syncer implements it
// to drop a deleted cluster's state and stop its scrapers at once. Calls
// come from the goroutine that made the change (an HTTP handler, the
// notification listener), so methods must return quickly and not call back
// into the Service.
type ChangeObserver interface {
	// TenantChanged reports that tenantID's configuration changed.
	TenantChanged(tenantID string)
	// AllChanged reports that changes may have been missed (the
	// notification listener reconnected).
	AllChanged()
}

// Observe adds o to the observers of every configuration change. Safe for
// concurrent use; observers cannot be removed.
func (s *Service) Observe(o ChangeObserver) {
	for {
		old := s.cache.observers.Load()
		var next []ChangeObserver
		if old != nil {
			next = append(next, *old...)
		}
		next = append(next, o)
		if s.cache.observers.CompareAndSwap(old, &next) {
			return
		}
	}
}

// RoutingClusters returns every cluster of the tenant as the scheduler
// routes it: its instances with their upstream keys decrypted, and the
// tenant's current configuration version. A tenant that does not exist has
// no clusters. It implements schedule.ClusterSource.
func (s *Service) RoutingClusters(ctx context.Context, tenantID string) ([]*routing.Cluster, error) {
	t, err := s.store.Tenant(ctx, tenantID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tenant %s: %w", tenantID, err)
	}
	cs, err := s.store.Clusters(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("tenant %s clusters: %w", tenantID, err)
	}
	out := make([]*routing.Cluster, 0, len(cs))
	for i := range cs {
		ins, err := s.store.Instances(ctx, tenantID, cs[i].ID)
		if err != nil {
			return nil, fmt.Errorf("cluster %s instances: %w", cs[i].ID, err)
		}
		for j := range ins {
			if ins[j].APIKey, err = s.OpenAPIKey(ins[j]); err != nil {
				// A key that no longer opens (the encryption key changed
				// without a reseal) cannot authenticate: route and scrape
				// nothing with it rather than fail the whole tenant.
				s.log.WarnContext(ctx, "instance upstream key does not open; instance disabled for scheduling",
					"tenant_id", tenantID, "instance_id", ins[j].ID, "err", err)
				ins[j].Disabled, ins[j].APIKey = true, ""
			}
			ins[j].SealedAPIKey = nil
		}
		p := Principal{Tenant: t, Cluster: &cs[i], Instances: ins, Version: t.ConfigVersion}
		rc, _ := p.buildRoutingCluster()
		out = append(out, rc)
	}
	return out, nil
}
