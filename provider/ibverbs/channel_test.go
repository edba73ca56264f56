//go:build ibverbs && cgo && linux

package ibverbs

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// The CQs created with one CompChannel share one completion channel, and
// the CQs created without one share the context's: two channels, two
// goroutines, however many CQs; the last CQ off a channel closes it.
func TestCQsShareChannels(t *testing.T) {
	c := openOrSkip(t)
	before := runtime.NumGoroutine()
	ch := verbs.NewCompChannel(8)
	var cqs []verbs.CQ
	for i := 0; i < 8; i++ {
		var with *verbs.CompChannel
		if i%2 == 0 {
			with = ch
		}
		cq, err := c.CreateCQ(16, with)
		if err != nil {
			t.Fatal(err)
		}
		cqs = append(cqs, cq)
	}
	if n := c.channels(); n != 2 {
		t.Errorf("8 CQs, 4 of them with one CompChannel: %d completion channels; want 2", n)
	}
	if g := runtime.NumGoroutine() - before; g > 2 {
		t.Errorf("8 CQs on 2 channels started %d goroutines; want at most 2", g)
	}
	for _, cq := range cqs {
		if err := cq.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.channels(); n != 0 {
		t.Errorf("%d completion channels after every CQ was destroyed; want 0", n)
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the CQs were destroyed, %d before", runtime.NumGoroutine(), before)
		}
	}
}

// Two CQs on one channel: each one's event wakes its own Wait and
// reaches the CompChannel as that CQ; many events (more than one ack
// batch) and a Destroy with events not yet acknowledged do not hang.
func TestSharedChannelDispatch(t *testing.T) {
	c := openOrSkip(t)
	ch := verbs.NewCompChannel(4)
	a1, b1 := pairCh(t, c, verbs.QPTypeRC, 64, ch)
	a2, b2 := pairCh(t, c, verbs.QPTypeRC, 64, ch)
	if n := c.channels(); n != 2 {
		t.Fatalf("%d completion channels; want 2 (the CompChannel's, the context's)", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sendTo := func(a, b *end, i int) {
		t.Helper()
		if err := b.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
		if wc := wait(t, a.cq); wc.Status != verbs.WCSuccess {
			t.Fatalf("send completion: %v", wc.Status)
		}
	}
	for i := 0; i < 2*ackBatch+3; i++ {
		which, other := b1, b2
		a := a1
		if i%2 == 1 {
			which, other, a = b2, b1, a2
		}
		if err := which.cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { waited <- which.cq.Wait(ctx) }()
		otherCtx, otherCancel := context.WithCancel(ctx)
		otherWaited := make(chan error, 1)
		go func() { otherWaited <- other.cq.Wait(otherCtx) }()
		sendTo(a, which, i)
		if err := <-waited; err != nil {
			t.Fatalf("round %d: Wait: %v", i, err)
		}
		select {
		case cq := <-ch.C():
			if cq != which.cq {
				t.Fatalf("round %d: the event is for the other CQ", i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no event on the CompChannel", i)
		}
		select {
		case err := <-otherWaited:
			t.Fatalf("round %d: the other CQ's Wait returned %v without a completion", i, err)
		case <-time.After(20 * time.Millisecond):
		}
		otherCancel()
		if err := <-otherWaited; err != context.Canceled {
			t.Fatalf("round %d: the other CQ's Wait after cancel: %v", i, err)
		}
		var wc [1]verbs.WC
		if n, err := which.cq.Poll(wc[:]); n != 1 || err != nil || wc[0].WRID != uint64(i) {
			t.Fatalf("round %d: Poll: %d, %v, WRID %d", i, n, err, wc[0].WRID)
		}
	}
	// The cleanups destroy the CQs with events not acknowledged yet (fewer
	// than a batch): detach acknowledges them, or ibv_destroy_cq would hang.
	done := make(chan struct{})
	go func() {
		b2.qp.Destroy()
		b2.cq.Destroy()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Destroy of a CQ with unacknowledged events hangs")
	}
}
