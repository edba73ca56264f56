// Package spin is the idle policy of softrdma's busy-polling loops: the
// device's receive loop, CQ.Wait's spin phase and the benchmarks' pollers.
//
// A busy poller must not starve the threads it waits for. On a machine
// with few CPUs the peer may be another process, so every yieldEvery
// empty polls the poller gives its CPU to other runnable threads with
// OSYield (sched_yield where the system has it), which returns at once
// when there are none. That call is not free (about a microsecond on a
// VM): yielding every 8 polls, a shared-memory ping-pong pinned to two
// CPUs spent 60 % of its time in sched_yield and an 8-byte WRITE took
// 1.04 µs one way; every 64 polls (a few microseconds of polling on
// shm, a hundred on UDP, whose polls are system calls) it took 0.33 µs,
// and UDP's latency did not move.
//
// Within the process, the poller lets other goroutines run with
// runtime.Gosched only when some are runnable and waiting for a P. When
// none is, Gosched is worse than useless: it puts the poller on the global
// run queue and wakes an idle P's thread to take it, while the yielding
// thread goes to sleep in the network poller — a thread hand-off per
// yield, thousands a second. When some are (more busy pollers than Ps),
// not yielding would leave them waiting for the runtime's 10 ms preemption.
package spin

import (
	"runtime"
	"runtime/metrics"
	"sync"
)

const (
	yieldEvery   = 64 // empty polls between sched_yield calls
	goschedEvery = 32 // empty polls between looks at the run queue
)

// Idle is called by a busy poller after its n-th consecutive empty poll
// (n counts from 1).
func Idle(n int) {
	if n%yieldEvery == 0 {
		OSYield()
	}
	if n%goschedEvery == 0 && Crowded() {
		runtime.Gosched()
	}
}

const runnable = "/sched/goroutines/runnable:goroutines"

// sample is Crowded's metrics.Read argument, shared because Read makes its
// argument escape: a sample on the stack would be a heap allocation per
// call. sampleMu guards it.
var (
	sampleMu sync.Mutex
	sample   = []metrics.Sample{{Name: runnable}}
)

// Crowded reports whether goroutines are runnable and waiting for a P.
// It costs about 100 ns and allocates nothing. When another poller is
// looking at that moment it answers false: the caller looks again soon.
func Crowded() bool {
	if !sampleMu.TryLock() {
		return false
	}
	defer sampleMu.Unlock()
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return runtime.GOMAXPROCS(0) == 1 // metric unavailable: assume the worst only with one P
	}
	return sample[0].Value.Uint64() > 0
}
