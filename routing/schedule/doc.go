// Package schedule is the fused scheduler: for every request it picks one
// concrete instance by fusing predicted quality and cost per model with
// predicted latency per instance (S[r,i] of DESIGN §3.1), under filters
// with a documented relaxation order, and admits the request on that
// instance or queues it (STJF with aging, workflow stickiness).
//
// Core is one cluster's synchronous scheduler (no goroutines, time passed
// in), driven by the Router's per-cluster goroutine and by the simulator.
// Router serves many clusters and owns their goroutines and scrapers.
// Policies are small types behind Policy, built by a Registry value. See
// README.md for the formula, filters, policies and configuration.
package schedule
