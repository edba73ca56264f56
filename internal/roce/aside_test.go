package roce

import (
	"context"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// busyPollUntilAside polls n's receive CQ, as a busy application does,
// until n's Serve has stepped aside, and returns the completions it got.
func busyPollUntilAside(t *testing.T, n *node) int {
	t.Helper()
	got := 0
	deadline := time.Now().Add(10 * time.Second)
	for !n.dev.aside.Load() {
		k, err := n.rcq.Poll(n.wcs[:1])
		if err != nil {
			t.Fatal(err)
		}
		got += k
		if time.Now().After(deadline) {
			t.Fatal("Serve did not step aside for a busy poller in 10 s")
		}
	}
	return got
}

// TestServeStepsAside: while the application busy-polls a CQ, the device's
// Serve sleeps and the poller receives for it; when the poller stops,
// Serve receives again, both when it finds out by itself (its periodic
// check) and at once when the poller blocks in CQ.Wait.
func TestServeStepsAside(t *testing.T) {
	old := stepAsideCheck
	t.Cleanup(func() { stepAsideCheck = old })

	t.Run("poller receives", func(t *testing.T) {
		stepAsideCheck = time.Hour // Serve comes back only if kicked
		ta, tb := udpPair(t)
		a, b := pair(t, ta, tb, defaultOpts())
		busyPollUntilAside(t, b)
		b.postRecv(7, 0, 64)
		a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}})
		// Serve sleeps for an hour: only the polling loop can receive.
		expectWC(t, b.busyPoll(b.rcq, nil, "the busy poller did not receive the SEND"), 7, verbs.WCSuccess, verbs.WCRecv)
		if !b.dev.aside.Load() {
			t.Fatal("Serve came back without a kick while the poller polled")
		}
		expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCSend)

		// Blocking in CQ.Wait kicks Serve back at once: a SEND that only
		// Serve can now receive completes the wait.
		b.postRecv(8, 0, 64)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done <- b.rcq.Wait(ctx)
		}()
		for b.dev.aside.Load() {
			time.Sleep(time.Millisecond)
		}
		a.post(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}})
		if err := <-done; err != nil {
			t.Fatalf("CQ.Wait after the poller stopped: %v", err)
		}
		expectWC(t, b.waitWC(b.rcq), 8, verbs.WCSuccess, verbs.WCRecv)
	})

	t.Run("Serve comes back by itself", func(t *testing.T) {
		stepAsideCheck = 5 * time.Millisecond
		ta, tb := udpPair(t)
		a, b := pair(t, ta, tb, defaultOpts())
		busyPollUntilAside(t, b)
		// The poller stops without waiting; a's WRITE needs b's ACK, which
		// only b's Serve can now send.
		a.post(&verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 4096)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		expectWC(t, a.waitWC(a.scq), 3, verbs.WCSuccess, verbs.WCRDMAWrite)
		if b.dev.aside.Load() {
			t.Fatal("Serve still aside after it received")
		}
	})

	t.Run("NoInlinePoll", func(t *testing.T) {
		stepAsideCheck = time.Hour
		ta, _ := udpPair(t)
		d, err := New(Config{Transport: ta, NoInlinePoll: true})
		if err != nil {
			t.Fatal(err)
		}
		go d.Serve()
		defer d.Close()
		cq, err := d.CreateCQ(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cq.Destroy()
		var wc [1]verbs.WC
		for range 10000 {
			cq.Poll(wc[:])
		}
		if d.inlinePolls.Load() != 0 || d.aside.Load() {
			t.Fatalf("NoInlinePoll: %d inline polls, aside %v", d.inlinePolls.Load(), d.aside.Load())
		}
	})
}
