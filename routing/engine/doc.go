// Package engine is the model of one vLLM instance the routing layer owns:
// the cluster file (tiers of identical instances, the output-length world
// model, calibration targets; LoadCluster, ParseCluster, ReferenceCluster),
// a per-instance Engine that models continuous batching on an injected
// clock, the output-length model (OutputLengths.Natural) and the engine's
// latency statistics (Stats). The discrete-event simulator (routing/sim)
// drives engines on a virtual clock; the HTTP emulator (infra/vllmemu)
// drives one per emulated server in real time. See README.md for the
// formulas.
//
// # Driving an Engine
//
// An Engine has no goroutines and never reads the wall clock. Its caller
// owns time. A discrete-event loop drives a set of engines like this:
//
//	f, _ := engine.LoadCluster("reference-13.json")
//	var engines []*engine.Engine
//	for _, in := range f.Instances() {
//		e, _ := engine.NewEngine(engine.EngineConfig{Tier: *in.Tier, Lengths: f.OutputLengths, Seed: 1, Start: t0})
//		engines = append(engines, e)
//	}
//	var events []engine.Event
//	for {
//		// The next thing to happen: an arrival from the workload or the
//		// earliest engine event.
//		next, src := nextArrival()            // the caller's own workload
//		for i, e := range engines {
//			if t, ok := e.NextEvent(); ok && t.Before(next) {
//				next, src = t, i
//			}
//		}
//		// Move every engine to next (engines with nothing due do nothing).
//		for _, e := range engines {
//			events = e.Advance(next, events[:0])
//			for _, ev := range events {
//				switch ev.Kind {
//				case engine.EventFirstToken: // TTFT = ev.At − submission
//				case engine.EventToken:      // ev.Tokens so far
//				case engine.EventDone:       // E2E = ev.At − submission; ev.Finish
//				}
//			}
//		}
//		if src == arrival {
//			tk, err := engines[chosen].Submit(next, engine.Request{ID: id, Prompt: p, Task: task, MaxTokens: mt})
//			_, _ = tk, err // tk.OutputTokens is the length it will have
//		}
//	}
//
// Rules the loop may rely on: Advance(t) processes every internal event at
// or before t, in time order, and stamps each Event with the time it
// happened (never after t); NextEvent is exact (no event happens strictly
// between two consecutive NextEvent times); Submit and Abort at time t take
// effect at t; the same requests at the same times give the same events.
// Advance past a NextEvent time is allowed (the engine catches up), so a
// real-time driver that wakes late loses no accuracy, only timeliness.
//
// Each Event is emitted at the end of the engine step that produced it: a
// first token ends the step that carried the sequence's prefill, a token
// ends each later decode step, and a done event follows a sequence's last
// token at the same instant. See Engine for the step model and README.md
// for the formulas.
package engine
