package roce

// The responder executes incoming requests (IBTA 9.7.5.2 for RC, 9.8 for
// UC, 9.8.4 for UD). For RC, each packet goes through:
//
//	PSN check   ── ahead: one PSN sequence NAK, then drop until the expected
//	               PSN arrives; behind: a duplicate, answered (ACK again,
//	               READ responses again, the recorded atomic result) and
//	               never executed again
//	opcode      ── FIRST → MIDDLE* → LAST within a message; QP access flags
//	resources   ── a receive WQE for SEND and WRITE_WITH_IMM (none: RNR NAK
//	               with min_rnr_timer); a replay slot for READ and atomics
//	length/rkey ── MTU-sized FIRST/MIDDLE, total within the WQE or DMA
//	               length; rkey, PD, permission, bounds, alignment
//	execute     ── copy into the MR (last byte last), read out of it, or the
//	               atomic; a receive completion when the message ends
//	acknowledge ── ACK when AckReq is set, coalesced per received batch;
//	               READ responses and atomic ACKs at once
//
// Errors map one to one to NAK codes and completion statuses: no receive
// WQE → RNR NAK; bad opcode sequence or length → NAK invalid request; bad
// rkey or bounds → NAK remote access error; a local failure placing data →
// NAK remote operational error. All but RNR move the QP to ERR.

import (
	"sync/atomic"
	"unsafe"

	"github.com/softrdma/softrdma/internal/memmove"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// responder is the receiving half of a QP's protocol state. Its steps are
// its methods, run with the QP's mu held. The steps that place a message
// (SEND, WRITE, UD) take a recvRes: the receive queue or SRQ, the PD, the
// receive CQ, the counters. The steps of an RC or UC request take a
// respQP, the QP's view for the responder (views.go): the recvRes, the
// access flags, and an answerTx, the transmit path its answers (ACKs,
// NAKs, READ responses, atomic ACKs) go on. None of them sees the QP
// itself, touches the requester's or the completer's state or moves the
// QP to ERR: an error that fails the QP is recorded and handed back in the
// request's respResult.
type responder struct {
	psn       wire.PSN // expected PSN
	msn       uint32   // message sequence number (24 bits on the wire)
	nakSent   bool     // a sequence NAK was sent for psn
	inMsg     bool     // inside a multi-packet SEND or WRITE
	inSend    bool     // the message in progress is a SEND
	haveCur   bool     // cur holds the receive WQE the SEND in progress fills
	cur       recvWQE
	recvOff   uint64
	writeVA   uint64
	writeRKey uint32
	writeLeft uint64
	writeLen  uint64
	ucDrop    bool // UC: dropping the rest of a message after a gap
	// started: a request with the expected PSN has come in. Until then
	// no request can be repeated, so a "duplicate" is a forgery (before
	// the peer's first packet pins its source port, anyone on the
	// peer's address can send one) and gets no ACK.
	started bool

	ackPending  bool
	ackPSN      wire.PSN
	ackDeferred bool   // on the device's list of ACKs that wait for a poller
	deferMisses uint8  // deferred ACKs in a row the poller's next poll sent
	deferSkips  uint16 // ACKs sent at once since the last try (deferWorthIt)

	res     []rdRes // replay ring for READ and atomic requests
	resNext int

	// failed: a step sent a NAK that fails the QP with failEvent; the
	// request's respResult hands it to the QP.
	failed    bool
	failEvent verbs.AsyncEventType
}

// respResult is what handling one RC request asks of the QP.
type respResult struct {
	// expected: the request had the expected PSN. Only such a packet
	// proves to come from the peer (the responder acknowledges a
	// duplicate of any older PSN, half the PSN space).
	expected bool
	// fail: the responder NAKed an error; the QP moves to ERR and raises
	// event.
	fail  bool
	event verbs.AsyncEventType
}

// result ends the handling of a request: it hands over a failure a step
// recorded, with expected.
func (r *responder) result(expected bool) respResult {
	res := respResult{expected: expected, fail: r.failed, event: r.failEvent}
	r.failed = false
	return res
}

// start makes the responder expect psn, the peer's first request, with
// the message sequence number at 0 (INIT → RTR).
func (r *responder) start(psn wire.PSN) { r.psn, r.msn = psn, 0 }

// setReplayRing gives the responder an empty replay ring of n records
// (max_dest_rd_atomic).
func (r *responder) setReplayRing(n int) {
	r.res = make([]rdRes, n)
	r.resNext = 0
}

// reset empties the responder (the QP went to RESET), keeping the storage
// of its replay ring and of cur.
func (r *responder) reset() {
	res := r.res
	clear(res)
	cur := r.cur
	*r = responder{res: res, cur: cur}
	r.cur.sgl.reset()
}

// flushLocked completes with a flush error the receive WQE of the message
// in progress, if any, and every WQE of the QP's receive queue (the QP
// moved to ERR); an SRQ's WQEs belong to the SRQ and stay.
func (r *responder) flushLocked(s *recvRes) {
	if r.inMsg && r.haveCur {
		s.complete(&r.cur, verbs.WCWRFlushErr, 0, 0, 0, 0, false)
		r.haveCur = false
	}
	if s.srq != nil {
		return
	}
	for s.rq.head != s.rq.tail {
		s.complete(s.rq.take(), verbs.WCWRFlushErr, 0, 0, 0, 0, false)
	}
}

// rdRes records an executed READ or atomic request so a duplicate of it is
// answered again without executing it again.
type rdRes struct {
	used        bool
	atomic      bool
	first, last wire.PSN
	orig        uint64 // atomic: the value returned
	// The request as executed: a duplicate is answered only if it asks
	// for the same thing (READ: the same rkey and a range inside the
	// original; atomic: the same rkey and address).
	va   uint64
	rkey uint32
	len  uint64
}

// Limits on what a request may ask for.
const (
	maxMsgSize  = 1 << 31 // IBTA's largest message (PortInfo MaxMsgSz)
	maxReadPSNs = 1 << 22 // a quarter of the PSN space
)

// verdict is the outcome of the checks on a request packet; each error
// maps to one NAK code, as rxe's responder error states do (rxe_resp.c:
// RESPST_ERR_RNR, RESPST_ERR_... → AETH syndromes).
type verdict uint8

const (
	vOK      verdict = iota
	vRNR             // no receive WQE: RNR NAK (RC) or drop (UC, UD)
	vInvalid         // NAK invalid request
	vAccess          // NAK remote access error
	vOpErr           // NAK remote operational error
)

func (v verdict) String() string {
	switch v {
	case vOK:
		return "ok"
	case vRNR:
		return "rnr"
	case vInvalid:
		return "invalid-request"
	case vAccess:
		return "remote-access-error"
	case vOpErr:
		return "remote-operational-error"
	}
	return "verdict(?)"
}

// onRequestLocked handles a request packet on an RC QP and returns what
// the QP must do about it.
func (r *responder) onRequestLocked(qp *respQP, p *wire.Packet) respResult {
	psn := p.BTH.PSN()
	if d := psn.Sub(r.psn); d > 0 {
		qp.c.OutOfSeqRequest.Add(1)
		if !r.nakSent {
			r.nakSent = true
			r.sendNAKLocked(qp.tx, r.psn, wire.NAKSyndrome(wire.NAKPSNSeqError))
		}
		return r.result(false)
	} else if d < 0 {
		r.onDuplicateLocked(qp, p, psn)
		return r.result(false)
	}
	r.nakSent, r.started = false, true
	v, recvStatus := r.executeLocked(qp, p, psn)
	switch v {
	case vOK:
	case vRNR:
		qp.c.SendRNRErr.Add(1)
		r.sendNAKLocked(qp.tx, psn, wire.RNRNAKSyndrome(qp.minRNR))
	case vInvalid:
		r.nakErrorLocked(qp, psn, wire.NAKInvalidRequest, recvStatus)
	case vAccess:
		r.nakErrorLocked(qp, psn, wire.NAKRemoteAccessError, recvStatus)
	case vOpErr:
		r.nakErrorLocked(qp, psn, wire.NAKRemoteOperationalError, recvStatus)
	}
	return r.result(true)
}

// executeLocked checks and executes a request with the expected PSN. On
// success it advances the expected PSN and arranges the acknowledgement.
// recvStatus is the status a consumed receive WQE completes with on error.
func (r *responder) executeLocked(qp *respQP, p *wire.Packet, psn wire.PSN) (v verdict, recvStatus verbs.WCStatus) {
	info := p.Info
	rc := qp.rc
	// Opcode sequence (IBTA C9-91..C9-93).
	first, last := info.Has(wire.FlagFirst), info.Has(wire.FlagLast)
	if r.inMsg {
		if first || (r.inSend != info.Has(wire.FlagSend)) || !(info.Has(wire.FlagSend) || info.Has(wire.FlagWrite)) {
			return vInvalid, verbs.WCRemInvReqErr
		}
	} else if !first {
		return vInvalid, verbs.WCRemInvReqErr
	}
	// Payload length (IBTA C9-95): FIRST and MIDDLE carry exactly one MTU.
	n := len(p.Payload)
	switch {
	case first && last:
		if n > qp.pmtu {
			return vInvalid, verbs.WCLocLenErr
		}
	case first || info.Has(wire.FlagMiddle):
		if n != qp.pmtu {
			return vInvalid, verbs.WCLocLenErr
		}
	case n == 0 || n > qp.pmtu:
		return vInvalid, verbs.WCLocLenErr
	}
	access := qp.access
	switch {
	case info.Has(wire.FlagSend):
		v, recvStatus = r.recvSendLocked(&qp.recvRes, p, first, last)
	case info.Has(wire.FlagWrite):
		if access&verbs.AccessRemoteWrite == 0 {
			return vInvalid, verbs.WCRemInvReqErr
		}
		v, recvStatus = r.recvWriteLocked(&qp.recvRes, p, first, last)
	case info.Has(wire.FlagRead) && rc:
		if access&verbs.AccessRemoteRead == 0 {
			return vInvalid, verbs.WCRemInvReqErr
		}
		return r.recvReadLocked(qp, p, psn), 0
	case info.Has(wire.FlagAtomic) && rc:
		if access&verbs.AccessRemoteAtomic == 0 {
			return vInvalid, verbs.WCRemInvReqErr
		}
		return r.recvAtomicLocked(qp, p, psn), 0
	default:
		return vInvalid, verbs.WCRemInvReqErr
	}
	if v != vOK {
		return v, recvStatus
	}
	r.psn = psn.Add(1)
	if last {
		r.msn++
		r.inMsg = false
	} else {
		r.inMsg = true
		r.inSend = info.Has(wire.FlagSend)
	}
	if rc && p.BTH.AckReq() {
		r.ackPending, r.ackPSN = true, psn
	}
	return vOK, 0
}

// recvRes is what the responder's receive steps use of the QP: its
// receive queue or SRQ, its PD (the MRs a WRITE or SEND_WITH_INV names),
// its receive CQ and QPN, the path MTU and Q_Key, and the device's
// counters.
type recvRes struct {
	rq   *recvQueue
	srq  *SRQ
	pd   *PD
	cq   *CQ
	qpn  uint32
	pmtu int
	qkey uint32
	c    *Counters
}

// recvRes returns the QP's resources for the responder's receive steps.
func (qp *QP) recvRes() *recvRes {
	return &recvRes{rq: &qp.rq, srq: qp.srq, pd: qp.pd, cq: qp.recvCQ, qpn: qp.qpn, pmtu: qp.pmtu, qkey: qp.attr.QKey, c: &qp.dev.Counters}
}

// complete completes the receive WQE w (completeRecv).
func (s *recvRes) complete(w *recvWQE, st verbs.WCStatus, op verbs.WCOpcode, n uint32, imm uint32, flags verbs.WCFlags, solicited bool) {
	completeRecv(s.cq, s.qpn, w, st, op, n, imm, flags, solicited)
}

// takeRecvWQELocked moves the next receive WQE (from srq if the QP has
// one, else from rq, the QP's own queue) into r.cur. It returns false if
// there is none.
func (r *responder) takeRecvWQELocked(rq *recvQueue, srq *SRQ) bool {
	if r.haveCur {
		r.recvOff = 0 // kept from a UC message that was cut short: start over
		return true
	}
	if srq != nil {
		if !srq.pop(&r.cur) {
			return false
		}
	} else {
		if !rq.takeFeed() {
			return false
		}
		w := rq.take()
		r.cur.wrID, r.cur.length, r.cur.bad = w.wrID, w.length, w.bad
		r.cur.sgl.reset()
		r.cur.sgl.sges = append(r.cur.sgl.sges, w.sgl.sges...)
		r.cur.sgl.mrs = append(r.cur.sgl.mrs, w.sgl.mrs...)
		w.sgl.reset()
	}
	r.haveCur = true
	r.recvOff = 0
	return true
}

func (r *responder) recvSendLocked(s *recvRes, p *wire.Packet, first, last bool) (verdict, verbs.WCStatus) {
	if first {
		if !r.takeRecvWQELocked(s.rq, s.srq) {
			return vRNR, 0
		}
		if r.cur.bad {
			return vOpErr, verbs.WCLocProtErr
		}
	}
	n := uint64(len(p.Payload))
	if n > r.cur.length-r.recvOff {
		return vInvalid, verbs.WCLocLenErr
	}
	if p.IETH != nil && !canInvalidate(s.pd, s.qpn, p.IETH.RKey()) {
		s.c.DropBadInvalidate.Add(1)
		return vInvalid, verbs.WCRemInvReqErr
	}
	if !r.cur.sgl.copyIn(p.Payload, r.recvOff) {
		return vOpErr, verbs.WCLocProtErr
	}
	r.recvOff += n
	if last {
		var flags verbs.WCFlags
		var imm uint32
		if p.ImmDt != nil {
			flags, imm = verbs.WCWithImm, p.ImmDt.Imm()
		}
		if p.IETH != nil {
			flags, imm = verbs.WCWithInv, p.IETH.RKey()
			invalidate(s.pd, s.qpn, imm)
		}
		r.haveCur = false
		s.complete(&r.cur, verbs.WCSuccess, verbs.WCRecv, uint32(r.recvOff), imm, flags, p.BTH.SolicitedEvent())
		s.c.RDMARecvs.Add(1)
	}
	return vOK, 0
}

// canInvalidate says whether a SEND_WITH_INV arriving on QP qpn of pd
// may revoke rkey. IBTA (10.6.7, o10-37) lets it invalidate type 2 memory
// windows and fast-registered regions of the QP's PD, never a region
// registered with RegMR (rxe refuses those too: "mr type is not
// MEM_REG") nor a type 1 window; softrdma has no fast registration, and
// a window must have been bound through the QP the SEND arrived on.
func canInvalidate(pd *PD, qpn, rkey uint32) bool { return pd.canInvalidateWindow(rkey, qpn) }

// invalidate revokes remote access through rkey, for SEND_WITH_INV.
func invalidate(pd *PD, qpn, rkey uint32) { pd.invalidateWindow(rkey, qpn, true) }

// emptyWrite reports whether p is an RC RDMA WRITE ONLY of zero bytes,
// the shape of a keepalive probe (keepalive.go).
func emptyWrite(p *wire.Packet) bool {
	return p.BTH.Opcode() == wire.RCWriteOnly && p.RETH.DMALen() == 0
}

func (r *responder) recvWriteLocked(s *recvRes, p *wire.Packet, first, last bool) (verdict, verbs.WCStatus) {
	if first {
		va, rkey, dlen := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.DMALen())
		if dlen > 0 {
			mr, _, ok := s.pd.remoteMR(rkey, va, dlen, verbs.AccessRemoteWrite, s.qpn)
			if !ok {
				return vAccess, verbs.WCRemAccessErr
			}
			mr.mu.RUnlock()
		}
		r.writeVA, r.writeRKey, r.writeLeft, r.writeLen = va, rkey, dlen, dlen
	}
	if p.ImmDt != nil && !r.takeRecvWQELocked(s.rq, s.srq) {
		return vRNR, 0 // checked before any byte is written
	}
	n := uint64(len(p.Payload))
	if n > r.writeLeft || (last && n != r.writeLeft) {
		return vInvalid, verbs.WCLocLenErr
	}
	if n > 0 {
		mr, b, ok := s.pd.remoteMR(r.writeRKey, r.writeVA, n, verbs.AccessRemoteWrite, s.qpn)
		if !ok {
			return vAccess, verbs.WCRemAccessErr
		}
		copyLastByteLast(b, p.Payload)
		mr.mu.RUnlock()
	}
	r.writeVA += n
	r.writeLeft -= n
	if last && p.ImmDt != nil {
		r.haveCur = false
		s.complete(&r.cur, verbs.WCSuccess, verbs.WCRecvRDMAWithImm, uint32(r.writeLen), p.ImmDt.Imm(), verbs.WCWithImm, p.BTH.SolicitedEvent())
	}
	return vOK, 0
}

func (r *responder) recvReadLocked(qp *respQP, p *wire.Packet, psn wire.PSN) verdict {
	if len(r.res) == 0 {
		return vInvalid // max_dest_rd_atomic is 0
	}
	va, rkey, dlen := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.DMALen())
	if dlen > maxMsgSize || packetsFor(dlen, qp.pmtu) > maxReadPSNs {
		// Longer than a message may be (IBTA: 2^31), or so many
		// responses that their PSNs would cover a quarter of the PSN
		// space (a 2 GiB READ at MTU 256 covers half, where "older" and
		// "newer" stop meaning anything).
		qp.c.DropTooLong.Add(1)
		return vInvalid
	}
	if dlen > 0 {
		mr, _, ok := qp.pd.remoteMR(rkey, va, dlen, verbs.AccessRemoteRead, qp.qpn)
		if !ok {
			return vAccess
		}
		mr.mu.RUnlock()
	}
	npkts := packetsFor(dlen, qp.pmtu)
	slot := r.nextResLocked()
	*slot = rdRes{used: true, first: psn, last: psn.Add(npkts - 1), va: va, rkey: rkey, len: dlen}
	r.psn = psn.Add(npkts)
	r.msn++
	r.sendReadResponsesLocked(qp, va, rkey, dlen, psn)
	return vOK
}

// packetsFor is how many packets of pmtu bytes carry n bytes (one for 0).
func packetsFor(n uint64, pmtu int) uint32 {
	if n == 0 {
		return 1
	}
	return uint32((n + uint64(pmtu) - 1) / uint64(pmtu))
}

// nextResLocked returns the replay ring's next slot, the oldest record.
func (r *responder) nextResLocked() *rdRes {
	slot := &r.res[r.resNext]
	r.resNext++
	if r.resNext == len(r.res) {
		r.resNext = 0
	}
	return slot
}

// sendReadResponsesLocked sends the responses to a READ of dlen bytes at va,
// numbered from psn. If the memory became inaccessible meanwhile it sends a
// remote access NAK instead and fails the QP.
func (r *responder) sendReadResponsesLocked(qp *respQP, va uint64, rkey uint32, dlen uint64, psn wire.PSN) {
	r.flushAckLocked(qp.tx)
	npkts := packetsFor(dlen, qp.pmtu)
	for i := uint32(0); i < npkts; i++ {
		off := uint64(i) * uint64(qp.pmtu)
		n := min(uint64(qp.pmtu), dlen-off)
		var op wire.Opcode
		switch {
		case npkts == 1:
			op = wire.RCReadResponseOnly
		case i == 0:
			op = wire.RCReadResponseFirst
		case i+1 == npkts:
			op = wire.RCReadResponseLast
		default:
			op = wire.RCReadResponseMiddle
		}
		var mr *MR
		var src []byte
		if n > 0 {
			var ok bool
			mr, src, ok = qp.pd.remoteMR(rkey, va+off, n, verbs.AccessRemoteRead, qp.qpn)
			if !ok {
				r.nakErrorLocked(qp, psn.Add(i), wire.NAKRemoteAccessError, 0)
				return
			}
		}
		info := op.Info()
		var b []byte
		if mr != nil && qp.gather && n >= gatherMin {
			// The transport gathers the payload from the MR (see
			// newGatherPacketLocked); the packet pins the MR till then.
			mr.pins.Add(1)
			mr.mu.RUnlock()
			b = qp.tx.answerGatherLocked(op, psn.Add(i), src, mr)
			mr = nil
		} else {
			b = qp.tx.answerLocked(op, psn.Add(i), int(n))
		}
		if info.Has(wire.FlagAETH) {
			wire.AETH(b[info.AETHOff:]).Encode(&wire.AETHFields{Syndrome: wire.ACKSyndrome(0x1F), MSN: r.msn & 0xFFFFFF})
		}
		if mr != nil {
			memmove.Copy(b[info.Length:info.Length+int(n)], src)
			mr.mu.RUnlock()
		}
	}
}

func (r *responder) recvAtomicLocked(qp *respQP, p *wire.Packet, psn wire.PSN) verdict {
	if len(r.res) == 0 {
		return vInvalid
	}
	a := p.AtomicETH
	va := a.VA()
	if va%8 != 0 {
		return vInvalid // IBTA C9-?: misaligned atomic → invalid request
	}
	mr, b, ok := qp.pd.remoteMR(a.RKey(), va, 8, verbs.AccessRemoteAtomic, qp.qpn)
	if !ok {
		return vAccess
	}
	// The target is 8-byte aligned in memory (an MR's addresses keep the
	// memory's low 12 bits), so
	// the operation is atomic against other QPs and the CPU as well.
	word := (*uint64)(unsafe.Pointer(&b[0]))
	var orig uint64
	if p.BTH.Opcode() == wire.RCFetchAdd {
		add := a.SwapAdd()
		orig = atomic.AddUint64(word, add) - add
	} else {
		cmp, swap := a.Compare(), a.SwapAdd()
		for {
			orig = atomic.LoadUint64(word)
			if orig != cmp || atomic.CompareAndSwapUint64(word, orig, swap) {
				break
			}
		}
	}
	mr.mu.RUnlock()
	slot := r.nextResLocked()
	*slot = rdRes{used: true, atomic: true, first: psn, last: psn, orig: orig, va: va, rkey: a.RKey(), len: 8}
	r.psn = psn.Add(1)
	r.msn++
	r.sendAtomicAckLocked(qp.tx, psn, orig)
	return vOK
}

func (r *responder) sendAtomicAckLocked(tx answerTx, psn wire.PSN, orig uint64) {
	r.flushAckLocked(tx)
	b := tx.answerLocked(wire.RCAtomicAck, psn, 0)
	info := wire.RCAtomicAck.Info()
	wire.AETH(b[info.AETHOff:]).Encode(&wire.AETHFields{Syndrome: wire.ACKSyndrome(0x1F), MSN: r.msn & 0xFFFFFF})
	wire.AtomicAckETH(b[info.AtomicAckETHOff:]).SetOrigData(orig)
}

// onDuplicateLocked answers a request whose PSN is older than expected
// (IBTA 9.7.5.2.2): SEND and WRITE are acknowledged again, READ is
// answered again, an atomic gets its recorded result. Nothing is executed
// twice. A duplicate READ or atomic must match the request it repeats (as
// rxe checks): the same rkey, a range inside the original READ (a resumed
// READ asks for its tail) or the same atomic address, and the QP must
// still allow the access; anything else is dropped silently and counted
// — it is not the requester's retry but a forgery or a confused peer, and
// answering it would read memory nobody asked for.
func (r *responder) onDuplicateLocked(qp *respQP, p *wire.Packet, psn wire.PSN) {
	if !r.started && !(emptyWrite(p) && psn == r.psn.Add(^uint32(0))) {
		// (The one exception: a keepalive probe from a peer that has
		// sent nothing yet repeats the PSN before its first. Its ACK
		// goes to the QP's peer, tells it nothing it did not know, and
		// executes nothing.)
		qp.c.DropEarlyDuplicate.Add(1)
		return
	}
	qp.c.DuplicateRequest.Add(1)
	info := p.Info
	switch {
	case info.Has(wire.FlagSend) || info.Has(wire.FlagWrite):
		// ACKed again with or without AckReq, as rxe does (C9-105): a
		// requester resending from the middle of a message sends packets
		// without it, and waits for this ACK to end its retries. One ACK
		// per receive batch however many duplicates it holds.
		r.ackPending, r.ackPSN = true, r.psn.Add(^uint32(0))
	case info.Has(wire.FlagRead):
		va, rkey, dlen := p.RETH.VA(), p.RETH.RKey(), uint64(p.RETH.DMALen())
		for i := range r.res {
			s := &r.res[i]
			if !s.used || s.atomic || !psn.InWindow(s.first, uint32(s.last.Sub(s.first))+1) {
				continue
			}
			// The responses from psn on cover the original's bytes from
			// (psn-first) MTUs on: a resumed READ asks for exactly those.
			skip := uint64(psn.Sub(s.first)) * uint64(qp.pmtu)
			if rkey != s.rkey || skip > s.len || va != s.va+skip || dlen != s.len-skip ||
				qp.access&verbs.AccessRemoteRead == 0 {
				qp.c.DropBadReplay.Add(1)
				return
			}
			r.sendReadResponsesLocked(qp, va, rkey, dlen, psn)
			return
		}
	case info.Has(wire.FlagAtomic):
		for i := range r.res {
			s := &r.res[i]
			if s.used && s.atomic && s.first == psn {
				if p.AtomicETH.RKey() != s.rkey || p.AtomicETH.VA() != s.va || qp.access&verbs.AccessRemoteAtomic == 0 {
					qp.c.DropBadReplay.Add(1)
					return
				}
				r.sendAtomicAckLocked(qp.tx, psn, s.orig)
				return
			}
		}
	}
}

// sendNAKLocked sends an ACK packet with a NAK or RNR NAK syndrome.
func (r *responder) sendNAKLocked(tx answerTx, psn wire.PSN, syndrome uint8) {
	r.flushAckLocked(tx)
	r.sendAckLocked(tx, psn, syndrome)
}

func (r *responder) sendAckLocked(tx answerTx, psn wire.PSN, syndrome uint8) {
	b := tx.answerLocked(wire.RCAck, psn, 0)
	wire.AETH(b[wire.RCAck.Info().AETHOff:]).Encode(&wire.AETHFields{Syndrome: syndrome, MSN: r.msn & 0xFFFFFF})
}

// flushAckLocked sends the coalesced ACK, if one is due.
func (r *responder) flushAckLocked(tx answerTx) {
	if r.ackPending {
		r.ackPending = false
		r.sendAckLocked(tx, r.ackPSN, wire.ACKSyndrome(0x1F))
	}
}

// nakErrorLocked reports a responder error: a NAK with code and the
// receive WQE in use (if any) completed with recvStatus. It records the
// failure for the request's respResult: the QP moves to ERR once the
// responder returns.
func (r *responder) nakErrorLocked(qp *respQP, psn wire.PSN, code wire.NAKCode, recvStatus verbs.WCStatus) {
	qp.c.NAKsSent.Add(1)
	r.sendNAKLocked(qp.tx, psn, wire.NAKSyndrome(code))
	if r.haveCur {
		if recvStatus == verbs.WCSuccess {
			recvStatus = verbs.WCRemInvReqErr
		}
		r.haveCur = false
		qp.complete(&r.cur, recvStatus, 0, 0, 0, 0, false)
	}
	r.inMsg = false
	ev := verbs.EventQPFatal
	switch code {
	case wire.NAKInvalidRequest:
		ev = verbs.EventQPReqErr
	case wire.NAKRemoteAccessError:
		ev = verbs.EventQPAccessErr
	}
	r.failed, r.failEvent = true, ev
}

// onUCRequestLocked handles a request on a UC QP: no acknowledgements; a
// PSN gap drops the message in progress and everything until the next
// FIRST or ONLY packet.
func (r *responder) onUCRequestLocked(qp *respQP, p *wire.Packet) (expected bool) {
	psn := p.BTH.PSN()
	expected = psn == r.psn
	first := p.Info.Has(wire.FlagFirst)
	if psn != r.psn {
		qp.c.DropUC.Add(1)
		r.inMsg = false // the receive WQE (if any) stays for the next message
		r.psn = psn
		if !first {
			r.ucDrop = true
			r.psn = psn.Add(1)
			return expected
		}
	}
	if r.ucDrop && !first {
		qp.c.DropUC.Add(1)
		r.psn = psn.Add(1)
		return expected
	}
	r.ucDrop = false
	if v, _ := r.executeLocked(qp, p, psn); v != vOK {
		// UC drops what it cannot place (IBTA 9.8.3.2); the QP stays up.
		if v == vRNR {
			qp.c.DropNoRecvWQE.Add(1)
		} else {
			qp.c.DropUC.Add(1)
		}
		r.inMsg = false
		r.ucDrop = !p.Info.Has(wire.FlagLast)
		r.psn = psn.Add(1)
	}
	return expected
}

// onUDRequestLocked delivers a UD SEND: Q_Key check, a receive WQE, the
// 40-byte network header, then the payload.
func (r *responder) onUDRequestLocked(s *recvRes, p *wire.Packet, pk *transport.Datagram) {
	if p.DETH == nil || p.DETH.QKey() != s.qkey {
		s.c.DropQKey.Add(1)
		return
	}
	if len(p.Payload) > s.pmtu {
		s.c.DropTooLong.Add(1) // a UD message is one packet of at most the path MTU
		return
	}
	if !r.takeRecvWQELocked(s.rq, s.srq) {
		s.c.DropNoRecvWQE.Add(1)
		return
	}
	r.haveCur = false
	w := &r.cur
	n := uint64(grhLen + len(p.Payload))
	wc := verbs.WC{WRID: w.wrID, QPNum: s.qpn, Opcode: verbs.WCRecv, SrcQP: p.DETH.SrcQP(), WCFlags: verbs.WCWithGRH}
	switch {
	case w.bad:
		wc.Status = verbs.WCLocProtErr
	case n > w.length:
		wc.Status = verbs.WCLocLenErr
	default:
		var grh [grhLen]byte
		buildGRH(grh[:], pk, len(p.Raw))
		if !w.sgl.copyIn(grh[:], 0) || !w.sgl.copyIn(p.Payload, grhLen) {
			wc.Status = verbs.WCLocProtErr
			break
		}
		wc.ByteLen = uint32(n)
		if p.ImmDt != nil {
			wc.WCFlags |= verbs.WCWithImm
			wc.ImmData = p.ImmDt.Imm()
		}
		s.c.RDMARecvs.Add(1)
	}
	if wc.Status != verbs.WCSuccess {
		wc.Opcode, wc.ByteLen, wc.WCFlags = verbs.WCRecv, 0, 0
	}
	s.cq.push(&wc, wc.Status != verbs.WCSuccess || p.BTH.SolicitedEvent())
	w.sgl.reset()
}
