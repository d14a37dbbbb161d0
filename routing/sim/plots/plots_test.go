package plots

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/routebalance/routebalance/routing"
	"github.com/routebalance/routebalance/routing/sim"
)

func TestWriteMakesEveryFigure(t *testing.T) {
	var cells []sim.Cell
	for _, r := range []float64{6, 12} {
		cells = append(cells,
			sim.Cell{Policy: "routebalance", Preset: "balanced", Rate: r, MeanE2E: 2, Quality: 0.6, CostPerRequest: 1e-4},
			sim.Cell{Policy: "routebalance", Preset: "quality", Rate: r, MeanE2E: 3, Quality: 0.7, CostPerRequest: 2e-4},
			sim.Cell{Policy: "quality-only", Rate: r, MeanE2E: r, Quality: 0.68, CostPerRequest: 3e-4},
		)
	}
	dir := t.TempDir()
	names, err := Write(dir, cells, 12)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 3 {
		t.Fatalf("names %v, want 3 figures", names)
	}
	for _, n := range names {
		for _, ext := range []string{".png", ".svg"} {
			st, err := os.Stat(filepath.Join(dir, n+ext))
			if err != nil {
				t.Errorf("%s%s: %v", n, ext, err)
			} else if st.Size() == 0 {
				t.Errorf("%s%s is empty", n, ext)
			}
		}
	}
}

func TestTimelineDrawsAnAutopilotCell(t *testing.T) {
	w := func(ts, rate, p95, wq float64) sim.Window {
		return sim.Window{TStart: ts, Rate: rate, N: 10, P95E2E: p95, TargetMet: p95 <= 3, Weights: routing.Weights{Quality: wq, Cost: 0.1, Latency: 0.9 - wq}}
	}
	ap := sim.Cell{Policy: "routebalance", Preset: "autopilot", RateProfile: "2:20s,8:10s", Windows: []sim.Window{w(0, 2, 1, 0.3), w(10, 2, 2, 0.5), w(20, 8, 4, 0.3)},
		Autopilot: &sim.AutopilotTrace{TargetP95E2EMs: 3000, Steps: []sim.AutopilotStep{
			{T: 5, Weights: routing.Weights{Quality: 0.5, Cost: 0.1, Latency: 0.4}}, {T: 25, Weights: routing.Weights{Quality: 0.3, Cost: 0.1, Latency: 0.6}}}}}
	fixed := sim.Cell{Policy: "routebalance", Preset: "quality", RateProfile: "2:20s,8:10s", Windows: []sim.Window{w(0, 2, 2, 0.8), w(10, 2, 3, 0.8), w(20, 8, -1, 0.8)}}
	dir := t.TempDir()
	if err := Timeline(dir, "tl", ap, []sim.Cell{ap, fixed}); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".png", ".svg"} {
		st, err := os.Stat(filepath.Join(dir, "tl"+ext))
		if err != nil || st.Size() < 1000 {
			t.Errorf("tl%s: %v (%v)", ext, err, st)
		}
	}
	if err := Timeline(dir, "x", fixed, nil); err == nil {
		t.Error("a cell without an autopilot trace drew a timeline")
	}
}
