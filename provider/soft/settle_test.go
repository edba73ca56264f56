package soft

import (
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// TestSettleQPSendsStagedAck: a receive batch took the ACK of b's last
// SEND to send (staged: b's QP no longer owes it) when b disconnects.
// Moving the QP to ERR cannot send it; SettleQP, which cm calls before
// the DREQ leaves, must, so that the DREQ follows the ACK.
func TestSettleQPSendsStagedAck(t *testing.T) {
	a, b, bl := deferredAckPair(t, Config{}) // nothing but b's calls sends b's ACKs
	b.postRecv(7)
	a.send(1)
	expectWC(t, b.busyPoll(b.rcq, nil, "b did not receive the SEND"), 7, verbs.WCSuccess, verbs.WCRecv)
	before := bl.acksOut.Load()
	// As a receive batch of another goroutine does first: the waiting
	// ACK goes into the batch's stage, sent at the batch's end.
	b.dev.rxMu.Lock()
	b.dev.rx.StageDeferredAcks()
	b.dev.rxMu.Unlock()
	must(t, b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState))
	if n := bl.acksOut.Load() - before; n != 0 {
		t.Fatalf("%d ACKs left before SettleQP: the test shows nothing", n)
	}
	b.dev.SettleQP(b.qp)
	if n := bl.acksOut.Load() - before; n != 1 {
		t.Fatalf("%d ACKs left by the time SettleQP returned; want the staged one", n)
	}
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCSend)
}

// TestSettleQPReceives: what waits in the transport when SettleQP is
// called is processed by the time it returns (cm settles before it ends
// a connection on a DREQ: an ACK in the socket beside it counts).
func TestSettleQPReceives(t *testing.T) {
	a, b, _ := deferredAckPair(t, Config{}) // b's loop is aside: only b's calls receive
	b.postRecv(7)
	before := counter(b.dev, "sent_pkts")
	a.send(1)
	// b sends nothing but the SEND's ACK, which the processing of the
	// SEND in SettleQP sends at once.
	realWait(t, func() bool {
		b.dev.SettleQP(b.qp)
		return counter(b.dev, "sent_pkts") != before
	}, "SettleQP did not receive the SEND")
	var wc [1]verbs.WC
	if n, err := b.rcq.Poll(wc[:]); err != nil || n != 1 {
		t.Fatalf("b's receive CQ: %d completions, %v", n, err)
	}
	expectWC(t, wc[0], 7, verbs.WCSuccess, verbs.WCRecv)
}
