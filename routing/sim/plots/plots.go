// Package plots draws the simulator's figures with gonum.org/v1/plot:
// quality-versus-latency and quality-versus-cost frontiers at one rate, and
// mean latency versus rate per policy, each as PNG and SVG.
package plots

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/routebalance/routebalance/routing/sim"
)

// palette is a colour-blind-safe set (Okabe–Ito).
func palette(i int) color.Color {
	p := []color.RGBA{
		{0, 114, 178, 255}, {213, 94, 0, 255}, {0, 158, 115, 255}, {204, 121, 167, 255},
		{230, 159, 0, 255}, {86, 180, 233, 255}, {0, 0, 0, 255}, {240, 228, 66, 255},
	}
	return p[i%len(p)]
}

// Write draws every figure into dir, each as NAME.png and NAME.svg, and
// returns the base names written. rate selects the cells of the frontier
// plots (the nearest swept rate is used).
func Write(dir string, cells []sim.Cell, rate float64) ([]string, error) {
	var names []string
	at := nearestRate(cells, rate)
	var here []sim.Cell
	for _, c := range cells {
		if c.Rate == at && c.Variant == "" {
			here = append(here, c)
		}
	}
	if len(here) > 0 {
		lat := func(c sim.Cell) float64 { return c.MeanE2E }
		cost := func(c sim.Cell) float64 { return c.CostPerRequest * 1000 }
		for _, f := range []struct {
			name, x string
			fx      func(sim.Cell) float64
		}{
			{fmt.Sprintf("frontier_latency_l%g", at), "mean end-to-end latency (s)", lat},
			{fmt.Sprintf("frontier_cost_l%g", at), "cost per 1,000 requests (USD)", cost},
		} {
			p := frontier(here, f.x, f.fx, fmt.Sprintf("quality vs %s at λ = %g req/s", f.x, at))
			if f.name[:len("frontier_latency")] == "frontier_latency" {
				p.X.Scale = plot.LogScale{}
				p.X.Tick.Marker = plot.LogTicks{Prec: -1}
				p.X.Label.Text += ", log scale"
			}
			if err := save(p, dir, f.name); err != nil {
				return names, err
			}
			names = append(names, f.name)
		}
	}
	p := latencyVsRate(cells)
	if err := save(p, dir, "latency_vs_rate"); err != nil {
		return names, err
	}
	return append(names, "latency_vs_rate"), nil
}

func nearestRate(cells []sim.Cell, rate float64) float64 {
	best, d := 0.0, math.Inf(1)
	for _, c := range cells {
		if x := math.Abs(c.Rate - rate); x < d {
			best, d = c.Rate, x
		}
	}
	return best
}

func frontier(cells []sim.Cell, xlabel string, fx func(sim.Cell) float64, title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "mean quality (labels of the served model)"
	p.Add(plotter.NewGrid())
	// One series per policy; routebalance presets are joined by a line.
	by := map[string][]sim.Cell{}
	var pols []string
	for _, c := range cells {
		if _, ok := by[c.Policy]; !ok {
			pols = append(pols, c.Policy)
		}
		by[c.Policy] = append(by[c.Policy], c)
	}
	for i, pol := range pols {
		cs := by[pol]
		sort.Slice(cs, func(a, b int) bool { return fx(cs[a]) < fx(cs[b]) })
		xy := make(plotter.XYs, len(cs))
		labels := make([]string, len(cs))
		for k, c := range cs {
			xy[k] = plotter.XY{X: fx(c), Y: c.Quality}
			labels[k] = c.Policy
			if c.Preset != "" {
				labels[k] = c.Preset
			}
		}
		sc, _ := plotter.NewScatter(xy)
		sc.GlyphStyle.Color = palette(i)
		sc.GlyphStyle.Radius = vg.Points(3.5)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		p.Add(sc)
		if len(cs) > 1 {
			ln, _ := plotter.NewLine(xy)
			ln.Color = palette(i)
			ln.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
			p.Add(ln)
		}
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: xy, Labels: labels})
		if err == nil {
			lb.Offset = vg.Point{X: vg.Points(4), Y: vg.Points(2)}
			for k := range lb.TextStyle {
				lb.TextStyle[k].Font.Size = vg.Points(7)
			}
			p.Add(lb)
		}
		p.Legend.Add(pol, sc)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	return p
}

func latencyVsRate(cells []sim.Cell) *plot.Plot {
	p := plot.New()
	p.Title.Text = "mean end-to-end latency vs request rate"
	p.X.Label.Text = "request rate λ (req/s)"
	p.Y.Label.Text = "mean end-to-end latency (s, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	by := map[string][]sim.Cell{}
	var labels []string
	for _, c := range cells {
		l := c.Label()
		if _, ok := by[l]; !ok {
			labels = append(labels, l)
		}
		by[l] = append(by[l], c)
	}
	for i, l := range labels {
		cs := by[l]
		sort.Slice(cs, func(a, b int) bool { return cs[a].Rate < cs[b].Rate })
		xy := make(plotter.XYs, 0, len(cs))
		for _, c := range cs {
			if c.MeanE2E > 0 {
				xy = append(xy, plotter.XY{X: c.Rate, Y: c.MeanE2E})
			}
		}
		if len(xy) == 0 {
			continue
		}
		ln, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			continue
		}
		ln.Color = palette(i)
		ln.Width = vg.Points(1.2)
		if i >= 8 { // the palette repeats: tell the second round apart by dashes
			ln.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		pts.Color = palette(i)
		pts.Shape = draw.CircleGlyph{}
		pts.Radius = vg.Points(2)
		p.Add(ln, pts)
		p.Legend.Add(l, ln, pts)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(7)
	return p
}

func save(p *plot.Plot, dir, name string) error {
	for _, ext := range []string{".png", ".svg"} {
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, filepath.Join(dir, name+ext)); err != nil {
			return fmt.Errorf("plot %s%s: %w", name, ext, err)
		}
	}
	return nil
}
