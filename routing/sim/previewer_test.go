package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/schedule"
)

// fixedClock is a routing.Clock that reads a settable time.
type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

// memTraffic is a recorded request log in memory (sim.Traffic).
type memTraffic struct {
	rows  map[string][]ObservedRequest // by cluster, newest first
	calls int
}

func (m *memTraffic) ServedRequests(_ context.Context, tenantID, clusterID string, from, to time.Time, n int) ([]ObservedRequest, error) {
	m.calls++
	var out []ObservedRequest
	for _, r := range m.rows[clusterID] {
		if !r.StartedAt.Before(from) && r.StartedAt.Before(to) && len(out) < n {
			out = append(out, r)
		}
	}
	return out, nil
}

// memPrompts is a routing.PromptMemory over a slice, newest first.
type memPrompts struct {
	tenant string
	byID   map[string]string
	newest []string
}

func (m memPrompts) TenantPrompts(tenantID string, n int) []string {
	if tenantID != m.tenant {
		return nil
	}
	return m.newest[:min(n, len(m.newest))]
}

func (m memPrompts) Prompt(tenantID, id string) string {
	if tenantID != m.tenant {
		return ""
	}
	return m.byID[id]
}

// previewCluster registers two small-1b instances and one big-70b.
func previewCluster() routing.Cluster {
	return routing.Cluster{ID: "c1", Policy: routing.PolicyConfig{Name: "routebalance"}, Instances: []routing.Instance{
		{ID: "i1", Model: "small-1b", GPU: "L4", PriceInPerMTok: 0.05, PriceOutPerMTok: 0.1, MaxConcurrency: 32, QualityPrior: 0.35},
		{ID: "i2", Model: "small-1b", GPU: "L4", PriceInPerMTok: 0.05, PriceOutPerMTok: 0.1, MaxConcurrency: 32, QualityPrior: 0.35},
		{ID: "i3", Model: "big-70b", GPU: "H100", PriceInPerMTok: 2, PriceOutPerMTok: 6, MaxConcurrency: 16, QualityPrior: 0.8},
	}}
}

func newTestPreviewer(t *testing.T, deps PreviewDeps) *Previewer {
	t.Helper()
	if deps.Sample == nil {
		_, deps.Sample = whatIfWorld(t)
	}
	cfg := PreviewConfig{}
	cfg.Sim.Timeout = 1 << 40 // no wall-clock limit in tests
	p, err := NewPreviewer(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPreviewerSample replays the sample set: the quality corner buys the
// better, dearer model (quality and cost at least the cost corner's), the
// same question again is answered identically from the cache, and a
// changed instance list is replayed afresh.
func TestPreviewerSample(t *testing.T) {
	p := newTestPreviewer(t, PreviewDeps{})
	q := routing.WhatIfQuery{TenantID: "t1", Cluster: previewCluster(), Version: "v1", MaxRequests: 120,
		Weights: routing.Weights{Quality: 0.8, Latency: 0.1, Cost: 0.1}, Baseline: &routing.Weights{Quality: 0.1, Latency: 0.1, Cost: 0.8}}
	res, err := p.Preview(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != "sample" || res.Requests != 120 || res.Observed != nil || res.QualitySource != "priors" || res.Policy != "routebalance" {
		t.Errorf("source %q requests %d observed %v quality source %q policy %q", res.Source, res.Requests, res.Observed, res.QualitySource, res.Policy)
	}
	pred, base := res.Predicted, res.Baseline
	if base == nil {
		t.Fatal("no baseline")
	}
	for _, m := range []*routing.WhatIfMetrics{pred, base} {
		if !(m.MeanQuality > 0 && m.MeanE2EMs > 0 && m.P95E2EMs >= m.MeanE2EMs*0.5 && m.MeanTTFTMs > 0 && m.MeanCostUSD > 0) || m.Completed != 120 {
			t.Errorf("implausible metrics %+v", m)
		}
	}
	if pred.MeanQuality < base.MeanQuality || pred.MeanCostUSD < base.MeanCostUSD || pred.ModelShare["big-70b"] <= base.ModelShare["big-70b"] {
		t.Errorf("quality corner %+v vs cost corner %+v", pred, base)
	}
	again, err := p.Preview(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(res, again); d != "" {
		t.Errorf("repeat differs (-first +again):\n%s", d)
	}
	q.Cluster.Instances = q.Cluster.Instances[:2] // big-70b deleted
	q.Baseline = nil
	small, err := p.Preview(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := small.Predicted.ModelShare["big-70b"]; ok || small.Baseline != nil {
		t.Errorf("after deleting big-70b: %+v", small.Predicted)
	}
}

// TestPreviewerBadInput: what the scheduler rejects is a FieldError naming
// the field.
func TestPreviewerBadInput(t *testing.T) {
	p := newTestPreviewer(t, PreviewDeps{})
	w := routing.Weights{Quality: 1}
	for _, tc := range []struct {
		name  string
		q     routing.WhatIfQuery
		field string
	}{
		{"unknown policy", routing.WhatIfQuery{Cluster: routing.Cluster{ID: "c", Policy: routing.PolicyConfig{Name: "nope"}, Instances: previewCluster().Instances}, Weights: w}, "policy"},
		{"oracle", routing.WhatIfQuery{Cluster: routing.Cluster{ID: "c", Policy: routing.PolicyConfig{Name: "oracle"}, Instances: previewCluster().Instances}, Weights: w}, "policy.name"},
		{"no instances", routing.WhatIfQuery{Cluster: routing.Cluster{ID: "c"}, Weights: w}, ""},
		{"negative max", routing.WhatIfQuery{Cluster: previewCluster(), Weights: w, MaxRequests: -1}, "max_requests"},
	} {
		_, err := p.Preview(context.Background(), tc.q)
		var fe *routing.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%s: err %v, want a FieldError on %q", tc.name, err, tc.field)
		}
	}
}

// TestPreviewerRecent replays the tenant's remembered prompts once there
// are MinRecent (20) of them, and the sample set before.
func TestPreviewerRecent(t *testing.T) {
	p := newTestPreviewer(t, PreviewDeps{})
	mem := memPrompts{tenant: "t1"}
	for i := range 19 {
		mem.newest = append(mem.newest, fmt.Sprintf("question %d about tax law", i))
	}
	q := routing.WhatIfQuery{TenantID: "t1", Cluster: previewCluster(), Weights: routing.Weights{Quality: 1}, Prompts: mem}
	if r, err := p.Preview(context.Background(), q); err != nil || r.Source != "sample" {
		t.Fatalf("19 prompts: %v source %q, want sample", err, r.Source)
	}
	mem.newest = append(mem.newest, "one more")
	q.Prompts = mem
	if r, err := p.Preview(context.Background(), q); err != nil || r.Source != "recent" {
		t.Fatalf("20 prompts: %v source %+v, want recent", err, r)
	}
	q.TenantID = "t2" // another tenant's memory is empty
	if r, err := p.Preview(context.Background(), q); err != nil || r.Source != "sample" {
		t.Fatalf("other tenant: %v source %q, want sample", err, r.Source)
	}
}

// TestPreviewerObserved: with enough recorded requests on the cluster the
// preview replays them (source "observed") at their observed rate and
// reports what they got; another cluster's traffic is not used, and too
// few requests fall back to the sample.
func TestPreviewerObserved(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	start := now.Add(-time.Hour)
	tr := &memTraffic{rows: map[string][]ObservedRequest{}}
	// 21 requests over 10 s on c1 (2 req/s), 9 on c2; newest first.
	for i := 29; i >= 0; i-- {
		c, at := "c1", start.Add(time.Duration(i)*500*time.Millisecond)
		if i >= 21 {
			c, at = "c2", start.Add(time.Duration(i)*time.Second)
		}
		tr.rows[c] = append(tr.rows[c], ObservedRequest{ID: fmt.Sprintf("o-%d", i), StartedAt: at, FinishedAt: at.Add(800 * time.Millisecond),
			PromptTokens: 100, OutputTokens: 50, TTFTMs: 90, E2EMs: 800 + float64(i), CostUSD: 0.00002, PredictedQuality: 0.5})
	}
	p := newTestPreviewer(t, PreviewDeps{Traffic: tr, Clock: &fixedClock{now}})
	q := routing.WhatIfQuery{TenantID: "t1", Cluster: previewCluster(), Weights: routing.Weights{Quality: 0.34, Latency: 0.33, Cost: 0.33},
		Prompts: memPrompts{tenant: "t1", byID: map[string]string{"o-3": "what is tax law"}}}
	r, err := p.Preview(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	obs := r.Observed
	if r.Source != "observed" || obs == nil {
		t.Fatalf("source %q observed %v, want observed", r.Source, obs)
	}
	if obs.Requests != 21 || math.Abs(obs.RateRPS-2) > 1e-9 || r.RateRPS != obs.RateRPS || obs.MeanE2EMs != 810 || obs.MeanTTFTMs != 90 ||
		obs.MeanQuality != 0.5 || !obs.WindowFrom.Equal(start) || !obs.WindowTo.Equal(start.Add(10800*time.Millisecond)) {
		t.Errorf("observed %+v (rate_rps %v)", obs, r.RateRPS)
	}
	if want := 800 + 0.95*20; math.Abs(obs.P95E2EMs-want) > 1e-9 {
		t.Errorf("observed p95 %v, want %v", obs.P95E2EMs, want)
	}
	if r.Requests != 50 {
		t.Errorf("requests = %d: 21 recorded prompts are resampled to the replay minimum of 50", r.Requests)
	}
	q.Cluster.ID = "c2" // 9 requests: too few
	if r, err := p.Preview(context.Background(), q); err != nil || r.Source != "sample" || r.Observed != nil {
		t.Fatalf("9 requests: %v source %q, want sample", err, r.Source)
	}
}

// memState is a fixed live scheduler view (sim.LiveState).
type memState map[string][]schedule.InstanceState

func (m memState) State(clusterID string) []schedule.InstanceState { return m[clusterID] }

// TestPreviewerStartsFromLiveState: a replay starts with the load the live
// scheduler reports on each instance — here a full batch with many decode
// tokens to go and a queue on the only small-1b instance — so its
// requests wait behind it; the same question with no load starts idle.
// The answer reports the state it started from, and a change of the live
// load is not answered from the cache.
func TestPreviewerStartsFromLiveState(t *testing.T) {
	c := routing.Cluster{ID: "c1", Instances: []routing.Instance{
		{ID: "i1", Model: "small-1b", GPU: "L4", MaxConcurrency: 4, PriceInPerMTok: 0.05, PriceOutPerMTok: 0.1},
	}}
	busy := schedule.InstanceState{ID: "i1", InFlight: 4, Running: 4, Waiting: 4, Queue: 2, PendingTokens: 4 * 400, Served: 50}
	st := memState{"c1": {busy}}
	p := newTestPreviewer(t, PreviewDeps{State: st})
	q := routing.WhatIfQuery{TenantID: "t1", Cluster: c, Weights: routing.Weights{Quality: 1}, MaxRequests: 50}
	loaded, err := p.Preview(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if want := (&routing.WhatIfLive{Instances: 1, InFlight: 4, Waiting: 6, PendingTokens: 1600}); !cmp.Equal(loaded.Live, want) {
		t.Errorf("live = %+v, want %+v", loaded.Live, want)
	}
	st["c1"] = []schedule.InstanceState{{ID: "i1", Served: 50}}
	idle, err := p.Preview(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if idle.Live == nil || idle.Live.InFlight != 0 || idle.Live.Waiting != 0 {
		t.Errorf("idle live = %+v", idle.Live)
	}
	// The first requests queue behind 10 live requests of ~400 tokens on
	// 4 slots: a clearly longer mean E2E and TTFT than from idle.
	if !(loaded.Predicted.MeanE2EMs > 1.3*idle.Predicted.MeanE2EMs && loaded.Predicted.MeanTTFTMs > 2*idle.Predicted.MeanTTFTMs) {
		t.Errorf("from live load: mean E2E %.0f ms, TTFT %.0f ms; from idle: %.0f ms, %.0f ms",
			loaded.Predicted.MeanE2EMs, loaded.Predicted.MeanTTFTMs, idle.Predicted.MeanE2EMs, idle.Predicted.MeanTTFTMs)
	}
	t.Logf("from live load: mean E2E %.0f ms, TTFT %.0f ms; from idle: %.0f ms, %.0f ms",
		loaded.Predicted.MeanE2EMs, loaded.Predicted.MeanTTFTMs, idle.Predicted.MeanE2EMs, idle.Predicted.MeanTTFTMs)
}
