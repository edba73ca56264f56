// Command softrdma is softrdma's command-line tool: device listings in the
// style of rdma-core's ibv_devices and ibv_devinfo, rdma-core's pingpong
// examples, perftest's benchmarks, librdmacm's example tools, and bench,
// which runs RDMA WRITE, READ and SEND bandwidth and latency tests with
// both ends in one process over UDP loopback. Each tool family is a
// package under internal/tools; this command only dispatches to them.
//
// The binary also dispatches on the name it is called by, so a symlink
// named ibv_devinfo behaves like "softrdma ibv_devinfo".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"

	"github.com/softrdma/softrdma/internal/tools/bench"
	"github.com/softrdma/softrdma/internal/tools/device"
	"github.com/softrdma/softrdma/internal/tools/devinfo"
	"github.com/softrdma/softrdma/internal/tools/flood"
	"github.com/softrdma/softrdma/internal/tools/perftest"
	"github.com/softrdma/softrdma/internal/tools/pingpong"
	"github.com/softrdma/softrdma/internal/tools/rdmacm"
)

// runFunc is every tool family's entry point: args[0] is the command's
// name, as argv[0].
type runFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

type command struct {
	name, summary string
	run           runFunc
}

// commands is the table of tools, in the order usage lists them.
func commands() []command {
	return []command{
		{"bench", "WRITE/READ/SEND bandwidth and latency, both ends in this process over UDP loopback", bench.Run},
		{"flood", "flood a RoCEv2 endpoint with forged packets (an attacker, for measuring; docs/security.md)", flood.Run},
		{"ib_atomic_bw", perftest.Summary("ib_atomic_bw"), perftest.Run},
		{"ib_atomic_lat", perftest.Summary("ib_atomic_lat"), perftest.Run},
		{"ib_read_bw", perftest.Summary("ib_read_bw"), perftest.Run},
		{"ib_read_lat", perftest.Summary("ib_read_lat"), perftest.Run},
		{"ib_send_bw", perftest.Summary("ib_send_bw"), perftest.Run},
		{"ib_send_lat", perftest.Summary("ib_send_lat"), perftest.Run},
		{"ib_write_bw", perftest.Summary("ib_write_bw"), perftest.Run},
		{"ib_write_lat", perftest.Summary("ib_write_lat"), perftest.Run},
		{"ibv_devices", "list RDMA devices (like rdma-core's ibv_devices)", devinfo.Run},
		{"ibv_devinfo", "show device and port attributes (like ibv_devinfo -v)", devinfo.Run},
		{"ibv_rc_pingpong", "RC SEND ping-pong, compatible with rdma-core's ibv_rc_pingpong", pingpong.Run},
		{"ibv_srq_pingpong", "RC ping-pong over a shared receive queue, compatible with rdma-core's ibv_srq_pingpong", pingpong.Run},
		{"ibv_uc_pingpong", "UC SEND ping-pong, compatible with rdma-core's ibv_uc_pingpong", pingpong.Run},
		{"ibv_ud_pingpong", "UD SEND ping-pong, compatible with rdma-core's ibv_ud_pingpong", pingpong.Run},
		{"nvme", "NVMe-oF host commands like nvme-cli's: discover, id-ctrl, id-ns, read, write, perf", runNvme},
		{"nvmet", "serve a file or memory as an NVMe-oF namespace over RDMA (Linux nvme-rdma connects to it)", runNvmet},
		{"riostream", "stream tests by riowrite into riomap'd buffers, compatible with librdmacm's riostream", rdmacm.Run},
		{"rping", "RDMA READ/WRITE ping over rdma_cm, compatible with librdmacm's rping", rdmacm.Run},
		{"rstream", "stream bandwidth and latency over rsockets, compatible with librdmacm's rstream", rdmacm.Run},
		{"ucmatose", "RC connections and SENDs over rdma_cm, compatible with librdmacm's ucmatose", rdmacm.Run},
		{"udaddy", "UD SENDs to a peer resolved with SIDR, compatible with librdmacm's udaddy", rdmacm.Run},
		{"version", "the module version and VCS revision this binary was built from", runVersion},
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: softrdma <command> [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-16s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'softrdma <command> -h' for a command's flags.\n")
}

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// run dispatches argv and returns the exit status.
func run(argv []string, stdout, stderr io.Writer) int {
	name := strings.TrimSuffix(filepath.Base(argv[0]), ".exe")
	args := argv // args[0] is the command's name, as each tool takes it
	cmd, ok := lookup(name)
	if !ok {
		rest := argv[1:]
		if len(rest) == 0 || rest[0] == "-h" || rest[0] == "--help" || rest[0] == "help" {
			usage(stderr)
			if len(rest) == 0 {
				return 2
			}
			return 0
		}
		cmd, ok = lookup(rest[0])
		if !ok {
			fmt.Fprintf(stderr, "softrdma: unknown command %q\n\n", rest[0])
			usage(stderr)
			return 2
		}
		name, args = rest[0], rest
	}
	env, err := device.LoadEnv()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	stopProfiles, err := startProfiles(env.Trace, env.CPUProfile, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	exitOnSignal(name, stopProfiles)
	err = cmd.run(context.Background(), args, stdout, stderr)
	stopProfiles()
	if errors.Is(err, flag.ErrHelp) {
		return 0 // -h printed the usage: success, as rdma-core and perftest
	}
	var status interface{ ExitStatus() int }
	if errors.As(err, &status) {
		// The tool's own status (ibv_devinfo's), its message printed
		// without the command's name, as the C tool prints it.
		if msg := err.Error(); msg != "" {
			fmt.Fprintln(stderr, msg)
		}
		return status.ExitStatus()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// startProfiles writes a runtime/trace of the whole command to traceFile
// and a CPU profile to cpuFile, each if its name is not empty
// (SOFTRDMA_TRACE=<file>, SOFTRDMA_CPUPROFILE=<file>; `go tool trace` and
// `go tool pprof` read them): the way to see where both ends of a
// two-process benchmark spend their time, goroutine hand-offs, timer
// wake-ups and system calls. The function it returns stops both.
func startProfiles(traceFile, cpuFile string, stderr io.Writer) (func(), error) {
	var stops []func()
	stop := func() {
		for _, f := range stops {
			f()
		}
	}
	for _, p := range []struct {
		env, file string
		start     func(io.Writer) error
		stop      func()
	}{
		{"SOFTRDMA_TRACE", traceFile, trace.Start, trace.Stop},
		{"SOFTRDMA_CPUPROFILE", cpuFile, pprof.StartCPUProfile, pprof.StopCPUProfile},
	} {
		if p.file == "" {
			continue
		}
		f, err := os.Create(p.file)
		if err == nil {
			if err = p.start(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("%s: %w", p.env, err)
		}
		stops = append(stops, func() {
			p.stop()
			if err := f.Close(); err != nil {
				fmt.Fprintf(stderr, "softrdma: %s: %v\n", p.env, err)
			}
		})
	}
	return stop, nil
}
