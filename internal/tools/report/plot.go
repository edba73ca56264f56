// Package report holds the output the benchmark tools share: the progress
// bar on a terminal, the PNG plots, and the JSON and CSV files.
package report

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Panel is one chart of a PNG: lines against message size (log2 x).
type Panel struct {
	Title, YLabel string
	Series        []Series
}

// Series is one line of a panel. A nil Color takes the panel's next
// (Color).
type Series struct {
	Name   string
	Color  color.Color
	Points plotter.XYs
}

// Color is the ith color of the plots' palette, cycling.
func Color(i int) color.Color {
	palette := [...]color.RGBA{
		{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	}
	return palette[i%len(palette)]
}

// WritePlot draws the panels side by side into a PNG at path. Series
// without points are left out; a panel without any is drawn empty.
func WritePlot(path string, panels []Panel) error {
	if len(panels) == 0 {
		return fmt.Errorf("plot: nothing to draw")
	}
	img := vgimg.New(vg.Length(8*len(panels))*vg.Inch, 6*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Inch / 2, PadY: vg.Inch / 4, PadLeft: vg.Inch / 4, PadRight: vg.Inch / 4, PadTop: vg.Inch / 4, PadBottom: vg.Inch / 4}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.Title
		p.X.Label.Text = "message size [bytes]"
		p.Y.Label.Text = pn.YLabel
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top, p.Legend.Left = true, true
		for j, s := range pn.Series {
			if len(s.Points) == 0 {
				continue
			}
			l, pt, err := plotter.NewLinePoints(s.Points)
			if err != nil {
				return fmt.Errorf("plot %s: %w", s.Name, err)
			}
			c := s.Color
			if c == nil {
				c = Color(j)
			}
			l.Color, pt.Color = c, c
			p.Add(l, pt)
			p.Legend.Add(s.Name, l, pt)
		}
		p.Draw(tiles.At(dc, i, 0))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
