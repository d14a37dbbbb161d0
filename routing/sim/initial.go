package sim

import (
	"fmt"
	"math"

	"github.com/routebalance/routebalance/routing/engine"
)

// InitialLoad is the work one instance already holds when a what-if replay
// starts (WhatIfConfig.Live): the preview copies it from the live
// scheduler's view so that a replay starts where the cluster is now, not
// idle.
type InitialLoad struct {
	// Running is how many sequences are decoding on the engine.
	Running int
	// PendingTokens is the decode tokens those sequences still have to
	// generate, in total; 0 gives each half the world model's default
	// median output (a request seen at a random moment is half done).
	PendingTokens float64
	// Waiting is how many requests wait for the instance; each is a fresh
	// request of 200 prompt tokens and the default median output.
	Waiting int
}

// initialPromptTokens is the prompt size assumed for a waiting request.
const initialPromptTokens = whatIfPromptTokens

// preloads turns per-instance initial loads (loads[i] for instance i of
// w) into the requests a Replay puts on the engines at time 0: each
// running sequence with a one-token prompt (its prefill is done) and its
// share of the pending tokens (spread evenly, the remainder on the first
// ones), each waiting request with a 200-token prompt and the tier's
// default median output.
func preloads(w *World, loads []InitialLoad) ([]Preload, error) {
	if len(loads) > len(w.specs) {
		return nil, fmt.Errorf("initial load for %d instances, the world has %d", len(loads), len(w.specs))
	}
	var out []Preload
	for i, ld := range loads {
		if ld.Running < 0 || ld.Waiting < 0 || !(ld.PendingTokens >= 0) || math.IsInf(ld.PendingTokens, 0) {
			return nil, fmt.Errorf("instance %d: invalid initial load %+v", i, ld)
		}
		t := w.specs[i].Tier
		median := max(1, int(math.Round(w.File.OutputLengths.Median(engine.DefaultTask)*max(t.Verbosity, 0.01))))
		left := int(math.Round(ld.PendingTokens))
		if left <= 0 {
			left = ld.Running * max(1, median/2)
		}
		for k := 0; k < ld.Running; k++ {
			n := left / ld.Running
			if k < left%ld.Running {
				n++
			}
			out = append(out, Preload{Instance: i, PromptTokens: 1, OutputTokens: max(n, 1)})
		}
		for k := 0; k < ld.Waiting; k++ {
			out = append(out, Preload{Instance: i, PromptTokens: initialPromptTokens, OutputTokens: median})
		}
	}
	return out, nil
}
