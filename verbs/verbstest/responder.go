package verbstest

import (
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// A one-sided request the responder refuses fails both ends (IBTA
// 9.7.5.2.8, rxe's RESPST_ERR_RKEY_VIOLATION and RESPST_ERR_UNSUPPORTED_OPCODE):
// the requester's WQE completes with the NAK's status, and the responder's
// QP moves to ERR with QP_ACCESS_ERR (rkey, PD, region access, bounds) or
// QP_REQ_ERR (an access the QP's own flags refuse). These cases also
// refuse an access after an earlier one to the same region succeeded, so
// a provider that keeps what it learnt of a region between requests must
// still fail the responder's QP.

func init() {
	register(
		testCase{"status/remote invalid request: a WRITE the responder QP's access flags refuse", testRemInvQPAccess},
		testCase{"status/remote access: a READ past the end after a WRITE to the region", testRemAccessBoundsAfterUse},
		testCase{"status/remote access: an atomic on a region without remote atomic after a WRITE to it", testRemAccessPermAfterUse},
		testCase{"status/remote access: a WRITE past the end of a registered Go buffer", testRemAccessBoundsRegMR},
	)
}

// responderFails posts wr on a, checks the requester's status st, its QP in
// ERR, and, unless the provider lacks ResponderAccessEvents, the
// responder's QP in ERR with ev.
func responderFails(t *testing.T, p *Pair, a, b *side, wr verbs.SendWR, st verbs.WCStatus, ev verbs.AsyncEventType) {
	t.Helper()
	var evs <-chan verbs.AsyncEvent
	if _, lacks := p.Lacks[ResponderAccessEvents]; !lacks {
		evs = b.events()
	}
	a.post(wr)
	a.expect(a.scq, wr.WRID, st)
	a.errored(wr.WRID + 1)
	if evs != nil {
		if e := b.event(evs, ev); e.QP == nil || e.QP.QPNum() != b.qp.QPNum() {
			t.Errorf("%v names %v; want the responder's QP %#x", ev, e.QP, b.qp.QPNum())
		}
		if s := b.qp.State(); s != verbs.QPStateErr {
			t.Errorf("responder QP after the refused request: %v; want ERR", s)
		}
	}
}

// written does one WRITE of 64 bytes to the start of b's region.
func written(a, b *side) {
	a.t.Helper()
	a.post(verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.sge(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	a.expect(a.scq, 9, verbs.WCSuccess)
}

func testRemInvQPAccess(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{qpAccess: verbs.AccessLocalWrite | verbs.AccessRemoteRead})
	responderFails(t, p, a, b, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.sge(0, 64)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}, verbs.WCRemInvReqErr, verbs.EventQPReqErr)
}

func testRemAccessBoundsAfterUse(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	written(a, b)
	responderFails(t, p, a, b, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{a.sge(0, 64)},
		RemoteAddr: b.mr.Addr() + bufLen - 32, RKey: b.mr.RKey()}, verbs.WCRemAccessErr, verbs.EventQPAccessErr)
}

func testRemAccessPermAfterUse(t *testing.T, p *Pair) {
	p.need(t, Atomics)
	a, b := connect(t, p, opts{mrAccess: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead})
	written(a, b)
	responderFails(t, p, a, b, verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{a.sge(0, 8)},
		RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 1}, verbs.WCRemAccessErr, verbs.EventQPAccessErr)
}

func testRemAccessBoundsRegMR(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	mr, err := b.pd.RegMR(make([]byte, 4096), fullAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	a.post(verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.sge(0, 64)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()})
	a.expect(a.scq, 9, verbs.WCSuccess)
	responderFails(t, p, a, b, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.sge(0, 64)},
		RemoteAddr: mr.Addr() + 4096 - 32, RKey: mr.RKey()}, verbs.WCRemAccessErr, verbs.EventQPAccessErr)
}
