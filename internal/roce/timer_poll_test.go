package roce

import (
	"runtime"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// TestBusyPollerEndsRNRWait: a busy poller ends an RNR wait that is due,
// without the Go scheduler. The QP's timer is a Go runtime timer, which
// runs only when a P enters the scheduler; a busy poller yields its P only
// to runnable goroutines (spin.Idle), and a due timer is not one, so with
// every P polling a 0.64 ms RNR wait lasted until the runtime preempted a
// poller, 10-20 ms (issue 9: small SENDs in softrdma bench falling from
// ~2.8 to ~0.13 M messages/s after one RNR NAK).
//
// The test holds the only P, as such a poller does, past the end of the
// wait and then polls once: that poll must resume the requester. (Timing
// a whole exchange instead would depend on the machine's load.)
func TestBusyPollerEndsRNRWait(t *testing.T) {
	ta, tb := udpPair(t)
	o := defaultOpts()
	o.minRNRTimer = 16 // 2.56 ms: room to catch the wait
	o.timeout = 16     // 268 ms: no ACK timeout in the way
	a, b := pair(t, ta, tb, o)
	qp := a.qp.(*QP)
	rnrWait := func() (bool, time.Time) {
		qp.mu.Lock()
		defer qp.mu.Unlock()
		return qp.req.rnrWait, qp.req.rnrUntil
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))

	// b has no receive posted: it answers the SEND with an RNR NAK, and
	// a's requester waits. (The devices' Serve goroutines receive while
	// this goroutine yields.)
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	deadline := time.Now().Add(10 * time.Second)
	waiting, until := rnrWait()
	for !waiting {
		if time.Now().After(deadline) {
			t.Fatal("no RNR wait began in 10 s")
		}
		runtime.Gosched()
		waiting, until = rnrWait()
	}

	// Hold the only P, without yielding, until the wait is over (the
	// runtime preempts only after 10 ms), then poll once, as a busy
	// poller does.
	for time.Now().Before(until.Add(100 * time.Microsecond)) {
	}
	if _, err := a.scq.Poll(a.wcs[:1]); err != nil {
		t.Fatal(err)
	}
	if waiting, _ := rnrWait(); waiting {
		t.Fatalf("the RNR wait ended %v ago, and a busy poll left the requester waiting for the Go timer", time.Since(until))
	}

	// The SEND goes through once b has a receive.
	b.postRecv(7, 0, 64)
	expectWC(t, b.waitWC(b.rcq), 7, verbs.WCSuccess, verbs.WCRecv)
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCSend)
	if b.dev.Counters.SendRNRErr.Load() == 0 {
		t.Fatal("no RNR NAK: the test did not test the RNR wait")
	}
}
