package shm

import (
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// TestSettleQPRetiresConsumed: SettleQP completes the SENDs the peer's
// consumer index covers even when no progress pass looks at the QP (one
// that found the QP held skips it): cm calls it before it ends a
// connection on the peer's DREQ, so a SEND the peer took shows as taken.
func TestSettleQPRetiresConsumed(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	qa := a.qp.(*QP)
	qa.busy.Store(0) // no progress pass looks at a's QP, as if always held
	// The SEND first: b takes it only once its receive is posted, after
	// a's PostSend has looked at the consumer index for the last time.
	postSend(t, a.qp, verbs.SendWR{WRID: 10, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	postRecv(t, b.qp, 1, b.mr.SGE(0, 64))
	if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.WRID != 1 {
		t.Fatalf("b's receive: %+v", wc)
	}
	var wc [1]verbs.WC
	if n, _ := a.cq.Poll(wc[:]); n != 0 {
		t.Fatalf("a's SEND completed without a progress pass (%+v): the test shows nothing", wc[0])
	}
	b.dev.SettleQP(a.qp) // another device's QP: nothing
	if n, _ := a.cq.Poll(wc[:]); n != 0 {
		t.Fatalf("SettleQP on another device retired a's SEND: %+v", wc[0])
	}
	a.dev.SettleQP(a.qp)
	if n, _ := a.cq.Poll(wc[:]); n != 1 || wc[0].WRID != 10 || wc[0].Status != verbs.WCSuccess {
		t.Fatalf("after SettleQP: %d completions %+v; want the consumed SEND, successful", n, wc[0])
	}
}
