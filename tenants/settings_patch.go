package tenants

import (
	"context"
	"fmt"

	"github.com/routebalance/routebalance/routing"
)

// SLOPatch is the slo object of PATCH /api/v1/settings: each absent field
// keeps the tenant's current value, 0 removes that budget.
type SLOPatch struct {
	TTFTMs               *float64 `json:"ttft_ms"`
	TPOTMs               *float64 `json:"tpot_ms"`
	E2EMs                *float64 `json:"e2e_ms"`
	MaxCostUSDPerRequest *float64 `json:"max_cost_usd_per_request"`
	MonthlyBudgetUSD     *float64 `json:"monthly_budget_usd"`
	P95E2EMs             *float64 `json:"p95_e2e_ms"`
	P95TTFTMs            *float64 `json:"p95_ttft_ms"`
}

// LimitsPatch is the limits object of PATCH /api/v1/settings: each absent
// field keeps the tenant's current value, 0 means unlimited.
type LimitsPatch struct {
	RPM            *int64 `json:"rpm"`
	TPM            *int64 `json:"tpm"`
	MaxConcurrency *int64 `json:"max_concurrency"`
}

// SettingsPatch is the body of PATCH /api/v1/settings: a partial update in
// which every absent field (at any depth) keeps its saved value, unlike
// PUT, which replaces the settings whole.
//
// Preset and weights: a named preset alone sets that preset and its
// weights; weights alone (or with "custom") set custom weights; "custom"
// alone keeps the saved weights as custom ones.
type SettingsPatch struct {
	DefaultClusterID *string          `json:"default_cluster_id"`
	Preset           *string          `json:"preset"`
	Weights          *routing.Weights `json:"weights"`
	SLO              *SLOPatch        `json:"slo"`
	Limits           *LimitsPatch     `json:"limits"`
}

// merge returns cur with p applied, as the full input PutSettings checks.
func (p SettingsPatch) merge(cur Settings) SettingsInput {
	in := SettingsInput{DefaultClusterID: cur.DefaultClusterID, Preset: cur.Preset, SLO: cur.SLO}
	if in.Preset == "" {
		in.Preset = routing.PresetBalanced
	}
	w := cur.Weights
	in.Weights = &w
	if p.DefaultClusterID != nil {
		in.DefaultClusterID = *p.DefaultClusterID
	}
	switch {
	case p.Weights != nil:
		in.Weights = p.Weights
		in.Preset = routing.PresetCustom
		if p.Preset != nil {
			in.Preset = *p.Preset
		}
	case p.Preset != nil:
		in.Preset = *p.Preset
		if in.Preset != routing.PresetCustom {
			in.Weights = nil
		}
	}
	if o := p.SLO; o != nil {
		set := func(dst *float64, v *float64) {
			if v != nil {
				*dst = *v
			}
		}
		set(&in.SLO.TTFTMs, o.TTFTMs)
		set(&in.SLO.TPOTMs, o.TPOTMs)
		set(&in.SLO.E2EMs, o.E2EMs)
		set(&in.SLO.MaxCostUSDPerRequest, o.MaxCostUSDPerRequest)
		set(&in.SLO.MonthlyBudgetUSD, o.MonthlyBudgetUSD)
		set(&in.SLO.P95E2EMs, o.P95E2EMs)
		set(&in.SLO.P95TTFTMs, o.P95TTFTMs)
	}
	if l := p.Limits; l != nil {
		nl := cur.Limits
		set := func(dst *int64, v *int64) {
			if v != nil {
				*dst = *v
			}
		}
		set(&nl.RPM, l.RPM)
		set(&nl.TPM, l.TPM)
		set(&nl.MaxConcurrency, l.MaxConcurrency)
		in.Limits = &nl
	}
	return in
}

// PatchSettings applies a partial update to a tenant's routing defaults
// (absent fields unchanged) with the same validation as PutSettings.
func (s *Service) PatchSettings(ctx context.Context, tenantID string, p SettingsPatch) (Settings, error) {
	cur, err := s.store.Settings(ctx, tenantID)
	if err != nil {
		return Settings{}, fmt.Errorf("current settings: %w", err)
	}
	return s.PutSettings(ctx, tenantID, p.merge(cur))
}
