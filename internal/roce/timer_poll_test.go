package roce

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// TestRNRWaitUnderBusyPolling: an RNR wait ends on time while busy
// pollers hold every P. The QP's timer is a Go runtime timer, which runs
// only when a P enters the scheduler; a busy poller that never yields
// kept it waiting until the runtime preempted the poller, 10 ms or more
// for a 0.64 ms wait (issue 9: small SENDs falling from ~2.8 to ~0.13 M
// messages/s after one RNR NAK). A busy poller now fires the deadlines
// that are due itself, as it receives inline.
func TestRNRWaitUnderBusyPolling(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	ta, tb := udpPair(t)
	o := defaultOpts()
	o.minRNRTimer = 12 // 0.64 ms
	o.timeout = 16     // 268 ms: no ACK timeout in the way
	a, b := pair(t, ta, tb, o)

	best := time.Hour
	for round := range 5 {
		// b polls its receive CQ without yielding, as a busy
		// application does, and posts the receive only after it has
		// answered a's SEND with an RNR NAK.
		var stop atomic.Bool
		done := make(chan error, 1)
		rnr0 := b.dev.Counters.SendRNRErr.Load()
		go func() {
			wcs := make([]verbs.WC, 1)
			posted, got := false, 0
			for !stop.Load() || got == 0 {
				n, err := b.rcq.Poll(wcs)
				if err != nil {
					done <- err
					return
				}
				got += n
				if !posted && b.dev.Counters.SendRNRErr.Load() > rnr0 {
					if err := b.qp.PostRecv(&verbs.RecvWR{WRID: uint64(round), SGList: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
						done <- err
						return
					}
					posted = true
				}
			}
			done <- nil
		}()
		t0 := time.Now()
		a.post(&verbs.SendWR{WRID: uint64(round), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
		wc := a.busyPoll(a.scq, nil, "the SEND did not complete in 10 s")
		d := time.Since(t0)
		stop.Store(true)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		expectWC(t, wc, uint64(round), verbs.WCSuccess, verbs.WCSend)
		if b.dev.Counters.SendRNRErr.Load() == rnr0 {
			t.Fatalf("round %d: no RNR NAK; the test did not test the RNR wait", round)
		}
		t.Logf("round %d: SEND completed after %v, RNR NAKs %d", round, d, b.dev.Counters.SendRNRErr.Load()-rnr0)
		best = min(best, d)
	}
	// 0.64 ms of RNR wait plus a few round trips; a late timer costs 10 ms.
	if best > 5*time.Millisecond {
		t.Fatalf("a SEND delayed by one 0.64 ms RNR wait took at best %v over 5 rounds: the RNR timer waited for the Go scheduler while busy pollers held every P", best)
	}
}
