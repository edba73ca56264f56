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
//	                          retry_cnt (7 = seven retries, as IBTA has it)
//	                          bounds it
//
// Progress (any WQE retired or PSN acknowledged) restores the retry
// counters and restarts the ACK timer.
//
// The completer owns its state (what is acknowledged, the retry budgets,
// the ACK deadline) and retires WQEs from the head of the send queue into
// the send CQ. It writes no requester state: what the requester must do
// next — account for what was retired, send more, go back, wait out an
// RNR NAK, or fail — comes back as a compResult, which the requester
// applies (requester.apply; the QP fails on compError). What it needs of
// the requester (the PSNs sent, the send queue's next) comes in as a
// reqSent; what it uses of the QP (the send queue, the counters, the
// state, the timeout and retry budgets) as a compQP (views.go), through
// whose sendRetirer it retires WQEs.

import (
	"encoding/binary"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// completer is the acknowledgement-tracking part of a QP's protocol state.
type completer struct {
	psn         wire.PSN  // oldest PSN not yet acknowledged
	retryCnt    uint8     // retries left after timeouts and sequence NAKs
	rnrRetry    uint8     // retries left after RNR NAKs (7: unlimited)
	ackDeadline time.Time // when the local ACK timer expires; zero if idle
	// retrying is set when a NAK or a gap made the requester go back, and
	// cleared by the next progress, so the stale responses to the first
	// attempt do not trigger a go-back of their own.
	retrying bool
	rtt      rttEstimator // stretches the ACK timer to the measured round trip
}

// start makes the completer expect the first acknowledgement for psn,
// the requester's first PSN (RTR → RTS), with full retry budgets.
func (c *completer) start(psn wire.PSN, retryCnt, rnrRetry uint8) {
	c.psn = psn
	c.retryCnt, c.rnrRetry = retryCnt, rnrRetry
}

// setRetryCnt and setRNRRetry restart a retry budget (ModifyQP).
func (c *completer) setRetryCnt(n uint8) { c.retryCnt = n }
func (c *completer) setRNRRetry(n uint8) { c.rnrRetry = n }

// onSent tells the completer that the requester sent requests at now,
// next being the PSN after the last one sent and fresh whether that was
// new rather than a go-back-N resend (only new PSNs time a round trip):
// an idle ACK timer starts. It returns the deadline the QP must queue, zero
// if the timer was running already (its deadline is queued) or the QP's
// timeout is infinite. now is read (from clock) only if it is zero and
// the timer starts: a QP with packets in flight has it running already,
// and PostSend saves a clock read per post that way.
func (c *completer) onSent(qp *compQP, next wire.PSN, fresh bool, now time.Time, clock func() time.Time) time.Time {
	if qp.timeout == 0 {
		return time.Time{}
	}
	// Time the last PSN sent if it is new (fresh: not a go-back-N
	// resend) and none is timed: one clock read per round trip.
	if c.rtt.probeAt.IsZero() && fresh {
		if now.IsZero() {
			now = clock()
		}
		c.rtt.onSent(next.Add(^uint32(0)), now)
	}
	if !c.ackDeadline.IsZero() {
		return time.Time{}
	}
	if now.IsZero() {
		now = clock()
	}
	c.restartAckTimer(qp, now)
	return c.ackDeadline
}

// reqSent is what the requester has sent, as the completer needs it to
// judge a response: the next PSN, one past the highest PSN ever sent, and
// the send queue's next (the first WQE not completely sent). The QP takes
// it from the requester before the completer runs (requester.sent); the
// completer moves next along as it retires WQEs, as the send queue does.
type reqSent struct {
	psn    wire.PSN
	maxPSN wire.PSN
	next   uint32
}

// compState is what a response (or a timeout) asks of the QP after the
// completer has done its part, named after rxe's completer states
// (rxe_comp.c).
type compState uint8

const (
	compDone  compState = iota // COMPST_DONE: nothing more (dropped, duplicate, or progress only)
	compRetry                  // COMPST_ERROR_RETRY: go back to rewindPSN, the oldest unacknowledged PSN
	compRNR                    // COMPST_RNR_RETRY: go back to rewindPSN once rnrUntil has come
	compError                  // COMPST_ERROR: the oldest WQE failed with status; the QP goes to ERR
)

func (s compState) String() string {
	switch s {
	case compDone:
		return "done"
	case compRetry:
		return "retry"
	case compRNR:
		return "rnr-retry"
	case compError:
		return "error"
	}
	return "compState(?)"
}

// compResult is the completer's answer to one response or timeout. The
// QP hands it to the requester (requester.apply), which carries out its
// part; the QP itself fails on compError.
type compResult struct {
	// acked is how many PSNs became acknowledged: the requester's window
	// grows by them and it may send more. 0: no progress.
	acked uint32
	// progress says the window moved or an RNR wait ended: run the
	// requester.
	progress bool
	next     compState
	inWindow bool // the response was inside the PSNs in flight
	// What the completer retired that the requester must account for
	// (requester.onRetired): READs and atomics no longer outstanding,
	// and whether it retired a WQE the requester had been rewound into,
	// with the PSN after it.
	rdRetired  uint32
	rewound    bool
	rewoundEnd wire.PSN
	status     verbs.WCStatus // compError
	rewindPSN  wire.PSN       // compRetry, compRNR: where the requester goes back to
	rnrUntil   time.Time      // compRNR
	// timeout: a compRetry after the local ACK timer expired, which
	// restarts the requester's window; otherwise a sequence NAK or a
	// lost response halves it.
	timeout bool
}

// onResponse handles a response packet (ACK, READ response, atomic ACK)
// for an RC QP.
func (c *completer) onResponse(qp *compQP, s *reqSent, p *wire.Packet, now time.Time) compResult {
	psn := p.BTH.PSN()
	// A response is acted on only while a request is outstanding and only
	// inside the PSNs in flight: from the oldest unacknowledged one to the
	// last sent. Anything else is a late duplicate or a forgery (a blind
	// attacker must now guess a PSN in a window of at most ackWindow out
	// of 2^24, besides the QPN and the peer's address and port).
	if qp.sq.head == qp.sq.tail || !qp.sq.at(qp.sq.head).started {
		qp.c.DropUnexpected.Add(1)
		return compResult{}
	}
	if psn.Less(c.psn) || !psn.Less(s.maxPSN) {
		qp.c.DropOutOfWindow.Add(1)
		return compResult{}
	}
	var r compResult
	switch {
	case p.BTH.Opcode() == wire.RCAck:
		r = c.onAck(qp, s, psn, p.AETH.Syndrome(), now)
	case p.Info.Has(wire.FlagRead):
		r = c.onReadResponse(qp, s, p, psn, now)
	case p.BTH.Opcode() == wire.RCAtomicAck:
		r = c.onAtomicAck(qp, s, p, psn, now)
	default:
		qp.c.DropUnexpected.Add(1)
		return compResult{}
	}
	r.inWindow = true
	return r
}

func (c *completer) onAck(qp *compQP, s *reqSent, psn wire.PSN, syn uint8, now time.Time) compResult {
	switch wire.SyndromeType(syn) {
	case wire.AckTypeACK:
		return c.ackThrough(qp, s, psn, false, now)
	case wire.AckTypeRNRNAK:
		qp.c.RcvdRNRErr.Add(1)
		r := c.ackThrough(qp, s, psn.Add(^uint32(0)), false, now)
		if r.next != compDone {
			return r
		}
		if st := qp.stateNow(); st != verbs.QPStateRTS && st != verbs.QPStateSQD {
			return r
		}
		if qp.sq.head == s.next && !qp.sq.at(qp.sq.head).started {
			return r // nothing is outstanding
		}
		if c.rnrRetry == 0 {
			qp.c.RetryRNRExceededErr.Add(1)
			r.next, r.status = compError, verbs.WCRNRRetryExcErr
			return r
		}
		if c.rnrRetry != 7 {
			c.rnrRetry--
		}
		c.ackDeadline = time.Time{} // the RNR timer runs instead
		r.next, r.rewindPSN, r.rnrUntil = compRNR, psn, now.Add(wire.RNRTimeout(wire.SyndromeValue(syn)))
		return r
	case wire.AckTypeNAK:
		code := wire.NAKCode(wire.SyndromeValue(syn))
		if code == wire.NAKPSNSeqError {
			qp.c.RcvdSeqErr.Add(1)
			r := c.ackThrough(qp, s, psn.Add(^uint32(0)), false, now)
			if r.next != compDone || c.retrying || (qp.sq.head == s.next && !qp.sq.at(qp.sq.head).started) {
				return r
			}
			r.next = compRetry
			return r
		}
		qp.c.NAKsRcvd.Add(1)
		r := c.ackThrough(qp, s, psn.Add(^uint32(0)), false, now)
		st := verbs.WCRemOpErr
		switch code {
		case wire.NAKInvalidRequest:
			st = verbs.WCRemInvReqErr
		case wire.NAKRemoteAccessError:
			st = verbs.WCRemAccessErr
		case wire.NAKInvalidRDRequest:
			st = verbs.WCRemInvRDReqErr
		}
		r.next, r.status = compError, st
		return r
	}
	qp.c.DropUnexpected.Add(1)
	return compResult{}
}

// ackThrough handles an acknowledgement of every PSN up to and including
// last. implicit is true when a READ response or atomic ACK implies it:
// then an outstanding READ or atomic at last is still waiting for its
// response and is not evidence of loss.
func (c *completer) ackThrough(qp *compQP, s *reqSent, last wire.PSN, implicit bool, now time.Time) compResult {
	var r compResult
	from := c.psn
	for qp.sq.head != qp.sq.tail {
		w := qp.sq.at(qp.sq.head)
		if !w.started {
			break
		}
		if w.isReadOrAtomic() {
			if !implicit && !last.Less(w.firstPSN) && !c.retrying {
				// The responder has moved past a request whose response
				// never arrived: it was lost. Ask again.
				qp.c.CompleterRetryErr.Add(1)
				r.next = compRetry
			}
			break
		}
		if last.Less(w.lastPSN) {
			// Partly acknowledged (every 64 packets): remember how far.
			// An acknowledgement of the WQE's last PSN completes it even
			// when a go-back-N rewind put the requester back inside it
			// (w.sent counts this attempt's packets only): every one of
			// its PSNs went out once, for last is below maxPSN. Taking
			// that as partial moved c.psn past the WQE, and the ACKs
			// of its retransmission fell outside the window for good.
			if !last.Less(w.firstPSN) && c.psn.LessEq(last) {
				c.psn = last.Add(1)
				r.progress = true
			}
			break
		}
		c.psn = w.lastPSN.Add(1)
		c.retire(qp, s, w, &r)
		r.progress = true
	}
	if r.progress {
		r.acked = uint32(c.psn.Sub(from))
		c.onProgress(qp, s, now, &r)
	}
	return r
}

// retire completes w, the oldest WQE, successfully, and records in r what
// the requester must account for.
func (c *completer) retire(qp *compQP, s *reqSent, w *sendWQE, r *compResult) {
	if w.isReadOrAtomic() {
		r.rdRetired++
	}
	if s.next == qp.sq.head {
		r.rewound, r.rewoundEnd = true, w.lastPSN.Add(1)
		s.next++ // completeSendLocked moves the send queue's next past w
	}
	qp.retirer.completeSendLocked(w, verbs.WCSuccess)
	// Local requests after w (BIND_MW, LOCAL_INV) took effect as the
	// requester passed them; they complete with w, in order.
	for qp.sq.head != qp.sq.tail {
		l := qp.sq.at(qp.sq.head)
		if !l.started || !l.isLocal() {
			break
		}
		qp.retirer.completeSendLocked(l, verbs.WCSuccess)
	}
}

// onProgress restores the retry counters and restarts the ACK timer; it
// stops it when everything the requester sent (as it will stand once it
// has applied r) is acknowledged.
func (c *completer) onProgress(qp *compQP, s *reqSent, now time.Time, r *compResult) {
	c.retrying = false
	c.retryCnt = qp.retryCnt
	c.rnrRetry = qp.rnrRetry
	c.rtt.onAcked(c.psn, now)
	sent := s.psn
	if r.rewound && sent.Less(r.rewoundEnd) {
		sent = r.rewoundEnd
	}
	if c.psn == sent && qp.sq.head == s.next {
		c.ackDeadline = time.Time{}
	} else {
		c.restartAckTimer(qp, now)
	}
}

// restartAckTimer sets the ACK deadline a local ACK timeout after now
// (none if the QP's timeout is 0, IBTA's infinite).
//
// The timeout is the QP's (IBTA 4.096 µs × 2^timeout, as rxe uses it)
// plus a jitter of up to a quarter of it, never less: QPs that lost
// packets at the same moment, as when a receiver's socket overflows
// under thousands of them, would otherwise all time out in the same
// instant and retransmit together into the same socket. The jitter is a
// hash of the QPN and the retries left, so it differs between QPs and
// between one QP's attempts, and a run is reproducible.
func (c *completer) restartAckTimer(qp *compQP, now time.Time) {
	if t := wire.LocalACKTimeout(qp.timeout); t > 0 {
		t = c.rtt.timeout(t)
		c.ackDeadline = now.Add(t + ackJitter(t, qp.qpn, c.retryCnt))
	}
}

// ackJitter is the extra wait, in [0, t/4), of a QP's ACK timeout.
func ackJitter(t time.Duration, qpn uint32, attempt uint8) time.Duration {
	// splitmix64's finalizer: every input bit moves every output bit.
	h := uint64(qpn)<<8 | uint64(attempt)
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return t / 4 * time.Duration(h>>54) / 1024 // h>>54: 0..1023
}

func (c *completer) onReadResponse(qp *compQP, s *reqSent, p *wire.Packet, psn wire.PSN, now time.Time) compResult {
	r := c.ackThrough(qp, s, psn.Add(^uint32(0)), true, now)
	if qp.sq.head == qp.sq.tail {
		qp.c.DropUnexpected.Add(1)
		return r
	}
	w := qp.sq.at(qp.sq.head)
	if !w.started || w.opcode != verbs.WRRDMARead || !psn.InWindow(w.firstPSN, w.npkts) {
		qp.c.DropUnexpected.Add(1)
		return r
	}
	if psn != w.nextRespPSN {
		if w.nextRespPSN.Less(psn) && !c.retrying {
			qp.c.CompleterRetryErr.Add(1)
			r.next = compRetry // a response was lost
		}
		return r
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
		r.next, r.status = compError, verbs.WCBadRespErr
		return r
	}
	if !w.sgl.copyIn(p.Payload, off) {
		r.next, r.status = compError, verbs.WCLocProtErr
		return r
	}
	w.nextRespPSN = psn.Add(1)
	// A response in order is forward progress: restore the retry budget.
	c.retrying = false
	c.retryCnt = qp.retryCnt
	if info.Has(wire.FlagLast) {
		c.psn = w.lastPSN.Add(1)
		c.retire(qp, s, w, &r)
		c.onProgress(qp, s, now, &r)
		r.progress = true // READs keep the whole window: it does not grow
	} else {
		c.restartAckTimer(qp, now)
	}
	return r
}

func (c *completer) onAtomicAck(qp *compQP, s *reqSent, p *wire.Packet, psn wire.PSN, now time.Time) compResult {
	r := c.ackThrough(qp, s, psn.Add(^uint32(0)), true, now)
	if qp.sq.head == qp.sq.tail {
		qp.c.DropUnexpected.Add(1)
		return r
	}
	w := qp.sq.at(qp.sq.head)
	if !w.started || w.opcode == verbs.WRRDMARead || !w.isReadOrAtomic() || psn != w.firstPSN {
		qp.c.DropUnexpected.Add(1)
		return r
	}
	var orig [8]byte
	binary.LittleEndian.PutUint64(orig[:], p.AtomicAckETH.OrigData())
	if !w.sgl.copyIn(orig[:], 0) {
		r.next, r.status = compError, verbs.WCLocProtErr
		return r
	}
	c.psn = psn.Add(1)
	c.retire(qp, s, w, &r)
	c.onProgress(qp, s, now, &r)
	r.progress = true
	return r
}

// retry decides what a loss (timeout says: found by the local ACK timer,
// not by a NAK or a gap) costs: another attempt, or, once retry_cnt is
// used up, the WQE and the QP. It returns compRetry or compError.
func (c *completer) retry(qp *compQP, now time.Time, timeout bool) compResult {
	if c.retryCnt == 0 {
		qp.c.RetryExceededErr.Add(1)
		return compResult{next: compError, status: verbs.WCRetryExcErr}
	}
	c.retryCnt--
	c.retrying = !timeout
	c.rtt.onRewind(timeout)
	c.restartAckTimer(qp, now)
	return compResult{next: compRetry, progress: true, rewindPSN: c.psn, timeout: timeout}
}

// onTimeout handles the local ACK timer at now.
func (c *completer) onTimeout(qp *compQP, now time.Time) compResult {
	d := c.ackDeadline
	if d.IsZero() || now.Before(d) {
		return compResult{}
	}
	c.ackDeadline = time.Time{}
	if qp.sq.head == qp.sq.tail || !qp.sq.at(qp.sq.head).started {
		return compResult{}
	}
	qp.c.Timeouts.Add(1)
	return c.retry(qp, now, true)
}

// applyCompLocked carries out the completer's answer to a response. A
// loss it reported (compRetry) first goes back to the completer, which
// decides whether a retry is left; the requester then applies the answer
// (requester.apply), and on compError the QP fails. It reports whether
// the requester may send now.
func (qp *QP) applyCompLocked(r compResult, now time.Time) (sendMore bool) {
	if r.next == compRetry {
		rr := qp.comp.retry(&qp.views.comp, now, false)
		r.next, r.status, r.rewindPSN, r.timeout = rr.next, rr.status, rr.rewindPSN, rr.timeout
		if r.next == compRetry {
			qp.dev.note(Note{Kind: NoteRetransmit, QPN: qp.qpn, Peer: qp.destAddr, PSN: r.rewindPSN, Reason: "sequence NAK or lost response"})
		}
	}
	if r.next == compRNR {
		qp.dev.note(Note{Kind: NoteRNRWait, QPN: qp.qpn, Peer: qp.destAddr, PSN: r.rewindPSN})
	}
	sendMore = qp.req.apply(&qp.sq, r)
	if r.next == compError {
		qp.failHeadLocked(r.status)
	}
	return sendMore
}

// onTimeoutLocked runs when the QP's timer fires: an RNR wait that ended
// lets the requester go again; an ACK timeout sends it back, or fails the
// QP once the retries are used up.
func (qp *QP) onTimeoutLocked(now time.Time) {
	sendMore := qp.req.resume(now)
	r := qp.comp.onTimeout(&qp.views.comp, now)
	switch r.next {
	case compRetry:
		qp.dev.note(Note{Kind: NoteRetransmit, QPN: qp.qpn, Peer: qp.destAddr, PSN: r.rewindPSN, Reason: "timeout"})
	case compError:
		qp.failHeadLocked(r.status)
		return
	}
	if qp.req.apply(&qp.sq, r) {
		sendMore = true
	}
	if sendMore {
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
