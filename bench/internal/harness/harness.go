// Package harness is what bench/compare's child processes share, whichever
// module they are built in: the "RESULT {json}" line they end with, the
// latency summary in it, and the CPU profile and runtime trace a run may
// ask for.
package harness

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"time"
)

// PrintResult prints m as the child's "RESULT {json}" line.
func PrintResult(m map[string]float64) {
	b, _ := json.Marshal(m)
	fmt.Printf("RESULT %s\n", b)
}

// Call times one call of a latency loop. In a runtime trace (-trace) the
// call is a region named "call", so that the slowest calls can be found
// in the trace and set against what both processes did meanwhile (the
// trace's clock snapshot gives the monotonic clock, which two processes
// on one machine share).
func Call(f func() error) (time.Duration, error) {
	var err error
	t0 := time.Now()
	trace.WithRegion(context.Background(), "call", func() { err = f() })
	return time.Since(t0), err
}

// LatMetrics summarises latency samples the way perftest does (typical
// is the median), in microseconds: lat_min_us, lat_p50_us, lat_avg_us,
// lat_p99_us, lat_p999_us and lat_max_us. It sorts s in place; s must not
// be empty.
func LatMetrics(s []time.Duration) map[string]float64 {
	slices.Sort(s)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	pct := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.5) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return map[string]float64{
		"lat_min_us":  us(s[0]),
		"lat_p50_us":  us(s[len(s)/2]),
		"lat_avg_us":  us(sum / time.Duration(len(s))),
		"lat_p99_us":  us(pct(0.99)),
		"lat_p999_us": us(pct(0.999)),
		"lat_max_us":  us(s[len(s)-1]),
	}
}

// StartProfiles starts a CPU profile into cpuProfile and a runtime trace
// into tracePath. An empty path falls back to SOFTRDMA_CPUPROFILE or
// SOFTRDMA_TRACE, as the softrdma CLI reads them (bench/compare's
// -profile-dir sets them); with neither, that one is not started. stop
// ends both and closes their files; on error it has already been called.
func StartProfiles(cpuProfile, tracePath string) (stop func(), err error) {
	cpuProfile = cmp.Or(cpuProfile, os.Getenv("SOFTRDMA_CPUPROFILE"))
	tracePath = cmp.Or(tracePath, os.Getenv("SOFTRDMA_TRACE"))
	var files []*os.File
	stop = func() {
		pprof.StopCPUProfile()
		trace.Stop()
		for _, f := range files {
			f.Close()
		}
		files = nil
	}
	open := func(path string, start func(io.Writer) error) error {
		if path == "" {
			return nil
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		files = append(files, f)
		return start(f)
	}
	if err := open(cpuProfile, pprof.StartCPUProfile); err != nil {
		stop()
		return func() {}, err
	}
	if err := open(tracePath, trace.Start); err != nil {
		stop()
		return func() {}, err
	}
	return stop, nil
}
