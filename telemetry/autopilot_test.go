package telemetry

import (
	"testing"
	"time"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/autopilot"
)

// TestAutopilotHooks: each step counts its window by met, sets the last
// window's gauge, the weights and the p95s; calling AutopilotHooks twice
// registers the series once.
func TestAutopilotHooks(t *testing.T) {
	m, err := New(DefaultConfig(), Deps{Log: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	h := m.AutopilotHooks()
	_ = m.AutopilotHooks()
	tg := autopilot.Targets{P95E2E: 3 * time.Second}
	w := routing.Weights{Quality: 0.5, Cost: 0.1, Latency: 0.4}
	h.Step("cl-1", tg, autopilot.WindowStatus{N: 40, P95E2EMs: 2500, P95TTFTMs: 300, TargetMet: true}, autopilot.DecisionStatus{Weights: w})
	h.Step("cl-1", tg, autopilot.WindowStatus{N: 40, P95E2EMs: 3500, P95TTFTMs: -1}, autopilot.DecisionStatus{Weights: w})
	h.Step("cl-1", tg, autopilot.WindowStatus{N: 0}, autopilot.DecisionStatus{Weights: w}) // not judged
	lab := "cluster=cl-1,targets=p95_e2e_ms=3000,"
	win := family(t, m, "routebalance_autopilot_windows_total")
	if win["cluster=cl-1,met=true,targets=p95_e2e_ms=3000,"].GetCounter().GetValue() != 1 || win["cluster=cl-1,met=false,targets=p95_e2e_ms=3000,"].GetCounter().GetValue() != 1 {
		t.Fatalf("windows %v", win)
	}
	if g := family(t, m, "routebalance_autopilot_last_window_met")[lab]; g.GetGauge().GetValue() != 0 {
		t.Fatalf("last window met %v", g)
	}
	wt := family(t, m, "routebalance_autopilot_weight")
	if wt[lab+"weight=quality,"].GetGauge().GetValue() != 0.5 || wt[lab+"weight=latency,"].GetGauge().GetValue() != 0.4 {
		t.Fatalf("weights %v", wt)
	}
	p := family(t, m, "routebalance_autopilot_window_p95_seconds")
	if p["cluster=cl-1,quantity=e2e,targets=p95_e2e_ms=3000,"].GetGauge().GetValue() != 3.5 || p["cluster=cl-1,quantity=ttft,targets=p95_e2e_ms=3000,"].GetGauge().GetValue() != 0.3 {
		t.Fatalf("p95 %v", p)
	}
}
