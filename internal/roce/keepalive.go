package roce

// Keepalive: an idle RC connection finds out that its peer is gone.
//
// A QP that sends nothing has no ACK timer running, so a peer that died
// (its process killed, its host down, the path cut) would go unnoticed
// for ever. An RC QP in RTS with an empty send queue that has heard
// nothing from its peer for Config.Keepalive sends a probe:
//
//	timer (lastHeard + Keepalive) ──► onTimer ──► keepaliveLocked:
//	      still idle and silent? ──► a hidden zero-length RDMA WRITE
//	      at the tail of the send queue ──► the requester sends it like
//	      any WQE: AckReq, the local ACK timer, retry_cnt retries
//	ACK ──► the completer retires it, posting no completion
//	retries used up ──► the QP goes to ERR (WCRetryExcErr for the probe,
//	      flushes for the rest) and raises EventQPFatal, since the
//	      probe's failure has no completion of its own to say so
//
// A zero-length RDMA WRITE needs no rkey and touches no memory (IBTA
// C9-88: a zero-length RDMA operation need not carry a valid address or
// R_Key; rxe's check_rkey skips it). Sent with a new PSN it would still
// be refused by a QP that grants no remote write (rxe's check_op_valid:
// an invalid request, and both QPs go to ERR), so the probe carries the
// last acknowledged PSN instead: a duplicate, which every responder
// acknowledges again before it looks at access (keepaliveLocked). A
// softrdma responder that has had no request yet answers that one
// duplicate too (responder.onDuplicateLocked).
// Any packet from the peer (a request, an ACK, a response) counts as
// hearing from it, so a busy connection never probes. The worst-case
// detection time of a dead peer is Keepalive plus the retries: about
// Keepalive + (retry_cnt + 1) × local ACK timeout × 1.25 (jitter).

import (
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// DefaultKeepalive is Config.Keepalive's default. With rdma_cm's QP
// settings (local ACK timeout code 19, about 2.1 s, and retry_cnt 7) a dead
// peer is found within about 5 s + 8 × 2.7 s ≈ 27 s.
const DefaultKeepalive = 5 * time.Second

// keepaliveAtLocked returns when the QP must probe its peer if nothing is
// heard before, or the zero time if it probes nothing: keepalive off, not
// an RC QP in RTS, or work in flight (its ACK timer watches the peer).
func (qp *QP) keepaliveAtLocked() time.Time {
	ka := qp.dev.keepalive
	if ka <= 0 || qp.typ != verbs.QPTypeRC || qp.stateLocked() != verbs.QPStateRTS ||
		qp.sq.head != qp.sq.tail || qp.lastHeard.IsZero() {
		return time.Time{}
	}
	return qp.lastHeard.Add(ka)
}

// heardLocked records that a packet from the peer arrived at now.
func (qp *QP) heardLocked(now time.Time) {
	if now.After(qp.lastHeard) {
		qp.lastHeard = now
	}
}

// keepaliveLocked sends a probe if the QP is idle and its peer silent for
// the keepalive interval at now.
func (qp *QP) keepaliveLocked(now time.Time) {
	at := qp.keepaliveAtLocked()
	if at.IsZero() || now.Before(at) {
		return
	}
	// The probe repeats the last acknowledged PSN (with everything
	// acknowledged, the one before the next): a responder answers a
	// duplicate WRITE with an ACK (IBTA C9-105) before it checks the
	// QP's access (rxe's check_psn comes before check_op_valid), so the
	// probe reaches a QP that grants no remote write too, and nothing
	// is executed. The requester and the completer step back over that
	// PSN as if it had never been sent; sending the probe moves them on
	// again.
	if p := qp.req.psn; qp.comp.psn == p && qp.req.maxPSN == p {
		p0 := p.Add(^uint32(0))
		qp.req.psn, qp.req.maxPSN, qp.comp.psn = p0, p0, p0
	}
	q := &qp.sq
	q.reserve() // a probe may take one slot beyond Cap.MaxSendWR
	w := q.at(q.tail)
	w.wrID, w.opcode, w.flags, w.signaled = 0, verbs.WRRDMAWrite, 0, false
	w.imm, w.invRKey, w.raddr, w.rkey, w.cmpAdd, w.swap = 0, 0, 0, 0, 0, 0
	w.sgl.reset()
	w.inline = w.inline[:0]
	w.isInline, w.length, w.status, w.probe = false, 0, verbs.WCSuccess, true
	w.started = false
	q.tail++
	q.probes++
	qp.dev.Counters.KeepaliveProbes.Add(1)
	qp.runRequesterLocked(now)
}

// retireProbeLocked accounts for a probe leaving the send queue with
// status st; a probe that failed on its own (not flushed) says so with
// EventQPFatal, as it posts no completion.
func (qp *QP) retireProbeLocked(st verbs.WCStatus) {
	qp.sq.probes--
	if st != verbs.WCSuccess && st != verbs.WCWRFlushErr {
		qp.dev.Counters.KeepaliveFailures.Add(1)
		qp.dev.Event(verbs.AsyncEvent{Type: verbs.EventQPFatal, QP: qp})
	}
}

// clearProbesLocked forgets the probes of a QP going back to RESET, whose
// send queue is emptied without completions: their slots are the
// application's again.
func (qp *QP) clearProbesLocked() {
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		qp.sq.at(i).probe = false
	}
}
