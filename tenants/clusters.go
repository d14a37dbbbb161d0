package tenants

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/routebalance/routebalance/routing"
)

// This file holds the Service's clusters and their policies.

func checkPolicy(p routing.PolicyConfig) (routing.PolicyConfig, error) {
	p.Name = strings.ToLower(strings.TrimSpace(p.Name))
	if p.Name == "" {
		p.Name = routing.PolicyRouteBalance
	}
	if !routing.IsLivePolicy(p.Name) {
		names := routing.LivePolicies()
		return p, fieldErr("policy.name", "must be %s or %s, got %q", strings.Join(names[:len(names)-1], ", "), names[len(names)-1], p.Name)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"threshold", p.Threshold}, {"slack", p.Slack}, {"switch_gain", p.SwitchGain}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return p, fieldErr("policy."+f.name, "must be a number >= 0, got %v", f.v)
		}
	}
	if p.Threshold > 1 {
		return p, fieldErr("policy.threshold", "is a quality in [0,1], got %v", p.Threshold)
	}
	return p, nil
}

// ClusterInput is the body of POST /api/v1/clusters.
type ClusterInput struct {
	Name   string                `json:"name"`
	Policy *routing.PolicyConfig `json:"policy"`
}

// CreateCluster makes a cluster with the default routebalance policy
// unless one is given.
func (s *Service) CreateCluster(ctx context.Context, tenantID string, in ClusterInput) (Cluster, error) {
	name, err := checkName("name", in.Name, true)
	if err != nil {
		return Cluster{}, err
	}
	var pol routing.PolicyConfig
	if in.Policy != nil {
		pol = *in.Policy
	}
	if pol, err = checkPolicy(pol); err != nil {
		return Cluster{}, err
	}
	now := s.now()
	c := Cluster{ID: newID(), TenantID: tenantID, Name: name, Policy: pol, CreatedAt: now, UpdatedAt: now}
	if err := s.store.CreateCluster(ctx, c); err != nil {
		return Cluster{}, fmt.Errorf("create cluster: %w", err)
	}
	s.cache.invalidateTenant(tenantID)
	return c, nil
}

// Clusters lists a tenant's clusters.
func (s *Service) Clusters(ctx context.Context, tenantID string) ([]Cluster, error) {
	return s.store.Clusters(ctx, tenantID)
}

// Cluster returns one of a tenant's clusters.
func (s *Service) Cluster(ctx context.Context, tenantID, id string) (Cluster, error) {
	return s.store.Cluster(ctx, tenantID, id)
}

// checkClusterRef checks that id (the value of field) names one of the
// tenant's clusters: a field error "no such cluster" otherwise, also for
// an id no cluster can have (a NUL or invalid UTF-8, which Postgres
// refuses outright instead of finding nothing).
func (s *Service) checkClusterRef(ctx context.Context, tenantID, field, id string) error {
	if len(id) > 256 || !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		return fieldErr(field, "no such cluster")
	}
	if _, err := s.store.Cluster(ctx, tenantID, id); err != nil {
		if errors.Is(err, ErrNotFound) {
			return fieldErr(field, "no such cluster")
		}
		return err
	}
	return nil
}

// ClusterPatch is the body of PATCH /api/v1/clusters/{id}.
type ClusterPatch struct {
	Name   *string               `json:"name"`
	Policy *routing.PolicyConfig `json:"policy"`
}

// UpdateCluster applies a patch to a cluster.
func (s *Service) UpdateCluster(ctx context.Context, tenantID, id string, p ClusterPatch) (Cluster, error) {
	c, err := s.store.Cluster(ctx, tenantID, id)
	if err != nil {
		return Cluster{}, err
	}
	if p.Name != nil {
		if c.Name, err = checkName("name", *p.Name, true); err != nil {
			return Cluster{}, err
		}
	}
	if p.Policy != nil {
		if c.Policy, err = checkPolicy(*p.Policy); err != nil {
			return Cluster{}, err
		}
	}
	c.UpdatedAt = s.now()
	if err := s.store.UpdateCluster(ctx, c); err != nil {
		return Cluster{}, err
	}
	s.cache.invalidateTenant(tenantID)
	return c, nil
}

// DeleteCluster deletes a cluster and its instances, and revokes the keys
// bound to it: the store only unbinds them (ON DELETE SET NULL), and an
// unbound key would route to the tenant's default or only cluster, one it
// was never meant for. A key stays bound to the cluster it was made for.
func (s *Service) DeleteCluster(ctx context.Context, tenantID, id string) error {
	if _, err := s.store.Cluster(ctx, tenantID, id); err != nil {
		return err // another tenant's or no cluster: nothing is revoked
	}
	keys, err := s.store.Keys(ctx, tenantID)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.ClusterID == id && k.RevokedAt == nil {
			if err := s.RevokeKey(ctx, tenantID, k.ID); err != nil {
				return fmt.Errorf("revoke key %s of the deleted cluster: %w", k.ID, err)
			}
		}
	}
	if err := s.store.DeleteCluster(ctx, tenantID, id); err != nil {
		return err
	}
	s.cache.invalidateTenant(tenantID)
	return nil
}
