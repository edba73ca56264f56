package shm

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/verbs"
)

func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Skip(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestIdleCostsNoCPU: connected devices with a CQ waiter in blocking mode
// use no CPU while nothing happens, and the waiter still wakes at once
// when a SEND arrives.
func TestIdleCostsNoCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a second")
	}
	a, b := pair(t, sideOpts{}, sideOpts{})
	postRecv(t, b.qp, 1, b.mr.SGE(0, 8))
	woke := make(chan time.Time, 1)
	go func() {
		b.cq.Wait(context.Background())
		woke <- time.Now()
	}()
	time.Sleep(100 * time.Millisecond) // the progress goroutines go to sleep
	before := cpuTime(t)
	time.Sleep(time.Second)
	used := cpuTime(t) - before
	t.Logf("CPU used in 1 s idle: %v", used)
	// A device that spins uses the whole second; one that sleeps uses
	// next to nothing, plus what the race detector and the rest of a
	// loaded machine's process charge it (5.5 ms once under CI's load).
	if used > 50*time.Millisecond {
		t.Errorf("idle devices used %v of CPU in 1 s", used)
	}
	sent := time.Now()
	postSend(t, a.qp, verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	select {
	case w := <-woke:
		t.Logf("blocked waiter woke %v after the SEND", w.Sub(sent))
	case <-time.After(2 * time.Second):
		t.Fatal("the blocked waiter did not wake")
	}
	poll(t, a.cq, 1)
	poll(t, b.cq, 1)
}
