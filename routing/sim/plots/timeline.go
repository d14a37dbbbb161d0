package plots

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/routebalance/routebalance/routing/sim"
)

// Timeline draws an autopilot cell of a rate-profile run over time as
// dir/name.png and .svg, three panels sharing the time axis: λ; the p95
// E2E of each window (the autopilot's, those of the other profile cells in
// others for comparison, and the target); the three weights after each
// control step.
func Timeline(dir, name string, c sim.Cell, others []sim.Cell) error {
	if c.Autopilot == nil || len(c.Windows) == 0 {
		return fmt.Errorf("timeline: cell %s has no autopilot trace or windows", c.Label())
	}
	width := 10.0
	if len(c.Windows) > 1 {
		width = c.Windows[1].TStart - c.Windows[0].TStart
	}
	end := c.Windows[len(c.Windows)-1].TStart + width

	rate := plot.New()
	rate.Title.Text = fmt.Sprintf("autopilot over the rate profile %s", c.RateProfile)
	rate.Y.Label.Text = "λ (req/s)"
	rate.Add(plotter.NewGrid())
	var rxy plotter.XYs
	for _, w := range c.Windows {
		rxy = append(rxy, plotter.XY{X: w.TStart, Y: w.Rate}, plotter.XY{X: w.TStart + width, Y: w.Rate})
	}
	if ln, err := plotter.NewLine(rxy); err == nil {
		ln.Color, ln.Width = palette(6), vg.Points(1.2)
		rate.Add(ln)
	}

	lat := plot.New()
	lat.Y.Label.Text = "window p95 E2E (s)"
	lat.Add(plotter.NewGrid())
	k := 1
	for _, o := range others {
		if o.Autopilot != nil || len(o.Windows) == 0 || o.RateProfile != c.RateProfile {
			continue
		}
		if ln := windowLine(o.Windows, width); ln != nil {
			ln.Color, ln.Width = palette(k), vg.Points(0.8)
			ln.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
			lat.Add(ln)
			lat.Legend.Add(o.Label(), ln)
			k++
		}
	}
	if ln := windowLine(c.Windows, width); ln != nil {
		ln.Color, ln.Width = palette(0), vg.Points(2)
		lat.Add(ln)
		lat.Legend.Add(c.Label(), ln)
	}
	if t := c.Autopilot.TargetP95E2EMs; t > 0 {
		if ln, err := plotter.NewLine(plotter.XYs{{X: 0, Y: t / 1e3}, {X: end, Y: t / 1e3}}); err == nil {
			ln.Color, ln.Width = color.Black, vg.Points(1.5)
			ln.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			lat.Add(ln)
			lat.Legend.Add(fmt.Sprintf("target %.2f s", t/1e3), ln)
		}
	}
	lat.Y.Min = 0
	lat.Legend.Top, lat.Legend.Left = true, true
	lat.Legend.TextStyle.Font.Size = vg.Points(7)

	wts := plot.New()
	wts.X.Label.Text = "time (s)"
	wts.Y.Label.Text = "weight"
	wts.Y.Min, wts.Y.Max = 0, 1
	wts.Add(plotter.NewGrid())
	steps := c.Autopilot.Steps
	for i, f := range []struct {
		name string
		get  func(sim.AutopilotStep) float64
	}{
		{"w_quality", func(s sim.AutopilotStep) float64 { return s.Weights.Quality }},
		{"w_cost", func(s sim.AutopilotStep) float64 { return s.Weights.Cost }},
		{"w_latency", func(s sim.AutopilotStep) float64 { return s.Weights.Latency }},
	} {
		var xy plotter.XYs
		prev := f.get(sim.AutopilotStep{Weights: c.Windows[0].Weights})
		t := 0.0
		for _, s := range steps {
			xy = append(xy, plotter.XY{X: t, Y: prev}, plotter.XY{X: s.T, Y: prev})
			t, prev = s.T, f.get(s)
		}
		xy = append(xy, plotter.XY{X: t, Y: prev}, plotter.XY{X: end, Y: prev})
		if ln, err := plotter.NewLine(xy); err == nil {
			ln.Color, ln.Width = palette(i+3), vg.Points(1.5)
			wts.Add(ln)
			wts.Legend.Add(f.name, ln)
		}
	}
	wts.Legend.Top, wts.Legend.Left = true, true
	wts.Legend.TextStyle.Font.Size = vg.Points(7)
	for _, p := range []*plot.Plot{rate, lat, wts} {
		p.X.Min, p.X.Max = 0, end
	}

	ps := [][]*plot.Plot{{rate}, {lat}, {wts}}
	w, h := 7*vg.Inch, 8*vg.Inch
	for _, ext := range []string{".png", ".svg"} {
		var cv vg.CanvasSizer
		if ext == ".png" {
			cv = vgimg.New(w, h)
		} else {
			cv = vgsvg.New(w, h)
		}
		dc := draw.New(cv)
		tiles := draw.Tiles{Rows: 3, Cols: 1, PadX: vg.Millimeter, PadY: vg.Millimeter, PadTop: vg.Points(2), PadBottom: vg.Points(2), PadLeft: vg.Points(2), PadRight: vg.Points(2)}
		cs := plot.Align(ps, tiles, dc)
		for i := range ps {
			ps[i][0].Draw(cs[i][0])
		}
		if err := writeCanvas(cv, filepath.Join(dir, name+ext)); err != nil {
			return err
		}
	}
	return nil
}

func writeCanvas(cv vg.CanvasSizer, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	var werr error
	switch c := cv.(type) {
	case *vgimg.Canvas:
		_, werr = vgimg.PngCanvas{Canvas: c}.WriteTo(f)
	case *vgsvg.Canvas:
		_, werr = c.WriteTo(f)
	}
	if err := f.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		return fmt.Errorf("plot %s: %w", path, werr)
	}
	return nil
}

// windowLine is a step line of the windows' p95 E2E (failed windows, p95
// −1, are left out).
func windowLine(ws []sim.Window, width float64) *plotter.Line {
	var xy plotter.XYs
	for _, w := range ws {
		if w.N == 0 || w.P95E2E < 0 {
			continue
		}
		xy = append(xy, plotter.XY{X: w.TStart, Y: w.P95E2E}, plotter.XY{X: w.TStart + width, Y: w.P95E2E})
	}
	if len(xy) == 0 {
		return nil
	}
	ln, err := plotter.NewLine(xy)
	if err != nil {
		return nil
	}
	return ln
}
