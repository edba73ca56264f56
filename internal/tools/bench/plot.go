package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/softrdma/softrdma/internal/bench"
)

// plotPanel is one chart of a PNG: lines against message size (log2 x).
type plotPanel struct {
	title, yLabel string
	series        []plotSeries
}

// plotSeries is one line of a panel.
type plotSeries struct {
	name  string
	color color.Color
	pts   plotter.XYs
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// writePlot draws the panels side by side into a PNG at path. Series
// without points are left out; a panel without any is drawn empty.
func writePlot(path string, panels []plotPanel) error {
	if len(panels) == 0 {
		return fmt.Errorf("plot: nothing to draw")
	}
	img := vgimg.New(vg.Length(8*len(panels))*vg.Inch, 6*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Inch / 2, PadY: vg.Inch / 4, PadLeft: vg.Inch / 4, PadRight: vg.Inch / 4, PadTop: vg.Inch / 4, PadBottom: vg.Inch / 4}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "message size [bytes]"
		p.Y.Label.Text = pn.yLabel
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Legend.Top, p.Legend.Left = true, true
		for j, s := range pn.series {
			if len(s.pts) == 0 {
				continue
			}
			l, pt, err := plotter.NewLinePoints(s.pts)
			if err != nil {
				return fmt.Errorf("plot %s: %w", s.name, err)
			}
			c := s.color
			if c == nil {
				c = palette[j%len(palette)]
			}
			l.Color, pt.Color = c, c
			p.Add(l, pt)
			p.Legend.Add(s.name, l, pt)
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

// plotBench draws the bench's bandwidth and latency against message size.
func plotBench(path string, rep benchReport) error {
	bw := plotPanel{title: "softrdma bandwidth (UDP loopback)", yLabel: "average bandwidth [MB/s]"}
	lat := plotPanel{title: "softrdma latency (median)", yLabel: "latency [µs] (READ: round trip)"}
	for i, op := range []bench.Op{bench.Write, bench.Read, bench.Send} {
		b := plotSeries{name: op.String(), color: palette[i]}
		for _, r := range rep.BW {
			if r.Op == op {
				b.pts = append(b.pts, plotter.XY{X: float64(r.Size), Y: r.AvgMBps})
			}
		}
		l := plotSeries{name: op.String(), color: palette[i]}
		for _, r := range rep.Lat {
			if r.Op == op {
				l.pts = append(l.pts, plotter.XY{X: float64(r.Size), Y: us(r.Typical)})
			}
		}
		bw.series = append(bw.series, b)
		lat.series = append(lat.series, l)
	}
	return writePlot(path, []plotPanel{bw, lat})
}
