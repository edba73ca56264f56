package verbstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// The objects' own rules: registration arguments, CQ notification and
// overrun, the SRQ limit, address handles, and teardown.

func init() {
	register(
		testCase{"mr/access flags and length are checked", testMRArgs},
		testCase{"cq/size is checked", testCQArgs},
		testCase{"cq/ReqNotify without a channel is refused", testNotifyNoChannel},
		testCase{"cq/ReqNotify delivers one event per arming", testNotify},
		testCase{"cq/overrun raises CQ_ERR, fails one poll, then recovers", testCQOverrun},
		testCase{"srq/the limit is armed by Modify only and fires once", testSRQLimit},
		testCase{"srq/Modify checks its attributes", testSRQModify},
		testCase{"srq/a QP on an SRQ that goes to ERR raises LAST_WQE_REACHED", testLastWQE},
		testCase{"ah/an AH needs a global route", testAH},
		testCase{"teardown/objects in use refuse to go", testTeardownInUse},
		testCase{"teardown/use after destroy fails with ErrDestroyed", testUseAfterDestroy},
		testCase{"teardown/Close releases what the application left", testCloseReleases},
	)
}

func testMRArgs(t *testing.T, p *Pair) {
	pd, err := p.A.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	for _, c := range []struct {
		name   string
		access verbs.Access
		n      int
	}{
		{"remote write without local write", verbs.AccessRemoteWrite, 64},
		{"remote atomic without local write", verbs.AccessRemoteAtomic, 64},
		{"unknown access bits", verbs.AccessLocalWrite | 1<<20, 64},
		{"zero length", verbs.AccessLocalWrite, 0},
	} {
		_, err := pd.AllocMR(c.n, c.access)
		isErr(t, "AllocMR: "+c.name, err, verbs.ErrInvalidArgument)
		_, err = pd.RegMR(make([]byte, c.n), c.access)
		isErr(t, "RegMR: "+c.name, err, verbs.ErrInvalidArgument)
	}
	// Remote read alone needs no local write.
	mr, err := pd.RegMR(make([]byte, 64), verbs.AccessRemoteRead)
	if err != nil {
		t.Fatalf("RegMR with remote read only: %v", err)
	}
	if mr.Len() != 64 || mr.Access() != verbs.AccessRemoteRead || mr.LKey() == 0 && mr.RKey() == 0 {
		t.Errorf("MR len %d access %v keys %#x/%#x", mr.Len(), mr.Access(), mr.LKey(), mr.RKey())
	}
	if sge := mr.SGE(8, 16); sge.Addr != mr.Addr()+8 || sge.Length != 16 || sge.LKey != mr.LKey() {
		t.Errorf("SGE(8, 16) = %+v", sge)
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
}

func testCQArgs(t *testing.T, p *Pair) {
	for _, n := range []int{0, -1, 1 << 30} {
		if cq, err := p.A.CreateCQ(n, nil); err == nil {
			cq.Destroy()
			t.Errorf("CreateCQ(%d) succeeded", n)
		} else {
			isErr(t, "CreateCQ", err, verbs.ErrInvalidArgument)
		}
	}
	cq, err := p.A.CreateCQ(10, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	if cq.CQE() < 10 {
		t.Errorf("CQE() = %d; want at least 10", cq.CQE())
	}
}

// testNotifyNoChannel: rxe accepts ibv_req_notify_cq on a CQ without a
// channel, and the event goes nowhere; softrdma says so with an error.
func testNotifyNoChannel(t *testing.T, p *Pair) {
	cq, err := p.A.CreateCQ(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	isErr(t, "ReqNotify on a CQ without a channel", cq.ReqNotify(false), verbs.ErrInvalidState)
}

func testNotify(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{channel: true})
	if err := b.rcq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	send := func(id uint64) {
		b.recv(id, 0, 64)
		a.post(verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(0, 8)}})
		a.expect(a.scq, id, verbs.WCSuccess)
	}
	send(1)
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout())
	defer cancel()
	cq, err := b.comp.GetEvent(ctx)
	if err != nil {
		t.Fatalf("no event after an armed completion: %v", err)
	}
	if cq != b.rcq {
		t.Errorf("event for %v; want the receive CQ", cq)
	}
	b.expect(b.rcq, 1, verbs.WCSuccess)
	// Not armed again: the next completion delivers no event.
	send(2)
	b.expect(b.rcq, 2, verbs.WCSuccess)
	select {
	case cq := <-b.comp.C():
		t.Errorf("event for %v without ReqNotify", cq)
	case <-time.After(20 * time.Millisecond):
	}
	// A solicited-only arming ignores an unsolicited completion and
	// takes a solicited one.
	if err := b.rcq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	send(3)
	b.expect(b.rcq, 3, verbs.WCSuccess)
	select {
	case <-b.comp.C():
		t.Error("a solicited-only arming fired on an unsolicited receive")
	case <-time.After(20 * time.Millisecond):
	}
	b.recv(4, 0, 64)
	a.post(verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, SendFlags: verbs.SendSolicited, SGList: []verbs.SGE{a.sge(0, 8)}})
	a.expect(a.scq, 4, verbs.WCSuccess)
	if _, err := b.comp.GetEvent(ctx); err != nil {
		t.Fatalf("no event for a solicited receive: %v", err)
	}
}

// testCQOverrun: a completion that finds the CQ full is lost. As rxe
// does, a loss raises CQ_ERR (softrdma's providers raise it for the first
// loss of an overrun, rxe for each); the CQ then reports the loss on the
// next Poll, once, and works on.
func testCQOverrun(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{sendCQE: 2})
	var evs <-chan verbs.AsyncEvent
	if _, lacks := p.Lacks[AsyncEvents]; !lacks {
		evs = a.events()
	}
	n := a.scq.CQE() + 2
	for i := 0; i < n; i++ {
		b.recv(uint64(i), 0, 64)
	}
	for i := 0; i < n; i++ {
		a.post(verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(0, 8)}})
	}
	for i := 0; i < n; i++ {
		b.expect(b.rcq, uint64(i), verbs.WCSuccess) // every send was delivered...
	}
	if evs != nil {
		if e := a.event(evs, verbs.EventCQErr); e.CQ != a.scq {
			t.Errorf("CQ_ERR names %v; want the send CQ", e.CQ)
		}
		// rxe raises CQ_ERR for every completion it loses, not once per
		// overrun: take the rest of this overrun's events before the Poll
		// that reports it, or a late one would report it again.
		quiet := time.NewTimer(200 * time.Millisecond)
		for drained := false; !drained; {
			select {
			case e, ok := <-evs:
				if !ok {
					t.Fatal("the event channel closed while the overrun's events were taken")
				}
				if e.Type == verbs.EventCQErr {
					t.Logf("another CQ_ERR for the same overrun (one per lost completion)")
				}
				quiet.Reset(200 * time.Millisecond)
			case <-quiet.C:
				drained = true
			}
		}
	} else {
		time.Sleep(50 * time.Millisecond) // ...and the requester saw every ACK
	}
	wc := make([]verbs.WC, n)
	got, err := a.scq.Poll(wc)
	if !errors.Is(err, verbs.ErrQueueFull) {
		t.Fatalf("Poll after an overrun: %d completions, error %v; want the overrun reported (ErrQueueFull)", got, err)
	}
	if got != a.scq.CQE() {
		t.Errorf("Poll after an overrun returned %d completions; want the %d the CQ held", got, a.scq.CQE())
	}
	// The overrun is reported once. The event can come before the
	// requester has retired the last SENDs (their ACK may come later):
	// those complete into the recovered CQ, before what is posted next.
	late := func(w verbs.WC) bool { return w.WRID < uint64(n) && w.Status == verbs.WCSuccess }
	got, err = a.scq.Poll(wc)
	if err != nil {
		t.Fatalf("the second Poll after an overrun: %v; want nil (reported once)", err)
	}
	for _, w := range wc[:got] {
		if !late(w) {
			t.Fatalf("the second Poll after an overrun returned %+v; want nothing but late completions of the SENDs", w)
		}
	}
	// The CQ works on.
	b.recv(99, 0, 64)
	a.post(verbs.SendWR{WRID: 99, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(0, 8)}})
	for {
		w := a.wc(a.scq)
		if w.WRID == 99 && w.Status == verbs.WCSuccess {
			break
		}
		if !late(w) {
			t.Fatalf("completion: wr_id %d status %v; want wr_id 99 (after late SENDs) status success", w.WRID, w.Status)
		}
	}
}

func testSRQLimit(t *testing.T, p *Pair) {
	p.need(t, SRQ)
	a, b := connect(t, p, opts{srq: true, srqWR: 16})
	evs := b.events()
	// A limit given at creation does not arm (IBTA; ibv_create_srq(3)).
	s2, err := b.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1, SRQLimit: 4})
	if err != nil {
		t.Fatal(err)
	}
	if attr, _ := s2.Query(); attr.SRQLimit != 0 {
		t.Errorf("a new SRQ's limit is %d; want 0 (not armed)", attr.SRQLimit)
	}
	s2.Destroy()

	for i := uint64(0); i < 8; i++ {
		b.recv(i, int(i)*64, 64)
	}
	if err := b.srq.Modify(&verbs.SRQAttr{SRQLimit: 6}, verbs.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	if attr, _ := b.srq.Query(); attr.SRQLimit != 6 || attr.MaxWR < 16 {
		t.Errorf("Query: limit %d max_wr %d; want 6, ≥16", attr.SRQLimit, attr.MaxWR)
	}
	send := func(id uint64) {
		a.post(verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(0, 8)}})
		a.expect(a.scq, id, verbs.WCSuccess)
		b.expect(b.rcq, id, verbs.WCSuccess)
	}
	send(0)
	send(1) // 6 left: not below the limit
	select {
	case e := <-evs:
		if e.Type == verbs.EventSRQLimitReached {
			t.Fatal("SRQ_LIMIT_REACHED with 6 WQEs left and a limit of 6")
		}
	case <-time.After(20 * time.Millisecond):
	}
	send(2) // 5 left
	if e := b.event(evs, verbs.EventSRQLimitReached); e.SRQ != b.srq {
		t.Errorf("SRQ_LIMIT_REACHED names %v; want the SRQ", e.SRQ)
	}
	if attr, _ := b.srq.Query(); attr.SRQLimit != 0 {
		t.Errorf("after the event the limit is %d; want 0 (disarmed)", attr.SRQLimit)
	}
	send(3) // disarmed: no second event
	select {
	case e := <-evs:
		if e.Type == verbs.EventSRQLimitReached {
			t.Error("a second SRQ_LIMIT_REACHED without re-arming")
		}
	case <-time.After(20 * time.Millisecond):
	}
}

func testSRQModify(t *testing.T, p *Pair) {
	p.need(t, SRQ)
	pd, err := p.A.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	_, err = pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 0})
	isErr(t, "CreateSRQ with MaxWR 0", err, verbs.ErrInvalidArgument)
	srq, err := pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srq.Destroy()
	attr, _ := srq.Query()
	err = srq.Modify(&verbs.SRQAttr{SRQLimit: attr.MaxWR + 1}, verbs.SRQAttrLimit)
	isErr(t, "a limit above MaxWR", err, verbs.ErrInvalidArgument)
	err = srq.Modify(&verbs.SRQAttr{MaxWR: 64}, verbs.SRQAttrMaxWR)
	isErr(t, "resizing", err, verbs.ErrNotSupported)
	if err := srq.Modify(&verbs.SRQAttr{SRQLimit: 2}, verbs.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	if err := srq.Modify(&verbs.SRQAttr{SRQLimit: 0}, verbs.SRQAttrLimit); err != nil {
		t.Fatal(err)
	}
	if attr, _ := srq.Query(); attr.SRQLimit != 0 {
		t.Errorf("limit %d after setting 0; want 0 (disarmed)", attr.SRQLimit)
	}
}

func testAH(t *testing.T, p *Pair) {
	pd, err := p.A.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	peer, err := p.B.QueryGID(1, p.GIDIndex)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pd.CreateAH(nil)
	isErr(t, "CreateAH(nil)", err, verbs.ErrInvalidArgument)
	_, err = pd.CreateAH(&verbs.AHAttr{PortNum: 1, GRH: verbs.GlobalRoute{DGID: peer}})
	isErr(t, "CreateAH without IsGlobal", err, verbs.ErrInvalidArgument)
	ah, err := pd.CreateAH(&verbs.AHAttr{PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: peer, SGIDIndex: uint8(p.GIDIndex), HopLimit: 64}})
	if err != nil {
		t.Fatalf("CreateAH to the peer: %v", err)
	}
	if ah.Attr().GRH.DGID != peer {
		t.Errorf("Attr().GRH.DGID = %v; want %v", ah.Attr().GRH.DGID, peer)
	}
	isErr(t, "DeallocPD with an AH", pd.Dealloc(), verbs.ErrInUse)
	if err := ah.Destroy(); err != nil {
		t.Fatal(err)
	}
	isErr(t, "DestroyAH twice", ah.Destroy(), verbs.ErrDestroyed)
}

// testTeardownInUse: libibverbs returns EBUSY for a PD with objects, a CQ
// with QPs and an SRQ with QPs; destroying in order then succeeds.
func testTeardownInUse(t *testing.T, p *Pair) {
	p.need(t, SRQ)
	s := newSide(t, p, p.A, opts{}, true)
	isErr(t, "DeallocPD with objects", s.pd.Dealloc(), verbs.ErrInUse)
	isErr(t, "DestroyCQ with a QP", s.scq.Destroy(), verbs.ErrInUse)
	isErr(t, "DestroySRQ with a QP", s.srq.Destroy(), verbs.ErrInUse)
	steps := []struct {
		name string
		f    func() error
	}{
		{"DestroyQP", s.qp.Destroy}, {"DestroySRQ", s.srq.Destroy}, {"DeregMR", s.mr.Dereg},
		{"DestroyCQ", s.scq.Destroy}, {"DestroyCQ", s.rcq.Destroy}, {"DeallocPD", s.pd.Dealloc},
	}
	for _, st := range steps {
		if err := st.f(); err != nil {
			t.Fatalf("%s in order: %v", st.name, err)
		}
	}
	for _, st := range steps {
		isErr(t, st.name+" twice", st.f(), verbs.ErrDestroyed)
	}
}

func testUseAfterDestroy(t *testing.T, p *Pair) {
	p.need(t, SRQ)
	s := newSide(t, p, p.A, opts{}, true)
	sge := s.sge(0, 8)
	if err := s.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	isErr(t, "PostSend on a destroyed QP", s.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{sge}}), verbs.ErrDestroyed)
	isErr(t, "PostRecv on a destroyed QP", s.qp.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{sge}}), verbs.ErrDestroyed)
	isErr(t, "Modify on a destroyed QP", s.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState), verbs.ErrDestroyed)
	if err := s.srq.Destroy(); err != nil {
		t.Fatal(err)
	}
	isErr(t, "PostRecv on a destroyed SRQ", s.srq.PostRecv(&verbs.RecvWR{SGList: []verbs.SGE{sge}}), verbs.ErrDestroyed)
	isErr(t, "Modify on a destroyed SRQ", s.srq.Modify(&verbs.SRQAttr{SRQLimit: 1}, verbs.SRQAttrLimit), verbs.ErrDestroyed)
	if err := s.scq.Destroy(); err != nil {
		t.Fatal(err)
	}
	_, err := s.scq.Poll(make([]verbs.WC, 1))
	isErr(t, "Poll on a destroyed CQ", err, verbs.ErrDestroyed)
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout())
	defer cancel()
	isErr(t, "Wait on a destroyed CQ", s.scq.Wait(ctx), verbs.ErrDestroyed)
	isErr(t, "ReqNotify on a destroyed CQ", s.scq.ReqNotify(false), verbs.ErrDestroyed)
	// A QP cannot be created on a destroyed CQ.
	_, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.scq, RecvCQ: s.rcq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err == nil {
		t.Error("CreateQP on a destroyed CQ succeeded")
	}
	if err := s.mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := s.rcq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := s.pd.Dealloc(); err != nil {
		t.Fatal(err)
	}
	_, err = s.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	isErr(t, "RegMR on a deallocated PD", err, verbs.ErrDestroyed)
	_, err = s.pd.AllocMR(64, verbs.AccessLocalWrite)
	isErr(t, "AllocMR on a deallocated PD", err, verbs.ErrDestroyed)
	_, err = s.pd.CreateSRQ(&verbs.SRQInitAttr{MaxWR: 4})
	isErr(t, "CreateSRQ on a deallocated PD", err, verbs.ErrDestroyed)
	_, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.rcq, RecvCQ: s.rcq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err == nil {
		t.Error("CreateQP on a deallocated PD succeeded")
	}
}

// testCloseReleases: closing a kernel device's file releases what the
// application left (rxe's objects go with the uverbs file); the objects
// then answer ErrDestroyed and the peer can no longer reach the memory.
func testCloseReleases(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	b.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{b.sge(0, 8)}, RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()})
	b.expect(b.scq, 1, verbs.WCSuccess)
	if err := p.A.Close(); err != nil {
		t.Fatalf("Close with objects left: %v; want them released", err)
	}
	if err := p.A.Close(); err != nil {
		t.Errorf("second Close: %v; want nil", err)
	}
	isErr(t, "PostSend after Close", a.qp.PostSend(&verbs.SendWR{Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(0, 8)}}), verbs.ErrDestroyed)
	isErr(t, "DeregMR after Close", a.mr.Dereg(), verbs.ErrDestroyed)
	_, err := p.A.AllocPD()
	isErr(t, "AllocPD after Close", err, verbs.ErrDestroyed)
	_, err = p.A.CreateCQ(4, nil)
	isErr(t, "CreateCQ after Close", err, verbs.ErrDestroyed)
	b.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{b.sge(0, 8)}, RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()})
	if w := b.wc(b.scq); w.WRID != 2 || w.Status == verbs.WCSuccess {
		t.Errorf("a WRITE to a closed device's memory completed %+v; want an error", w)
	}
}

// testLastWQE: IBTA 11.6.3.1: a QP attached to an SRQ that enters the
// error state raises LAST_WQE_REACHED: it takes no more WQEs from the
// SRQ, which keeps the ones it holds for its other QPs.
func testLastWQE(t *testing.T, p *Pair) {
	p.need(t, SRQ)
	p.need(t, QPEvents)
	p.need(t, LastWQEEvent)
	a, b := connect(t, p, opts{srq: true})
	evs := b.events()
	b.recv(1, 0, 64)
	b.recv(2, 64, 64)
	if err := b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if e := b.event(evs, verbs.EventQPLastWQEReached); e.QP == nil || e.QP.QPNum() != b.qp.QPNum() {
		t.Errorf("LAST_WQE_REACHED names %v; want the QP %#x", e.QP, b.qp.QPNum())
	}
	b.quiet(b.rcq) // the SRQ's WQEs are not flushed: they belong to the SRQ
	_ = a
}
