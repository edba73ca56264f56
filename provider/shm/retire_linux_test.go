package shm

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// TestUnsignaledSendsRetire streams unsignaled SENDs, many times the send
// queue's depth, at a peer that takes them: the requester reads the
// peer's acknowledgement only now and then (retireDue), and its send
// queue must still drain, so that no post finds it full for longer than
// the peer takes to consume.
func TestUnsignaledSendsRetire(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	const n = 64 * 8 // the send queue holds 64
	var got atomic.Int64
	done := make(chan struct{})
	go func() { // the receiver reposts as it goes
		defer close(done)
		for i := range 64 {
			if err := b.qp.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{b.mr.SGE(i*64, 64)}}); err != nil {
				t.Error(err)
				return
			}
		}
		wc := make([]verbs.WC, 16)
		deadline := time.Now().Add(10 * time.Second)
		for got.Load() < n && time.Now().Before(deadline) {
			k, err := b.cq.Poll(wc)
			if err != nil {
				t.Error(err)
				return
			}
			for _, w := range wc[:k] {
				if w.Status != verbs.WCSuccess {
					t.Errorf("receive: %+v", w)
					return
				}
				got.Add(1)
				if err := b.qp.PostRecv(&verbs.RecvWR{WRID: w.WRID, SGList: []verbs.SGE{b.mr.SGE(int(w.WRID)*64, 64)}}); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	wr := verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}
	wc := make([]verbs.WC, 4)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < n; {
		err := a.qp.PostSend(&wr)
		if err == nil {
			i++
			continue
		}
		if !errors.Is(err, verbs.ErrQueueFull) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("send queue still full after %d posts, %d received", i, got.Load())
		}
		if k, _ := a.cq.Poll(wc); k > 0 { // unsignaled successes complete silently
			t.Fatalf("completion for an unsignaled SEND: %+v", wc[0])
		}
	}
	<-done
	if got.Load() != n {
		t.Fatalf("received %d of %d", got.Load(), n)
	}
}

// TestErrAfterAckedUnsignaled: SENDs the peer took complete with success
// (silently, being unsignaled) when the application moves the QP to ERR,
// though no poll retired them first; only what was not taken is flushed.
func TestErrAfterAckedUnsignaled(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	for i := range 3 {
		postRecv(t, b.qp, uint64(i), b.mr.SGE(i*64, 64))
	}
	for range 3 {
		if err := a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, b.cq, 3)
	if err := a.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	wc := make([]verbs.WC, 4)
	for ctx.Err() == nil {
		if k, _ := a.cq.Poll(wc); k > 0 {
			t.Fatalf("a SEND the peer took was flushed: %+v", wc[:k])
		}
		a.cq.Wait(ctx)
	}
}
