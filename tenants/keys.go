package tenants

import (
	"context"
	"fmt"

	"github.com/routebalance/routebalance/routing"
)

// This file holds the Service's API keys: create, list, revoke, patch.

// KeyInput is the body of POST /api/v1/keys.
type KeyInput struct {
	Name      string `json:"name"`
	ClusterID string `json:"cluster_id"`
}

// CreateKey makes a new API key and returns its record and its secret,
// which is never available again.
func (s *Service) CreateKey(ctx context.Context, tenantID string, in KeyInput) (Key, string, error) {
	name, err := checkName("name", in.Name, true)
	if err != nil {
		return Key{}, "", err
	}
	if in.ClusterID != "" {
		if err := s.checkClusterRef(ctx, tenantID, "cluster_id", in.ClusterID); err != nil {
			return Key{}, "", err
		}
	}
	secret, prefix, err := NewKeySecret()
	if err != nil {
		return Key{}, "", err
	}
	k := Key{ID: newID(), TenantID: tenantID, Name: name, Prefix: prefix, ClusterID: in.ClusterID, CreatedAt: s.now()}
	if err := s.store.CreateKey(ctx, k, HashKey(secret)); err != nil {
		return Key{}, "", fmt.Errorf("create key: %w", err)
	}
	return k, secret, nil
}

// Keys lists a tenant's keys, revoked ones included, without secrets.
func (s *Service) Keys(ctx context.Context, tenantID string) ([]Key, error) {
	return s.store.Keys(ctx, tenantID)
}

// RevokeKey revokes a key; it stops resolving at once in this process.
// Revoking twice is not an error.
func (s *Service) RevokeKey(ctx context.Context, tenantID, id string) error {
	k, err := s.store.Key(ctx, tenantID, id)
	if err != nil {
		return err
	}
	if k.RevokedAt == nil {
		now := s.now()
		k.RevokedAt = &now
		if err := s.store.UpdateKey(ctx, k); err != nil {
			return err
		}
	}
	s.cache.invalidateTenant(tenantID)
	return nil
}

// KeyPatch is the body of PATCH /api/v1/keys/{id}; absent fields are
// left alone. Preset "" with no weights clears the key's override; an SLO
// of all zeros clears the key's SLO override.
type KeyPatch struct {
	Name      *string          `json:"name"`
	ClusterID *string          `json:"cluster_id"`
	Preset    *string          `json:"preset"`
	Weights   *routing.Weights `json:"weights"`
	SLO       *SLO             `json:"slo"`
	Limits    *Limits          `json:"limits"`
}

// UpdateKey applies a patch to a key.
func (s *Service) UpdateKey(ctx context.Context, tenantID, id string, p KeyPatch) (Key, error) {
	k, err := s.store.Key(ctx, tenantID, id)
	if err != nil {
		return Key{}, err
	}
	if p.Name != nil {
		if k.Name, err = checkName("name", *p.Name, true); err != nil {
			return Key{}, err
		}
	}
	if p.ClusterID != nil {
		if *p.ClusterID != "" {
			if err := s.checkClusterRef(ctx, tenantID, "cluster_id", *p.ClusterID); err != nil {
				return Key{}, err
			}
		}
		k.ClusterID = *p.ClusterID
	}
	if p.Preset != nil || p.Weights != nil {
		preset := ""
		if p.Preset != nil {
			preset = *p.Preset
		}
		if preset == "" && p.Weights == nil {
			k.Preset, k.Weights = "", nil
		} else {
			name, w, err := resolvePreset(preset, p.Weights)
			if err != nil {
				return Key{}, err
			}
			k.Preset, k.Weights = name, &w
		}
	}
	if p.SLO != nil {
		if err := checkSLO("slo", *p.SLO); err != nil {
			return Key{}, err
		}
		if *p.SLO == (SLO{}) {
			k.SLO = nil
		} else {
			o := *p.SLO
			k.SLO = &o
		}
	}
	if p.Limits != nil {
		if err := checkLimits("limits", *p.Limits); err != nil {
			return Key{}, err
		}
		k.Limits = *p.Limits
	}
	if err := s.store.UpdateKey(ctx, k); err != nil {
		return Key{}, err
	}
	s.cache.invalidateTenant(tenantID)
	return k, nil
}
