package tenants

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/routebalance/routebalance/routing"
)

// This file holds the Service's instances: registration, patches and
// their sealed upstream keys.

// InstanceInput is the body of POST and PATCH on instances; absent fields
// keep their value (PATCH) or default (POST: tensor_parallel 1,
// quality_prior 0.5, kind "chat"). An api_key of "" removes the upstream key.
type InstanceInput struct {
	BaseURL         *string  `json:"base_url"`
	Model           *string  `json:"model"`
	GPU             *string  `json:"gpu"`
	TensorParallel  *int     `json:"tensor_parallel"`
	PriceInPerMTok  *float64 `json:"price_in_per_mtok"`
	PriceOutPerMTok *float64 `json:"price_out_per_mtok"`
	MaxConcurrency  *int     `json:"max_concurrency"`
	QualityPrior    *float64 `json:"quality_prior"`
	Disabled        *bool    `json:"disabled"`
	APIKey          *string  `json:"api_key"`
	// Kind is "chat" or "embedding".
	Kind *string `json:"kind"`
}

// DefaultQualityPrior is an instance's quality_prior when none is given.
const DefaultQualityPrior = 0.5

func (s *Service) applyInstance(ctx context.Context, in *Instance, p InstanceInput) error {
	if p.BaseURL != nil {
		u, err := s.endpoints.CheckURL(ctx, "base_url", *p.BaseURL)
		if err != nil {
			return err
		}
		in.BaseURL = u
	}
	if p.Model != nil {
		if err := checkNoControl("model", *p.Model); err != nil {
			return err
		}
		m := strings.TrimSpace(*p.Model)
		if m == "" || len(m) > 256 || m == "auto" {
			return fieldErr("model", "must be the served model name (1–256 characters, not \"auto\")")
		}
		in.Model = m
	}
	if p.GPU != nil {
		g, err := checkText("gpu", *p.GPU, 64)
		if err != nil {
			return err
		}
		in.GPU = g
	}
	if p.TensorParallel != nil {
		if *p.TensorParallel < 1 || *p.TensorParallel > 64 {
			return fieldErr("tensor_parallel", "must be between 1 and 64, got %d", *p.TensorParallel)
		}
		in.TensorParallel = *p.TensorParallel
	}
	for _, f := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"price_in_per_mtok", p.PriceInPerMTok, &in.PriceInPerMTok}, {"price_out_per_mtok", p.PriceOutPerMTok, &in.PriceOutPerMTok}} {
		if f.v == nil {
			continue
		}
		if err := checkPrice(f.name, *f.v); err != nil {
			return err
		}
		*f.dst = *f.v
	}
	if p.MaxConcurrency != nil {
		if *p.MaxConcurrency < 0 || *p.MaxConcurrency > 100_000 {
			return fieldErr("max_concurrency", "must be between 0 (scheduler default) and 100000, got %d", *p.MaxConcurrency)
		}
		in.MaxConcurrency = *p.MaxConcurrency
	}
	if p.QualityPrior != nil {
		q := *p.QualityPrior
		if math.IsNaN(q) || q < 0 || q > 1 {
			return fieldErr("quality_prior", "must be in [0,1], got %v", q)
		}
		in.QualityPrior = q
	}
	if p.Disabled != nil {
		in.Disabled = *p.Disabled
	}
	if p.Kind != nil {
		k, err := routing.ParseKind(*p.Kind)
		if err != nil {
			return fieldErr("kind", "must be \"chat\" or \"embedding\", got %q", *p.Kind)
		}
		in.Kind = k
	}
	if p.APIKey != nil {
		if *p.APIKey == "" {
			in.SealedAPIKey, in.HasAPIKey = nil, false
		} else {
			if len(*p.APIKey) > 4096 {
				return fieldErr("api_key", "must be at most 4096 bytes")
			}
			if err := checkUpstreamKey("api_key", *p.APIKey); err != nil {
				return err
			}
			sealed, err := s.sealer.Seal(*p.APIKey, in.ID)
			if err != nil {
				return err
			}
			in.SealedAPIKey, in.HasAPIKey = sealed, true
		}
	}
	return nil
}

// CreateInstance registers an instance in a cluster. base_url and model are
// required; the URL must pass the endpoint policy.
func (s *Service) CreateInstance(ctx context.Context, tenantID, clusterID string, p InstanceInput) (Instance, error) {
	if _, err := s.store.Cluster(ctx, tenantID, clusterID); err != nil {
		return Instance{}, err
	}
	if p.BaseURL == nil || strings.TrimSpace(*p.BaseURL) == "" {
		return Instance{}, fieldErr("base_url", "is required")
	}
	if p.Model == nil {
		return Instance{}, fieldErr("model", "is required")
	}
	now := s.now()
	in := Instance{ID: newID(), ClusterID: clusterID, TensorParallel: 1, QualityPrior: DefaultQualityPrior, Kind: routing.KindChat, CreatedAt: now, UpdatedAt: now}
	if err := s.applyInstance(ctx, &in, p); err != nil {
		return Instance{}, err
	}
	if err := s.store.CreateInstance(ctx, tenantID, in); err != nil {
		return Instance{}, fmt.Errorf("create instance: %w", err)
	}
	s.cache.invalidateTenant(tenantID)
	return in, nil
}

// Instances lists a cluster's instances (upstream keys stay sealed).
func (s *Service) Instances(ctx context.Context, tenantID, clusterID string) ([]Instance, error) {
	if _, err := s.store.Cluster(ctx, tenantID, clusterID); err != nil {
		return nil, err
	}
	return s.store.Instances(ctx, tenantID, clusterID)
}

// Instance returns one instance.
func (s *Service) Instance(ctx context.Context, tenantID, clusterID, id string) (Instance, error) {
	return s.store.Instance(ctx, tenantID, clusterID, id)
}

// UpdateInstance applies a patch to an instance.
func (s *Service) UpdateInstance(ctx context.Context, tenantID, clusterID, id string, p InstanceInput) (Instance, error) {
	in, err := s.store.Instance(ctx, tenantID, clusterID, id)
	if err != nil {
		return Instance{}, err
	}
	if err := s.applyInstance(ctx, &in, p); err != nil {
		return Instance{}, err
	}
	in.UpdatedAt = s.now()
	if err := s.store.UpdateInstance(ctx, tenantID, in); err != nil {
		return Instance{}, err
	}
	s.cache.invalidateTenant(tenantID)
	return in, nil
}

// DeleteInstance removes an instance.
func (s *Service) DeleteInstance(ctx context.Context, tenantID, clusterID, id string) error {
	if err := s.store.DeleteInstance(ctx, tenantID, clusterID, id); err != nil {
		return err
	}
	s.cache.invalidateTenant(tenantID)
	return nil
}

// OpenAPIKey decrypts an instance's upstream key ("" when it has none).
func (s *Service) OpenAPIKey(in Instance) (routing.Secret, error) {
	if len(in.SealedAPIKey) == 0 {
		return "", nil
	}
	pt, err := s.sealer.Open(in.SealedAPIKey, in.ID)
	if err != nil {
		return "", fmt.Errorf("instance %s upstream key: %w", in.ID, err)
	}
	return routing.Secret(pt), nil
}
