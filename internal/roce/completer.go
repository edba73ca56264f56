package roce

// The completer consumes what a responder sends back (IBTA 9.7.5.1):
//
//	ACK (PSN p)            ─► retire every SEND/WRITE WQE ending at or
//	                          before p; an ACK past a READ or atomic that has
//	                          no response yet means the responses were lost:
//	                          go back to it
//	READ response          ─► must be the next expected PSN of the oldest
//	                          WQE (a READ); data scattered at (PSN-first) ×
//	                          MTU; the LAST/ONLY retires it. A gap → go back
//	ATOMIC ACK             ─► original value into the local buffer; retire
//	NAK PSN sequence error ─► implicit ACK of p-1, go back to p
//	RNR NAK                ─► implicit ACK of p-1, wait the RNR time, resend
//	                          from p; rnr_retry (7 = forever) bounds it
//	NAK (access, invalid,
//	operational)           ─► the WQE fails with the matching status and the
//	                          QP moves to ERR, flushing the rest
//	local ACK timeout      ─► go back to the oldest unacknowledged PSN;
//	                          retry_cnt bounds it
//
// Progress (any WQE retired or PSN acknowledged) restores the retry
// counters and restarts the ACK timer.

import (
	"encoding/binary"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// completer is the acknowledgement-tracking half of a QP's protocol state.
type completer struct {
	psn         wire.PSN  // oldest PSN not yet acknowledged
	retryCnt    uint8     // retries left after timeouts and sequence NAKs
	rnrRetry    uint8     // retries left after RNR NAKs (7: unlimited)
	ackDeadline time.Time // when the local ACK timer expires; zero if idle
	// retrying is set when a NAK or a gap made the requester go back, and
	// cleared by the next progress, so the stale responses to the first
	// attempt do not trigger a go-back of their own.
	retrying bool
}

// onResponseLocked handles a response packet (ACK, READ response, atomic
// ACK) for an RC QP.
func (qp *QP) onResponseLocked(p *wire.Packet, now time.Time) {
	psn := p.BTH.PSN()
	// Only PSNs this QP has sent can be acknowledged.
	if !psn.Less(qp.req.maxPSN) {
		qp.dev.Counters.DropUnexpected.Add(1)
		return
	}
	info := p.Info
	switch {
	case p.BTH.Opcode() == wire.RCAck:
		qp.onAckLocked(psn, p.AETH.Syndrome(), now)
	case info.Has(wire.FlagRead):
		qp.onReadResponseLocked(p, psn, now)
	case p.BTH.Opcode() == wire.RCAtomicAck:
		qp.onAtomicAckLocked(p, psn, now)
	default:
		qp.dev.Counters.DropUnexpected.Add(1)
	}
}

func (qp *QP) onAckLocked(psn wire.PSN, syn uint8, now time.Time) {
	switch wire.SyndromeType(syn) {
	case wire.AckTypeACK:
		qp.ackThroughLocked(psn, false, now)
	case wire.AckTypeRNRNAK:
		qp.dev.Counters.RcvdRNRErr.Add(1)
		qp.ackThroughLocked(psn.Add(^uint32(0)), false, now)
		if qp.stateLocked() != verbs.QPStateRTS && qp.stateLocked() != verbs.QPStateSQD {
			return
		}
		if qp.sq.head == qp.sq.next && !qp.sq.at(qp.sq.head).started {
			return
		}
		if qp.comp.rnrRetry == 0 {
			qp.dev.Counters.RetryRNRExceededErr.Add(1)
			qp.failHeadLocked(verbs.WCRNRRetryExcErr)
			return
		}
		if qp.comp.rnrRetry != 7 {
			qp.comp.rnrRetry--
		}
		qp.rewindLocked(psn)
		qp.req.rnrWait = true
		qp.req.rnrUntil = now.Add(wire.RNRTimeout(wire.SyndromeValue(syn)))
		qp.comp.ackDeadline = time.Time{}
		qp.armTimerLocked(now, qp.req.rnrUntil)
		qp.dev.addRNRWait(qp, qp.req.rnrUntil)
	case wire.AckTypeNAK:
		code := wire.NAKCode(wire.SyndromeValue(syn))
		if code == wire.NAKPSNSeqError {
			qp.dev.Counters.RcvdSeqErr.Add(1)
			qp.ackThroughLocked(psn.Add(^uint32(0)), false, now)
			if qp.comp.retrying || (qp.sq.head == qp.sq.next && !qp.sq.at(qp.sq.head).started) {
				return
			}
			qp.retryLocked(now, false)
			return
		}
		qp.dev.Counters.NAKsRcvd.Add(1)
		qp.ackThroughLocked(psn.Add(^uint32(0)), false, now)
		st := verbs.WCRemOpErr
		switch code {
		case wire.NAKInvalidRequest:
			st = verbs.WCRemInvReqErr
		case wire.NAKRemoteAccessError:
			st = verbs.WCRemAccessErr
		case wire.NAKInvalidRDRequest:
			st = verbs.WCRemInvRDReqErr
		}
		qp.failHeadLocked(st)
	default:
		qp.dev.Counters.DropUnexpected.Add(1)
	}
}

// ackThroughLocked handles an acknowledgement of every PSN up to and
// including last. implicit is true when a READ response or atomic ACK
// implies it: then an outstanding READ or atomic at last is still waiting
// for its response and is not evidence of loss.
func (qp *QP) ackThroughLocked(last wire.PSN, implicit bool, now time.Time) {
	progress := false
	from := qp.comp.psn
	for qp.sq.head != qp.sq.tail {
		w := qp.sq.at(qp.sq.head)
		if !w.started {
			break
		}
		if w.isReadOrAtomic() {
			if !implicit && !last.Less(w.firstPSN) && !qp.comp.retrying {
				// The responder has moved past a request whose response
				// never arrived: it was lost. Ask again.
				qp.dev.Counters.CompleterRetryErr.Add(1)
				if progress {
					qp.onProgressLocked(now)
				}
				qp.retryLocked(now, false)
				return
			}
			break
		}
		if w.sent != w.npkts || last.Less(w.lastPSN) {
			// Partly acknowledged (every 64 packets): remember how far.
			if !last.Less(w.firstPSN) && qp.comp.psn.LessEq(last) {
				qp.comp.psn = last.Add(1)
				progress = true
			}
			break
		}
		qp.comp.psn = w.lastPSN.Add(1)
		qp.completeSendLocked(w, verbs.WCSuccess)
		progress = true
	}
	if progress {
		qp.req.onAcked(uint32(qp.comp.psn.Sub(from)))
		qp.onProgressLocked(now)
	}
}

// onProgressLocked restores the retry counters and restarts the ACK timer.
func (qp *QP) onProgressLocked(now time.Time) {
	qp.comp.retrying = false
	qp.comp.retryCnt = qp.attr.RetryCnt
	qp.comp.rnrRetry = qp.attr.RNRRetry
	if qp.comp.psn == qp.req.psn && qp.sq.head == qp.sq.next {
		qp.comp.ackDeadline = time.Time{}
	} else if t := wire.LocalACKTimeout(qp.attr.Timeout); t > 0 {
		qp.comp.ackDeadline = now.Add(t)
		qp.armTimerLocked(now, qp.comp.ackDeadline)
	}
	qp.req.kick = true
}

func (qp *QP) onReadResponseLocked(p *wire.Packet, psn wire.PSN, now time.Time) {
	qp.ackThroughLocked(psn.Add(^uint32(0)), true, now)
	if qp.sq.head == qp.sq.tail {
		qp.dev.Counters.DropUnexpected.Add(1)
		return
	}
	w := qp.sq.at(qp.sq.head)
	if !w.started || w.opcode != verbs.WRRDMARead || !psn.InWindow(w.firstPSN, w.npkts) {
		qp.dev.Counters.DropUnexpected.Add(1)
		return
	}
	if psn != w.nextRespPSN {
		if w.nextRespPSN.Less(psn) && !qp.comp.retrying {
			qp.dev.Counters.CompleterRetryErr.Add(1)
			qp.retryLocked(now, false) // a response was lost
		}
		return
	}
	info := p.Info
	idx := uint32(psn.Sub(w.firstPSN))
	off := uint64(idx) * uint64(qp.pmtu)
	want := min(uint64(qp.pmtu), w.length-off)
	// The data at a PSN is the same whichever request produced it (the
	// first, or a resumed one), so a late response of an earlier attempt
	// is as good as one of the current: only the end must be the end, and
	// a FIRST must start some request.
	posOK := (idx+1 == w.npkts) == info.Has(wire.FlagLast) &&
		(!info.Has(wire.FlagFirst) || psn == w.firstPSN || psn == w.respStart)
	if !posOK || uint64(len(p.Payload)) != want {
		qp.failHeadLocked(verbs.WCBadRespErr)
		return
	}
	if !w.sgl.copyIn(p.Payload, off) {
		qp.failHeadLocked(verbs.WCLocProtErr)
		return
	}
	w.nextRespPSN = psn.Add(1)
	// A response in order is forward progress: restore the retry budget.
	qp.comp.retrying = false
	qp.comp.retryCnt = qp.attr.RetryCnt
	if info.Has(wire.FlagLast) {
		qp.comp.psn = w.lastPSN.Add(1)
		qp.completeSendLocked(w, verbs.WCSuccess)
		qp.onProgressLocked(now)
	} else if t := wire.LocalACKTimeout(qp.attr.Timeout); t > 0 {
		qp.comp.ackDeadline = now.Add(t)
	}
}

func (qp *QP) onAtomicAckLocked(p *wire.Packet, psn wire.PSN, now time.Time) {
	qp.ackThroughLocked(psn.Add(^uint32(0)), true, now)
	if qp.sq.head == qp.sq.tail {
		qp.dev.Counters.DropUnexpected.Add(1)
		return
	}
	w := qp.sq.at(qp.sq.head)
	if !w.started || w.opcode == verbs.WRRDMARead || !w.isReadOrAtomic() || psn != w.firstPSN {
		qp.dev.Counters.DropUnexpected.Add(1)
		return
	}
	var orig [8]byte
	binary.LittleEndian.PutUint64(orig[:], p.AtomicAckETH.OrigData())
	if !w.sgl.copyIn(orig[:], 0) {
		qp.failHeadLocked(verbs.WCLocProtErr)
		return
	}
	qp.comp.psn = psn.Add(1)
	qp.completeSendLocked(w, verbs.WCSuccess)
	qp.onProgressLocked(now)
}

// retryLocked goes back to the oldest unacknowledged PSN and sends again,
// or fails the QP with WCRetryExcErr once retry_cnt is used up.
func (qp *QP) retryLocked(now time.Time, timeout bool) {
	if qp.comp.retryCnt == 0 {
		qp.dev.Counters.RetryExceededErr.Add(1)
		qp.failHeadLocked(verbs.WCRetryExcErr)
		return
	}
	qp.comp.retryCnt--
	qp.comp.retrying = !timeout
	qp.req.onLoss()
	qp.rewindLocked(qp.comp.psn)
	if t := wire.LocalACKTimeout(qp.attr.Timeout); t > 0 {
		qp.comp.ackDeadline = now.Add(t)
		qp.armTimerLocked(now, qp.comp.ackDeadline)
	}
	qp.req.kick = true
}

// onTimeoutLocked runs when the QP's timer fires.
func (qp *QP) onTimeoutLocked(now time.Time) {
	if qp.req.rnrWait && !now.Before(qp.req.rnrUntil) {
		qp.req.rnrWait = false
		qp.req.kick = true
	}
	if d := qp.comp.ackDeadline; !d.IsZero() && !now.Before(d) {
		if qp.sq.head == qp.sq.tail || !qp.sq.at(qp.sq.head).started {
			qp.comp.ackDeadline = time.Time{}
		} else {
			qp.dev.Counters.Timeouts.Add(1)
			qp.comp.ackDeadline = time.Time{}
			qp.retryLocked(now, true)
		}
	}
	if qp.req.kick {
		qp.req.kick = false
		qp.runRequesterLocked(now)
	}
}

// failHeadLocked completes the oldest WQE with st and moves the QP to ERR,
// flushing everything after it.
func (qp *QP) failHeadLocked(st verbs.WCStatus) {
	if qp.sq.head != qp.sq.tail {
		qp.sq.at(qp.sq.head).status = st
	}
	qp.errorLocked()
}
