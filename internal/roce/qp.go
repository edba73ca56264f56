package roce

import (
	"math/bits"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// defaultPKey is the full-membership default partition key, the only one
// softrdma devices have.
const defaultPKey = 0xFFFF

// QP is a queue pair. Its protocol state (everything below mu) belongs to
// whoever holds mu: PostSend, the receive path, or the timeout step. The
// state is split by role, as in rxe: the requester (requester.go) owns
// what it has sent, the completer (completer.go) what is acknowledged,
// the retry budgets and the ACK deadline, the responder (responder.go)
// what it has received; the send queue's WQEs are shared, the requester
// moving sq.next and the completer sq.head. ModifyQP starts each role
// with its own method. Between the requester and the completer, what one
// must do for the other is handed over, not written into its fields:
// before the completer judges a response, the QP gives it a snapshot of
// what the requester has sent (requester.sent, a reqSent); the
// completer's answer to a response or timeout is a compResult, which the
// requester carries out through requester.apply (what was retired and
// acknowledged, a go-back after a loss, an RNR wait); and the requester
// tells the completer that it sent (completer.onSent), which returns the
// deadline to queue. The responder's steps are methods of responder: the
// receive steps take the QP's receive resources (recvRes), the request
// steps a respQP view whose answerTx queues their answers on the QP's
// transmit queue, and an error that fails the QP comes back in a
// respResult, which the receive path applies (errorLocked and the async
// event). The completer likewise sees a compQP view, not the QP
// (views.go).
type QP struct {
	dev    *Device
	pd     *PD
	qpn    uint32
	typ    verbs.QPType
	init   verbs.QPInitAttr
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	sigAll bool
	state  atomic.Uint32 // verbs.QPState, readable without mu

	mu   sync.Mutex
	attr verbs.QPAttr
	pmtu int
	dest netip.AddrPort // peer address (RC, UC)
	// splitWrites: multi-packet WRITEs go as one WRITE ONLY per MTU
	// (Config.NoSplitWrites).
	splitWrites bool
	destAddr    netip.Addr
	src         netip.Addr // the source address (GID) the AV names
	sq          sendQueue
	rq          recvQueue
	req         requester
	comp        completer
	resp        responder
	tx          txq
	timerAt     time.Time // the deadline queued in dev.timers; zero if none
	inBacklog   bool      // on dev.backlog: requests wait for the transport
	onDoorbell  bool      // on dev.doorbells: packets wait for RingDoorbells
	commEst     bool      // EventCommEst was raised
	peerPort    uint16    // the UDP port the peer sends from, once a packet proved it (RC, UC)
	sqdNotify   bool      // raise EventSQDrained once the send queue drains in SQD
	lastHeard   time.Time // when the last packet from the peer arrived (keepalive.go)
	destroyed   bool
	sec         *secCtx // packet protection (Secure); nil: plain RoCEv2
	tclass      uint8   // traffic class byte of the QP's packets (the AV's, cc.go)
	cc          ccState // congestion control (cc.go)
	views       views   // what the responder and the completer see of the QP (views.go)

	// The send feed (feed.go): requests the QP takes in by itself.
	feed       SendFeed
	feedPost   func(*verbs.SendWR) error // qp.postFedLocked, bound once
	feedFailed bool                      // the current Take had a request refused
	sqRetired  uint32                    // send requests that left the send queue, ever (SendFeed.Arm)
}

// sendWQE is a send work request as the requester and completer see it.
type sendWQE struct {
	wrID     uint64
	opcode   verbs.WROpcode
	flags    verbs.SendFlags
	signaled bool
	imm      uint32
	invRKey  uint32
	raddr    uint64
	rkey     uint32
	cmpAdd   uint64
	swap     uint64
	dest     netip.AddrPort // UD
	src      netip.Addr     // UD: the AH's source address
	destQPN  uint32         // UD
	tclass   uint8          // UD: the AH's traffic class byte
	qkey     uint32         // UD
	sgl      sgl
	inline   []byte
	isInline bool
	length   uint64
	status   verbs.WCStatus // a local error found at post time
	probe    bool           // a keepalive probe: it posts no completion
	bind     *bindOp        // BIND_MW: the binding (kept with the slot, reused)
	executed bool           // BIND_MW, LOCAL_INV: carried out (a rewind must not repeat it)

	// Requester progress.
	started     bool
	firstPSN    wire.PSN
	lastPSN     wire.PSN
	npkts       uint32
	sent        uint32   // packets of the message sent in the current attempt
	nextRespPSN wire.PSN // READ: next response expected
	respStart   wire.PSN // READ: PSN of the (re)issued request, whose response is FIRST/ONLY
}

// isLocal reports whether w is a local operation (BIND_MW, LOCAL_INV):
// it takes effect when the requester reaches it and sends nothing.
func (w *sendWQE) isLocal() bool { return w.opcode == verbs.WRBindMW || w.opcode == verbs.WRLocalInv }

func (w *sendWQE) isReadOrAtomic() bool {
	return w.opcode == verbs.WRRDMARead || w.opcode == verbs.WRAtomicCmpAndSwp || w.opcode == verbs.WRAtomicFetchAndAdd
}

// sendQueue is a ring of send WQEs. head is the oldest WQE not yet retired,
// next the first not completely transmitted, tail the first free slot;
// head ≤ next ≤ tail as counters that wrap at 2^32. The ring is a power of
// two long, so a slot is its counter's low bits across the wrap too, and
// it grows on demand up to the smallest power of two that holds max: a QP
// costs memory for the WQEs it has had outstanding at once, not for its
// Cap.MaxSendWR (4096 idle QPs with 128-deep queues would hold 28 MiB of
// empty WQEs otherwise).
type sendQueue struct {
	wqes             []sendWQE
	max              uint32 // Cap.MaxSendWR: how many may be outstanding
	head, next, tail uint32
	nsge, inline     uint32 // each slot's SGE and inline data capacity
	probes           uint32 // keepalive probes queued: they do not count against max
}

// sqInitial is how many slots a send queue starts with.
const sqInitial = 8

func newSendQueue(max, nsge, inline uint32) sendQueue {
	q := sendQueue{max: max, nsge: nsge, inline: inline}
	q.wqes = make([]sendWQE, min(ringLen(max), sqInitial))
	q.fill(q.wqes, 0, uint32(len(q.wqes)))
	return q
}

// ringLen is the ring length for n entries: the smallest power of two ≥ n.
func ringLen(n uint32) int { return 1 << bits.Len32(max(n, 1)-1) }

func (q *sendQueue) at(i uint32) *sendWQE { return &q.wqes[i&uint32(len(q.wqes)-1)] }
func (q *sendQueue) full() bool           { return q.tail-q.head >= q.max+q.probes }

// reserve makes sure the slot at tail is free, growing the ring if every
// slot holds a WQE; the caller has checked full.
func (q *sendQueue) reserve() {
	if q.tail-q.head < uint32(len(q.wqes)) {
		return
	}
	old := q.wqes
	n := uint32(len(old))
	q.wqes = make([]sendWQE, 2*n)
	for k := range n { // the WQEs keep their order, and their storage
		*q.at(q.head + k) = old[(q.head+k)&(n-1)]
	}
	q.fill(q.wqes, q.head+n, n)
}

// fill gives the n slots from counter i on storage of their own.
func (q *sendQueue) fill(wqes []sendWQE, i, n uint32) {
	inl := make([]byte, int(n)*int(q.inline))
	for k := range n {
		w := &wqes[(i+k)&uint32(len(wqes)-1)]
		w.sgl = newSGL(q.nsge)
		o := int(k) * int(q.inline)
		w.inline = inl[o:o:min(o+int(q.inline), len(inl))]
	}
}

type recvWQE struct {
	wrID   uint64
	sgl    sgl
	length uint64
	bad    bool // an lkey did not resolve at post time
}

// recvQueue is a ring of receive WQEs from head (the oldest) to tail (the
// first free slot), a power of two long for the same reason as sendQueue;
// it holds at most max.
type recvQueue struct {
	wqes       []recvWQE
	max        uint32
	head, tail uint32

	// The receive feed (feed.go).
	feed    RecvFeed
	post    func(*verbs.RecvWR) error // the QP's postRecvFedLocked, bound once
	retired uint32                    // requests that left the queue, ever (RecvFeed)
}

// take returns the oldest WQE and removes it from the queue; the caller
// has checked that there is one.
func (q *recvQueue) take() *recvWQE {
	w := q.at(q.head)
	q.head++
	q.retire()
	return w
}

// retire counts one request gone from the queue (or refused from the
// feed), for the feed's producer.
func (q *recvQueue) retire() {
	q.retired++
	if q.feed != nil {
		q.feed.Retired(q.retired)
	}
}

// takeFeed takes the receive feed's requests into the queue when it is
// empty; it reports whether the queue holds one.
func (q *recvQueue) takeFeed() bool {
	if q.head == q.tail && q.feed != nil {
		q.feed.Take(q.post)
	}
	return q.head != q.tail
}

func (q *recvQueue) at(i uint32) *recvWQE { return &q.wqes[i&uint32(len(q.wqes)-1)] }
func (q *recvQueue) full() bool           { return q.tail-q.head >= q.max }

func newRecvQueue(n, nsge uint32) recvQueue {
	q := recvQueue{wqes: make([]recvWQE, ringLen(n)), max: n}
	for i := range q.wqes {
		q.wqes[i].sgl = newSGL(nsge)
	}
	return q
}

func newSGL(n uint32) sgl {
	return sgl{sges: make([]verbs.SGE, 0, n), mrs: make([]*MR, 0, n)}
}

// CreateQP creates a queue pair in the RESET state.
func (pd *PD) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	const op = "CreateQP"
	if err := pd.check(op); err != nil {
		return nil, err
	}
	if attr == nil {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "attr is nil")
	}
	switch attr.QPType {
	case verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD:
	default:
		return nil, verbs.Errorf(op, verbs.ErrNotSupported, "QP type %v; softrdma supports RC, UC and UD", attr.QPType)
	}
	sendCQ, ok1 := attr.SendCQ.(*CQ)
	recvCQ, ok2 := attr.RecvCQ.(*CQ)
	if !ok1 || !ok2 || sendCQ == nil || recvCQ == nil {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "SendCQ and RecvCQ must be CQs of this device")
	}
	if sendCQ.dev != pd.dev || recvCQ.dev != pd.dev || sendCQ.ring.Dead() || recvCQ.ring.Dead() {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "SendCQ and RecvCQ must be live CQs of this device")
	}
	var srq *SRQ
	if attr.SRQ != nil {
		s, ok := attr.SRQ.(*SRQ)
		if !ok || s.pd != pd {
			return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "SRQ must belong to the same PD")
		}
		if attr.QPType == verbs.QPTypeUD || attr.QPType == verbs.QPTypeUC || attr.QPType == verbs.QPTypeRC {
			srq = s
		}
	}
	c := attr.Cap
	if c.MaxSendWR == 0 || c.MaxSendWR > maxQPWR {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "Cap.MaxSendWR %d: must be 1..%d", c.MaxSendWR, maxQPWR)
	}
	if srq == nil && (c.MaxRecvWR == 0 || c.MaxRecvWR > maxQPWR) {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "Cap.MaxRecvWR %d: must be 1..%d (or use an SRQ)", c.MaxRecvWR, maxQPWR)
	}
	if c.MaxSendSGE > maxSGE || c.MaxRecvSGE > maxSGE {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "Cap.MaxSendSGE %d / MaxRecvSGE %d: at most %d", c.MaxSendSGE, c.MaxRecvSGE, maxSGE)
	}
	if c.MaxInlineData > maxInline {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "Cap.MaxInlineData %d: at most %d", c.MaxInlineData, maxInline)
	}
	c.MaxSendSGE = max(c.MaxSendSGE, 1)
	c.MaxRecvSGE = max(c.MaxRecvSGE, 1)
	qp := &QP{
		dev:    pd.dev,
		pd:     pd,
		typ:    attr.QPType,
		init:   *attr,
		sendCQ: sendCQ,
		recvCQ: recvCQ,
		srq:    srq,
		sigAll: attr.SigAll,
	}
	qp.init.Cap = c
	qp.sq = newSendQueue(c.MaxSendWR, c.MaxSendSGE, c.MaxInlineData)
	if srq == nil {
		qp.rq = newRecvQueue(c.MaxRecvWR, c.MaxRecvSGE)
	}
	qp.resp.cur.sgl = newSGL(maxSGE)
	qp.attr.PKeyIndex = 0
	qp.attr.PortNum = 1
	qp.attr.Cap = c
	qp.refreshViewsLocked()
	if err := pd.dev.addQP(qp); err != nil {
		return nil, err
	}
	pd.refs.Add(1)
	sendCQ.users.Add(1)
	recvCQ.users.Add(1)
	if srq != nil {
		srq.users.Add(1)
	}
	return qp, nil
}

// QPNum returns the QP number.
func (qp *QP) QPNum() uint32 { return qp.qpn }

// Type returns the QP type.
func (qp *QP) Type() verbs.QPType { return qp.typ }

// State returns the current state.
func (qp *QP) State() verbs.QPState { return verbs.QPState(qp.state.Load()) }

func (qp *QP) stateLocked() verbs.QPState { return verbs.QPState(qp.state.Load()) }

func (qp *QP) setStateLocked(s verbs.QPState) {
	qp.state.Store(uint32(s))
	qp.attr.QPState = s
}

// Modify changes attributes and state.
func (qp *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		return verbs.Errorf("ModifyQP", verbs.ErrDestroyed, "QP %d was destroyed", qp.qpn)
	}
	cur := qp.stateLocked()
	next, err := verbs.CheckModify(cur, qp.typ, attr, mask)
	if err != nil {
		return err
	}
	if err := qp.checkValuesLocked(attr, mask); err != nil {
		return err
	}
	qp.applyLocked(attr, mask)
	now := qp.dev.clock()
	if (next == verbs.QPStateReset || next == verbs.QPStateErr) && qp.resp.ackPending {
		// An ACK that waits for a poller is the peer's last word on what
		// arrived: it leaves before the QP stops, or the peer fails a
		// request that did arrive (its SEND completes flushed when the
		// DREQ that follows this reaches it first).
		qp.resp.flushAckLocked(qp)
		qp.flushLocked()
	}
	switch {
	case next == verbs.QPStateReset:
		qp.resetLocked()
	case next == verbs.QPStateErr:
		qp.errorLocked()
	case cur == verbs.QPStateInit && next == verbs.QPStateRTR:
		qp.resp.start(wire.PSN(qp.attr.RQPSN))
	case next == verbs.QPStateRTS && cur == verbs.QPStateRTR:
		// The requester sends from the SQ PSN, and the completer expects
		// the first acknowledgement for it.
		psn := wire.PSN(qp.attr.SQPSN)
		qp.req.start(psn)
		qp.comp.start(psn, qp.attr.RetryCnt, qp.attr.RNRRetry)
		qp.lastHeard = now // the keepalive interval starts with RTS
	}
	if next != verbs.QPStateReset && next != verbs.QPStateErr {
		qp.setStateLocked(next)
	}
	if next == verbs.QPStateSQD && cur != verbs.QPStateSQD {
		qp.sqdNotify = qp.attr.EnSQDAsyncNotify
		qp.checkDrainedLocked()
	}
	if next == verbs.QPStateRTS && (cur == verbs.QPStateSQD || cur == verbs.QPStateSQE) {
		qp.runRequesterLocked(now)
		qp.flushLocked()
	}
	if next == verbs.QPStateRTS {
		qp.rearmLocked()
	}
	qp.armFeedLocked()
	qp.armRecvFeedLocked()
	return nil
}

// checkValuesLocked checks what depends on this device and QP, beyond what
// verbs.CheckModify checks for every provider.
func (qp *QP) checkValuesLocked(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	const op = "ModifyQP"
	if mask&verbs.QPAttrPathMTU != 0 && attr.PathMTU > qp.dev.pmtu {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "path MTU %v exceeds the port's active MTU %v (link MTU %d); use at most %v",
			attr.PathMTU, qp.dev.pmtu, qp.dev.linkMT, qp.dev.pmtu)
	}
	if mask&verbs.QPAttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "P_Key index %d: the P_Key table has one entry, index 0", attr.PKeyIndex)
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 && attr.MaxRdAtomic > maxRdAtomic {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "MaxRdAtomic %d: at most %d", attr.MaxRdAtomic, maxRdAtomic)
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 && attr.MaxDestRdAtomic > maxRdAtomic {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "MaxDestRdAtomic %d: at most %d", attr.MaxDestRdAtomic, maxRdAtomic)
	}
	if mask&verbs.QPAttrAV != 0 {
		ah := &attr.AHAttr
		if !ah.IsGlobal || ah.GRH.DGID.IsZero() {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "RoCE needs a global route: set AHAttr.IsGlobal and AHAttr.GRH.DGID to the peer's GID (ibv_*_pingpong: pass -g 1)")
		}
		if _, err := qp.dev.checkSGID(op, ah); err != nil {
			return err
		}
	}
	return nil
}

// checkSGID checks that an address vector's source GID is one this device
// can send from, and that the destination's address family matches it. It
// returns the source address.
func (d *Device) checkSGID(op string, ah *verbs.AHAttr) (netip.Addr, error) {
	i := int(ah.GRH.SGIDIndex)
	if i >= len(d.gids) {
		return netip.Addr{}, verbs.Errorf(op, verbs.ErrInvalidArgument,
			"source GID index %d: the table has %d entries (%v)", i, len(d.gids), d.gidList())
	}
	src := d.srcs[i]
	if !src.IsValid() {
		return netip.Addr{}, verbs.Errorf(op, verbs.ErrInvalidArgument,
			"source GID index %d (%v): the device cannot send from it (no socket on that address: the interface does not have it); its GIDs: %v",
			i, d.gids[i].Addr().Unmap(), d.gidList())
	}
	if dst := ah.GRH.DGID.Addr(); dst.Is4() != src.Is4() {
		return netip.Addr{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "destination GID %v and source GID index %d (%v) are of different IP families; its GIDs: %v",
			ah.GRH.DGID, i, src, d.gidList())
	}
	return src, nil
}

func (qp *QP) applyLocked(attr *verbs.QPAttr, mask verbs.QPAttrMask) {
	a := &qp.attr
	if mask&verbs.QPAttrAccessFlags != 0 {
		a.QPAccessFlags = attr.QPAccessFlags
	}
	if mask&verbs.QPAttrQKey != 0 {
		a.QKey = attr.QKey
	}
	if mask&verbs.QPAttrAV != 0 {
		a.AHAttr = attr.AHAttr
		qp.destAddr = attr.AHAttr.GRH.DGID.Addr()
		qp.src = qp.dev.srcs[attr.AHAttr.GRH.SGIDIndex] // checked by checkSGID
		qp.peerPort = 0
		qp.dest = netip.AddrPortFrom(qp.destAddr, qp.dev.port)
		qp.tclass = qp.dev.cc.tclassFor(attr.AHAttr.GRH.TrafficClass)
		qp.splitWrites = qp.typ == verbs.QPTypeRC &&
			(qp.dev.splitAlways || qp.dev.coalescer != nil && qp.dev.coalescer.Coalesces(qp.dest))
	}
	if mask&verbs.QPAttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
	}
	if mask&verbs.QPAttrTimeout != 0 {
		a.Timeout = attr.Timeout
	}
	if mask&verbs.QPAttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
		qp.comp.setRetryCnt(attr.RetryCnt)
	}
	if mask&verbs.QPAttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
		qp.comp.setRNRRetry(attr.RNRRetry)
	}
	if mask&verbs.QPAttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN
	}
	if mask&verbs.QPAttrSQPSN != 0 {
		a.SQPSN = attr.SQPSN
	}
	if mask&verbs.QPAttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&verbs.QPAttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
		qp.resp.setReplayRing(int(attr.MaxDestRdAtomic))
	}
	if mask&verbs.QPAttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&verbs.QPAttrDestQPN != 0 {
		a.DestQPNum = attr.DestQPNum
	}
	if mask&verbs.QPAttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = attr.EnSQDAsyncNotify
	}
	if qp.typ == verbs.QPTypeUD {
		qp.pmtu = qp.dev.pmtu.Bytes()
	} else if a.PathMTU.Valid() {
		qp.pmtu = a.PathMTU.Bytes()
	}
	qp.refreshViewsLocked()
}

// Query returns the attributes.
func (qp *QP) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.QPState = qp.stateLocked()
	a.CurQPState = a.QPState
	a.SQDraining = a.QPState == verbs.QPStateSQD && qp.sq.next != qp.sq.head
	return a, qp.init, nil
}

// Destroy destroys the QP. Outstanding work requests are discarded without
// completions, as ibv_destroy_qp does.
func (qp *QP) Destroy() error {
	qp.mu.Lock()
	if qp.destroyed {
		qp.mu.Unlock()
		return verbs.Errorf("DestroyQP", verbs.ErrDestroyed, "QP already destroyed")
	}
	qp.destroyed = true
	if qp.feed != nil {
		qp.feed.Arm(false, qp.sqRetired)
		qp.feed = nil // the producer frees it once Destroy returns
	}
	if qp.rq.feed != nil {
		qp.rq.feed.Arm(false, qp.rq.retired)
		qp.rq.feed = nil
	}
	// An ACK that waits for a poller is the peer's last word on what
	// arrived: send it rather than make the peer retry into the void.
	if qp.resp.ackPending {
		qp.resp.flushAckLocked(qp)
		qp.flushLocked()
	}
	// Requests waiting for the doorbell are discarded with their WQEs;
	// their buffers and MR pins go back now, or a DeregMR of their
	// memory would wait for them forever.
	qp.tx.drop(qp.dev)
	qp.setStateLocked(verbs.QPStateReset)
	qp.stopTimerLocked()
	qp.ccResetLocked()
	qp.clearRecvLocked()
	qp.dev.unbindQPWindows(qp.qpn)
	qp.mu.Unlock()
	qp.dev.removeQP(qp)
	qp.pd.refs.Add(-1)
	qp.sendCQ.users.Add(-1)
	qp.recvCQ.users.Add(-1)
	if qp.srq != nil {
		qp.srq.users.Add(-1)
	}
	return nil
}

// checkDrainedLocked raises EventSQDrained once a QP in SQD that asked for
// it has no send work in flight.
func (qp *QP) checkDrainedLocked() {
	if qp.sqdNotify && qp.stateLocked() == verbs.QPStateSQD && qp.sq.head == qp.sq.next {
		qp.sqdNotify = false
		qp.dev.Event(verbs.AsyncEvent{Type: verbs.EventSQDrained, QP: qp})
	}
}

// resetLocked returns the QP to RESET: queues emptied, no completions.
func (qp *QP) resetLocked() {
	qp.setStateLocked(verbs.QPStateReset)
	qp.cleanCQsLocked()
	qp.dev.unbindQPWindows(qp.qpn)
	qp.stopTimerLocked()
	qp.ccResetLocked()
	qp.clearProbesLocked()
	qp.sqRetired += qp.sq.tail - qp.sq.head - qp.sq.probes // discarded: they leave the queue too
	if qp.feed != nil {
		qp.feed.Discard()
	}
	qp.sq.head, qp.sq.next, qp.sq.tail, qp.sq.probes = 0, 0, 0, 0
	qp.lastHeard = time.Time{}
	qp.rq.retired += qp.rq.tail - qp.rq.head
	if qp.rq.feed != nil {
		qp.rq.feed.Discard()
	}
	qp.rq.head, qp.rq.tail = 0, 0
	qp.clearRecvLocked()
	qp.req = requester{}
	qp.comp = completer{}
	qp.commEst, qp.sqdNotify, qp.peerPort = false, false, 0
	qp.resp.reset()
	qp.tx.drop(qp.dev)
}

// cleanCQsLocked removes the QP's completions from its CQs (CQRing.Clean)
// as it enters RESET.
func (qp *QP) cleanCQsLocked() {
	qp.sendCQ.ring.Clean(qp.qpn)
	if qp.recvCQ != qp.sendCQ {
		qp.recvCQ.ring.Clean(qp.qpn)
	}
}

func (qp *QP) clearRecvLocked() {
	for i := range qp.rq.wqes {
		qp.rq.wqes[i].sgl.reset()
	}
	for i := range qp.sq.wqes {
		qp.sq.wqes[i].sgl.reset()
	}
}

// errorLocked moves the QP to ERR and flushes every outstanding work
// request: the send queue from the oldest unretired WQE (whose status says
// why, if it failed) and the receive queue, all with completions.
func (qp *QP) errorLocked() {
	if qp.stateLocked() == verbs.QPStateErr {
		return
	}
	qp.setStateLocked(verbs.QPStateErr)
	qp.stopTimerLocked()
	if qp.dev.cfg.Notify != nil {
		st := verbs.WCSuccess
		if qp.sq.head != qp.sq.tail {
			st = qp.sq.at(qp.sq.head).status
		}
		qp.dev.note(Note{Kind: NoteQPError, QPN: qp.qpn, Peer: qp.destAddr, Status: st})
	}
	// Queued requests must not leave once the QP is in error (their WQEs
	// complete as flushed right below), but a queued NAK that explains the
	// error to the peer must.
	qp.sealLocked()
	qp.tx.keepResponses(qp.dev)
	qp.flushLocked()
	qp.takeFeedLocked() // what waits in the feed was posted before the error: it is flushed too
	qp.flushSendLocked()
	qp.takeRecvFeedLocked() // flushed with the receive queue
	qp.resp.flushLocked(qp.recvRes())
	qp.armRecvFeedLocked()
	if qp.srq != nil {
		// IBTA 11.6.3.1: a QP on an SRQ that went to ERR takes no more
		// of its WQEs; the application may now destroy it.
		qp.dev.Event(verbs.AsyncEvent{Type: verbs.EventQPLastWQEReached, QP: qp})
	}
}

func (qp *QP) flushSendLocked() {
	for qp.sq.head != qp.sq.tail {
		w := qp.sq.at(qp.sq.head)
		st := w.status
		if st == verbs.WCSuccess {
			st = verbs.WCWRFlushErr
		}
		var rd uint32
		if w.started && w.isReadOrAtomic() {
			rd = 1
		}
		qp.req.onRetired(rd, w.started && qp.sq.next == qp.sq.head, w.lastPSN.Add(1))
		qp.completeSendLocked(w, st)
	}
	qp.sq.next = qp.sq.head
}

// completeSendLocked retires the oldest send WQE with status st, posting a
// completion if it is signaled or failed.
func (qp *QP) completeSendLocked(w *sendWQE, st verbs.WCStatus) {
	if w.probe {
		w.probe = false
		qp.retireProbeLocked(st)
	} else {
		qp.sqRetired++
		if w.signaled || st != verbs.WCSuccess {
			wc := verbs.WC{WRID: w.wrID, Status: st, Opcode: w.opcode.WCOpcode(), QPNum: qp.qpn}
			if st == verbs.WCSuccess {
				wc.ByteLen = uint32(w.length)
			}
			qp.sendCQ.push(&wc, st != verbs.WCSuccess)
		}
	}
	if w.started && qp.sq.next == qp.sq.head {
		qp.sq.next++ // the queue keeps head ≤ next (a rewind had put next here)
	}
	if qp.sqdNotify {
		defer qp.checkDrainedLocked()
	}
	w.sgl.reset()
	if w.bind != nil {
		w.bind.mw, w.bind.mr = nil, nil // let the objects go
	}
	w.started = false
	w.status = verbs.WCSuccess
	qp.sq.head++
}

// completeRecv completes the receive WQE w of QP qpn into cq; solicited
// says whether the message asked for a solicited event.
func completeRecv(cq *CQ, qpn uint32, w *recvWQE, st verbs.WCStatus, op verbs.WCOpcode, n uint32, imm uint32, flags verbs.WCFlags, solicited bool) {
	wc := verbs.WC{WRID: w.wrID, Status: st, Opcode: op, ByteLen: n, ImmData: imm, WCFlags: flags, QPNum: qpn}
	if st != verbs.WCSuccess {
		wc.Opcode = verbs.WCRecv
		wc.ByteLen = 0
	}
	cq.push(&wc, st != verbs.WCSuccess || solicited)
	w.sgl.reset()
}

// Errors returned by PostSend and PostRecv; preallocated because a full
// queue is a normal condition in a tight posting loop.
var (
	errSQFull = &verbs.Error{Op: "PostSend", Err: verbs.ErrQueueFull, Detail: "the send queue is full; poll the send CQ for completions or create the QP with a larger Cap.MaxSendWR"}
	errRQFull = &verbs.Error{Op: "PostRecv", Err: verbs.ErrQueueFull, Detail: "the receive queue is full; create the QP with a larger Cap.MaxRecvWR"}
)

// PostSend posts send work requests.
func (qp *QP) PostSend(wr *verbs.SendWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	st := qp.stateLocked()
	if qp.destroyed {
		return &verbs.PostError{WRID: wr.WRID, Err: verbs.Errorf("PostSend", verbs.ErrDestroyed, "QP %d was destroyed", qp.qpn)}
	}
	switch st {
	case verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateErr, verbs.QPStateSQE:
	default:
		return &verbs.PostError{WRID: wr.WRID, Err: verbs.Errorf("PostSend", verbs.ErrInvalidState, "QP %d is in %v; move it to RTS first", qp.qpn, st)}
	}
	qp.takeFeedLocked() // the feed's requests were posted first
	i := 0
	for ; wr != nil; wr = wr.Next {
		if err := qp.postOneLocked(wr); err != nil {
			qp.kickLocked(time.Time{})
			qp.armFeedLocked()
			return &verbs.PostError{Index: i, WRID: wr.WRID, Err: err}
		}
		i++
	}
	qp.kickLocked(time.Time{})
	qp.armFeedLocked()
	return nil
}

// kickLocked transmits what the posts made ready, or flushes the posts at
// once if the QP is in error.
//
// Doorbell batching: when an RC QP already has unacknowledged packets, an
// ACK is on its way, and the receive loop sends whatever is queued when it
// handles that ACK (endRxLocked) or the timer fires, so new packets wait in
// the QP's batch (at most txBatch; a full batch goes at once) and leave in
// one system call instead of one each. An idle QP sends at once, so
// latency is untouched.
//
// now may be zero (see runRequesterLocked).
func (qp *QP) kickLocked(now time.Time) {
	switch qp.stateLocked() {
	case verbs.QPStateErr, verbs.QPStateSQE:
		qp.flushSendLocked()
	case verbs.QPStateRTS:
		inFlight := qp.typ == verbs.QPTypeRC && qp.comp.psn != qp.req.psn
		qp.runRequesterLocked(now)
		if qp.resp.ackPending {
			// An ACK waits for this goroutine (Config.NoDeferredAck): it
			// leaves with the requests, in the same system call.
			qp.resp.flushAckWithPostLocked(qp)
			qp.flushLocked()
			return
		}
		switch {
		case qp.tx.pinsMemory():
			// Packets that gather from an MR never wait for the
			// doorbell: DeregMR waits for them to leave.
			qp.flushLocked()
		case inFlight, qp.onDoorbell:
			// The receive loop or RingDoorbells sends them.
		case !qp.holdLocked():
			qp.flushLocked() // an idle QP sends at once
		}
	}
}

func (qp *QP) postOneLocked(wr *verbs.SendWR) error {
	const op = "PostSend"
	c := &qp.init.Cap
	if len(wr.SGList) > int(c.MaxSendSGE) {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "%d SGEs exceed the QP's Cap.MaxSendSGE %d", len(wr.SGList), c.MaxSendSGE)
	}
	if !qp.opcodeAllowed(wr.Opcode) {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "%v is not available on a %v QP", wr.Opcode, qp.typ)
	}
	if qp.sq.full() {
		return errSQFull
	}
	qp.sq.reserve()
	w := qp.sq.at(qp.sq.tail)
	w.wrID = wr.WRID
	w.opcode = wr.Opcode
	w.flags = wr.SendFlags
	w.signaled = qp.sigAll || wr.SendFlags&verbs.SendSignaled != 0
	w.imm = wr.ImmData
	w.invRKey = wr.InvalidateRKey
	w.raddr = wr.RemoteAddr
	w.rkey = wr.RKey
	w.cmpAdd = wr.CompareAdd
	w.swap = wr.Swap
	w.status = verbs.WCSuccess
	w.started = false
	w.isInline = false
	w.executed = false
	if wr.Opcode == verbs.WRBindMW || wr.Opcode == verbs.WRLocalInv {
		return qp.postLocalLocked(wr, w)
	}
	readInto := wr.Opcode == verbs.WRRDMARead || wr.Opcode == verbs.WRAtomicCmpAndSwp || wr.Opcode == verbs.WRAtomicFetchAndAdd
	if wr.SendFlags&verbs.SendInline != 0 && !readInto {
		n := 0
		for _, e := range wr.SGList {
			n += int(e.Length)
		}
		if n > int(c.MaxInlineData) {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "%d bytes of inline data exceed the QP's Cap.MaxInlineData %d", n, c.MaxInlineData)
		}
		// Inline data is copied now, so the caller may reuse its buffers;
		// the SGEs need no lkey, but must lie in memory this process
		// registered (softrdma addresses memory only through MRs).
		w.inline = w.inline[:0]
		w.sgl.reset()
		for _, e := range wr.SGList {
			var ok bool
			if w.inline, ok = qp.dev.appendInline(w.inline, qp.pd, e); !ok {
				w.status = verbs.WCLocProtErr
				break
			}
		}
		w.isInline = true
		w.length = uint64(len(w.inline))
		if w.status != verbs.WCSuccess {
			w.length = uint64(n)
		}
	} else {
		total, ok := w.sgl.load(qp.pd, wr.SGList, readInto)
		w.length = total
		if !ok {
			w.status = verbs.WCLocProtErr
		}
	}
	if w.length > 1<<31 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "message of %d bytes exceeds the 2 GiB maximum", w.length)
	}
	switch wr.Opcode {
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		if err := verbsobj.CheckAtomic(op, w.length, wr.RemoteAddr); err != nil {
			return err
		}
	}
	if qp.typ == verbs.QPTypeUD {
		ah, ok := wr.AH.(*AH)
		if !ok || ah == nil || ah.pd.dev != qp.dev {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "a UD send needs an AH created on this device")
		}
		if w.length > uint64(qp.pmtu) {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "UD message of %d bytes exceeds the path MTU %d", w.length, qp.pmtu)
		}
		w.dest = ah.dest
		w.src = ah.src
		w.tclass = ah.tclass
		w.destQPN = wr.RemoteQPN & 0xFFFFFF
		w.qkey = wr.RemoteQKey
		if w.qkey&0x80000000 != 0 { // IBTA 10.2.5: use the QP's own Q_Key
			w.qkey = qp.attr.QKey
		}
	}
	qp.sq.tail++
	return nil
}

// postLocalLocked fills w, the send queue's next slot, for a BIND_MW or
// LOCAL_INV request and queues it.
func (qp *QP) postLocalLocked(wr *verbs.SendWR, w *sendWQE) error {
	if len(wr.SGList) != 0 {
		return verbs.Errorf("PostSend", verbs.ErrInvalidArgument, "%v carries no data: it takes no SGEs", wr.Opcode)
	}
	w.length = 0
	w.sgl.reset()
	if wr.Opcode == verbs.WRBindMW {
		o, err := qp.loadBind(wr.Bind)
		if err != nil {
			return err
		}
		if w.bind == nil {
			w.bind = new(bindOp)
		}
		*w.bind = o
	}
	qp.sq.tail++
	return nil
}

func (qp *QP) opcodeAllowed(op verbs.WROpcode) bool {
	switch qp.typ {
	case verbs.QPTypeUD:
		return op == verbs.WRSend || op == verbs.WRSendWithImm
	case verbs.QPTypeUC:
		return op == verbs.WRSend || op == verbs.WRSendWithImm || op == verbs.WRRDMAWrite || op == verbs.WRRDMAWriteWithImm ||
			op == verbs.WRBindMW || op == verbs.WRLocalInv
	case verbs.QPTypeRC:
		return op <= verbs.WRBindMW
	}
	return false
}

// appendInline appends the bytes an inline SGE names to dst. The SGE
// needs no lkey but must lie in an MR of pd (softrdma addresses memory
// only through MRs); the lkey, if it names one, is tried first. The copy
// happens under the MR's read lock, so it cannot overlap a DeregMR (after
// which the memory may be unmapped or reused). ok is false if no live MR
// of pd holds the range.
func (d *Device) appendInline(dst []byte, pd *PD, e verbs.SGE) (_ []byte, ok bool) {
	try := func(mr *MR) bool {
		if mr == nil || mr.pd() != pd {
			return false
		}
		mr.mu.RLock()
		defer mr.mu.RUnlock()
		b, in := mr.span(e.Addr, uint64(e.Length))
		if mr.dead || !in {
			return false
		}
		dst = append(dst, b...)
		return true
	}
	if mr := d.lookupKey(e.LKey); mr != nil && mr.lkey == e.LKey && try(mr) {
		return dst, true
	}
	ok = false
	d.keys.each(func(k uint32, mr *MR) bool {
		ok = k == mr.lkey && try(mr)
		return !ok
	})
	return dst, ok
}

// PostRecv posts receive work requests.
func (qp *QP) PostRecv(wr *verbs.RecvWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		return &verbs.PostError{WRID: wr.WRID, Err: verbs.Errorf("PostRecv", verbs.ErrDestroyed, "QP %d was destroyed", qp.qpn)}
	}
	if qp.srq != nil {
		return &verbs.PostError{WRID: wr.WRID, Err: verbs.Errorf("PostRecv", verbs.ErrInvalidArgument, "QP %d takes receive WQEs from its SRQ; post to the SRQ", qp.qpn)}
	}
	if st := qp.stateLocked(); st == verbs.QPStateReset {
		return &verbs.PostError{WRID: wr.WRID, Err: verbs.Errorf("PostRecv", verbs.ErrInvalidState, "QP %d is in RESET; move it to INIT first", qp.qpn)}
	}
	qp.takeRecvFeedLocked() // the feed's requests were posted first
	i := 0
	var err error
	for ; wr != nil; wr = wr.Next {
		if err = qp.postRecvOneLocked(wr); err != nil {
			err = &verbs.PostError{Index: i, WRID: wr.WRID, Err: err}
			break
		}
		i++
	}
	if qp.stateLocked() == verbs.QPStateErr {
		qp.resp.flushLocked(qp.recvRes())
	}
	qp.armRecvFeedLocked()
	return err
}

// postRecvOneLocked appends one receive request to the receive queue.
func (qp *QP) postRecvOneLocked(wr *verbs.RecvWR) error {
	if len(wr.SGList) > int(qp.init.Cap.MaxRecvSGE) {
		return verbs.Errorf("PostRecv", verbs.ErrInvalidArgument, "%d SGEs exceed the QP's Cap.MaxRecvSGE %d", len(wr.SGList), qp.init.Cap.MaxRecvSGE)
	}
	if qp.rq.full() {
		return errRQFull
	}
	w := qp.rq.at(qp.rq.tail)
	w.wrID = wr.WRID
	total, ok := w.sgl.load(qp.pd, wr.SGList, true)
	w.length, w.bad = total, !ok
	qp.rq.tail++
	return nil
}
