package tenants

import (
	"context"
	"math"
	"strings"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
)

// This file holds the Service's tenant settings: routing defaults, SLOs
// and presets.

func checkSLO(field string, o SLO) error {
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"ttft_ms", o.TTFTMs}, {"tpot_ms", o.TPOTMs}, {"e2e_ms", o.E2EMs},
		{"max_cost_usd_per_request", o.MaxCostUSDPerRequest}, {"monthly_budget_usd", o.MonthlyBudgetUSD},
		{"p95_e2e_ms", o.P95E2EMs}, {"p95_ttft_ms", o.P95TTFTMs},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fieldErr(field+"."+f.name, "must be a number >= 0 (0 means no budget), got %v", f.v)
		}
	}
	return nil
}

// checkAutopilot: the autopilot preset needs a p95 target in the SLO.
func checkAutopilot(preset string, o SLO) error {
	if preset != autopilot.PresetAutopilot {
		return nil
	}
	if _, ok := o.AutopilotTargets(); !ok {
		return fieldErr("slo", "preset autopilot needs p95_e2e_ms and/or p95_ttft_ms (its targets)")
	}
	return nil
}

// resolvePreset validates a preset with optional weights and returns the
// weights to store: a named preset's own vector, or the given custom
// weights (required and on the simplex).
func resolvePreset(preset string, w *routing.Weights) (string, routing.Weights, error) {
	p := strings.ToLower(strings.TrimSpace(preset))
	if p == routing.PresetCustom || (p == "" && w != nil) {
		if w == nil {
			return "", routing.Weights{}, fieldErr("weights", "are required with the custom preset")
		}
		if err := w.Validate(); err != nil {
			return "", routing.Weights{}, err
		}
		return routing.PresetCustom, *w, nil
	}
	if p == autopilot.PresetAutopilot {
		// The controller sets the weights; stored are where it starts.
		pw, _ := routing.PresetWeights(routing.PresetBalanced)
		return p, pw, nil
	}
	pw, err := routing.PresetWeights(p)
	if err != nil {
		return "", routing.Weights{}, fieldErr("preset", "must be quality, latency, cost, balanced, autopilot or custom, got %q", preset)
	}
	if w != nil {
		if err := w.Validate(); err != nil {
			return "", routing.Weights{}, err
		}
	}
	return p, pw, nil
}

// Settings returns a tenant's routing defaults.
func (s *Service) Settings(ctx context.Context, tenantID string) (Settings, error) {
	return s.store.Settings(ctx, tenantID)
}

// SettingsInput is the body of PUT /api/v1/settings. Preset is required;
// weights are required with custom and ignored (but still validated) with a
// named preset.
type SettingsInput struct {
	DefaultClusterID string           `json:"default_cluster_id"`
	Preset           string           `json:"preset"`
	Weights          *routing.Weights `json:"weights"`
	SLO              SLO              `json:"slo"`
	// Limits replaces the tenant's rate limits; absent keeps them.
	Limits *Limits `json:"limits"`
}

// PutSettings replaces a tenant's routing defaults.
func (s *Service) PutSettings(ctx context.Context, tenantID string, in SettingsInput) (Settings, error) {
	if in.Preset == "" && in.Weights == nil {
		return Settings{}, fieldErr("preset", "is required (quality, latency, cost, balanced or custom)")
	}
	preset, w, err := resolvePreset(in.Preset, in.Weights)
	if err != nil {
		return Settings{}, err
	}
	if err := checkSLO("slo", in.SLO); err != nil {
		return Settings{}, err
	}
	if err := checkAutopilot(preset, in.SLO); err != nil {
		return Settings{}, err
	}
	if in.DefaultClusterID != "" {
		if err := s.checkClusterRef(ctx, tenantID, "default_cluster_id", in.DefaultClusterID); err != nil {
			return Settings{}, err
		}
	}
	st := Settings{DefaultClusterID: in.DefaultClusterID, Preset: preset, Weights: w, SLO: in.SLO}
	if st.Limits, err = s.settingsLimits(ctx, tenantID, in.Limits); err != nil {
		return Settings{}, err
	}
	if err := s.store.PutSettings(ctx, tenantID, st); err != nil {
		return Settings{}, err
	}
	s.cache.invalidateTenant(tenantID)
	return st, nil
}
