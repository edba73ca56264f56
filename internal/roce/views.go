package roce

// What the responder and the completer see of their QP.
//
// Neither role is handed the *QP. The QP keeps a view for each: the few
// attributes and resources the role reads, and a narrow interface for the
// one thing it cannot do itself and that only the QP can, because it
// involves the QP's other roles:
//
//	responder ── respQP: receive resources (recvRes), access flags,
//	             min_rnr_timer, whether payloads may be gathered
//	             └─ answerTx: an answer packet on the QP's transmit queue,
//	                in order with the requester's packets, flushed,
//	                staged or backlogged with them
//	completer ── compQP: the send queue, the counters, the QP's state,
//	             timeout and retry budgets, MTU, QPN
//	             └─ sendRetirer: retire the oldest WQE into the send CQ
//	                (also ends a keepalive probe and signals an SQ drain)
//
// The views live in the QP and are rebuilt whenever what they copy
// changes (refreshViewsLocked: CreateQP, every Modify, SecureQP), so a
// packet costs no copying; the QP's state, which changes without a Modify,
// is read through a pointer. What a role must have the QP do afterwards
// comes back as its result (respResult, compResult).

import (
	"sync/atomic"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// answerTx is the transmit path of the responder's answers (ACKs, NAKs,
// READ responses, atomic ACKs): packets to the QP's peer, queued behind
// the QP's earlier packets. *QP implements it. Precondition of both
// methods: the QP's mu held.
type answerTx interface {
	// answerLocked appends an answer packet with opcode op and PSN psn
	// and room for payloadLen bytes of payload, as newPacketLocked does.
	answerLocked(op wire.Opcode, psn wire.PSN, payloadLen int) []byte
	// answerGatherLocked appends an answer whose payload stays in mr, as
	// newGatherPacketLocked does (the caller has pinned mr).
	answerGatherLocked(op wire.Opcode, psn wire.PSN, payload []byte, mr *MR) []byte
}

func (qp *QP) answerLocked(op wire.Opcode, psn wire.PSN, payloadLen int) []byte {
	bth := wire.BTHFields{PSN: psn, DestQP: qp.attr.DestQPNum}
	return qp.newPacketLocked(qp.route(), op, &bth, payloadLen)
}

func (qp *QP) answerGatherLocked(op wire.Opcode, psn wire.PSN, payload []byte, mr *MR) []byte {
	bth := wire.BTHFields{PSN: psn, DestQP: qp.attr.DestQPNum}
	return qp.newGatherPacketLocked(qp.route(), op, &bth, payload, mr)
}

// views are the roles' views of one QP.
type views struct {
	resp respQP
	comp compQP
}

// refreshViewsLocked rebuilds the views from the QP. Precondition: the
// QP's mu held (or the QP not yet published).
func (qp *QP) refreshViewsLocked() {
	qp.views = views{resp: qp.respQP(), comp: qp.compQP()}
}

// respQP is what the responder's steps use of their QP.
type respQP struct {
	recvRes          // receive queue or SRQ, PD, receive CQ, QPN, MTU, Q_Key, counters
	tx      answerTx // where answers go
	rc      bool     // an RC QP (UC runs the same steps without answers)
	access  verbs.Access
	minRNR  uint8 // min_rnr_timer, for RNR NAKs
	// gather: READ responses may leave their payload in the MR for the
	// transport to gather (transport.Gatherer; not with packet
	// protection, which seals the payload with the headers).
	gather bool
}

// respQP builds the QP's view for the responder.
func (qp *QP) respQP() respQP {
	return respQP{
		recvRes: *qp.recvRes(),
		tx:      qp,
		rc:      qp.typ == verbs.QPTypeRC,
		access:  qp.attr.QPAccessFlags,
		minRNR:  qp.attr.MinRNRTimer,
		gather:  qp.dev.gather && qp.sec == nil,
	}
}

// sendRetirer completes the oldest WQE of a send queue into the send CQ.
// *QP implements it (completeSendLocked). Precondition: the QP's mu held.
type sendRetirer interface {
	completeSendLocked(w *sendWQE, st verbs.WCStatus)
}

// compQP is what the completer's steps use of their QP.
type compQP struct {
	sq      *sendQueue
	c       *Counters
	retirer sendRetirer
	state   *atomic.Uint32 // the QP's verbs.QPState
	// The QP's local ACK timeout (IBTA's code) and the retry budgets a
	// forward step restores.
	timeout, retryCnt, rnrRetry uint8
	pmtu                        int
	qpn                         uint32
}

// stateNow is the QP's state.
func (q *compQP) stateNow() verbs.QPState { return verbs.QPState(q.state.Load()) }

// compQP builds the QP's view for the completer.
func (qp *QP) compQP() compQP {
	return compQP{
		sq:       &qp.sq,
		c:        &qp.dev.Counters,
		retirer:  qp,
		state:    &qp.state,
		timeout:  qp.attr.Timeout,
		retryCnt: qp.attr.RetryCnt,
		rnrRetry: qp.attr.RNRRetry,
		pmtu:     qp.pmtu,
		qpn:      qp.qpn,
	}
}
