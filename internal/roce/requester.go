package roce

// The requester turns send WQEs into packets (IBTA 9.7.4.1):
//
//	sq.next ──► start: assign firstPSN, count packets (READ: reserve one
//	            PSN per expected response)
//	        ──► one packet at a time: opcode FIRST/MIDDLE/LAST/ONLY from the
//	            WQE's opcode and position; RETH on the first WRITE packet and
//	            on READ; ImmDt/IETH on the last; AtomicETH on atomics;
//	            AckReq on the last packet and every ackReqEvery packets
//	        ──► qp.tx, sent in batches under the QP lock
//
// For RC it stops when ackWindow PSNs are unacknowledged, when max_rd_atomic
// READ/atomic requests are outstanding, at a fenced WQE while READs or
// atomics are outstanding, and while an RNR NAK's timer runs. UC and UD
// WQEs complete as soon as their last packet is queued.

import (
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// requester is the sending half of a QP's protocol state.
type requester struct {
	psn           wire.PSN  // PSN of the next packet
	maxPSN        wire.PSN  // one past the highest PSN ever sent
	noAck         int       // packets sent since the last AckReq
	rdOutstanding int       // READ and atomic WQEs started and not retired
	rnrWait       bool      // an RNR NAK paused the requester ...
	rnrUntil      time.Time // ... until then

	// cwnd is the window of unacknowledged PSNs (0: all of ackWindow).
	// Go-back-N resends everything after a lost packet, so a lossy path
	// costs about a window per loss: a sequence NAK halves the window
	// (down to minWindow), and it grows back by one PSN per window
	// acknowledged. A local ACK timeout says more: nothing came back for
	// a whole timeout, as when a receiver's socket overflowed under many
	// QPs at once, so the QP restarts from restartWindow and grows the
	// window by one PSN per PSN acknowledged (slow start, RFC 5681 3.1)
	// up to ssthresh, half the window it had, and then by one per window
	// again. Without loss it never leaves ackWindow.
	cwnd     uint32
	cwndAcc  uint32 // PSNs acknowledged towards the next increase
	ssthresh uint32 // while cwnd is below it, the window doubles per round trip
}

// start makes the requester send from psn (RTR → RTS).
func (r *requester) start(psn wire.PSN) { r.psn, r.maxPSN = psn, psn }

// minWindow is the smallest window a sequence NAK shrinks a QP to.
const minWindow = 16

// restartWindow is the window after a local ACK timeout: the oldest
// unacknowledged packet goes alone, so a timeout costs the network one
// packet per QP, however many QPs time out together.
const restartWindow = 1

// window is the number of unacknowledged PSNs the requester may have.
func (r *requester) window() int32 {
	if r.cwnd == 0 {
		return ackWindow
	}
	return int32(r.cwnd)
}

// onLoss halves the window after a sequence NAK or a lost response, to
// half the PSNs that were in flight (flight) but not below minWindow nor
// above the window it had (RFC 5681's FlightSize/2: a QP whose messages
// are short has far fewer PSNs in flight than its window, and halving an
// idle window would resend as much as before). The peer is answering and
// said what is missing, so the requester goes on at that window at once.
// A window restarted by a timeout doubles on up to minWindow at most.
func (r *requester) onLoss(flight uint32) {
	w := r.window()
	r.cwnd = uint32(min(w, max(int32(min(flight, ackWindow))/2, minWindow)))
	r.cwndAcc = 0
	if r.ssthresh = min(r.ssthresh, minWindow); r.ssthresh <= r.cwnd {
		r.ssthresh = 0
	}
}

// onTimeout restarts the window after a local ACK timeout: restartWindow
// PSNs, doubling per window acknowledged up to half the window it had.
func (r *requester) onTimeout() {
	r.ssthresh = uint32(max(r.window()/2, minWindow))
	r.cwnd = restartWindow
	r.cwndAcc = 0
}

// onAcked grows the window by n newly acknowledged PSNs: by n while below
// ssthresh, else by one PSN per window's worth, back to ackWindow.
func (r *requester) onAcked(n uint32) {
	if r.cwnd == 0 {
		return
	}
	if r.cwnd < r.ssthresh {
		grow := min(n, r.ssthresh-r.cwnd)
		r.cwnd += grow
		n -= grow
		if r.cwnd >= r.ssthresh {
			r.ssthresh = 0
		}
	}
	r.cwndAcc += n
	for r.cwndAcc >= r.cwnd && r.cwnd < ackWindow {
		r.cwndAcc -= r.cwnd
		r.cwnd++
	}
	if r.cwnd >= ackWindow {
		r.cwnd, r.cwndAcc, r.ssthresh = 0, 0, 0
	}
}

// runRequesterLocked transmits as much of the send queue as the QP may.
// now may be zero: it is read only to arm the ACK timer, which a QP with
// packets in flight has armed already (PostSend saves a clock read per post
// that way).
func (qp *QP) runRequesterLocked(now time.Time) {
	if qp.stateLocked() != verbs.QPStateRTS {
		return
	}
	rc := qp.typ == verbs.QPTypeRC
	sent := false
	for qp.sq.next != qp.sq.tail {
		if qp.tx.n == txBatch {
			if qp.flushLocked(); qp.tx.n == txBatch {
				break // the transport is full: the backlog flush resumes us
			}
		}
		w := qp.sq.at(qp.sq.next)
		if w.status != verbs.WCSuccess {
			// A local error found at post time: the WQE fails and, as
			// IBTA 10.8.3 wants for local errors, takes the QP with it.
			if rc && qp.sq.next != qp.sq.head {
				break // earlier WQEs must complete first
			}
			qp.errorLocked()
			return
		}
		if w.isLocal() {
			if rc && !w.started && w.flags&verbs.SendFence != 0 && qp.req.rdOutstanding > 0 {
				break
			}
			qp.runLocalLocked(w, rc) // on failure the check above takes it
			continue
		}
		if rc {
			if qp.req.rnrWait {
				break
			}
			if !w.started {
				if w.isReadOrAtomic() && qp.req.rdOutstanding >= int(max(qp.attr.MaxRdAtomic, 1)) {
					break
				}
				if w.flags&verbs.SendFence != 0 && qp.req.rdOutstanding > 0 {
					break
				}
			}
			// READs and atomics keep the whole window: a READ's PSNs are
			// its responses, and its losses are the responder's packets.
			win := qp.req.window()
			if w.isReadOrAtomic() {
				win = ackWindow
			}
			if qp.req.psn.Sub(qp.comp.psn) >= win {
				break
			}
		}
		paced := qp.cc.limited // DCQCN cut the QP's rate (cc.go)
		if paced {
			var ok bool
			if now, ok = qp.paceLocked(now); !ok {
				break // the QP's timer resumes it
			}
			qp.cc.ackDue = rc && qp.ackDueLocked(now)
		}
		if rc && qp.dev.cc.delay && !w.isReadOrAtomic() {
			now = qp.delaySampleLocked(qp.req.psn, now) // CCDelay's round trip (cc_delay.go)
		}
		if !w.started {
			qp.startWQELocked(w)
		}
		if !qp.sendPacketLocked(w) {
			return // the QP went to ERR
		}
		if paced {
			p := &qp.tx.pkts[qp.tx.n-1]
			qp.pacedLocked(p.Len(), now, wire.BTH(p.Buf).AckReq())
		}
		qp.cc.ackDue = false
		sent = true
		if w.sent == w.npkts {
			qp.sq.next++
			if !rc {
				qp.completeSendLocked(w, verbs.WCSuccess)
			}
		}
	}
	if sent && rc {
		// The completer owns the ACK timer: it starts it if idle, and
		// the QP queues the deadline it returns.
		if at := qp.comp.onSent(&qp.views.comp, qp.req.psn, qp.req.psn == qp.req.maxPSN, now, qp.dev.clock); !at.IsZero() {
			qp.armTimerLocked(at)
		}
	}
}

// runLocalLocked carries out a BIND_MW or LOCAL_INV the requester has
// reached (once: a rewind passes it again without repeating it) and
// moves past it. It sends nothing; it completes now if nothing before it
// is outstanding (on UC always), else with the request before it
// (completer.retire). On failure w.status says why and the requester
// fails it in order.
func (qp *QP) runLocalLocked(w *sendWQE, rc bool) {
	if !w.executed {
		w.executed = true
		st := verbs.WCSuccess
		switch w.opcode {
		case verbs.WRBindMW:
			st = qp.bindLocked(w.bind)
		case verbs.WRLocalInv:
			st = qp.localInvLocked(w.invRKey)
		}
		if st != verbs.WCSuccess {
			w.status = st
			return
		}
	}
	w.started = true
	w.npkts, w.sent = 0, 0
	w.firstPSN = qp.req.psn
	w.lastPSN = qp.req.psn.Add(^uint32(0)) // the PSN of the request before it
	at := qp.sq.next
	qp.sq.next++
	if !rc || at == qp.sq.head {
		qp.completeSendLocked(w, verbs.WCSuccess)
	}
}

func (qp *QP) startWQELocked(w *sendWQE) {
	w.started = true
	w.sent = 0
	w.firstPSN = qp.req.psn
	switch {
	case w.opcode == verbs.WRAtomicCmpAndSwp || w.opcode == verbs.WRAtomicFetchAndAdd:
		w.npkts = 1
	case w.length == 0:
		w.npkts = 1
	default:
		w.npkts = uint32((w.length + uint64(qp.pmtu) - 1) / uint64(qp.pmtu))
	}
	w.lastPSN = w.firstPSN.Add(w.npkts - 1)
	w.nextRespPSN = w.firstPSN
	w.respStart = w.firstPSN
	if w.isReadOrAtomic() {
		qp.req.rdOutstanding++
	}
}

// Opcodes by WQE opcode and position; UC adds 0x20 to the RC values.
var (
	sendOps   = [4]wire.Opcode{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast, wire.RCSendOnly}
	sendImm   = [4]wire.Opcode{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastImm, wire.RCSendOnlyImm}
	sendInv   = [4]wire.Opcode{wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLastInv, wire.RCSendOnlyInv}
	writeOps  = [4]wire.Opcode{wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast, wire.RCWriteOnly}
	writeImm  = [4]wire.Opcode{wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLastImm, wire.RCWriteOnlyImm}
	posFirst  = 0
	posMiddle = 1
	posLast   = 2
	posOnly   = 3
)

// sendPacketLocked builds the WQE's next packet. It returns false if the
// packet could not be built and the QP went to ERR.
func (qp *QP) sendPacketLocked(w *sendWQE) bool {
	psn := qp.req.psn
	bth := wire.BTHFields{PSN: psn, DestQP: qp.attr.DestQPNum}
	dst := qp.route()
	if qp.typ == verbs.QPTypeUD {
		dst = route{src: w.src, dst: w.dest, tclass: w.tclass}
		bth.DestQP = w.destQPN
	}

	switch w.opcode {
	case verbs.WRRDMARead:
		// A READ resumed after lost responses asks only for the rest, from
		// the PSN of the first missing response (as rxe does); the
		// responder finds that PSN in its replay ring.
		off := uint64(w.respStart.Sub(w.firstPSN)) * uint64(qp.pmtu)
		bth.AckReq = true
		b := qp.newPacketLocked(dst, wire.RCReadRequest, &bth, 0)
		wire.RETH(b[wire.RCReadRequest.Info().RETHOff:]).Encode(&wire.RETHFields{VA: w.raddr + off, RKey: w.rkey, DMALen: uint32(w.length - off)})
		w.sent = w.npkts // one request stands for every response PSN
		qp.advancePSNLocked(uint32(w.lastPSN.Sub(w.respStart))+1, true)
		return true
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		op := wire.RCFetchAdd
		f := wire.AtomicETHFields{VA: w.raddr, RKey: w.rkey, SwapAdd: w.cmpAdd}
		if w.opcode == verbs.WRAtomicCmpAndSwp {
			op = wire.RCCompareSwap
			f = wire.AtomicETHFields{VA: w.raddr, RKey: w.rkey, SwapAdd: w.swap, Compare: w.cmpAdd}
		}
		bth.AckReq = true
		b := qp.newPacketLocked(dst, op, &bth, 0)
		wire.AtomicETH(b[op.Info().AtomicETHOff:]).Encode(&f)
		w.sent = 1
		qp.advancePSNLocked(1, true)
		return true
	}

	// SEND and WRITE: one path-MTU segment at a time.
	off := uint64(w.sent) * uint64(qp.pmtu)
	n := min(uint64(qp.pmtu), w.length-off)
	first, last := w.sent == 0, w.sent+1 == w.npkts
	// Config.NoSplitWrites. Not a WRITE with immediate: its receiver's
	// completion reports the message's length, which only a FIRST carries.
	split := qp.splitWrites && w.opcode == verbs.WRRDMAWrite && w.npkts > 1
	pos := posMiddle
	switch {
	case first && last:
		pos = posOnly
	case first:
		pos = posFirst
	case last:
		pos = posLast
	}
	var op wire.Opcode
	switch w.opcode {
	case verbs.WRSend:
		op = sendOps[pos]
	case verbs.WRSendWithImm:
		op = sendImm[pos]
	case verbs.WRSendWithInv:
		op = sendInv[pos]
	case verbs.WRRDMAWrite:
		op = writeOps[pos]
	case verbs.WRRDMAWriteWithImm:
		op = writeImm[pos]
	}
	if split {
		op = wire.RCWriteOnly // every packet a WRITE of its own
	}
	switch qp.typ {
	case verbs.QPTypeUC:
		op |= 0x20
	case verbs.QPTypeUD:
		op = wire.UDSendOnly
		if w.opcode == verbs.WRSendWithImm {
			op = wire.UDSendOnlyImm
		}
	}
	info := op.Info()
	// AckReq on the last packet, every ackReqEvery packets, and on the
	// packet that fills the window (a window shrunk by loss may be smaller
	// than ackReqEvery, and the requester would wait for an ACK that the
	// responder has no reason to send).
	ackReq := qp.typ == verbs.QPTypeRC && (last || qp.req.noAck >= ackReqEvery-1 || psn.Sub(qp.comp.psn)+1 >= qp.req.window() || qp.cc.ackDue)
	bth.AckReq = ackReq
	bth.SolicitedEvent = last && w.flags&verbs.SendSolicited != 0 && w.opcode != verbs.WRRDMAWrite
	var b []byte
	gathered := false
	if qp.dev.gather && qp.sec == nil && !w.isInline && n >= gatherMin && w.length >= gatherMinMessage {
		// The payload stays in the MR; the transport gathers it.
		if m, mr := w.sgl.pin(off, n); mr != nil {
			b = qp.newGatherPacketLocked(dst, op, &bth, m, mr)
			gathered = true
		}
	}
	if !gathered {
		b = qp.newPacketLocked(dst, op, &bth, int(n))
	}
	if info.Has(wire.FlagRETH) {
		reth := wire.RETHFields{VA: w.raddr, RKey: w.rkey, DMALen: uint32(w.length)}
		if split {
			reth.VA, reth.DMALen = w.raddr+off, uint32(n)
		}
		wire.RETH(b[info.RETHOff:]).Encode(&reth)
	}
	if info.Has(wire.FlagImm) {
		wire.ImmDt(b[info.ImmOff:]).SetImm(w.imm)
	}
	if info.Has(wire.FlagIETH) {
		wire.IETH(b[info.IETHOff:]).SetRKey(w.invRKey)
	}
	if info.Has(wire.FlagDETH) {
		wire.DETH(b[info.DETHOff:]).Encode(&wire.DETHFields{QKey: w.qkey, SrcQP: qp.qpn})
	}
	switch {
	case gathered:
	case w.isInline:
		copy(b[info.Length:info.Length+int(n)], w.inline[off:off+n])
	case !w.sgl.copyOut(b[info.Length:info.Length+int(n)], off):
		qp.tx.unqueueLast(qp.dev) // the half-built packet
		w.status = verbs.WCLocProtErr
		if qp.typ != verbs.QPTypeRC || qp.sq.next == qp.sq.head {
			qp.errorLocked()
			return false
		}
		return false
	}
	w.sent++
	if last && qp.req.maxPSN.LessEq(psn) && (w.opcode == verbs.WRSend || w.opcode == verbs.WRSendWithImm || w.opcode == verbs.WRSendWithInv) {
		qp.dev.Counters.RDMASends.Add(1) // first transmissions only, as rxe counts
	}
	qp.advancePSNLocked(1, ackReq)
	return true
}

// advancePSNLocked moves the next PSN on by n after a packet was queued.
func (qp *QP) advancePSNLocked(n uint32, ackReq bool) {
	qp.req.psn = qp.req.psn.Add(n)
	if qp.req.maxPSN.Less(qp.req.psn) {
		qp.req.maxPSN = qp.req.psn
	} else {
		qp.dev.Counters.Retransmits.Add(1)
	}
	if ackReq {
		qp.req.noAck = 0
	} else {
		qp.req.noAck++
	}
}

// sent tells the completer what the requester has sent; next is the send
// queue's next.
func (r *requester) sent(next uint32) reqSent {
	return reqSent{psn: r.psn, maxPSN: r.maxPSN, next: next}
}

// apply carries out the requester's part of the completer's answer c:
// it accounts for what was retired, grows the window by what was
// acknowledged, and on a loss shrinks the window (restarts it after a
// timeout) and goes back to c.rewindPSN; after an RNR NAK it goes back and
// waits until c.rnrUntil. sq is the QP's send queue. It reports whether
// the requester may send now.
func (r *requester) apply(sq *sendQueue, c compResult) (sendMore bool) {
	if c.rdRetired > 0 || c.rewound {
		r.onRetired(c.rdRetired, c.rewound, c.rewoundEnd) // before any rewind below
	}
	if c.acked > 0 {
		r.onAcked(c.acked)
	}
	switch c.next {
	case compRetry:
		if c.timeout {
			r.onTimeout()
		} else {
			r.onLoss(uint32(r.maxPSN.Sub(c.rewindPSN)))
		}
		r.rewind(sq, c.rewindPSN)
		return true
	case compRNR:
		r.rewind(sq, c.rewindPSN)
		r.pauseUntil(c.rnrUntil)
		return false
	case compError:
		return false
	}
	return c.progress
}

// pauseUntil stops the requester until t (an RNR NAK's timer).
func (r *requester) pauseUntil(t time.Time) { r.rnrWait, r.rnrUntil = true, t }

// resume ends an RNR wait whose time has come; it reports whether it did.
func (r *requester) resume(now time.Time) bool {
	if !r.rnrWait || now.Before(r.rnrUntil) {
		return false
	}
	r.rnrWait = false
	return true
}

// onRetired updates the requester's accounting after WQEs were retired
// (by the completer, or flushed): rd READs or atomics are no longer
// outstanding, and if rewound, a go-back-N rewind had put the requester
// back inside a retired WQE, which a late response completed before it
// was sent again: the next WQE must start after its PSNs (before end),
// not inside them. (The send queue's next moved past it as it retired.)
func (r *requester) onRetired(rd uint32, rewound bool, end wire.PSN) {
	r.rdOutstanding = max(r.rdOutstanding-int(rd), 0)
	if rewound && r.psn.Less(end) {
		r.psn = end
	}
}

// rewind goes back to PSN psn, the oldest unacknowledged packet, to
// retransmit everything from there (go-back-N, IBTA 9.7.5.1.4). A SEND or
// WRITE resumes mid-message at psn; a READ or atomic is requested again
// whole, which the responder answers from its replay ring. sq is the
// QP's send queue, whose WQEs from head on are sent again.
func (r *requester) rewind(sq *sendQueue, psn wire.PSN) {
	if sq.head == sq.tail {
		return
	}
	head := sq.at(sq.head)
	if !head.started {
		return // nothing was sent
	}
	r.rdOutstanding = 0
	end := sq.next
	if end != sq.tail {
		end++ // include the partly sent WQE
	}
	for i := sq.head; i != end; i++ {
		w := sq.at(i)
		w.started = false
	}
	sq.next = sq.head
	switch {
	case !head.isReadOrAtomic() && head.npkts > 0 && psn.InWindow(head.firstPSN, head.npkts):
		head.started = true
		head.sent = uint32(psn.Sub(head.firstPSN))
		r.psn = psn
	case head.opcode == verbs.WRRDMARead && head.nextRespPSN != head.firstPSN:
		// Part of the READ arrived: ask again for the rest only.
		head.started = true
		head.sent = 0
		head.respStart = head.nextRespPSN
		r.rdOutstanding = 1
		r.psn = head.nextRespPSN
	default:
		r.psn = head.firstPSN
	}
	r.noAck = 0
}
