// Package plot draws the benchmark curves of the bench commands as PNG
// files: one line per subject, x a load (goroutines, workers) on a log
// scale, y a measure (ops/s, p99).
package plot

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one subject's curve.
type Series struct {
	Name string
	X, Y []float64
}

// Chart is one plot.
type Chart struct {
	Title, X, Y string
	LogX, LogY  bool
	Series      []Series
}

// palette tells the subjects apart in print and for the colour-blind
// (Okabe and Ito's eight colours).
var palette = []color.RGBA{
	{0, 114, 178, 255}, {230, 159, 0, 255}, {0, 158, 115, 255}, {204, 121, 167, 255},
	{86, 180, 233, 255}, {213, 94, 0, 255}, {240, 228, 66, 255}, {0, 0, 0, 255},
}

// Save writes the chart as a PNG of w by h inches.
func Save(c Chart, path string, w, h vg.Length) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.X
	p.Y.Label.Text = c.Y
	if c.LogX {
		p.X.Scale = plot.LogScale{}
	}
	// The x ticks are the loads measured (1, 4, 16, …): a log axis's own
	// ticks, at powers of ten, would label only 1 and 100.
	p.X.Tick.Marker = xTicks(c.Series)
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	for i, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("plot %q: series %q has %d x and %d y", c.Title, s.Name, len(s.X), len(s.Y))
		}
		pts := make(plotter.XYs, 0, len(s.X))
		for j := range s.X {
			// A log axis cannot show 0; such a point (nothing measured)
			// is left out rather than drawn at a made-up value.
			if (c.LogX && s.X[j] <= 0) || (c.LogY && s.Y[j] <= 0) || math.IsNaN(s.Y[j]) {
				continue
			}
			pts = append(pts, plotter.XY{X: s.X[j], Y: s.Y[j]})
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("plot %q: %w", c.Title, err)
		}
		col := palette[i%len(palette)]
		line.Color, points.Color = col, col
		line.Width = vg.Points(1.5)
		if i >= len(palette) {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
	}
	// The legend goes right of the plot, where it covers no line.
	const legendW = 2.6 * vg.Inch
	img := vgimg.New(w+legendW, h)
	dc := draw.New(img)
	leg := p.Legend
	p.Legend = plot.NewLegend()
	p.Draw(draw.Crop(dc, 0, -legendW, 0, 0))
	leg.Top = true
	leg.Left = true
	leg.Draw(draw.Crop(dc, w+vg.Points(6), 0, 0, -vg.Points(24)))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %q: %w", c.Title, err)
	}
	return f.Close()
}

// xTicks labels every x a series has.
type xTicks []Series

func (t xTicks) Ticks(lo, hi float64) []plot.Tick {
	seen := map[float64]bool{}
	var out []plot.Tick
	for _, s := range t {
		for _, x := range s.X {
			if !seen[x] && x >= lo && x <= hi {
				seen[x] = true
				out = append(out, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
			}
		}
	}
	return out
}
