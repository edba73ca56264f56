//go:build !linux && !freebsd

package spin

import "runtime"

// OSYield gives the processor to other goroutines (runtime.Gosched).
//
// Where the syscall package names sched_yield (Linux, FreeBSD) OSYield
// calls it (yield_sched.go); elsewhere (macOS) a Go program has no
// portable way to yield its thread to other processes. Gosched is the
// fallback: it lets this process's goroutines run, at the cost of the
// thread hand-off described in the package comment, and a peer in
// another process still gets the CPU when the OS preempts the poller.
func OSYield() { runtime.Gosched() }
