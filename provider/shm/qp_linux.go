package shm

// A QP's data path, requester side (PostSend, then progress):
//
//	PostSend ─ validate, copy the WR into a WQE ─► execute in order:
//	    WRITE     grant(rkey) ─► bounds ─► memcpy into the peer's pages (last byte last)
//	    READ      grant(rkey) ─► bounds ─► memcpy out of them into the local SGEs
//	    atomics   grant(rkey) ─► alignment ─► sync/atomic on the shared word
//	    SEND*     slots of the QP's ring (WRITE_WITH_IMM: one slot after the memcpy)
//	retire ─ in order, once the peer's consumer index passed the WQE's slots
//	         (or at once for one-sided ops with nothing before them); a NAK
//	         fails its WQE; an error moves the QP to ERR and flushes the rest.
//
// Responder side (progress): peek the inbox ring ─► a receive WQE (none:
// RNR, waiting min_rnr_timer × the requester's rnr_retry, then NAK RNR
// retry exceeded) ─► copy into it ─► complete ─► pop (the ACK). Too long
// → the receive completes WCLocLenErr and the requester WCRemInvReqErr; a
// bad receive lkey → WCLocProtErr / WCRemOpErr; both move the QP to ERR.
//
// A grant is the peer's answer to "may QP a map rkey k": the owner checks
// QP, PD, access and the MR, then passes the memfd. Grants are cached per
// (QP, rkey) until the owner revokes them (DeregMR, the owner's QP
// leaving RTS, the connection closing; see grants_linux.go).

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/internal/memmove"
	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// QP is a queue pair: RC over shared-memory rings and mapped regions, or
// UD over rings shared with each peer device (ud_linux.go). PostSend and PostRecv are safe for
// concurrent use.
type QP struct {
	dev    *Device
	pd     *PD
	typ    verbs.QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	sigAll bool
	init   verbs.QPInitAttr
	qpn    uint32

	// wake is a peer to wake once mu is released (ringLocked, unlock).
	wake *conn

	// Read by conn readers without mu.
	peer    atomic.Uint64
	destQPN atomic.Uint32
	access  atomic.Uint32
	busy    atomic.Int32  // progress looks at the QP
	refusal atomic.Uint32 // a refused access's event for progress to fail the QP with (refuse_linux.go)

	mu      sync.Mutex
	state   verbs.QPState
	attr    verbs.QPAttr
	conn    *conn
	out     *ring // requests we produce
	outFD   int
	outMem  []byte
	in      *ring // the peer's requests, which we consume
	inMem   []byte
	inDone  bool  // stopped consuming (RNR retry exceeded)
	rnrFrom int64 // nanotime the head SEND found no receive WQE, 0 none
	failed  bool  // the requester failed: execute nothing more

	sq                   []sendWQE
	sqHead, sqNext, sqTl uint64
	awaited              uint64 // sqNext after the last executed WQE that completes to the CQ
	retireLooks          uint64 // retireLocked calls (retireDue)
	rq                   []recvWQE
	rqHead, rqTail       uint64
	cur                  recvWQE
	haveCur              bool
	recvOff              uint64
	ud                   udQP // UD: the connection datagrams go through (ud_linux.go)
	dead                 bool
	lastGrant            *grant // the grant of the last one-sided op, checked for revocation on use
	lastRKey             uint32
	copyBuf              []byte // COPY_WRITE chunks, allocated on first use

	given qpGrants // what peers were granted through this QP (grants_linux.go)
}

type sendWQE struct {
	wrID       uint64
	opcode     verbs.WROpcode
	signaled   bool
	solicited  bool
	sgl        sgl
	inline     []byte
	isInline   bool
	imm        uint32
	invRKey    uint32
	rkey       uint32
	raddr      uint64
	cmpAdd     uint64
	swap       uint64
	length     uint64
	status     verbs.WCStatus
	executed   bool
	ringOp     bool
	sent       uint64
	startSeq   uint64
	endSeq     uint64
	ah         *AH
	remoteQPN  uint32
	qkey       uint32
	localError bool
}

// CreateQP creates an RC or UD queue pair in RESET.
func (pd *PD) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	const op = "CreateQP"
	if attr == nil {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "attr is nil")
	}
	if attr.QPType != verbs.QPTypeRC && attr.QPType != verbs.QPTypeUD {
		return nil, verbs.Errorf(op, verbs.ErrNotSupported, "%v QPs: the shm provider offers RC and UD", attr.QPType)
	}
	scq, ok1 := attr.SendCQ.(*CQ)
	rcq, ok2 := attr.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq.dev != pd.dev || rcq.dev != pd.dev {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "SendCQ and RecvCQ must be CQs of this shm device")
	}
	if err := pd.objs.Check(op, "PD"); err != nil {
		return nil, err
	}
	if scq.ring.Dead() || rcq.ring.Dead() {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "SendCQ and RecvCQ must be live CQs of this device")
	}
	c := attr.Cap
	if c.MaxSendWR == 0 || c.MaxSendWR > maxQPWR || c.MaxRecvWR > maxQPWR || c.MaxSendSGE > maxSGE || c.MaxRecvSGE > maxSGE || c.MaxInlineData > maxInline {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "Cap %+v: work requests 1..%d, SGEs ≤ %d, inline ≤ %d", c, maxQPWR, maxSGE, maxInline)
	}
	var srq *SRQ
	if attr.SRQ != nil {
		s, ok := attr.SRQ.(*SRQ)
		if !ok || s.pd.dev != pd.dev || s.qps.Dead() {
			return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "SRQ must be a live SRQ of this shm device")
		}
		srq = s
	} else if c.MaxRecvWR == 0 {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "Cap.MaxRecvWR must be at least 1 without an SRQ")
	}
	c.MaxSendSGE, c.MaxRecvSGE = max(c.MaxSendSGE, 1), max(c.MaxRecvSGE, 1)
	qp := &QP{dev: pd.dev, pd: pd, typ: attr.QPType, sendCQ: scq, recvCQ: rcq, srq: srq, sigAll: attr.SigAll, init: *attr, outFD: -1}
	qp.init.Cap = c
	qp.sq = make([]sendWQE, c.MaxSendWR)
	for i := range qp.sq {
		qp.sq[i].sgl = make(sgl, 0, c.MaxSendSGE)
		if c.MaxInlineData > 0 {
			qp.sq[i].inline = make([]byte, 0, c.MaxInlineData)
		}
	}
	if srq == nil {
		qp.rq = make([]recvWQE, c.MaxRecvWR)
		for i := range qp.rq {
			qp.rq[i].sgl = make(sgl, 0, c.MaxRecvSGE)
		}
	}
	qp.cur.sgl = make(sgl, 0, max(c.MaxRecvSGE, maxSGE))
	d := pd.dev
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, verbs.Errorf(op, verbs.ErrDestroyed, "device closed")
	}
	qp.qpn = randKey(d.qpByNum, 0xFFFFFF)
	d.qpByNum[qp.qpn] = qp
	d.setQPsLocked()
	d.mu.Unlock()
	scq.qps.Add(1)
	rcq.qps.Add(1)
	if srq != nil {
		srq.qps.Add(1)
	}
	pd.objs.Add(1)
	return qp, nil
}

func (qp *QP) QPNum() uint32          { return qp.qpn }
func (qp *QP) Type() verbs.QPType     { return qp.typ }
func (qp *QP) Context() verbs.Context { return qp.dev }

// State returns the current state.
func (qp *QP) State() verbs.QPState {
	qp.mu.Lock()
	defer qp.unlock()
	return qp.state
}

// Query returns the attributes.
func (qp *QP) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	qp.mu.Lock()
	defer qp.unlock()
	a := qp.attr
	a.QPState, a.CurQPState, a.Cap = qp.state, qp.state, qp.init.Cap
	return a, qp.init, nil
}

// Modify changes state and attributes, validated by verbs.CheckModify.
// INIT → RTR on an RC QP connects to the device the AV's DGID names and
// hands it this QP's request ring.
func (qp *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	var old *conn
	err := qp.modify(attr, mask, &old)
	if old != nil {
		qp.dropStaleRings(old)
	}
	return err
}

// modify is Modify under the QP's lock; a move to RESET from a connected
// state leaves the old connection in *reset.
func (qp *QP) modify(attr *verbs.QPAttr, mask verbs.QPAttrMask, reset **conn) error {
	qp.mu.Lock()
	defer qp.unlock()
	if qp.dead {
		return verbs.Errorf("ModifyQP", verbs.ErrDestroyed, "QP destroyed")
	}
	next, err := verbs.CheckModify(qp.state, qp.typ, attr, mask)
	if err != nil {
		return err
	}
	if next == verbs.QPStateRTR && qp.state == verbs.QPStateInit && qp.typ == verbs.QPTypeRC {
		if err := qp.connectLocked(attr); err != nil {
			return err
		}
	}
	a := &qp.attr
	if mask&verbs.QPAttrAccessFlags != 0 {
		if attr.QPAccessFlags != a.QPAccessFlags {
			// Grants given carry the old flags (and a writable fd
			// perhaps): revoke them; the peer asks again.
			if r, wasOpen := qp.closeGrantsLocked(); wasOpen {
				qp.openGrantsLocked()
				r.revokeLater(qp.dev)
			}
		}
		a.QPAccessFlags = attr.QPAccessFlags
		qp.access.Store(uint32(attr.QPAccessFlags))
	}
	if mask&verbs.QPAttrQKey != 0 {
		a.QKey = attr.QKey
	}
	if mask&verbs.QPAttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&verbs.QPAttrPort != 0 {
		a.PortNum = attr.PortNum
	}
	if mask&verbs.QPAttrAV != 0 {
		a.AHAttr = attr.AHAttr
	}
	if mask&verbs.QPAttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
	}
	if mask&verbs.QPAttrDestQPN != 0 {
		a.DestQPNum = attr.DestQPNum
	}
	if mask&verbs.QPAttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN
	}
	if mask&verbs.QPAttrSQPSN != 0 {
		a.SQPSN = attr.SQPSN
	}
	if mask&verbs.QPAttrTimeout != 0 {
		a.Timeout = attr.Timeout
	}
	if mask&verbs.QPAttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
	}
	if mask&verbs.QPAttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
		if qp.out != nil {
			qp.out.setRNRRetry(attr.RNRRetry)
		}
	}
	if mask&verbs.QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
	}
	switch next {
	case verbs.QPStateReset:
		*reset = qp.conn
		qp.resetLocked()
	case verbs.QPStateErr:
		if qp.state != verbs.QPStateErr && qp.typ == verbs.QPTypeRC {
			qp.retireNowLocked() // what the peer took is not flushed
		}
		qp.errorLocked()
	default:
		qp.state = next
	}
	return nil
}

// connectLocked creates the QP's request ring and hands it to the peer.
func (qp *QP) connectLocked(attr *verbs.QPAttr) error {
	if !attr.AHAttr.IsGlobal {
		return verbs.Errorf("ModifyQP", verbs.ErrInvalidArgument, "shm QPs address peers by GID: set AHAttr.IsGlobal and GRH.DGID to the peer device's GID")
	}
	peer, ok := peerOf(attr.AHAttr.GRH.DGID)
	if !ok {
		return verbs.Errorf("ModifyQP", verbs.ErrInvalidArgument, "DGID %v is not a shm device's GID (fd73:686d::/32)", attr.AHAttr.GRH.DGID)
	}
	c, err := qp.dev.connTo(peer, "ModifyQP")
	if err != nil {
		return err
	}
	if !c.acquire() {
		return verbs.Errorf("ModifyQP", verbs.ErrUnreachable, "the connection to device %016x closed as the QP connected", peer)
	}
	fd, mem, err := newMemfd("softrdma-shm-ring", ringBytes)
	if err != nil {
		c.release()
		return verbs.Errorf("ModifyQP", verbs.ErrInvalidArgument, "ring memfd: %v", err)
	}
	if err := c.send(&ctrl{typ: mRing, a: qp.qpn, b: attr.DestQPNum}, nil, fd, false); err != nil {
		c.release()
		unix.Munmap(mem)
		unix.Close(fd)
		return verbs.Errorf("ModifyQP", verbs.ErrNotFound, "peer device: %v", err)
	}
	qp.conn, qp.out, qp.outFD, qp.outMem = c, newRing(mem), fd, mem
	qp.peer.Store(peer)
	qp.destQPN.Store(attr.DestQPNum)
	qp.busy.Store(1)
	qp.openGrantsLocked()
	return nil
}

// unmapLocked drops the rings.
func (qp *QP) unmapLocked() {
	qp.busy.Store(0)
	if qp.outMem != nil {
		unix.Munmap(qp.outMem)
		unix.Close(qp.outFD)
		qp.out, qp.outMem, qp.outFD = nil, nil, -1
	}
	if qp.inMem != nil {
		unix.Munmap(qp.inMem)
		qp.in, qp.inMem = nil, nil
	}
	if qp.conn != nil {
		qp.conn.release()
	}
	qp.dropUDLocked()
	qp.conn = nil
	qp.lastGrant = nil
	qp.peer.Store(0)
	qp.destQPN.Store(0)
}

// dropStaleRings forgets the rings the peer sent over c for the QP's old
// connection that the QP never took: taken for the next connection, such
// a ring would stay empty for ever (the peer writes to its new one). A
// ring may still be in c's control stream, so it first makes a round trip
// on c, a revocation of key 0, which no MR has (randKey): the peer
// answers after every message it sent before, so they have all been
// handled when the answer arrives. It runs without the QP's lock, which
// the peer's messages may need.
func (qp *QP) dropStaleRings(c *conn) {
	if !c.dead.Load() {
		c.call(&ctrl{typ: mRevoke, c: 0}, nil, 2*time.Second)
	}
	d := qp.dev
	d.mu.Lock()
	for k, m := range d.inboxes {
		if k.local == qp.qpn && k.peer == c.peerID {
			m.unmap()
			delete(d.inboxes, k)
		}
	}
	d.mu.Unlock()
}

func (qp *QP) resetLocked() {
	qp.revokeGrantsLater()
	qp.unmapLocked()
	qp.state = verbs.QPStateReset
	// The QP's completions go with it, as on the RoCEv2 provider
	// (verbsobj.CQRing.Clean).
	qp.sendCQ.ring.Clean(qp.qpn)
	if qp.recvCQ != qp.sendCQ {
		qp.recvCQ.ring.Clean(qp.qpn)
	}
	qp.sqHead, qp.sqNext, qp.sqTl, qp.awaited = 0, 0, 0, 0
	qp.rqHead, qp.rqTail = 0, 0
	qp.haveCur, qp.inDone, qp.failed, qp.rnrFrom = false, false, false, 0
	qp.attr = verbs.QPAttr{}
	qp.access.Store(0)
	qp.refusal.Store(0) // after revokeGrantsLater: no refusal is noted from then on
}

// errorLocked moves the QP to ERR: the oldest unretired send WQE
// completes with its own status if it failed, every other one with
// WCWRFlushErr, then every receive WQE. The peer's requests still in our
// inbox, and any it sends later, fail at the peer with WCRetryExcErr, as
// they would after its retries ran out on a wire; the peer's QP itself
// stays up until then.
func (qp *QP) errorLocked() {
	if qp.state == verbs.QPStateErr {
		return
	}
	qp.state = verbs.QPStateErr
	qp.revokeGrantsLater()
	if qp.in != nil && !qp.inDone {
		qp.in.setNak(verbs.WCRetryExcErr)
		qp.inDone = true
	}
	for qp.sqHead != qp.sqTl {
		w := &qp.sq[qp.sqHead%uint64(len(qp.sq))]
		st := w.status
		if st == verbs.WCSuccess || !w.executed {
			st = verbs.WCWRFlushErr
		}
		qp.completeSendLocked(w, st)
	}
	qp.sqNext = qp.sqHead
	if qp.haveCur {
		qp.completeRecvLocked(&qp.cur, verbs.WCWRFlushErr, 0, 0, 0, 0, false)
		qp.haveCur = false
	}
	for qp.rqHead != qp.rqTail {
		w := &qp.rq[qp.rqHead%uint64(len(qp.rq))]
		qp.rqHead++
		qp.completeRecvLocked(w, verbs.WCWRFlushErr, 0, 0, 0, 0, false)
	}
	if qp.conn != nil && qp.conn.bell != nil && !qp.conn.dead.Load() {
		qp.ringLocked()
	}
	if qp.srq != nil {
		// IBTA 11.6.3.1: a QP on an SRQ that went to ERR takes no more
		// of its WQEs; the application may now destroy it.
		qp.dev.event(verbs.AsyncEvent{Type: verbs.EventQPLastWQEReached, QP: qp})
	}
}

// flushAfterFailureLocked moves the QP to ERR after its oldest WQE
// completed with an error: every later WQE is flushed, even one that
// executed and failed too (a responder that went to ERR on the first
// refuses the next; on a wire the NAK of the first flushes it).
func (qp *QP) flushAfterFailureLocked() {
	for i := qp.sqHead; i != qp.sqTl; i++ {
		qp.sq[i%uint64(len(qp.sq))].status = verbs.WCWRFlushErr
	}
	qp.errorLocked()
}

// peerGone is called when the peer's device disconnected. What the
// peer consumed before it went completes first, as its ACK would have on
// a wire: its consumer index in our ring is its last word (a peer that
// took our last SENDs and then disconnected and exited must not see them
// flushed at our end).
//
// If nothing of ours is left in flight, the QP stays up for
// peerGoneGrace before it moves to ERR. On a wire nothing tells an idle
// QP that its peer left (a keepalive finds out, seconds later), and
// programs count on that: ibv_rc_pingpong's server, still polling for
// its last SEND's completion when the client exits, failed on the flush
// of the receives it had posted beyond the last message.
func (qp *QP) peerGone() {
	qp.mu.Lock()
	defer qp.unlock()
	if qp.state != verbs.QPStateErr {
		qp.retireNowLocked()
	}
	if out := qp.out; out != nil && qp.state != verbs.QPStateErr && qp.sqHead == qp.sqTl {
		time.AfterFunc(time.Duration(peerGoneGrace.Load()), func() { qp.peerGoneIdle(out) })
		return
	}
	qp.errorLocked()
	qp.unmapLocked()
}

// peerGoneGrace is how long (in ns) a QP with nothing in flight stays up
// after its peer left: about what a wire's keepalive would take to
// notice. Tests shorten it.
var peerGoneGrace atomic.Int64

func init() { peerGoneGrace.Store(int64(time.Second)) }

// peerGoneIdle ends a QP's grace after its peer left (peerGone), unless
// the QP was destroyed or connected anew (its ring is not out) since.
// What it posted in the meantime nobody took: it is flushed.
func (qp *QP) peerGoneIdle(out *ring) {
	qp.mu.Lock()
	defer qp.unlock()
	if qp.dead || qp.out != out {
		return
	}
	if qp.state != verbs.QPStateErr {
		qp.retireNowLocked()
	}
	qp.errorLocked()
	qp.unmapLocked()
}

func (qp *QP) completeSendLocked(w *sendWQE, st verbs.WCStatus) {
	if w.signaled || st != verbs.WCSuccess {
		wc := verbs.WC{WRID: w.wrID, Status: st, Opcode: w.opcode.WCOpcode(), QPNum: qp.qpn}
		if st == verbs.WCSuccess {
			wc.ByteLen = uint32(w.length)
		}
		qp.sendCQ.push(&wc, st != verbs.WCSuccess)
	}
	qp.sqHead++
}

func (qp *QP) completeRecvLocked(w *recvWQE, st verbs.WCStatus, op verbs.WCOpcode, n, imm uint32, flags verbs.WCFlags, solicited bool) {
	wc := verbs.WC{WRID: w.wrID, Status: st, Opcode: op, ByteLen: n, ImmData: imm, WCFlags: flags, QPNum: qp.qpn}
	if st != verbs.WCSuccess {
		wc.Opcode, wc.ByteLen, wc.WCFlags = verbs.WCRecv, 0, 0
	}
	qp.recvCQ.push(&wc, solicited || st != verbs.WCSuccess)
}

func (qp *QP) opcodeAllowed(op verbs.WROpcode) bool {
	if qp.typ == verbs.QPTypeUD {
		return op == verbs.WRSend || op == verbs.WRSendWithImm
	}
	return op <= verbs.WRSendWithInv
}

// PostSend posts a chain of send requests and starts executing them.
func (qp *QP) PostSend(wr *verbs.SendWR) error {
	qp.dev.markActive()
	qp.mu.Lock()
	defer qp.unlock()
	i := 0
	var err error
	for ; wr != nil; i, wr = i+1, wr.Next {
		if err = qp.postOneLocked(wr); err != nil {
			break
		}
	}
	if qp.typ == verbs.QPTypeRC {
		qp.executeLocked()
		if qp.sqTl-qp.sqHead >= uint64(len(qp.sq))/2 {
			qp.retireLocked() // room for the next posts; else a poll retires
		}
	}
	if err != nil {
		return &verbs.PostError{Index: i, WRID: wr.WRID, Err: err}
	}
	return nil
}

var (
	errSQFull   = verbs.Errorf("PostSend", verbs.ErrQueueFull, "the send queue is full; poll the send CQ")
	errNotRTS   = verbs.Errorf("PostSend", verbs.ErrInvalidState, "the QP is not in RTS")
	errRQFull   = verbs.Errorf("PostRecv", verbs.ErrQueueFull, "the receive queue is full")
	errRecvSt   = verbs.Errorf("PostRecv", verbs.ErrInvalidState, "receives may be posted from INIT on")
	errUsesSRQ  = verbs.Errorf("PostRecv", verbs.ErrInvalidArgument, "the QP takes receive WQEs from its SRQ; post there")
	errQPFreed  = verbs.Errorf("PostSend", verbs.ErrDestroyed, "QP destroyed")
	errTooMany  = verbs.Errorf("PostSend", verbs.ErrInvalidArgument, "more SGEs than Cap.MaxSendSGE")
	errTooManyR = verbs.Errorf("PostRecv", verbs.ErrInvalidArgument, "more SGEs than Cap.MaxRecvSGE")
)

func (qp *QP) postOneLocked(wr *verbs.SendWR) error {
	const op = "PostSend"
	if qp.dead {
		return errQPFreed
	}
	if qp.state != verbs.QPStateRTS && qp.state != verbs.QPStateErr {
		return errNotRTS
	}
	if !qp.opcodeAllowed(wr.Opcode) {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "%v is not available on a %v QP", wr.Opcode, qp.typ)
	}
	if len(wr.SGList) > int(qp.init.Cap.MaxSendSGE) {
		return errTooMany
	}
	if qp.sqTl-qp.sqHead == uint64(len(qp.sq)) {
		return errSQFull
	}
	w := &qp.sq[qp.sqTl%uint64(len(qp.sq))]
	w.wrID, w.opcode = wr.WRID, wr.Opcode
	w.signaled = qp.sigAll || wr.SendFlags&verbs.SendSignaled != 0
	w.solicited = wr.SendFlags&verbs.SendSolicited != 0
	w.imm, w.invRKey, w.rkey, w.raddr = wr.ImmData, wr.InvalidateRKey, wr.RKey, wr.RemoteAddr
	w.cmpAdd, w.swap = wr.CompareAdd, wr.Swap
	w.status, w.executed, w.sent, w.isInline, w.ringOp, w.localError = verbs.WCSuccess, false, 0, false, false, false
	w.sgl = append(w.sgl[:0], wr.SGList...)
	readInto := wr.Opcode == verbs.WRRDMARead || wr.Opcode == verbs.WRAtomicCmpAndSwp || wr.Opcode == verbs.WRAtomicFetchAndAdd
	if wr.SendFlags&verbs.SendInline != 0 && !readInto {
		var n uint64
		for _, e := range wr.SGList {
			n += uint64(e.Length)
		}
		if n > uint64(qp.init.Cap.MaxInlineData) {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "%d bytes of inline data exceed Cap.MaxInlineData %d", n, qp.init.Cap.MaxInlineData)
		}
		w.inline = w.inline[:n]
		if !w.sgl.gather(qp.pd, 0, w.inline) {
			w.status = verbs.WCLocProtErr
		}
		w.isInline, w.length = true, n
	} else if qp.typ == verbs.QPTypeRC && !readInto {
		// SEND and WRITE look their SGEs up when they copy; a bad lkey
		// fails them then, before anything reaches the peer's memory
		// for a single SGE.
		w.length = 0
		for _, e := range wr.SGList {
			w.length += uint64(e.Length)
		}
	} else {
		var ok bool
		w.length, ok = w.sgl.check(qp.pd, readInto)
		if !ok {
			w.status = verbs.WCLocProtErr
		}
	}
	if w.length > 1<<31 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "message of %d bytes exceeds the 2 GiB maximum", w.length)
	}
	if wr.Opcode == verbs.WRAtomicCmpAndSwp || wr.Opcode == verbs.WRAtomicFetchAndAdd {
		if err := verbsobj.CheckAtomic(op, w.length, wr.RemoteAddr); err != nil {
			return err
		}
	}
	if qp.typ == verbs.QPTypeUD {
		ah, ok := wr.AH.(*AH)
		if !ok || ah == nil || ah.pd.dev != qp.dev {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "a UD send needs an AH created on this device")
		}
		if w.length > maxInline {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "UD message of %d bytes exceeds the MTU %d", w.length, maxInline)
		}
		w.ah, w.remoteQPN, w.qkey = ah, wr.RemoteQPN&0xFFFFFF, wr.RemoteQKey
		if w.qkey&0x80000000 != 0 {
			w.qkey = qp.attr.QKey
		}
	}
	qp.sqTl++
	if qp.state == verbs.QPStateErr {
		qp.sqNext = qp.sqTl
		qp.completeSendLocked(w, verbs.WCWRFlushErr)
		return nil
	}
	if qp.typ == verbs.QPTypeUD {
		qp.sendUDLocked(w)
		qp.sqNext = qp.sqTl
		qp.completeSendLocked(w, w.status)
	}
	return nil
}

// PostRecv posts receive requests.
func (qp *QP) PostRecv(wr *verbs.RecvWR) error {
	qp.mu.Lock()
	defer qp.unlock()
	for i := 0; wr != nil; i, wr = i+1, wr.Next {
		var err error
		switch {
		case qp.dead:
			err = errQPFreed
		case qp.srq != nil:
			err = errUsesSRQ
		case qp.state == verbs.QPStateReset:
			err = errRecvSt
		case len(wr.SGList) > int(qp.init.Cap.MaxRecvSGE):
			err = errTooManyR
		case qp.rqTail-qp.rqHead == uint64(len(qp.rq)):
			err = errRQFull
		}
		if err != nil {
			return &verbs.PostError{Index: i, WRID: wr.WRID, Err: err}
		}
		w := &qp.rq[qp.rqTail%uint64(len(qp.rq))]
		fillRecv(w, qp.pd, wr)
		qp.rqTail++
		if qp.state == verbs.QPStateErr {
			qp.rqHead++
			qp.completeRecvLocked(w, verbs.WCWRFlushErr, 0, 0, 0, 0, false)
		}
	}
	if qp.rnrFrom != 0 {
		qp.consumeLocked() // a SEND waits for this receive
	}
	return nil
}

// takeRecvLocked moves the next receive WQE into qp.cur.
func (qp *QP) takeRecvLocked() bool {
	if qp.haveCur {
		return true
	}
	if qp.srq != nil {
		if !qp.srq.take(&qp.cur) {
			return false
		}
	} else {
		if qp.rqHead == qp.rqTail {
			return false
		}
		w := &qp.rq[qp.rqHead%uint64(len(qp.rq))]
		qp.cur.wrID, qp.cur.length, qp.cur.bad = w.wrID, w.length, w.bad
		qp.cur.sgl = append(qp.cur.sgl[:0], w.sgl...)
		qp.rqHead++
	}
	qp.haveCur = true
	qp.recvOff = 0
	return true
}

// progressLocked services the QP's rings once.
func (qp *QP) progressLocked() bool {
	if qp.typ != verbs.QPTypeRC || qp.dead {
		return false
	}
	moved := false
	if qp.refusal.Load() != 0 {
		qp.failRefusedLocked()
		moved = true
	}
	if qp.state == verbs.QPStateRTS || qp.state == verbs.QPStateSQD {
		moved = qp.executeLocked() || moved
	}
	if qp.retireLocked() {
		moved = true
	}
	if qp.consumeLocked() {
		moved = true
	}
	return moved
}

// ringLocked wakes the peer's progress goroutine, if it sleeps, once
// the QP's lock is released (unlock): a futex wake and a message, system
// calls that may hand this thread's CPU to the thread they wake. Made
// under the lock, they left the QP held while the poster waited for a
// CPU again; every other goroutine that wanted the QP (the progress
// goroutine, a poller, the next post) waited with it, for whole
// scheduler slices on a busy machine. Precondition: mu held.
func (qp *QP) ringLocked() { qp.ringConnLocked(qp.conn) }

// ringConnLocked is ringLocked for a conn the QP holds (its RC conn, or
// the UD conn it cached). A UD post list to several peers makes the wakes
// after the first at once.
func (qp *QP) ringConnLocked(c *conn) {
	switch {
	case c == nil || qp.wake == c:
	case qp.wake != nil:
		c.ring()
	case c.sleeps():
		c.users.Add(1) // the QP holds c: it stays mapped until the wake is done
		qp.wake = c
	}
}

// unlock releases the QP's lock, then makes the wake ringLocked left.
func (qp *QP) unlock() {
	c := qp.wake
	qp.wake = nil
	qp.mu.Unlock()
	if c != nil {
		c.wake()
		c.release()
	}
}

// executeLocked starts the WQEs not yet executed, in order.
func (qp *QP) executeLocked() bool {
	if qp.out == nil || qp.failed || qp.state != verbs.QPStateRTS {
		return false
	}
	moved, rang := false, false
	for qp.sqNext != qp.sqTl {
		w := &qp.sq[qp.sqNext%uint64(len(qp.sq))]
		done, put := qp.execOneLocked(w)
		rang = rang || put
		if !done {
			break
		}
		moved = true
		w.executed = true
		w.endSeq = qp.out.prod
		qp.sqNext++
		if w.signaled || w.status != verbs.WCSuccess {
			qp.awaited = qp.sqNext
		}
		if w.status != verbs.WCSuccess {
			qp.failed = true
			if !w.localError {
				qp.out.failRequester()
				rang = true
			}
			break
		}
	}
	if rang {
		qp.ringLocked()
	}
	return moved
}

// execOneLocked executes w; done is false if it waits for ring slots.
func (qp *QP) execOneLocked(w *sendWQE) (done, put bool) {
	if w.status != verbs.WCSuccess {
		w.localError = true
		return true, false
	}
	w.startSeq = qp.out.prod
	switch w.opcode {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRSendWithInv:
		return qp.execSendLocked(w)
	case verbs.WRRDMAWriteWithImm:
		if n, ok := qp.out.free(); !ok {
			w.status = verbs.WCRetryExcErr
			return true, false
		} else if n == 0 {
			return false, false
		}
		if qp.writeLocked(w); w.status != verbs.WCSuccess {
			return true, false
		}
		w.ringOp = true
		qp.out.put(&slotHdr{op: opWriteImm, flags: flagFirst | flagLast | flagImm | qp.solic(w), imm: w.imm, msgLen: uint32(w.length)}, nil)
		return true, true
	case verbs.WRRDMAWrite:
		qp.writeLocked(w)
	case verbs.WRRDMARead:
		qp.readLocked(w)
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		qp.atomicLocked(w)
	}
	return true, false
}

func (qp *QP) solic(w *sendWQE) uint8 {
	if w.solicited {
		return flagSolic
	}
	return 0
}

func (qp *QP) execSendLocked(w *sendWQE) (done, put bool) {
	w.ringOp = true
	for {
		n, ok := qp.out.free()
		if !ok {
			w.status = verbs.WCRetryExcErr
			return true, put
		}
		if n == 0 {
			return false, put
		}
		if w.sent == 0 {
			w.startSeq = qp.out.prod
		}
		dst := qp.out.payload()
		k := min(uint64(len(dst)), w.length-w.sent)
		dst = dst[:k]
		if w.isInline {
			copy(dst, w.inline[w.sent:])
		} else if !w.sgl.gather(qp.pd, w.sent, dst) {
			// The memory was deregistered after posting.
			w.status, w.localError = verbs.WCLocProtErr, true
			return true, put
		}
		h := slotHdr{op: opSend, length: uint32(k), msgLen: uint32(w.length)}
		if w.sent == 0 {
			h.flags |= flagFirst
		}
		w.sent += k
		if w.sent == w.length {
			h.flags |= flagLast | qp.solic(w)
			switch w.opcode {
			case verbs.WRSendWithImm:
				h.flags, h.imm = h.flags|flagImm, w.imm
			case verbs.WRSendWithInv:
				h.flags, h.imm = h.flags|flagInv, w.invRKey
			}
		}
		qp.out.publish(&h)
		put = true
		if h.flags&flagLast != 0 {
			return true, true
		}
	}
}

// remoteLocked returns n bytes at raddr of the peer's region rkey, with
// g.mu read-locked, or the completion status that fails the request.
func (qp *QP) remoteLocked(rkey uint32, raddr, n uint64, want verbs.Access) (*grant, []byte, verbs.WCStatus) {
	var g *grant
	if g = qp.lastGrant; g != nil && qp.lastRKey == rkey {
		g.mu.RLock()
		if !g.live() { // revoked since
			g.mu.RUnlock()
			g = nil
		}
	} else {
		g = nil
	}
	if g == nil {
		var st verbs.WCStatus
		if g, st = qp.conn.grant(qp.qpn, qp.destQPN.Load(), rkey, want); st != verbs.WCSuccess {
			return nil, nil, st
		}
		qp.lastGrant, qp.lastRKey = g, rkey
	}
	if g.copy {
		return g, nil, verbs.WCSuccess // the owner checks each access itself
	}
	var st verbs.WCStatus
	switch {
	case g.qpAccess&want != want:
		st = verbs.WCRemInvReqErr
	case g.mrAccess&want != want:
		st = verbs.WCRemAccessErr
	case raddr < g.addr || raddr-g.addr > uint64(len(g.mem)) || n > uint64(len(g.mem))-(raddr-g.addr):
		st = verbs.WCRemAccessErr
	}
	if st != verbs.WCSuccess {
		g.mu.RUnlock()
		// The owner's QP fails as a responder's would (refuse_linux.go).
		return nil, nil, qp.conn.checkRefused(qp.qpn, qp.destQPN.Load(), rkey, want, raddr, n, st)
	}
	off := raddr - g.addr
	return g, g.mem[off : off+n], verbs.WCSuccess
}

func (qp *QP) writeLocked(w *sendWQE) {
	if w.length == 0 {
		return
	}
	g, dst, st := qp.remoteLocked(w.rkey, w.raddr, w.length, verbs.AccessRemoteWrite)
	if st != verbs.WCSuccess {
		w.status = st
		return
	}
	if g.copy {
		g.mu.RUnlock()
		qp.copyWriteLocked(w)
		return
	}
	defer g.mu.RUnlock()
	// The last byte lands last: pollers of the last byte (ib_write_lat)
	// may then read the rest.
	n := len(dst) - 1
	var ok bool
	if !w.isInline && len(w.sgl) == 1 {
		e := w.sgl[0]
		mr, src, good := qp.pd.local(e.LKey, e.Addr, uint64(len(dst)), false)
		if !good {
			w.status, w.localError = verbs.WCLocProtErr, true
			return
		}
		memmove.Copy(dst[:n], src)
		atomicStoreByte(&dst[n], src[n])
		mr.mu.RUnlock()
		return
	}
	if w.isInline {
		copy(dst[:n], w.inline)
		atomicStoreByte(&dst[n], w.inline[n])
		ok = true
	} else if ok = w.sgl.gather(qp.pd, 0, dst[:n]); ok {
		var last [1]byte
		if ok = w.sgl.gather(qp.pd, uint64(n), last[:]); ok {
			atomicStoreByte(&dst[n], last[0])
		}
	}
	if !ok {
		w.status, w.localError = verbs.WCLocProtErr, true
	}
}

func (qp *QP) readLocked(w *sendWQE) {
	if w.length == 0 {
		return
	}
	g, src, st := qp.remoteLocked(w.rkey, w.raddr, w.length, verbs.AccessRemoteRead)
	if st != verbs.WCSuccess {
		w.status = st
		return
	}
	if g.copy {
		g.mu.RUnlock()
		qp.copyReadLocked(w)
		return
	}
	ok := w.sgl.scatter(qp.pd, 0, src)
	g.mu.RUnlock()
	if !ok {
		w.status, w.localError = verbs.WCLocProtErr, true
	}
}

func (qp *QP) atomicLocked(w *sendWQE) {
	if w.raddr%8 != 0 {
		w.status = verbs.WCRemInvReqErr // misaligned atomic: invalid request
		return
	}
	g, b, st := qp.remoteLocked(w.rkey, w.raddr, 8, verbs.AccessRemoteAtomic)
	if st != verbs.WCSuccess {
		w.status = st
		return
	}
	if g.copy {
		g.mu.RUnlock()
		qp.copyAtomicLocked(w)
		return
	}
	p := (*uint64)(unsafe.Pointer(&b[0]))
	var orig uint64
	if w.opcode == verbs.WRAtomicFetchAndAdd {
		orig = atomic.AddUint64(p, w.cmpAdd) - w.cmpAdd
	} else {
		for {
			orig = atomic.LoadUint64(p)
			if orig != w.cmpAdd || atomic.CompareAndSwapUint64(p, orig, w.swap) {
				break
			}
		}
	}
	g.mu.RUnlock()
	var r [8]byte
	binary.LittleEndian.PutUint64(r[:], orig)
	if !w.sgl.scatter(qp.pd, 0, r[:]) {
		w.status, w.localError = verbs.WCLocProtErr, true
	}
}

// retireLocked completes executed WQEs in order, when it is due
// (retireDue).
func (qp *QP) retireLocked() bool {
	if qp.out == nil || qp.sqHead == qp.sqNext || !qp.retireDue() {
		return false
	}
	return qp.retireNowLocked()
}

// retireNowLocked completes the executed WQEs the peer acknowledged, in
// order. Paths that end the QP's sending call it directly: what the peer
// took completes with success before the rest is flushed.
func (qp *QP) retireNowLocked() bool {
	if qp.out == nil || qp.sqHead == qp.sqNext {
		return false
	}
	if _, ok := qp.out.acked(); !ok {
		w := &qp.sq[qp.sqHead%uint64(len(qp.sq))]
		w.status = verbs.WCRetryExcErr
		qp.completeSendLocked(w, w.status)
		qp.errorLocked()
		return true
	}
	cons := qp.out.seenCons
	nakSt, nakSeq, nak := qp.out.nak()
	moved := false
	for qp.sqHead != qp.sqNext {
		w := &qp.sq[qp.sqHead%uint64(len(qp.sq))]
		if nak && w.ringOp && nakSeq >= w.startSeq && nakSeq < w.endSeq {
			qp.completeSendLocked(w, nakSt)
			qp.flushAfterFailureLocked()
			return true
		}
		if w.status != verbs.WCSuccess {
			if cons < w.startSeq {
				break // failed after earlier SENDs that are not acknowledged yet
			}
			qp.completeSendLocked(w, w.status)
			qp.flushAfterFailureLocked()
			return true
		}
		if cons < w.endSeq {
			break
		}
		qp.completeSendLocked(w, verbs.WCSuccess)
		moved = true
	}
	if nak && qp.sqHead == qp.sqNext && qp.state != verbs.QPStateErr && nakSeq < qp.out.prod {
		qp.errorLocked() // a NAK for nothing we sent: the peer is broken
		return true
	}
	return moved
}

// retireDue reports whether retireLocked reads the peer's acknowledgement
// (the consumer index and the NAK, one cache line the peer writes for
// every slot it takes) on this call: when an executed WQE is awaited (it
// completes to the CQ: signaled, or failed), when the send queue is half
// full, and on every retireLookEvery-th call otherwise, so that the
// unsignaled WQEs a busy poller leaves are retired and a NAK of one is
// seen within microseconds. Reading the line at every poll of a ping-pong
// moved it between the CPUs once per message for nothing.
func (qp *QP) retireDue() bool {
	qp.retireLooks++
	return qp.awaited > qp.sqHead || qp.failed ||
		qp.sqTl-qp.sqHead >= uint64(len(qp.sq))/2 ||
		qp.retireLooks%retireLookEvery == 0 ||
		qp.state != verbs.QPStateRTS // draining for SQD/ERR: retire at once
}

// retireLookEvery is how often (in retireLocked calls) a QP whose
// executed WQEs are all unsignaled reads the peer's acknowledgement.
const retireLookEvery = 64

// consumeLocked handles the peer's requests in the inbox.
func (qp *QP) consumeLocked() bool {
	if qp.in == nil {
		if qp.conn == nil || (qp.state != verbs.QPStateRTR && qp.state != verbs.QPStateRTS && qp.state != verbs.QPStateSQD) {
			return false
		}
		d := qp.dev
		k := inboxKey{peer: qp.peer.Load(), local: qp.qpn, remot: qp.destQPN.Load()}
		d.mu.Lock()
		mem := d.claimInboxLocked(k)
		d.mu.Unlock()
		if mem == nil {
			return false
		}
		qp.inMem, qp.in = mem, newRing(mem)
		qp.in.cons = atomic.LoadUint64(qp.in.word64(offCons))
	}
	if qp.inDone || (qp.state != verbs.QPStateRTR && qp.state != verbs.QPStateRTS && qp.state != verbs.QPStateSQD) {
		return false
	}
	moved := false
	for {
		if qp.in.requesterFailed() {
			qp.errorLocked()
			return true
		}
		h, payload, ok, err := qp.in.peek()
		if err != nil {
			qp.errorLocked() // the peer corrupted its ring
			return true
		}
		if !ok {
			break
		}
		// The requester published this slot after the owner's copies it
		// asked for were applied: acquire them (copy_linux.go).
		qp.dev.copies.Load()
		if h.flags&flagFirst != 0 {
			if !qp.takeRecvLocked() {
				qp.rnrLocked()
				break
			}
			qp.rnrFrom = 0
			if qp.cur.bad {
				qp.failRecvLocked(verbs.WCLocProtErr, verbs.WCRemOpErr)
				return true
			}
		} else if !qp.haveCur {
			qp.errorLocked() // a middle fragment without a first: corrupt
			return true
		}
		if h.op == opWriteImm {
			qp.haveCur = false
			qp.popLocked()
			moved = true
			qp.completeRecvLocked(&qp.cur, verbs.WCSuccess, verbs.WCRecvRDMAWithImm, h.msgLen, h.imm, verbs.WCWithImm, h.flags&flagSolic != 0)
			continue
		} else {
			if h.flags&flagInv != 0 {
				// As the RoCEv2 responder: a SEND_WITH_INV may invalidate
				// memory windows and fast-registered regions only (IBTA
				// 10.6.7, o10-37), and shm devices have neither. Revoking
				// an MR would let any peer of the PD cut off every other.
				qp.dev.ctr.badInvalidate.Add(1)
				qp.failRecvLocked(verbs.WCRemInvReqErr, verbs.WCRemInvReqErr)
				return true
			}
			if uint64(len(payload)) > qp.cur.length-qp.recvOff {
				qp.failRecvLocked(verbs.WCLocLenErr, verbs.WCRemInvReqErr)
				return true
			}
			if !qp.cur.sgl.scatter(qp.pd, qp.recvOff, payload) {
				qp.failRecvLocked(verbs.WCLocProtErr, verbs.WCRemOpErr)
				return true
			}
			qp.recvOff += uint64(len(payload))
			if h.flags&flagLast != 0 {
				var flags verbs.WCFlags
				if h.flags&flagImm != 0 {
					flags = verbs.WCWithImm
				}
				imm := h.imm
				if flags == 0 {
					imm = 0
				}
				qp.haveCur = false
				qp.popLocked()
				moved = true
				qp.completeRecvLocked(&qp.cur, verbs.WCSuccess, verbs.WCRecv, uint32(qp.recvOff), imm, flags, h.flags&flagSolic != 0)
				continue
			}
		}
		qp.popLocked()
		moved = true
	}
	if moved && qp.conn != nil && !qp.conn.dead.Load() {
		qp.ringLocked()
	}
	return moved
}

// popLocked frees the slot consumeLocked took. The consumer index is the
// requester's acknowledgement (peerGone completes what it covers), so it
// moves before the receive's completion is pushed: an application that
// saw the completion and then closed its device must not leave the SEND
// unacknowledged at the requester.
func (qp *QP) popLocked() { qp.in.pop() }

// failRecvLocked fails the SEND in progress: the receive WQE completes
// with recvSt, the requester sees nak, and the QP moves to ERR.
func (qp *QP) failRecvLocked(recvSt, nak verbs.WCStatus) {
	// The responder's error, as an asynchronous event (rxe: the NAK's
	// syndrome picks it).
	ev := verbs.EventQPFatal
	switch nak {
	case verbs.WCRemInvReqErr:
		ev = verbs.EventQPReqErr
	case verbs.WCRemAccessErr:
		ev = verbs.EventQPAccessErr
	}
	qp.dev.event(verbs.AsyncEvent{Type: ev, QP: qp})
	qp.haveCur = false
	qp.completeRecvLocked(&qp.cur, recvSt, 0, 0, 0, 0, false)
	qp.in.setNak(nak)
	qp.inDone = true
	qp.errorLocked()
}

// rnrLocked handles a SEND that found no receive WQE: it waits, as the
// requester would retry after RNR NAKs, for rnr_retry × min_rnr_timer
// (forever for 7), then fails it with WCRNRRetryExcErr at the requester.
func (qp *QP) rnrLocked() {
	now := nanotime()
	if qp.rnrFrom == 0 {
		qp.rnrFrom = now
	}
	retry := qp.in.rnrRetry()
	if retry == 7 {
		return
	}
	deadline := qp.rnrFrom + int64(retry)*int64(wire.RNRTimeout(qp.attr.MinRNRTimer))
	if now >= deadline {
		qp.in.setNak(verbs.WCRNRRetryExcErr)
		qp.inDone = true
		qp.rnrFrom = 0
		qp.ringLocked()
		return
	}
	for {
		cur := qp.dev.rnrWake.Load()
		if (cur != 0 && cur <= deadline) || qp.dev.rnrWake.CompareAndSwap(cur, deadline) {
			break
		}
	}
}

// Destroy frees the QP. Outstanding work requests are dropped without
// completions, as ibv_destroy_qp does.
func (qp *QP) Destroy() error {
	qp.mu.Lock()
	if qp.dead {
		qp.unlock()
		return verbs.Errorf("DestroyQP", verbs.ErrDestroyed, "QP already destroyed")
	}
	qp.dead = true
	if qp.in != nil && !qp.inDone {
		qp.in.setNak(verbs.WCRetryExcErr)
	}
	c := qp.conn
	if c != nil {
		c.ring() // while the QP still holds c
	}
	granted, _ := qp.closeGrantsLocked()
	qp.unmapLocked()
	qp.unlock()
	granted.revoke() // what the peer mapped through this QP
	if c != nil && !c.dead.Load() {
		// Our grants from the peer go with the QP.
		c.gmu.Lock()
		for k, g := range c.grants {
			if k.qpn == qp.qpn {
				delete(c.grants, k)
				g.drop()
			}
		}
		c.gmu.Unlock()
	}
	d := qp.dev
	d.mu.Lock()
	delete(d.qpByNum, qp.qpn)
	for k, m := range d.inboxes {
		if k.local == qp.qpn {
			d.dropInboxLocked(k, m)
		}
	}
	d.setQPsLocked()
	d.mu.Unlock()
	qp.sendCQ.qps.Add(-1)
	qp.recvCQ.qps.Add(-1)
	if qp.srq != nil {
		qp.srq.qps.Add(-1)
	}
	qp.pd.objs.Add(-1)
	return nil
}
