package soft

import (
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// TestReceiveBeforeDeadlines: a process starved of CPU runs its due
// deadlines late, and by then the ACK that answered the request may be
// waiting in its socket. Whoever runs the deadlines (a busy poller coming
// back, or the driver's timer) receives first, so the answered request
// does not time out: under load every such timeout cost a retry, and
// seven of them failed ibv_rc_pingpong's QPs although every packet
// arrived.
func TestReceiveBeforeDeadlines(t *testing.T) {
	for _, by := range []string{"busy poller", "timer"} {
		t.Run(by, func(t *testing.T) {
			a, _, bl := pair(t, Config{}, Config{})
			// a's receive loop sleeps while a polls; then a stops
			// polling: nothing receives for a.
			busyPollUntilAside(t, a)
			a.buf[0] = 1
			a.write(1, 0, 64)
			realWait(t, func() bool { return bl.acksOut.Load() > 0 }, "b never acknowledged the WRITE")
			until := a.dev.eng.NextDeadline()
			if until.IsZero() {
				t.Fatal("no ACK timeout armed for the WRITE")
			}
			// a was descheduled past the WRITE's ACK timeout; the timer
			// did not run either.
			a.clk.Jump(until.Sub(a.clk.Now()) + time.Millisecond)
			switch by {
			case "busy poller":
				a.dev.inlinePolls.Store(0) // the next poll looks at the clock
				expectWC(t, a.busyPoll(a.scq, nil, "the WRITE never completed"), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
			case "timer":
				// The loop is back but has not run yet; the timer runs
				// first.
				a.dev.aside.Store(false)
				a.dev.onTimer()
				expectWC(t, a.busyPoll(a.scq, nil, "the WRITE never completed"), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
			}
			if n, r := counter(a.dev, "timeouts"), counter(a.dev, "retransmits"); n != 0 || r != 0 {
				t.Fatalf("the WRITE's ACK waited in the socket, yet it timed out %d times and was retransmitted %d times", n, r)
			}
		})
	}
}
