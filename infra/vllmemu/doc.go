// Package vllmemu emulates vLLM inference servers for a simulated
// heterogeneous cluster: an HTTP server per instance that speaks vLLM's
// OpenAI-compatible API and /metrics in real (optionally scaled) time, with
// injected faults. Each server drives one routing/engine Engine (the
// instance model, shared with the simulator) from its own goroutine.
package vllmemu
