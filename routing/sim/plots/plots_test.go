package plots

import (
	"os"
	"path/filepath"
	"testing"

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
