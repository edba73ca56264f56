//go:build linux

package main

// The PNG: bandwidth against message size for every series (log-log), and
// the 8-byte latency percentiles of every series.

import (
	"image/color"
	"os"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// seriesStyle gives each stack a colour family and each series of a stack
// its own dash pattern and marker.
func seriesStyle(series string, i int) (color.Color, []vg.Length, draw.GlyphDrawer) {
	palette := map[string][]color.RGBA{
		"softrdma":  {{0x1f, 0x77, 0xb4, 0xff}, {0x6b, 0xae, 0xd6, 0xff}, {0x08, 0x30, 0x6b, 0xff}},
		"UCX":       {{0xd6, 0x27, 0x28, 0xff}, {0xff, 0x7f, 0x0e, 0xff}},
		"libfabric": {{0x2c, 0xa0, 0x2c, 0xff}, {0x98, 0xdf, 0x8a, 0xff}},
		"Go":        {{0x55, 0x55, 0x55, 0xff}, {0x94, 0x67, 0xbd, 0xff}},
	}
	stack, _, _ := strings.Cut(series, " ")
	cs := palette[stack]
	if len(cs) == 0 {
		cs = []color.RGBA{{0x8c, 0x56, 0x4b, 0xff}}
	}
	dashes := [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}}
	glyphs := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}}
	return cs[i%len(cs)], dashes[i%len(dashes)], glyphs[i%len(glyphs)]
}

func (r *report) plot(path string) error {
	bw := plot.New()
	bw.Title.Text = "bandwidth vs message size (medians; loopback, two processes)"
	bw.X.Label.Text = "message size [bytes]"
	bw.Y.Label.Text = "bandwidth [MB/s, 2^20]"
	bw.X.Scale, bw.Y.Scale = plot.LogScale{}, plot.LogScale{}
	// The sweep's sizes and any other size measured (rdmanet's stream).
	sizes := slices.Clone(r.Sizes)
	for _, m := range r.Medians {
		if m.Kind == "bw" && !slices.Contains(sizes, m.Size) {
			sizes = append(sizes, m.Size)
		}
	}
	slices.Sort(sizes)
	var sizeTicks []plot.Tick
	for _, s := range sizes {
		sizeTicks = append(sizeTicks, plot.Tick{Value: float64(s), Label: strings.TrimSuffix(strings.TrimSuffix(sizeStr(s), "iB"), "B")})
	}
	bw.X.Tick.Marker, bw.Y.Tick.Marker = plot.ConstantTicks(sizeTicks), plot.LogTicks{Prec: -1}
	bw.Legend.Top, bw.Legend.Left = false, false // bottom right: small messages are slow
	bw.Add(plotter.NewGrid())

	lat := plot.New()
	lat.Title.Text = "8-byte latency percentiles (medians over rounds)"
	lat.X.Label.Text = "statistic"
	lat.Y.Label.Text = "latency [µs] (one-way; softrdma READ: round trip)"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	stats := []struct{ metric, label string }{
		{"lat_min_us", "min"}, {"lat_p50_us", "p50"}, {"lat_avg_us", "avg"}, {"lat_p99_us", "p99"}, {"lat_p999_us", "p99.9"},
	}
	var ticks []plot.Tick
	for i, s := range stats {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: s.label})
	}
	lat.X.Tick.Marker = plot.ConstantTicks(ticks)
	lat.X.Min, lat.X.Max = -0.3, float64(len(stats))-0.7
	lat.Legend.Top, lat.Legend.Left = true, true
	lat.Add(plotter.NewGrid())

	latMax := 0.0
	perStack := map[string]int{}
	for _, s := range r.series {
		stack, _, _ := strings.Cut(s, " ")
		c, dash, glyph := seriesStyle(s, perStack[stack])
		perStack[stack]++

		var pts plotter.XYs
		for _, size := range sizes {
			if v, ok := r.get(s, "bw", size, "bw_MiBps"); ok && v > 0 {
				pts = append(pts, plotter.XY{X: float64(size), Y: v})
			}
		}
		label := s
		if t := r.tools[s+"|bw"]; strings.Contains(t, "pingpong") {
			label += " (ping-pong)"
		}
		if err := addSeries(bw, label, pts, c, dash, glyph); err != nil {
			return err
		}

		pts = nil
		for i, st := range stats {
			if v, ok := r.get(s, "lat", latSize, st.metric); ok && v > 0 {
				latMax = max(latMax, v)
				pts = append(pts, plotter.XY{X: float64(i), Y: v})
			}
		}
		if err := addSeries(lat, s, pts, c, dash, glyph); err != nil {
			return err
		}
	}

	if latMax > 0 {
		lat.Y.Max = latMax * 6 // room for the legend above the lines
	}
	// A log axis with nothing on it (only some stacks ran) needs a range.
	for _, p := range []*plot.Plot{bw, lat} {
		if p.Y.Min <= 0 || p.Y.Max <= p.Y.Min {
			p.Y.Min, p.Y.Max = 1, 10
		}
		if p == bw && (p.X.Min <= 0 || p.X.Max <= p.X.Min) {
			p.X.Min, p.X.Max = 1, 1<<20
		}
	}

	img := vgimg.New(18*vg.Inch, 7*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 2, PadY: vg.Inch / 4, PadLeft: vg.Inch / 4,
		PadRight: vg.Inch / 4, PadTop: vg.Inch / 4, PadBottom: vg.Inch / 4}
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

func addSeries(p *plot.Plot, name string, pts plotter.XYs, c color.Color, dash []vg.Length, glyph draw.GlyphDrawer) error {
	if len(pts) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	l.Color, l.Dashes, l.Width = c, dash, vg.Points(1.5)
	s.Color, s.Shape, s.Radius = c, glyph, vg.Points(3)
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}
