package shm

import (
	"context"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// A goroutine blocked in CQ.Wait is not left to the progress goroutine's
// nap when another goroutine of the application posts meanwhile (a
// socket's reader waits while its writer sends): posting marks the device
// active, but with a waiter asleep the progress goroutine must keep
// delivering, and sleep only where peers ring it. The nap lasts an hour
// here, so a nap would strand the SEND below.
func TestWaiterNotLeftToNapWhenAnotherPosts(t *testing.T) {
	d := napTime
	t.Cleanup(func() { napTime = d })
	napTime = time.Hour
	x, y := pair(t, sideOpts{}, sideOpts{})
	postRecv(t, x.qp, 1, x.mr.SGE(0, 64))
	postRecv(t, y.qp, 1, y.mr.SGE(0, 64))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- y.cq.Wait(ctx) }()
	time.Sleep(50 * time.Millisecond) // past Wait's own polling: it blocks
	// Another goroutine of y's application posts: the device is active.
	// Three times: a nap may end at once on the wake-up the waiter left
	// when it blocked, but only once.
	for i := range 3 {
		postRecv(t, x.qp, uint64(10+i), x.mr.SGE(1024+64*i, 64))
		copy(y.mr.Bytes()[512:], "pong")
		if err := y.qp.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SGList: []verbs.SGE{y.mr.SGE(512, 4)}}); err != nil {
			t.Fatal(err)
		}
		poll(t, x.cq, 1)                  // x took it: y's progress goroutine retires it, then idles
		time.Sleep(50 * time.Millisecond) // long enough for it to reach its nap or its sleep
	}
	copy(x.mr.Bytes()[512:], "ping")
	if err := x.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.mr.SGE(512, 4)}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v (the receive waited for the progress goroutine's nap)", err)
	}
	poll(t, x.cq, 1)
}

// The same for an application that armed its CQ and sleeps on the
// CompChannel (ibv_get_cq_event's way): while the CQ is armed the
// progress goroutine must not nap, though the application posts, and the
// event comes without waiting out a nap (an hour here).
func TestArmedCQNotLeftToNapWhenAnotherPosts(t *testing.T) {
	d := napTime
	t.Cleanup(func() { napTime = d })
	napTime = time.Hour
	x, y := pair(t, sideOpts{}, sideOpts{channel: true})
	postRecv(t, y.qp, 1, y.mr.SGE(0, 64))
	if err := y.cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		postRecv(t, x.qp, uint64(10+i), x.mr.SGE(1024+64*i, 64))
		if err := y.qp.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SGList: []verbs.SGE{y.mr.SGE(512, 4)}}); err != nil {
			t.Fatal(err)
		}
		poll(t, x.cq, 1)
		time.Sleep(50 * time.Millisecond)
	}
	if err := x.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{x.mr.SGE(512, 4)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := y.ch.GetEvent(ctx); err != nil {
		t.Fatalf("GetEvent: %v (the receive waited for the progress goroutine's nap)", err)
	}
	poll(t, x.cq, 1)
	if n := y.dev.armed.Load(); n != 0 {
		t.Errorf("%d CQs counted armed after the event; want 0", n)
	}
}
