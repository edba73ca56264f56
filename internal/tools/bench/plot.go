package bench

import (
	"gonum.org/v1/plot/plotter"

	"github.com/softrdma/softrdma/internal/bench"
	"github.com/softrdma/softrdma/internal/tools/report"
)

// plotBench draws the bench's bandwidth and latency against message size.
func plotBench(path string, rep benchReport) error {
	bw := report.Panel{Title: "softrdma bandwidth (UDP loopback)", YLabel: "average bandwidth [MB/s]"}
	lat := report.Panel{Title: "softrdma latency (median)", YLabel: "latency [µs] (READ: round trip)"}
	for i, op := range []bench.Op{bench.Write, bench.Read, bench.Send} {
		b := report.Series{Name: op.String(), Color: report.Color(i)}
		for _, r := range rep.BW {
			if r.Op == op {
				b.Points = append(b.Points, plotter.XY{X: float64(r.Size), Y: r.AvgMBps})
			}
		}
		l := report.Series{Name: op.String(), Color: report.Color(i)}
		for _, r := range rep.Lat {
			if r.Op == op {
				l.Points = append(l.Points, plotter.XY{X: float64(r.Size), Y: report.Micros(r.Typical)})
			}
		}
		bw.Series = append(bw.Series, b)
		lat.Series = append(lat.Series, l)
	}
	return report.WritePlot(path, []report.Panel{bw, lat})
}
