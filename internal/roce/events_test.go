package roce

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// nextEvent waits for d's next asynchronous event.
func nextEvent(t *testing.T, d *Device) verbs.AsyncEvent {
	t.Helper()
	select {
	case e := <-d.AsyncEvents():
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no asynchronous event in 5 s")
	}
	return verbs.AsyncEvent{}
}

func expectEvent(t *testing.T, d *Device, typ verbs.AsyncEventType, obj any) {
	t.Helper()
	e := nextEvent(t, d)
	var got any
	switch {
	case e.QP != nil:
		got = e.QP
	case e.CQ != nil:
		got = e.CQ
	case e.SRQ != nil:
		got = e.SRQ
	}
	if e.Type != typ || got != obj {
		t.Fatalf("event %v; want %v on %v", e, typ, obj)
	}
}

// TestAsyncEvents: the events ibv_get_async_event delivers, each raised
// where IBTA raises it.
func TestAsyncEvents(t *testing.T) {
	t.Run("COMM_EST and QP_ACCESS_ERR", func(t *testing.T) {
		ta, tb := udpPair(t)
		o := realOpts()
		a, b := newNodeWith(t, Config{Transport: ta}, o), newNodeWith(t, Config{Transport: tb}, o)
		a.peer, b.peer = b, a
		connect(t, a, b, o)
		// b only as far as RTR: its first packet establishes it.
		p := cm.Params{Port: 1, Access: o.access, PathMTU: o.mtu, SGIDIndex: 1, HopLimit: 64, MinRNRTimer: 1, MaxDestRdAtomic: 4}
		must(t, cm.Init(b.qp, &p))
		must(t, cm.ReadyToReceive(b.qp, cm.Endpoint{QPN: a.qp.QPNum(), PSN: 0xFFFFF0, GID: a.gid()}, &p))
		b.postRecv(1, 0, 64)
		a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}})
		expectWC(t, b.waitWC(b.rcq), 1, verbs.WCSuccess, verbs.WCRecv)
		expectEvent(t, b.dev, verbs.EventCommEst, b.qp)
		// A WRITE with a bad rkey: b's responder NAKs it and fails.
		a.post(&verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 1})
		expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCSend)
		expectWC(t, a.waitWC(a.scq), 2, verbs.WCRemAccessErr, verbs.WCRDMAWrite)
		expectEvent(t, b.dev, verbs.EventQPAccessErr, b.qp)
	})

	t.Run("SRQ_LIMIT_REACHED and QP_LAST_WQE_REACHED", func(t *testing.T) {
		f := newFuzzTarget(t)
		defer f.destroy()
		srq, err := f.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
		must(t, err)
		for i := range 4 {
			must(t, srq.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGList: []verbs.SGE{f.mr.SGE(0, 64)}}))
		}
		must(t, srq.Modify(&verbs.SRQAttr{SRQLimit: 3}, verbs.SRQAttrLimit))
		qp, err := f.pd.CreateQP(&verbs.QPInitAttr{SendCQ: f.cq, RecvCQ: f.cq, QPType: verbs.QPTypeUD, SRQ: srq, Cap: verbs.QPCap{MaxSendWR: 1}})
		must(t, err)
		defer qp.Destroy()
		var w recvWQE
		w.sgl = newSGL(1)
		srq.(*SRQ).pop(&w) // 3 left: not below the limit
		select {
		case e := <-f.dev.AsyncEvents():
			t.Fatalf("event %v at the limit", e)
		default:
		}
		srq.(*SRQ).pop(&w) // 2 left
		expectEvent(t, f.dev, verbs.EventSRQLimitReached, srq)
		if a, _ := srq.Query(); a.SRQLimit != 0 {
			t.Fatalf("limit %d after the event; want 0 (disarmed)", a.SRQLimit)
		}
		must(t, qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState))
		expectEvent(t, f.dev, verbs.EventQPLastWQEReached, qp)
		qp.Destroy()
		srq.Destroy()
	})

	t.Run("CQ_ERR", func(t *testing.T) {
		f := newFuzzTarget(t)
		defer f.destroy()
		cq, err := f.dev.CreateCQ(1, nil)
		must(t, err)
		defer cq.Destroy()
		for range 3 {
			cq.(*CQ).push(&verbs.WC{}, false)
		}
		expectEvent(t, f.dev, verbs.EventCQErr, cq)
		if _, err := cq.Poll(make([]verbs.WC, 4)); err == nil {
			t.Fatal("Poll after an overflow reported no error")
		}
		select {
		case e := <-f.dev.AsyncEvents():
			t.Fatalf("a second event %v for one overflow", e)
		default:
		}
	})

	t.Run("SQ_DRAINED", func(t *testing.T) {
		f := newFuzzTarget(t)
		defer f.destroy()
		must(t, f.rc.Modify(&verbs.QPAttr{QPState: verbs.QPStateSQD, EnSQDAsyncNotify: true}, verbs.QPAttrState|verbs.QPAttrEnSQDAsyncNotify))
		expectEvent(t, f.dev, verbs.EventSQDrained, f.rc)
	})
}

// TestCloseReleasesEverything: closing a device with everything still
// in use releases it all, and the objects then say they are gone.
func TestCloseReleasesEverything(t *testing.T) {
	f := newFuzzTarget(t)
	srq, err := f.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	must(t, err)
	ah, err := f.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(f.peer.Addr()), SGIDIndex: 1}})
	must(t, err)
	mr, err := f.pd.AllocMR(1<<16, verbs.AccessLocalWrite)
	must(t, err)
	must(t, f.dev.Close())
	if err := f.rc.PostSend(&verbs.SendWR{}); !errors.Is(err, verbs.ErrDestroyed) {
		t.Fatalf("PostSend after Close: %v", err)
	}
	for name, err := range map[string]error{"MR": mr.Dereg(), "SRQ": srq.Destroy(), "AH": ah.Destroy(), "CQ": f.cq.Destroy(), "PD": f.pd.Dealloc()} {
		if !errors.Is(err, verbs.ErrDestroyed) {
			t.Errorf("%s after Close: %v; want ErrDestroyed", name, err)
		}
	}
	if n := f.dev.nPD.Load() + f.dev.nCQ.Load() + f.dev.nMR.Load() + f.dev.nAH.Load(); n != 0 {
		t.Fatalf("%d objects left", n)
	}
	if _, open := <-f.dev.AsyncEvents(); open {
		t.Fatal("the event channel is open after Close")
	}
}

// TestCompletionEventAfterAck: the completion event of a receive is
// delivered after the ACK of the message has left. A program woken by
// the event answers at once; delivered in the middle of the batch, the
// event let the answer leave before the ACK, and the peer completed its
// receive before its send.
func TestCompletionEventAfterAck(t *testing.T) {
	ta, tb := udpPair(t)
	var sentAtEvent atomic.Uint64
	events := make(chan verbs.CQ, 1)
	var bdev atomic.Pointer[Device]
	ch := verbs.NewCompChannelFunc(func(cq verbs.CQ) {
		sentAtEvent.Store(bdev.Load().Counters.SentPkts.Load())
		events <- cq
	})
	ob := realOpts()
	ob.recvEvents = ch
	a, b := newNodeWith(t, Config{Transport: ta}, realOpts()), newNodeWith(t, Config{Transport: tb}, ob)
	bdev.Store(b.dev)
	a.peer, b.peer = b, a
	connect(t, a, b, realOpts())
	connect(t, b, a, ob)
	for i := range 20 {
		b.postRecv(uint64(i), 0, 64)
		must(t, b.rcq.ReqNotify(false))
		before := b.dev.Counters.SentPkts.Load()
		a.post(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 64)}})
		select {
		case cq := <-events:
			if cq != b.rcq {
				t.Fatalf("event for %v, want the receive CQ", cq)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no completion event in 5 s")
		}
		if got := sentAtEvent.Load(); got == before {
			t.Fatalf("message %d: the event came before the responder sent anything (sent_pkts %d): its ACK had not left", i, got)
		}
		expectWC(t, b.waitWC(b.rcq), uint64(i), verbs.WCSuccess, verbs.WCRecv)
		expectWC(t, a.waitWC(a.scq), uint64(i), verbs.WCSuccess, verbs.WCSend)
	}
}
