package shm

import (
	"context"
	"sync/atomic"
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

// An application whose waits spin on ProgressWaiting (the C library's
// ibv_get_cq_event) moves the rings itself: its armed CQ must not keep
// the progress goroutine awake and asleep on the doorbell, where every
// peer's post rang it (a futex wake and a message per post). Once it
// stops spinning, the armed CQ's event still comes: at once if it blocks
// through BeginWait, within a nap if it waits on the descriptor itself.
func TestSpinningWaiterNotRung(t *testing.T) {
	d := napTime
	t.Cleanup(func() { napTime = d })
	napTime = 30 * time.Millisecond
	// Cleanups run last first: the hook goes after the devices close.
	t.Cleanup(func() { wakeHook = nil })
	x, y := pair(t, sideOpts{}, sideOpts{channel: true})
	var rings atomic.Int32
	wakeHook = func(c *conn) {
		if c.dev == x.dev {
			rings.Add(1)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(i int) {
		t.Helper()
		if err := x.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{x.mr.SGE(512, 4)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if i == 2 {
			// The first rounds may ring: y's progress goroutine sleeps
			// on the doorbell until a spin has been seen (and the first
			// event may be there before the spin begins).
			rings.Store(0)
		}
		postRecv(t, y.qp, uint64(i), y.mr.SGE(0, 64))
		if err := y.cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // y's progress goroutine may go to sleep
		send(i)
		// At least one spin a round: the progress goroutine, woken by
		// the ring of a round before it saw a spin, may have delivered
		// the event already.
		deadline := time.Now().Add(5 * time.Second)
		for y.dev.ProgressWaiting(); len(y.ch.C()) == 0; y.dev.ProgressWaiting() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the spinning waiter got no event", i)
			}
		}
		if _, err := y.ch.GetEvent(ctx); err != nil {
			t.Fatal(err)
		}
		poll(t, y.cq, 1)
	}
	if n := rings.Load(); n != 0 {
		t.Errorf("x rang y %d times in 8 SENDs to a spinning waiter", n)
	}
	// It stops spinning while another of its threads keeps polling
	// (an empty CQ every 200 µs): the polls are not spins, and within a
	// few naps the armed CQs are the progress goroutine's again.
	other, err := y.dev.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		wc := make([]verbs.WC, 1)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Microsecond):
			}
			other.Poll(wc)
		}
	}()
	deadline := time.Now().Add(10 * napTime)
	for y.dev.spinWaits.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	<-polled
	if y.dev.spinWaits.Load() {
		t.Fatal("10 naps after the last spin, with another thread polling, the device still counts on a spinning waiter")
	}
	// It blocks through BeginWait, or waits on the channel without it:
	// the event comes either way.
	for i, begin := range []bool{true, false} {
		postRecv(t, y.qp, uint64(20+i), y.mr.SGE(0, 64))
		if err := y.cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if begin {
			y.dev.BeginWait()
		}
		send(20 + i)
		if _, err := y.ch.GetEvent(ctx); err != nil {
			t.Fatalf("BeginWait %v: no event: %v", begin, err)
		}
		if begin {
			y.dev.EndWait()
		}
		poll(t, y.cq, 1)
	}
}
