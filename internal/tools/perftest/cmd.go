// Package perftest is ib_write_bw, ib_write_lat, ib_read_bw, ib_read_lat,
// ib_send_bw, ib_send_lat, ib_atomic_bw and ib_atomic_lat: perftest 4.5's
// benchmarks over softrdma, with perftest's options, out-of-band TCP
// exchange (internal/perftest, imported under the same name), measurement
// loops (internal/bench), statistics and output, so either end can be the
// real perftest on rxe or a RoCE NIC.
package perftest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"

	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/verbs"
)

// ptTests returns the eight benchmarks, named as perftest names its
// binaries.
func ptTests() []ptTest {
	return []ptTest{
		{"ib_write_bw", perftest.Write, perftest.BW},
		{"ib_write_lat", perftest.Write, perftest.Lat},
		{"ib_read_bw", perftest.Read, perftest.BW},
		{"ib_read_lat", perftest.Read, perftest.Lat},
		{"ib_send_bw", perftest.Send, perftest.BW},
		{"ib_send_lat", perftest.Send, perftest.Lat},
		{"ib_atomic_bw", perftest.Atomic, perftest.BW},
		{"ib_atomic_lat", perftest.Atomic, perftest.Lat},
	}
}

// Commands are the benchmarks Run runs, by the name Run takes as args[0].
func Commands() []string {
	var names []string
	for _, t := range ptTests() {
		names = append(names, t.name)
	}
	return names
}

// Summary is a one-line description of the benchmark name, for a list of
// commands.
func Summary(name string) string {
	for _, t := range ptTests() {
		if t.name != name {
			continue
		}
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
		return what + " " + kind + ", compatible with perftest's " + t.name
	}
	return ""
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
	// noProgress turns the progress bar off (SOFTRDMA_NO_PROGRESS); it
	// draws only when errOut is a terminal.
	noProgress bool
}

// Run runs the benchmark args[0] names (one of Commands) with the command
// line args[1:], its report on stdout and perftest's warnings on stderr.
// -h and -V print what they print and return nil, as perftest exits 0.
//
// A latency benchmark sets GOMAXPROCS to 1 unless the environment sets
// GOMAXPROCS (see below): Run is for a process that runs one benchmark.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var t ptTest
	for _, c := range ptTests() {
		if len(args) > 0 && c.name == args[0] {
			t = c
		}
	}
	if t.name == "" {
		return fmt.Errorf("perftest.Run: args[0] must name a benchmark (one of %v)", Commands())
	}
	o, err := parsePTArgs(t, args[1:], stdout)
	if err != nil {
		if errors.Is(err, errPTExit) {
			return nil
		}
		return err
	}
	env, err := device.LoadEnv()
	if err != nil {
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
	return runPT(ptEnv{ctx: ctx, out: stdout, errOut: stderr, noProgress: env.NoProgress}, o)
}
