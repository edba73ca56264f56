package verbstest

import (
	"testing"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// Completion statuses: each error a work request can meet, the status
// each side reports, and what follows (IBTA 10.8.3; rxe's completer and
// responder map NAK syndromes to these statuses one to one).

func init() {
	register(
		testCase{"status/local length: a SEND longer than the receive", testLocLen},
		testCase{"status/local protection: an unknown lkey", testLocProtKey},
		testCase{"status/local protection: an SGE past the end of its MR", testLocProtBounds},
		testCase{"status/local protection: a READ into memory without local write", testLocProtWrite},
		testCase{"status/local protection: an lkey of another PD", testLocProtPD},
		testCase{"status/remote access: a WRITE with an unknown rkey", testRemAccessKey},
		testCase{"status/remote access: a WRITE past the end of the region", testRemAccessBounds},
		testCase{"status/remote access: a READ of a region without remote read", testRemAccessPerm},
		testCase{"status/remote access: an rkey of another PD", testRemAccessPD},
		testCase{"status/remote access: an rkey after DeregMR", testRemAccessDereg},
		testCase{"status/remote invalid request: SEND_WITH_INV of a registered region's rkey", testSendInv},
		testCase{"status/RNR retry exceeded: a SEND with no receive posted", testRNR},
		testCase{"status/WR flush: the work requests after an error", testFlushAfterError},
	)
}

// errored checks that s's QP went to the error state after a failed
// request: the next request flushes.
func (s *side) errored(id uint64) {
	s.t.Helper()
	if st := s.qp.State(); st != verbs.QPStateErr {
		s.t.Errorf("QP state after the error: %v; want ERR", st)
	}
	s.post(verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{s.sge(0, 8)}})
	s.expect(s.scq, id, verbs.WCWRFlushErr)
}

func testLocLen(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	var evs <-chan verbs.AsyncEvent
	_, noEvents := p.Lacks[QPEvents]
	_, noLengthEvent := p.Lacks[LengthErrEvent]
	if !noEvents && !noLengthEvent {
		evs = b.events()
	}
	b.recv(5, 0, 16)
	b.recv(6, 16, 16)
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(0, 64)}})
	// The responder completes the receive with the local error and NAKs
	// the request as invalid (rxe: RESPST_ERR_LENGTH).
	a.expectStatus(a.scq, 1, verbs.WCRemInvReqErr, LengthNAKStatus)
	b.expectStatus(b.rcq, 5, verbs.WCLocLenErr, LengthNAKStatus)
	b.expect(b.rcq, 6, verbs.WCWRFlushErr)
	a.errored(2)
	if evs != nil {
		if e := b.event(evs, verbs.EventQPReqErr); e.QP == nil || e.QP.QPNum() != b.qp.QPNum() {
			t.Errorf("QP_REQ_ERR names %v; want the responder's QP %#x", e.QP, b.qp.QPNum())
		}
	}
}

func testLocProtKey(t *testing.T, p *Pair) {
	a, _ := connect(t, p, opts{})
	sge := a.sge(0, 8)
	sge.LKey ^= 0x5A5A5A5A
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{sge}})
	a.expectStatus(a.scq, 1, verbs.WCLocProtErr, LocalKeyStatus)
	a.errored(2)
}

func testLocProtBounds(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.sge(bufLen-8, 16)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	a.expect(a.scq, 1, verbs.WCLocProtErr)
	a.errored(2)
}

func testLocProtWrite(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	ro, err := a.pd.RegMR(make([]byte, 4096), verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Dereg()
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{ro.SGE(0, 64)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	a.expect(a.scq, 1, verbs.WCLocProtErr)
}

func testLocProtPD(t *testing.T, p *Pair) {
	a, _ := connect(t, p, opts{})
	pd2, err := p.A.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd2.Dealloc()
	other, err := pd2.AllocMR(4096, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Dereg()
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{other.SGE(0, 8)}})
	a.expectStatus(a.scq, 1, verbs.WCLocProtErr, LocalKeyStatus)
}

// remoteFails posts a WRITE (or READ) with the given rkey and address and
// checks the requester's WCRemAccessErr and, unless the provider lacks
// ResponderAccessEvents, the responder's QP in ERR with QP_ACCESS_ERR.
func remoteFails(t *testing.T, p *Pair, a, b *side, op verbs.WROpcode, addr uint64, rkey uint32) {
	t.Helper()
	var evs <-chan verbs.AsyncEvent
	if _, lacks := p.Lacks[ResponderAccessEvents]; !lacks {
		evs = b.events()
	}
	a.post(verbs.SendWR{WRID: 1, Opcode: op, SGList: []verbs.SGE{a.sge(0, 64)}, RemoteAddr: addr, RKey: rkey})
	a.expect(a.scq, 1, verbs.WCRemAccessErr)
	a.errored(2)
	if evs != nil {
		if e := b.event(evs, verbs.EventQPAccessErr); e.QP == nil || e.QP.QPNum() != b.qp.QPNum() {
			t.Errorf("QP_ACCESS_ERR names %v; want the responder's QP %#x", e.QP, b.qp.QPNum())
		}
		if st := b.qp.State(); st != verbs.QPStateErr {
			t.Errorf("responder QP after the access error: %v; want ERR", st)
		}
	}
}

func testRemAccessKey(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	remoteFails(t, p, a, b, verbs.WRRDMAWrite, b.mr.Addr(), b.mr.RKey()^0x00FF00FF)
}

func testRemAccessBounds(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	remoteFails(t, p, a, b, verbs.WRRDMAWrite, b.mr.Addr()+bufLen-32, b.mr.RKey())
}

func testRemAccessPerm(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{mrAccess: verbs.AccessLocalWrite | verbs.AccessRemoteWrite})
	remoteFails(t, p, a, b, verbs.WRRDMARead, b.mr.Addr(), b.mr.RKey())
}

func testRemAccessPD(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	pd2, err := p.B.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd2.Dealloc()
	other, err := pd2.AllocMR(4096, fullAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Dereg()
	remoteFails(t, p, a, b, verbs.WRRDMAWrite, other.Addr(), other.RKey())
}

func testRemAccessDereg(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	mr2, err := b.pd.AllocMR(4096, fullAccess)
	if err != nil {
		t.Fatal(err)
	}
	addr, rkey := mr2.Addr(), mr2.RKey()
	// The key works, then stops working when the region is deregistered.
	a.post(verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.sge(0, 64)}, RemoteAddr: addr, RKey: rkey})
	a.expect(a.scq, 9, verbs.WCSuccess)
	if err := mr2.Dereg(); err != nil {
		t.Fatal(err)
	}
	remoteFails(t, p, a, b, verbs.WRRDMAWrite, addr, rkey)
}

// testSendInv: IBTA 10.6.7 (o10-37) lets SEND_WITH_INV invalidate memory
// windows and fast-registered regions only; rxe refuses a region from
// ibv_reg_mr ("mr type is not MEM_REG"). The SEND fails as an invalid
// request and the region stays usable through its rkey.
func testSendInv(t *testing.T, p *Pair) {
	p.need(t, SendInvRefused)
	a, b := connect(t, p, opts{})
	b.recv(5, 0, 64)
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithInv, InvalidateRKey: b.mr.RKey(), SGList: []verbs.SGE{a.sge(0, 8)}})
	a.expect(a.scq, 1, verbs.WCRemInvReqErr)
	if st := b.qp.State(); st != verbs.QPStateErr {
		t.Errorf("responder QP after the invalid request: %v; want ERR", st)
	}
	// The region still answers to its rkey, on a new QP of its PD.
	qp2, err := b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.scq, RecvCQ: b.rcq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp2.Destroy()
	c := newSide(t, p, p.A, opts{}, false)
	e2 := cm.Endpoint{QPN: qp2.QPNum(), PSN: 77, GID: b.gid}
	prm := p.params(opts{})
	if err := cm.Connect(c.qp, c.endpoint(5), e2, prm); err != nil {
		t.Fatal(err)
	}
	if err := cm.Connect(qp2, e2, c.endpoint(5), prm); err != nil {
		t.Fatal(err)
	}
	c.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{c.sge(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	c.expect(c.scq, 2, verbs.WCSuccess)
}

func testRNR(t *testing.T, p *Pair) {
	a, _ := connect(t, p, opts{rnrRetry: 1, rnrRetrySet: true})
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(0, 8)}})
	a.expect(a.scq, 1, verbs.WCRNRRetryExcErr)
	a.errored(2)
}

func testFlushAfterError(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	// Receives posted before the error flush, in order, with their wr_ids.
	for i := uint64(0); i < 3; i++ {
		a.recv(100+i, int(i)*64, 64)
	}
	sge := a.sge(0, 8)
	sge.LKey ^= 0x5A5A5A5A
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{sge}})
	a.expectStatus(a.scq, 1, verbs.WCLocProtErr, LocalKeyStatus)
	for i := uint64(0); i < 3; i++ {
		if w := a.expect(a.rcq, 100+i, verbs.WCWRFlushErr); w.QPNum != a.qp.QPNum() {
			t.Errorf("flushed receive names QP %#x; want %#x", w.QPNum, a.qp.QPNum())
		}
	}
	// Receives posted in ERR flush too.
	p.need(t, FlushPostedInErr)
	a.recv(200, 0, 8)
	a.expect(a.rcq, 200, verbs.WCWRFlushErr)
	_ = b
}
