// Command softrdma is softrdma's command-line tool: device listings in the
// style of rdma-core's ibv_devices and ibv_devinfo, and bench, which runs
// RDMA WRITE, READ and SEND bandwidth and latency tests with both ends in
// one process over UDP loopback.
//
// The binary also dispatches on the name it is called by, so a symlink
// named ibv_devinfo behaves like "softrdma ibv_devinfo".
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/trace"
	"sort"
	"strings"
)

type command struct {
	summary string
	run     func(args []string) error
}

var commands = map[string]command{
	"ibv_devices":     {"list RDMA devices (like rdma-core's ibv_devices)", runDevices},
	"ibv_devinfo":     {"show device and port attributes (like ibv_devinfo -v)", runDevinfo},
	"bench":           {"WRITE/READ/SEND bandwidth and latency, both ends in this process over UDP loopback", runBench},
	"ibv_rc_pingpong": {"RC SEND ping-pong, compatible with rdma-core's ibv_rc_pingpong", runRCPingpong},
	"ibv_uc_pingpong": {"UC SEND ping-pong, compatible with rdma-core's ibv_uc_pingpong", runUCPingpong},
	"ibv_ud_pingpong": {"UD SEND ping-pong, compatible with rdma-core's ibv_ud_pingpong", runUDPingpong},
	"rping":           {"RDMA READ/WRITE ping over rdma_cm, compatible with librdmacm's rping", runRping},
	"ucmatose":        {"RC connections and SENDs over rdma_cm, compatible with librdmacm's ucmatose", runUcmatose},
	"rstream":         {"stream bandwidth and latency over rsockets, compatible with librdmacm's rstream", runRstream},
	"riostream":       {"stream tests by riowrite into riomap'd buffers, compatible with librdmacm's riostream", runRiostream},
	"udaddy":          {"UD SENDs to a peer resolved with SIDR, compatible with librdmacm's udaddy", runUdaddy},
	"flood":           {"flood a RoCEv2 endpoint with forged packets (an attacker, for measuring; docs/security.md)", runFlood},
	"nvmet":           {"serve a file or memory as an NVMe-oF namespace over RDMA (Linux nvme-rdma connects to it)", runNvmet},
	"nvme":            {"NVMe-oF host commands like nvme-cli's: discover, id-ctrl, id-ns, read, write, perf", runNvme},
	"version":         {"the module version and VCS revision this binary was built from", runVersion},
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: softrdma <command> [flags]\n\ncommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'softrdma <command> -h' for a command's flags.\n")
}

func main() {
	name := strings.TrimSuffix(filepath.Base(os.Args[0]), ".exe")
	args := os.Args[1:]
	cmd, ok := commands[name]
	if !ok {
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			usage()
			if len(args) == 0 {
				os.Exit(2)
			}
			return
		}
		cmd, ok = commands[args[0]]
		if !ok {
			fmt.Fprintf(os.Stderr, "softrdma: unknown command %q\n\n", args[0])
			usage()
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	stopTrace, err := startTrace(os.Getenv("SOFTRDMA_TRACE"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: SOFTRDMA_TRACE: %v\n", name, err)
		os.Exit(1)
	}
	exitOnSignal(name, func() { stopTrace(); closeToolFiles() })
	err = cmd.run(args)
	stopTrace()
	closeToolFiles()
	if errors.Is(err, flag.ErrHelp) || errors.Is(err, errPTExit) {
		return // -h printed the usage: success, as rdma-core and perftest
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// startTrace writes a runtime/trace of the whole command to file, if it is
// not empty (SOFTRDMA_TRACE=<file>; `go tool trace <file>` reads it): the
// way to see goroutine hand-offs, timer wake-ups and system calls of both
// ends of a two-process benchmark. The function it returns stops the trace.
func startTrace(file string) (func(), error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		trace.Stop()
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "softrdma: SOFTRDMA_TRACE:", err)
		}
	}, nil
}
