package perftest

// Output beyond perftest's table: CPU utilisation (--cpu_util, as perftest),
// and softrdma's additions, which leave the table untouched: CSV
// (--out_csv), a PNG of an -a sweep (--plot) and a progress bar on a
// terminal.

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/softrdma/softrdma/internal/bench"
	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/internal/tools/report"
)

// cpuUtilOn reports whether the table has perftest's CPU_Util[%] column:
// --cpu_util in duration mode (perftest measures it only there).
func (o *ptOptions) cpuUtilOn() bool { return o.cpuUtil && o.duration > 0 && !o.infinite }

// ptCPUSampler reads /proc/stat when the sampled interval of a
// duration-mode run starts and when it ends, as perftest's SIGALRM handler
// does, from a goroutine that sleeps until then (the polling loops stay
// untouched).
type ptCPUSampler struct {
	done       chan struct{}
	start, end perftest.CPUStat
	err        error
}

func startPTCPUSampler(ph *bench.Phases) bench.CPUSampler {
	s := &ptCPUSampler{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		time.Sleep(time.Duration(ph.SampleStart) - time.Since(bench.Epoch))
		if s.start, s.err = readProcStat(); s.err != nil {
			return
		}
		time.Sleep(time.Duration(ph.SampleEnd) - time.Since(bench.Epoch))
		s.end, s.err = readProcStat()
	}()
	return s
}

// Util waits for the end reading and returns the utilisation in percent;
// 0 if /proc/stat could not be read (perftest prints 0 then too).
func (s *ptCPUSampler) Util() float64 {
	if s == nil {
		return 0
	}
	<-s.done
	if s.err != nil {
		return 0
	}
	return perftest.CPUUtil(s.start, s.end)
}

func readProcStat() (perftest.CPUStat, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return perftest.CPUStat{}, err
	}
	defer f.Close()
	return perftest.ReadCPUStat(f)
}

// ptOutputs collects the rows printed, for --out_csv and --plot.
type ptOutputs struct {
	bw     []perftest.BWReport
	lat    []perftest.LatStats
	latDur []perftest.LatDurationStats
	bar    *report.ProgressBar
	// completed counts completions seen by the polling loops, for the
	// progress bar; the engine adds to it (bench.Test.Completed).
	completed atomic.Uint64
}

// startRun tells the progress bar that size, run i of n, begins.
func (r *ptRun) startRun(size uint64, i, n int) {
	o := r.o
	r.outs.completed.Store(0)
	var frac func() float64
	switch {
	case o.infinite:
		return // no end to show
	case o.duration > 0:
		t0, d := time.Now(), time.Duration(o.duration)*time.Second
		frac = func() float64 { return float64(time.Since(t0)) / float64(d) }
	case o.iters > 0:
		total := float64(o.iters * o.numQPs)
		frac = func() float64 { return float64(r.outs.completed.Load()) / total }
	}
	r.outs.bar.Start(fmt.Sprintf("%s %d B", o.test.name, size), i, n, frac)
}

// writeOutputs writes the CSV and the plot, if asked for.
func (r *ptRun) writeOutputs() error {
	o := r.o
	if o.csvFile != "" {
		if err := r.writeCSV(o.csvFile); err != nil {
			return fmt.Errorf("--out_csv: %w", err)
		}
	}
	if o.plotFile != "" {
		if err := r.writePTPlot(o.plotFile); err != nil {
			return fmt.Errorf("--plot: %w", err)
		}
	}
	return nil
}

func (r *ptRun) writeCSV(path string) error {
	o, outs := r.o, &r.outs
	var rows [][]string
	f := perftest.FormatFloat // as the table prints it ("-nan" included)
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	switch {
	case o.test.kind == perftest.BW:
		unit := "MBps"
		if o.gbits {
			unit = "Gbps"
		}
		head := []string{"bytes", "iterations", "bw_peak_" + unit, "bw_average_" + unit, "msg_rate_Mpps"}
		if o.cpuUtilOn() {
			head = append(head, "cpu_util_pct")
		}
		rows = append(rows, head)
		for _, b := range outs.bw {
			row := []string{u(b.Size), u(b.Iters), f(b.BWPeak, 2), f(b.BWAvg, 2), f(b.MsgRate, 6)}
			if o.cpuUtilOn() {
				row = append(row, f(b.CPUUtil, 2))
			}
			rows = append(rows, row)
		}
	case o.duration > 0:
		head := []string{"bytes", "iterations", "t_avg_usec", "tps"}
		if o.cpuUtilOn() {
			head = append(head, "cpu_util_pct")
		}
		rows = append(rows, head)
		for _, s := range outs.latDur {
			row := []string{u(s.Size), u(s.Iters), f(s.TAvg, 2), f(s.TPS, 2)}
			if o.cpuUtilOn() {
				row = append(row, f(s.CPUUtil, 2))
			}
			rows = append(rows, row)
		}
	default:
		rows = append(rows, []string{"bytes", "iterations", "t_min_usec", "t_max_usec", "t_typical_usec", "t_avg_usec", "t_stdev_usec", "p99_usec", "p99_9_usec"})
		for _, s := range outs.lat {
			rows = append(rows, []string{u(s.Size), u(s.Iters), f(s.TMin, 2), f(s.TMax, 2), f(s.TTypical, 2), f(s.TAvg, 2), f(s.TStdev, 2), f(s.P99, 2), f(s.P999, 2)})
		}
	}
	return report.WriteCSV(path, rows)
}

func (r *ptRun) writePTPlot(path string) error {
	o, outs := r.o, &r.outs
	name := o.test.name
	var pn report.Panel
	switch {
	case o.test.kind == perftest.BW:
		unit := "MB/s"
		if o.gbits {
			unit = "Gb/s"
		}
		pn = report.Panel{Title: name + " bandwidth", YLabel: "bandwidth [" + unit + "]"}
		avg, peak := report.Series{Name: "BW average"}, report.Series{Name: "BW peak"}
		for _, b := range outs.bw {
			avg.Points = append(avg.Points, plotter.XY{X: float64(b.Size), Y: b.BWAvg})
			if b.BWPeak > 0 {
				peak.Points = append(peak.Points, plotter.XY{X: float64(b.Size), Y: b.BWPeak})
			}
		}
		pn.Series = []report.Series{avg, peak}
	case o.duration > 0:
		pn = report.Panel{Title: name + " latency", YLabel: "average latency [µs]"}
		s := report.Series{Name: "t_avg"}
		for _, d := range outs.latDur {
			s.Points = append(s.Points, plotter.XY{X: float64(d.Size), Y: d.TAvg})
		}
		pn.Series = []report.Series{s}
	default:
		pn = report.Panel{Title: name + " latency", YLabel: "latency [µs]"}
		typ, p99, p999 := report.Series{Name: "typical (median)"}, report.Series{Name: "99%"}, report.Series{Name: "99.9%"}
		for _, s := range outs.lat {
			typ.Points = append(typ.Points, plotter.XY{X: float64(s.Size), Y: s.TTypical})
			p99.Points = append(p99.Points, plotter.XY{X: float64(s.Size), Y: s.P99})
			p999.Points = append(p999.Points, plotter.XY{X: float64(s.Size), Y: s.P999})
		}
		pn.Series = []report.Series{typ, p99, p999}
	}
	if len(pn.Series[0].Points) == 0 {
		return fmt.Errorf("no results to plot")
	}
	return report.WritePlot(path, []report.Panel{pn})
}
