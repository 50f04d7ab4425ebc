package plot_test

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/aegislab/aegis/bench/plot"
)

// Save writes a PNG of the size asked, and refuses a series whose x and y
// differ in length.
func TestSave(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.png")
	c := plot.Chart{Title: "t", X: "goroutines", Y: "ops/s", LogX: true, Series: []plot.Series{
		{Name: "a", X: []float64{1, 4, 16}, Y: []float64{10, 30, 0}},
		{Name: "b", X: []float64{1, 4, 16}, Y: []float64{5, 6, 7}},
	}}
	if err := plot.Save(c, path, 400, 300); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Width < 300 || cfg.Height < 200 {
		t.Fatalf("image %dx%d", cfg.Width, cfg.Height)
	}
	c.Series[0].Y = c.Series[0].Y[:2]
	if err := plot.Save(c, path, 400, 300); err == nil {
		t.Fatal("a series with 3 x and 2 y was drawn")
	}
}
