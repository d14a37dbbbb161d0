package main

import (
	"fmt"
	"log/slog"

	"github.com/routebalance/routebalance/routing/estimate"
	"github.com/routebalance/routebalance/routing/latency"
	"github.com/routebalance/routebalance/routing/schedule"
	"github.com/routebalance/routebalance/routing/sim"
)

// simDeps returns a constructor of the scheduler's collaborators for one
// cell: the KNN index opened afresh and a fresh latency model, so lengths
// and latencies learnt online in one cell never leak into the next.
//
// latencyPrior "world" starts each tier's latency model from the cluster
// file's light-load TPOT, load factor, TTFT overhead and prefill cost —
// what `routebalance profile` measures on a real tier before serving;
// "default" starts every tier from latency.DefaultPrior and learns online
// only.
func simDeps(index, latencyPrior string, w *sim.World, log *slog.Logger) (func() (schedule.Deps, error), error) {
	if latencyPrior != "world" && latencyPrior != "default" {
		return nil, fmt.Errorf("latency-prior: want world or default, got %q", latencyPrior)
	}
	if index != "" {
		if _, err := estimate.ReadManifest(index); err != nil {
			return nil, fmt.Errorf("index: %w", err)
		}
	}
	return func() (schedule.Deps, error) {
		deps := schedule.Deps{Logger: log}
		if index != "" {
			knn, err := estimate.Open(index, estimate.Config{})
			if err != nil {
				return deps, fmt.Errorf("index: %w", err)
			}
			deps.Estimator = knn
		}
		lm, err := latency.New(latency.Config{})
		if err != nil {
			return deps, err
		}
		if latencyPrior == "world" {
			for _, t := range w.File.Tiers {
				lm.SetPrior(t.Tier(), latency.LightPrior(t.TPOTMsLight/1e3, t.TPOTLoadFactor, t.MaxNumSeqs, t.TTFTOverheadMs/1e3, t.PrefillMsPer1kPromptTokens/1e3))
			}
		}
		deps.Latency = lm
		return deps, nil
	}, nil
}
