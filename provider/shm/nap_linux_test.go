package shm

import (
	"context"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// A CQ waiter that blocks after the application polled is not left to the
// progress goroutine's nap (during which peers do not ring): the nap is
// made to last an hour here, so without wakeForWaiter the SEND below
// would wait for it.
func TestWaitEndsNap(t *testing.T) {
	d := napTime
	t.Cleanup(func() { napTime = d })
	napTime = time.Hour
	x, y := pair(t, sideOpts{}, sideOpts{})
	postRecv(t, y.qp, 1, y.mr.SGE(0, 64))
	// Poll for a while: the device is active, its progress goroutine naps.
	wc := make([]verbs.WC, 1)
	for start := time.Now(); time.Since(start) < 20*time.Millisecond; {
		if n, _ := y.cq.Poll(wc); n != 0 {
			t.Fatalf("unexpected completion %+v", wc[0])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- y.cq.Wait(ctx) }()
	time.Sleep(50 * time.Millisecond) // past Wait's own polling: it blocks
	copy(x.mr.Bytes(), "ping")
	if err := x.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.mr.SGE(0, 4)}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v (the receive completed only after the nap)", err)
	}
	poll(t, x.cq, 1)
}

// A QP that another goroutine holds while the progress goroutine looks is
// looked at again before it sleeps: a peer that found the device awake
// did not ring for what arrived meanwhile. (The doorbell's safety-net
// wake is taken away here, so a skipped QP would strand the SEND.)
func TestContendedQPNotSkipped(t *testing.T) {
	d, w := napTime, safetyWake
	t.Cleanup(func() { napTime, safetyWake = d, w })
	napTime, safetyWake = time.Millisecond, time.Hour
	x, y := pair(t, sideOpts{}, sideOpts{})
	postRecv(t, y.qp, 1, y.mr.SGE(0, 64))
	wc := make([]verbs.WC, 1)
	for start := time.Now(); time.Since(start) < 20*time.Millisecond; {
		y.cq.Poll(wc) // active: the progress goroutine naps, peers do not ring
	}
	q := y.qp.(*QP)
	q.mu.Lock()
	copy(x.mr.Bytes(), "ping")
	if err := x.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.mr.SGE(0, 4)}}); err != nil {
		q.mu.Unlock()
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- y.cq.Wait(ctx) }()
	time.Sleep(50 * time.Millisecond) // the waiter blocks; the progress goroutine finds the QP held
	q.mu.Unlock()
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v (the SEND stayed in the ring)", err)
	}
	poll(t, x.cq, 1)
}
