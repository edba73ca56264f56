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

var opColors = map[bench.Op]color.Color{
	bench.Write: color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	bench.Read:  color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	bench.Send:  color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

// plotBench draws bandwidth and latency against message size side by side.
func plotBench(path string, rep benchReport) error {
	bw := plot.New()
	bw.Title.Text = "softrdma bandwidth (UDP loopback)"
	bw.X.Label.Text = "message size [bytes]"
	bw.Y.Label.Text = "average bandwidth [MB/s]"
	bw.X.Scale = plot.LogScale{}
	bw.X.Tick.Marker = plot.LogTicks{Prec: -1}
	bw.Legend.Top, bw.Legend.Left = true, true
	lat := plot.New()
	lat.Title.Text = "softrdma latency (median)"
	lat.X.Label.Text = "message size [bytes]"
	lat.Y.Label.Text = "latency [µs] (READ: round trip)"
	lat.X.Scale = plot.LogScale{}
	lat.X.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.Legend.Top, lat.Legend.Left = true, true

	for _, op := range []bench.Op{bench.Write, bench.Read, bench.Send} {
		var pts plotter.XYs
		for _, r := range rep.BW {
			if r.Op == op {
				pts = append(pts, plotter.XY{X: float64(r.Size), Y: r.AvgMBps})
			}
		}
		if err := addLine(bw, op, pts); err != nil {
			return err
		}
		pts = nil
		for _, r := range rep.Lat {
			if r.Op == op {
				pts = append(pts, plotter.XY{X: float64(r.Size), Y: us(r.Typical)})
			}
		}
		if err := addLine(lat, op, pts); err != nil {
			return err
		}
	}
	img := vgimg.New(16*vg.Inch, 6*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 2, PadY: vg.Inch / 4, PadLeft: vg.Inch / 4, PadRight: vg.Inch / 4, PadTop: vg.Inch / 4, PadBottom: vg.Inch / 4}
	bw.Draw(tiles.At(dc, 0, 0))
	lat.Draw(tiles.At(dc, 1, 0))
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

func addLine(p *plot.Plot, op bench.Op, pts plotter.XYs) error {
	if len(pts) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return fmt.Errorf("%v: %w", op, err)
	}
	l.Color, s.Color = opColors[op], opColors[op]
	p.Add(l, s)
	p.Legend.Add(op.String(), l, s)
	return nil
}
