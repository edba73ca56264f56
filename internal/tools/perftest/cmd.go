package main

// ib_write_bw, ib_write_lat, ib_read_bw, ib_read_lat, ib_send_bw,
// ib_send_lat, ib_atomic_bw and ib_atomic_lat: perftest 4.5's benchmarks
// over softrdma, with perftest's options, out-of-band TCP exchange
// (internal/perftest), measurement loops, statistics and output, so either
// end can be the real perftest on rxe or a RoCE NIC.

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"

	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/verbs"
)

// ptTests are the eight benchmarks, named as perftest names its binaries.
var ptTests = []ptTest{
	{"ib_write_bw", perftest.Write, perftest.BW},
	{"ib_write_lat", perftest.Write, perftest.Lat},
	{"ib_read_bw", perftest.Read, perftest.BW},
	{"ib_read_lat", perftest.Read, perftest.Lat},
	{"ib_send_bw", perftest.Send, perftest.BW},
	{"ib_send_lat", perftest.Send, perftest.Lat},
	{"ib_atomic_bw", perftest.Atomic, perftest.BW},
	{"ib_atomic_lat", perftest.Atomic, perftest.Lat},
}

func init() {
	for _, t := range ptTests {
		what := "RDMA WRITE"
		switch t.verb {
		case perftest.Read:
			what = "RDMA READ"
		case perftest.Send:
			what = "SEND"
		case perftest.Atomic:
			what = "atomic"
		}
		kind := "bandwidth"
		if t.kind == perftest.Lat {
			kind = "latency"
		}
		commands[t.name] = command{
			summary: what + " " + kind + ", compatible with perftest's " + t.name,
			run:     func(args []string) error { return runPTCommand(t, args) },
		}
	}
}

// ptEnv is what a benchmark runs with besides its options: the tests give
// each side its own device and output.
type ptEnv struct {
	ctx context.Context
	dev verbs.Context // the device; nil opens the one -d names
	out io.Writer     // the report (stdout)
	// errOut gets the warnings perftest prints on stderr.
	errOut io.Writer
	// ln, if set, is the server's listener; nil listens on -p.
	ln net.Listener
}

// runPTCommand is the CLI entry point of one benchmark.
func runPTCommand(t ptTest, args []string) error {
	o, err := parsePTArgs(t, args, os.Stdout)
	if err != nil {
		if errors.Is(err, errPTExit) {
			return nil
		}
		return err
	}
	if o.test.kind == perftest.Lat && os.Getenv("GOMAXPROCS") == "" {
		// A latency test is one goroutine polling, the device's loop
		// stepped aside. With a second P idle, the Go runtime hands that
		// goroutine to another thread when it is preempted or yields,
		// and the kernel may run that thread on the CPU where the peer
		// process polls: both pollers then share one CPU for
		// milliseconds, 15-30 µs a sample. One P keeps the poller on
		// its thread (docs/performance.md: p99 19.5 → 9.6 µs). As
		// perftest binds a core; GOMAXPROCS=N in the environment keeps N.
		runtime.GOMAXPROCS(1)
	}
	return runPT(ptEnv{ctx: context.Background(), out: os.Stdout, errOut: os.Stderr}, o)
}
