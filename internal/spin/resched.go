package spin

import (
	"runtime"
	"time"
)

// Resched lets a long-running busy poller pass through the scheduler on its
// own, every ReschedEvery of polling, before the runtime forces it to.
//
// A goroutine that polls without ever blocking keeps the same scheduling
// tick. After 10 ms of that the runtime's monitor thread (sysmon) preempts
// it; when the poller is inside a cgo or system call at that moment, as a
// poller of a kernel device's CQ nearly always is, sysmon takes its P away
// and hands it off, and after each such hand-off sysmon wakes every 20 µs
// for the next millisecond and more before it backs off to 10 ms again.
// A poller that never yields so keeps sysmon waking every few tens of
// microseconds all the time, each wake a timer interrupt and a context
// switch on the poller's CPU; on a one-CPU machine the poller is off its
// CPU while sysmon runs. One runtime.Gosched every ReschedEvery gives the
// goroutine a new tick before sysmon would act, so sysmon keeps sleeping,
// at the cost of one trip through the scheduler per ReschedEvery.
//
// The zero value is ready. A Resched belongs to one goroutine.
type Resched struct {
	n    int
	last time.Duration // since epoch, of the last Gosched; 0: not yet
}

// ReschedEvery is how often a poller using Resched passes through the
// scheduler: half of the runtime's 10 ms forced-preemption period.
const ReschedEvery = 5 * time.Millisecond

// reschedLook is how many Step calls Resched lets pass between looks at
// the clock.
const reschedLook = 64

// epoch, since and gosched are Resched's clock and yield; tests replace
// since and gosched.
var (
	epoch   = time.Now()
	since   = func() time.Duration { return time.Since(epoch) }
	gosched = runtime.Gosched
)

// Step is called on every pass of the goroutine's busy loop, whether its
// poll found work or not (a loop that always finds some, such as a
// bandwidth sender's, never blocks either); every ReschedEvery it calls
// runtime.Gosched.
func (r *Resched) Step() {
	r.n++
	if r.n%reschedLook != 0 {
		return
	}
	now := since()
	if r.last == 0 {
		r.last = now
		return
	}
	if now-r.last >= ReschedEvery {
		gosched()
		r.last = since()
	}
}
