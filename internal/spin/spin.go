// Package spin is the idle policy of softrdma's busy-polling loops: the
// device's receive loop, CQ.Wait's spin phase and the benchmarks' pollers.
//
// A busy poller must not starve the threads it waits for. On a machine
// with few CPUs the peer may be another process, so every few empty polls
// the poller gives its CPU to other runnable threads with sched_yield,
// which returns at once when there are none. Within the process, other
// goroutines have other Ps; only when GOMAXPROCS is 1 must the poller let
// them run with runtime.Gosched. With more Ps it must not: Gosched puts the
// goroutine on the global run queue and wakes an idle P's thread to take
// it, while the yielding thread goes to sleep in the network poller — a
// thread hand-off per yield, thousands a second.
package spin

import (
	"runtime"
	"syscall"
)

const (
	yieldEvery   = 8  // empty polls between sched_yield calls
	goschedEvery = 64 // empty polls between Gosched calls, GOMAXPROCS=1 only
)

// Idle is called by a busy poller after its n-th consecutive empty poll
// (n counts from 1).
func Idle(n int) {
	if n%yieldEvery == 0 {
		OSYield()
	}
	if n%goschedEvery == 0 && runtime.GOMAXPROCS(0) == 1 {
		runtime.Gosched()
	}
}

// OSYield gives the CPU to another runnable thread, if any (sched_yield).
// It is a raw system call: the goroutine keeps its P, which a yield that
// returns in microseconds does not need to hand over.
func OSYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
