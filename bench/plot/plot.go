// Package plot draws the benchmark curves of the bench commands as PNG
// files: one line per subject, x a load (goroutines, workers) on a log
// scale, y a measure (ops/s, p99).
package plot

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
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
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	p.Legend.Left = true
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
	return p.Save(w, h, path)
}
