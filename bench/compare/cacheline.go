//go:build linux

package main

// The cache-line floor: the least a hand-off through shared memory costs on
// this host. Two goroutines, each locked to an OS thread pinned to its own
// CPU (0 and 1, where the shm stack pins its servers and clients), pass one
// cache line back and forth: each waits, spinning on an atomic load, for the
// other's value and answers with an atomic store. Nothing else travels: no
// ring, no descriptor, no completion. Every message of a shared-memory
// transport costs at least one such hand-off, so the row stands beside the
// shm 8 B WRITE and SEND latencies as the machine's floor.
//
// One-way latency is a batch of round trips' time / (2 × round trips);
// batches are short (cacheLineBatch round trips) so that a preemption by
// another process lands in a few samples and the median stays the
// hardware's figure.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	seriesCacheLine = "cache-line hand-off"
	cacheLineTool   = "atomic ping-pong CPU 0 ↔ CPU 1"
	cacheLineBatch  = 64 // round trips per sample
)

// cacheLine is one 64-byte line with the counter the two sides pass, kept
// off any neighbour's line by padding on both sides.
type cacheLine struct {
	_ [64]byte
	v atomic.Uint64
	_ [56]byte
}

// pinThread locks the calling goroutine to its OS thread and that thread
// to cpu. The thread is not unlocked: it exits with its goroutine, taking
// the affinity with it.
func pinThread(cpu int) error {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("sched_setaffinity to CPU %d: %w", cpu, err)
	}
	return nil
}

// cacheLineProbe ping-pongs one cache line between CPU 0 and CPU 1, samples
// batches of cacheLineBatch round trips each, and reports one-way latency:
// median, average, p99 and minimum, in µs.
func cacheLineProbe(ctx context.Context, samples int) (metrics, runInfo, error) {
	info := runInfo{Cmds: []string{fmt.Sprintf("in-process: %s, %d samples of %d round trips", cacheLineTool, samples, cacheLineBatch)}}
	if runtime.NumCPU() < 2 {
		return nil, info, errors.New("one CPU: no hand-off between two CPUs to measure")
	}
	samples = max(samples, 100)
	total := uint64(samples+samples/10) * cacheLineBatch // a tenth more as warm-up
	line := new(cacheLine)
	var stop atomic.Bool
	echoErr := make(chan error, 1)
	go func() {
		if err := pinThread(1); err != nil {
			stop.Store(true)
			echoErr <- err
			return
		}
		// The echo side: answer every odd value with the next even one.
		for want := uint64(1); want < 2*total; want += 2 {
			for line.v.Load() != want {
				if stop.Load() {
					echoErr <- nil
					return
				}
			}
			line.v.Store(want + 1)
		}
		echoErr <- nil
	}()
	ns := make([]float64, 0, samples+samples/10)
	res := make(chan error, 1)
	go func() {
		if err := pinThread(0); err != nil {
			res <- err
			return
		}
		deadline := time.Now().Add(30 * time.Second)
		next := uint64(1)
		for len(ns) < cap(ns) {
			t0 := time.Now()
			for range cacheLineBatch {
				line.v.Store(next)
				for line.v.Load() != next+1 {
					if stop.Load() {
						res <- errors.New("echo side stopped")
						return
					}
				}
				next += 2
			}
			d := time.Since(t0)
			ns = append(ns, float64(d.Nanoseconds())/(2*cacheLineBatch))
			if ctx.Err() != nil || time.Now().After(deadline) {
				res <- fmt.Errorf("cache-line ping-pong: %d of %d samples before the deadline", len(ns), cap(ns))
				return
			}
		}
		res <- nil
	}()
	err := <-res
	stop.Store(true)
	if e := <-echoErr; err == nil {
		err = e
	}
	if err != nil {
		return nil, info, err
	}
	ns = ns[len(ns)-samples:] // drop the warm-up
	m := cacheLineMetrics(ns)
	info.Raw = fmt.Sprintf("one-way ns: p50 %.1f avg %.1f p99 %.1f min %.1f", m["lat_p50_us"]*1e3, m["lat_avg_us"]*1e3, m["lat_p99_us"]*1e3, m["lat_min_us"]*1e3)
	return m, info, nil
}

// cacheLineMetrics turns one-way samples in ns into the latency metrics
// perftest's rows carry, in µs.
func cacheLineMetrics(ns []float64) metrics {
	s := append([]float64(nil), ns...)
	sort.Float64s(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	at := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] / 1e3 }
	return metrics{
		"lat_p50_us": at(0.50),
		"lat_p99_us": at(0.99),
		"lat_avg_us": sum / float64(len(s)) / 1e3,
		"lat_min_us": s[0] / 1e3,
	}
}
