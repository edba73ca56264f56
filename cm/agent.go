package cm

// The CM agent: one per device port, installed as the port's QP1 MAD
// handler (verbs.GSI). It speaks the IB CM protocol (IBTA vol 1 ch. 12)
// the way Linux's drivers/infiniband/core/cm.c does:
//
//	MAD handler ──copy──▶ agent.in ──▶ run loop ──▶ handle{REQ,MRA,REJ,REP,RTU,DREQ,DREP,SIDR_*}
//	                                       │   ▲
//	      Dial / Accept / Close ──call────▶│   │ one lock (mu): every cmID's state
//	                                       ▼   │
//	                     retransmit timer (the earliest deadline of all cmIDs)
//
// A cmID is one side of one connection attempt, in one of cm.c's states.
// Messages that expect an answer (REQ, REP, DREQ, SIDR_REQ) are resent
// with the same transaction ID until answered or their retries run out,
// as the kernel's MAD layer does for cm. The API goroutines wait on a
// cmID's event channel; the agent never blocks on them.

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// state is a cmID's state, named as cm.c names them (enum ib_cm_state).
type state uint8

const (
	stateIdle state = iota
	stateListen
	stateReqSent
	stateReqRcvd
	stateMRAReqSent
	stateMRAReqRcvd
	stateRepSent
	stateRepRcvd
	stateMRARepRcvd
	stateEstablished
	stateDReqSent
	stateDReqRcvd
	stateTimewait
	stateSIDRReqSent
	stateSIDRReqRcvd
)

var stateNames = [...]string{
	stateIdle: "IDLE", stateListen: "LISTEN", stateReqSent: "REQ_SENT", stateReqRcvd: "REQ_RCVD",
	stateMRAReqSent: "MRA_REQ_SENT", stateMRAReqRcvd: "MRA_REQ_RCVD", stateRepSent: "REP_SENT",
	stateRepRcvd: "REP_RCVD", stateMRARepRcvd: "MRA_REP_RCVD", stateEstablished: "ESTABLISHED",
	stateDReqSent: "DREQ_SENT", stateDReqRcvd: "DREQ_RCVD", stateTimewait: "TIMEWAIT",
	stateSIDRReqSent: "SIDR_REQ_SENT", stateSIDRReqRcvd: "SIDR_REQ_RCVD",
}

func (s state) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "state?"
}

// Constants rdma_cm and cm.c use (cma.c, cm.c).
const (
	cmResponseTimeout = 20 // CMA_CM_RESPONSE_TIMEOUT: 4.096 µs × 2^20 ≈ 4 s
	maxCMRetries      = 15 // CMA_MAX_CM_RETRIES
	mraServiceTimeout = 24 // CMA_CM_MRA_SETTING without the delay flag
	// iboePacketLifetime is rdma_cm's packet life time on RoCE
	// (CMA_IBOE_PACKET_LIFETIME in Linux 6.1; its REQs carry a local ACK
	// timeout of 19 = 18 + 1).
	iboePacketLifetime = 18
	// caACKDelay is the local CA ACK delay rxe reports (its
	// local_ca_ack_delay device attribute, seen as the REP's target ACK
	// delay in captures).
	caACKDelay = 15
	// RDMAUDPQKey is the Q_Key rdma_cm gives UD QPs of the UDP port space
	// (RDMA_UDP_QKEY).
	RDMAUDPQKey = 0x01234567
)

// convertToDuration turns an IBA time code (4.096 µs × 2^code) into the
// rounded-up power-of-two milliseconds cm.c uses (cm_convert_to_ms).
func convertToDuration(code uint8) time.Duration {
	n := int(code) - 8
	if n < 0 {
		n = 0
	}
	return time.Duration(1<<n) * time.Millisecond
}

// ackTimeout is cm.c's cm_ack_timeout: the QP's local ACK timeout from the
// CA's ACK delay and the path's packet life time.
func ackTimeout(caDelay, packetLife uint8) uint8 {
	t := int(packetLife) + 1
	d := int(caDelay)
	if t >= d {
		if d >= t-1 {
			t++
		}
	} else {
		t = d
		if int(packetLife)+1 >= d-1 {
			t++
		}
	}
	return uint8(min(31, t))
}

// event is what the agent tells the API goroutine waiting on a cmID.
type event struct {
	kind wire.CMAttr // REP, REJ, RTU, SIDR_REP; 0 for a timeout
	// The message, by pointer: a cmID's event buffer lives as long as
	// its connection, and thousands are held.
	rep    *wire.CMRep
	rej    *wire.CMRej
	sidr   *wire.CMSIDRRep
	reqErr error // set for timeouts and local failures
}

// cmID is one end of one connection (struct cm_id_private).
type cmID struct {
	a        *agent
	state    state
	localID  uint32
	remoteID uint32
	tid      uint64
	peer     verbs.GID // where its MADs go (QP1 of that GID)
	peerPKey uint16
	// remoteCAGUID with remoteID identifies the peer's side for duplicate
	// detection of REQs.
	remoteCAGUID uint64
	localQPN     uint32 // our data QP, checked against a DREQ's remote QPN
	remoteQPN    uint32
	serviceID    uint64
	ackTimeout   uint8 // the path's local ACK timeout code (TIMEWAIT length)

	// The message being retransmitted, if any.
	msg      []byte
	retries  int // resends left
	timeout  time.Duration
	deadline time.Time

	// events to the API goroutine (Dial or Accept); buffered, never blocks
	// the agent: at most one answer per request is pending.
	ev chan event
	// conn, once established, gets the disconnect.
	conn *Conn
	// lastSent is the last REP or DREP, resent on duplicates.
	lastSent []byte
	// passive: this side answered a REQ (a listener's connection).
	passive bool
	// rkey and sidrKey, when set, are id's entries in agent.remote and
	// agent.sidr, so that removing id costs no scan.
	rkey, sidrKey       remoteKey
	hasRkey, hasSIDRKey bool
	// rtuProof, if set, is what the RTU's private data must start with:
	// the dialer's proof that it holds the listener's pre-shared key.
	rtuProof []byte
}

// agent is the CM of one port of one device.
type agent struct {
	gsi   verbs.GSI
	port  uint8
	ctx   verbs.Context
	guid  uint64 // local CA GUID (the device's node GUID)
	hiTID uint32
	// idSlot and idMask shape local comm IDs on a device that shares its
	// address with other processes: the slot in the top bits, which
	// steer the MADs that name the ID to this process (sharedDevice).
	idSlot, idMask uint32

	in      chan madIn
	unreach chan unreachIn // refused.go
	kick    chan struct{}
	stop    chan struct{}
	// stopped and unhook: see lifetime.go.
	stopOnce sync.Once
	stopped  atomic.Bool
	unhook   func()

	mu        sync.Mutex
	ids       map[uint32]*cmID     // by local comm ID
	remote    map[remoteKey]*cmID  // passive ids by the peer's comm ID
	listeners map[uint64]*Listener // by service ID
	sidr      map[remoteKey]*cmID  // SIDR requests being answered
	now       func() time.Time
	deadlines deadlines    // every cmID's retransmission or TIMEWAIT deadline
	answers   answerBucket // unsolicited answers (guard.go)
	stats     agentStats
	conns     map[*Conn]struct{} // established, not yet closed (adopt)
	// ending are connections to end once their QPs settled (settle.go).
	ending []connEnd
	// closeWhenIdle: close the device when the last of conns closes
	// (closeIdle).
	closeWhenIdle bool
}

type remoteKey struct {
	id   uint32
	guid uint64
	gid  verbs.GID
}

type madIn struct {
	src verbs.MADSource
	mad [wire.MADLen]byte
	n   int
}

// agentNumbers numbers agents as the kernel numbers MAD agents (hi_tid).
var agentNumbers atomic.Uint32

var agents struct {
	mu sync.Mutex
	m  map[verbs.Context]*agent
}

// agentFor returns the agent of ctx's port, installing it on first use.
// The agent lives until the device closes (lifetime.go).
func agentFor(ctx verbs.Context, port uint8) (*agent, error) {
	agents.mu.Lock()
	if a := agents.m[ctx]; a != nil {
		agents.mu.Unlock()
		return a, nil
	}
	gsi, ok := ctx.(verbs.GSI)
	if !ok {
		agents.mu.Unlock()
		return nil, verbs.Errorf("cm", verbs.ErrNotSupported, "device %s has no QP1 (verbs.GSI): it cannot carry CM MADs", ctx.Device().Name())
	}
	a := newAgent(ctx, gsi, port, time.Now)
	if err := gsi.HandleMADs(port, a.receive); err != nil {
		agents.mu.Unlock()
		return nil, err
	}
	a.watchUnreachable(ctx)
	go a.run()
	if agents.m == nil {
		agents.m = map[verbs.Context]*agent{}
	}
	agents.m[ctx] = a
	agents.mu.Unlock()
	return a, a.watchClose()
}

// sharedDevice is a device that may share its address with devices in
// other processes (provider/soft on Linux): connection requests reach
// this process for the services it claims, and every other CM MAD by
// the slot in the comm ID it names.
type sharedDevice interface {
	SharedSlot() (slot uint32, bits int, shared bool)
	ClaimService(serviceID uint64) error
	ReleaseService(serviceID uint64)
}

func newAgent(ctx verbs.Context, gsi verbs.GSI, port uint8, now func() time.Time) *agent {
	a := &agent{
		gsi: gsi, port: port, ctx: ctx, now: now,
		in: make(chan madIn, 256), unreach: make(chan unreachIn, 16), kick: make(chan struct{}, 1), stop: make(chan struct{}),
		ids: map[uint32]*cmID{}, remote: map[remoteKey]*cmID{}, listeners: map[uint64]*Listener{},
		sidr: map[remoteKey]*cmID{},
	}
	a.idMask = 0xFFFFFFFF
	if ctx != nil {
		if da, err := ctx.QueryDevice(); err == nil {
			a.guid = da.NodeGUID
		}
		if sd, ok := ctx.(sharedDevice); ok {
			if slot, bits, shared := sd.SharedSlot(); shared && bits > 0 && bits < 16 {
				a.idSlot = slot << (32 - bits)
				a.idMask = 1<<(32-bits) - 1
			}
		}
	}
	a.hiTID = agentNumbers.Add(1)
	return a
}

func randUint32() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}

// randomPSN returns an unguessable 24-bit starting PSN.
func randomPSN() uint32 { return randUint32() & 0xffffff }

// receive is the GSI handler: it copies the MAD and returns at once.
func (a *agent) receive(src verbs.MADSource, mad []byte) {
	var m madIn
	m.src = src
	m.n = copy(m.mad[:], mad)
	select {
	case a.in <- m:
	default: // full: dropped, as a lost MAD; the sender retransmits
	}
}

// run is the agent's goroutine: MADs in, retransmissions out.
func (a *agent) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		a.mu.Lock()
		next := a.timeoutsLocked(a.now())
		a.mu.Unlock()
		a.endSettled()
		d := time.Hour
		if !next.IsZero() {
			d = max(next.Sub(a.now()), 0)
		}
		timer.Reset(d)
		select {
		case m := <-a.in:
			a.mu.Lock()
			a.handleLocked(m.src, m.mad[:m.n])
			a.mu.Unlock()
		case u := <-a.unreach:
			a.mu.Lock()
			a.refusedLocked(u)
			a.mu.Unlock()
		case <-timer.C:
		case <-a.kick:
		case <-a.stop:
			a.endSettled()
			return
		}
	}
}

// wake makes run recompute its deadline (after a send from an API call).
func (a *agent) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// newIDLocked creates a cmID with a fresh random local comm ID.
func (a *agent) newIDLocked() *cmID {
	id := &cmID{a: a, ev: make(chan event, 4), peerPKey: 0xffff}
	for {
		id.localID = a.idSlot | randUint32()&a.idMask
		if id.localID != 0 && a.ids[id.localID] == nil {
			break
		}
	}
	// cm.c: the MAD agent's number, then the comm ID as it lies in
	// memory (big-endian) read as a host (little-endian) word.
	id.tid = uint64(a.hiTID)<<32 | uint64(bits.ReverseBytes32(id.localID))
	a.ids[id.localID] = id
	return id
}

func (a *agent) removeLocked(id *cmID) {
	if a.ids[id.localID] == id {
		delete(a.ids, id.localID)
	}
	if id.hasRkey && a.remote[id.rkey] == id {
		delete(a.remote, id.rkey)
	}
	if id.hasSIDRKey && a.sidr[id.sidrKey] == id {
		delete(a.sidr, id.sidrKey)
	}
	id.hasRkey, id.hasSIDRKey = false, false
	id.msg = nil
	id.deadline = time.Time{}
	id.state = stateIdle
}

// newMAD returns a 256-byte CM MAD with its header written.
func newMAD(attr wire.CMAttr, tid uint64) []byte {
	b := make([]byte, wire.MADLen)
	wire.EncodeCMHeader(b, attr, tid)
	return b
}

// sendLocked sends mad to the peer's QP1. Errors are dropped like lost
// MADs: the retransmission covers them; the error is returned for the
// one that retransmission cannot cover (verbs.ErrUnreachable).
func (a *agent) sendLocked(dst verbs.GID, mad []byte) error {
	return a.gsi.SendMAD(a.port, dst, 1, verbs.GSIQKey, mad)
}

// sendRetriedLocked sends mad and keeps resending it every timeout until
// the answer cancels it or retries run out.
func (a *agent) sendRetriedLocked(id *cmID, mad []byte, timeout time.Duration, retries int) {
	id.msg, id.timeout, id.retries = mad, timeout, retries
	a.armLocked(id, a.now().Add(timeout))
	if err := a.sendLocked(id.peer, mad); errors.Is(err, verbs.ErrUnreachable) {
		a.unreachableLocked(id)
	}
	a.wake()
}

// unreachableLocked ends id at once when the provider knows its peer is
// gone (verbs.ErrUnreachable: a shared-memory peer whose process exited),
// where a wire would resend until the retries run out: the waiting Dial
// or Accept fails with ErrUnreachable, a DREQ is taken as answered.
func (a *agent) unreachableLocked(id *cmID) {
	id.msg, id.deadline = nil, time.Time{}
	switch id.state {
	case stateReqSent, stateMRAReqRcvd, stateSIDRReqSent, stateRepSent, stateMRARepRcvd:
		a.removeLocked(id)
		id.ev <- event{reqErr: ErrUnreachable}
	case stateDReqSent:
		a.enterTimewaitLocked(id)
	}
}

func (a *agent) expireLocked(id *cmID, now time.Time) {
	if id.state == stateTimewait {
		a.removeLocked(id)
		id.deadline = time.Time{}
		return
	}
	if id.msg != nil && id.retries > 0 {
		id.retries--
		a.armLocked(id, now.Add(id.timeout))
		if err := a.sendLocked(id.peer, id.msg); errors.Is(err, verbs.ErrUnreachable) {
			a.unreachableLocked(id)
		}
		return
	}
	// Out of retries (cm_process_send_error).
	id.msg, id.deadline = nil, time.Time{}
	switch id.state {
	case stateReqSent, stateMRAReqRcvd, stateSIDRReqSent:
		a.removeLocked(id)
		id.ev <- event{reqErr: ErrTimeout}
	case stateRepSent, stateMRARepRcvd:
		a.removeLocked(id)
		id.ev <- event{reqErr: ErrTimeout}
	case stateDReqSent:
		a.enterTimewaitLocked(id)
	}
}

// enterTimewaitLocked is cm_enter_timewait: the comm ID stays reserved
// (a late DREQ gets its DREP again) for the ACK timeout of the path.
func (a *agent) enterTimewaitLocked(id *cmID) {
	id.state = stateTimewait
	id.msg = nil
	a.armLocked(id, a.now().Add(convertToDuration(id.ackTimeout)))
	if c := id.conn; c != nil {
		a.endConnLocked(c, ErrDisconnected)
	}
	a.wake()
}

// handleLocked dispatches one received MAD.
func (a *agent) handleLocked(src verbs.MADSource, b []byte) {
	m, err := wire.ParseMAD(b)
	if err != nil || len(b) < wire.MADLen {
		return
	}
	if m.MgmtClass() != wire.MgmtClassCM || m.BaseVersion() != wire.MADBaseVersion {
		return // not ours; the provider answers other classes
	}
	if m.ClassVersion() != wire.CMClassVersion || m.Method() != wire.MADMethodSend {
		return
	}
	data := m.Data()
	tid := m.TransactionID()
	switch wire.CMAttr(m.AttrID()) {
	case wire.CMReqAttr:
		if r, err := wire.ParseCMReq(data); err == nil {
			a.handleReqLocked(src, tid, &r)
		}
	case wire.CMMRAAttr:
		if r, err := wire.ParseCMMRA(data); err == nil {
			a.handleMRALocked(src, &r)
		}
	case wire.CMRejAttr:
		if r, err := wire.ParseCMRej(data); err == nil {
			a.handleRejLocked(src, &r)
		}
	case wire.CMRepAttr:
		if r, err := wire.ParseCMRep(data); err == nil {
			a.handleRepLocked(src, tid, &r)
		}
	case wire.CMRTUAttr:
		if r, err := wire.ParseCMRTU(data); err == nil {
			a.handleRTULocked(src, &r)
		}
	case wire.CMDReqAttr:
		if r, err := wire.ParseCMDReq(data); err == nil {
			a.handleDReqLocked(src, tid, &r)
		}
	case wire.CMDRepAttr:
		if r, err := wire.ParseCMDRep(data); err == nil {
			a.handleDRepLocked(src, &r)
		}
	case wire.CMSIDRReqAttr:
		if r, err := wire.ParseCMSIDRReq(data); err == nil {
			a.handleSIDRReqLocked(src, tid, &r)
		}
	case wire.CMSIDRRepAttr:
		if r, err := wire.ParseCMSIDRRep(data); err == nil {
			a.handleSIDRRepLocked(src, &r)
		}
	}
}

// rejectLocked sends a REJ answering a message of the peer (for a REQ
// nobody owns, cm_issue_rej: the REJ echoes the REQ's comm ID and TID).
func (a *agent) rejectLocked(dst verbs.GID, tid uint64, localID, remoteID uint32, kind wire.CMMsgKind, reason wire.CMRejReason, ari, private []byte) {
	mad := newMAD(wire.CMRejAttr, tid)
	rej := wire.CMRej{LocalCommID: localID, RemoteCommID: remoteID, MessageRejected: kind, Reason: reason}
	rej.RejectedInfoLength = uint8(copy(rej.ARI[:], ari))
	copy(rej.PrivateData[:], private)
	rej.Encode(mad[wire.MADHeaderLen:])
	a.sendLocked(dst, mad)
}

func (a *agent) handleReqLocked(src verbs.MADSource, tid uint64, r *wire.CMReq) {
	key := remoteKey{id: r.LocalCommID, guid: r.LocalCAGUID, gid: src.GID}
	if id := a.remote[key]; id != nil {
		// A duplicate (cm_dup_req_handler): our answer was lost or slow.
		switch id.state {
		case stateMRAReqSent:
			if a.mayAnswerLocked() {
				a.sendMRALocked(id, wire.CMMsgREQ)
			}
		case stateTimewait:
			if a.mayAnswerLocked() {
				a.rejectLocked(id.peer, id.tid, id.localID, id.remoteID, wire.CMMsgREQ, wire.RejStaleConn, nil, nil)
			}
		}
		return
	}
	l := a.listeners[r.ServiceID]
	if l == nil {
		if a.mayAnswerLocked() {
			a.rejectLocked(src.GID, tid, 0, r.LocalCommID, wire.CMMsgREQ, wire.RejInvalidServiceID, nil, nil)
		}
		return
	}
	if r.Transport != wire.CMTransportRC && r.Transport != wire.CMTransportUC {
		if a.mayAnswerLocked() {
			a.rejectLocked(src.GID, tid, 0, r.LocalCommID, wire.CMMsgREQ, wire.RejInvalidTransportType, nil, nil)
		}
		return
	}
	if clampReq(r) {
		a.stats.clamped.Add(1)
	}
	id := a.newIDLocked()
	id.tid = tid // answers carry the REQ's transaction ID
	id.peer, id.remoteID, id.remoteCAGUID = src.GID, r.LocalCommID, r.LocalCAGUID
	id.remoteQPN, id.serviceID = r.LocalQPN, r.ServiceID
	id.ackTimeout = r.Primary.LocalACKTimeout
	id.state, id.passive = stateReqRcvd, true
	a.remote[key] = id
	id.rkey, id.hasRkey = key, true
	req := newConnRequest(l, id, src, r)
	select {
	case l.reqs <- req:
		// rdma_cm marks the REQ as "MRA pending" (IB_CM_MRA_FLAG_DELAY):
		// the MRA goes out only if the peer repeats its REQ before we
		// answer.
		id.state = stateMRAReqSent
	default:
		a.removeLocked(id)
		if a.mayAnswerLocked() {
			a.rejectLocked(src.GID, tid, id.localID, r.LocalCommID, wire.CMMsgREQ, wire.RejNoResources, nil, nil)
		}
	}
}

func (a *agent) sendMRALocked(id *cmID, kind wire.CMMsgKind) {
	mad := newMAD(wire.CMMRAAttr, id.tid)
	mra := wire.CMMRA{LocalCommID: id.localID, RemoteCommID: id.remoteID, MessageMRAed: kind, ServiceTimeout: mraServiceTimeout}
	mra.Encode(mad[wire.MADHeaderLen:])
	a.sendLocked(id.peer, mad)
}

func (a *agent) handleMRALocked(src verbs.MADSource, m *wire.CMMRA) {
	id := a.ids[m.RemoteCommID]
	if id == nil {
		return
	}
	if !fromPeer(id, src, m.LocalCommID) {
		a.unmatchedLocked()
		return
	}
	if clampMRA(m) {
		a.stats.clamped.Add(1)
	}
	extend := convertToDuration(m.ServiceTimeout) + convertToDuration(id.ackTimeout)
	switch {
	case id.state == stateReqSent && m.MessageMRAed == wire.CMMsgREQ:
		id.state = stateMRAReqRcvd
		id.remoteID = m.LocalCommID
	case id.state == stateRepSent && m.MessageMRAed == wire.CMMsgREP:
		id.state = stateMRARepRcvd
	default:
		a.unmatchedLocked()
		return
	}
	// The peer is alive but slow: wait longer before the next resend
	// (cm_mra_handler's ib_modify_mad).
	id.timeout = extend
	a.armLocked(id, a.now().Add(extend))
	a.wake()
}

func (a *agent) handleRejLocked(src verbs.MADSource, r *wire.CMRej) {
	id := a.ids[r.RemoteCommID]
	if id == nil {
		return
	}
	if !fromPeer(id, src, r.LocalCommID) || !rejAccepted(id, r) {
		a.unmatchedLocked()
		return
	}
	switch id.state {
	case stateReqSent, stateMRAReqRcvd, stateRepSent, stateMRARepRcvd, stateRepRcvd:
		a.removeLocked(id)
		id.ev <- event{kind: wire.CMRejAttr, rej: r}
	case stateEstablished, stateDReqSent:
		// The peer lost the connection: treat as a disconnect.
		a.enterTimewaitLocked(id)
	}
}

func (a *agent) handleRepLocked(src verbs.MADSource, tid uint64, r *wire.CMRep) {
	id := a.ids[r.RemoteCommID]
	if id == nil {
		// A stale REP for a comm ID we do not know: cm.c answers with a
		// REJ "invalid comm ID" so the peer stops resending; like
		// cm_issue_rej, it swaps the REP's comm IDs, so the peer finds
		// it names the comm ID it answered.
		if a.mayAnswerLocked() {
			a.rejectLocked(src.GID, tid, r.RemoteCommID, r.LocalCommID, wire.CMMsgREP, wire.RejInvalidCommID, nil, nil)
		}
		return
	}
	if id.passive || !fromPeer(id, src, r.LocalCommID) {
		a.unmatchedLocked()
		return
	}
	switch id.state {
	case stateReqSent, stateMRAReqRcvd:
	case stateEstablished:
		// Our RTU was lost (cm_dup_rep_handler): send it again.
		if id.lastSent != nil {
			a.sendLocked(id.peer, id.lastSent)
		}
		return
	default:
		a.unmatchedLocked()
		return
	}
	id.state = stateRepRcvd
	id.remoteID, id.remoteQPN = r.LocalCommID, r.LocalQPN
	id.msg, id.deadline = nil, time.Time{}
	id.ev <- event{kind: wire.CMRepAttr, rep: r}
}

func (a *agent) handleRTULocked(src verbs.MADSource, r *wire.CMRTU) {
	id := a.ids[r.RemoteCommID]
	if id == nil {
		return
	}
	if !fromPeer(id, src, r.LocalCommID) || (id.state != stateRepSent && id.state != stateMRARepRcvd) {
		a.unmatchedLocked()
		return
	}
	if id.rtuProof != nil && !checkRTUProof(id.rtuProof, r.PrivateData[:]) {
		// Not from a dialer that holds the pre-shared key (a replayed
		// REQ): the REP keeps being resent until its retries or
		// Accept's context run out.
		a.stats.proofFailed.Add(1)
		return
	}
	id.state = stateEstablished
	id.msg, id.deadline = nil, time.Time{}
	id.ev <- event{kind: wire.CMRTUAttr}
}

func (a *agent) sendDRepLocked(dst verbs.GID, tid uint64, localID, remoteID uint32) []byte {
	mad := newMAD(wire.CMDRepAttr, tid)
	d := wire.CMDRep{LocalCommID: localID, RemoteCommID: remoteID}
	d.Encode(mad[wire.MADHeaderLen:])
	a.sendLocked(dst, mad)
	return mad
}

func (a *agent) handleDReqLocked(src verbs.MADSource, tid uint64, d *wire.CMDReq) {
	id := a.ids[d.RemoteCommID]
	if id == nil {
		// cm_issue_drep: answer anyway, so the peer leaves DREQ_SENT.
		if a.mayAnswerLocked() {
			a.sendDRepLocked(src.GID, tid, d.RemoteCommID, d.LocalCommID)
		}
		return
	}
	if !fromPeer(id, src, d.LocalCommID) || d.RemoteQPN != id.localQPN {
		a.unmatchedLocked()
		return
	}
	switch id.state {
	case stateEstablished, stateRepSent, stateMRARepRcvd, stateDReqSent:
		// A DREQ in REP_SENT means the RTU was lost and the peer is done.
		if id.state == stateRepSent || id.state == stateMRARepRcvd {
			id.ev <- event{reqErr: ErrDisconnected}
		}
		id.lastSent = a.sendDRepLocked(id.peer, tid, id.localID, id.remoteID)
		a.enterTimewaitLocked(id)
	case stateTimewait:
		a.sendDRepLocked(id.peer, tid, id.localID, id.remoteID)
	default:
		a.unmatchedLocked()
	}
}

func (a *agent) handleDRepLocked(src verbs.MADSource, d *wire.CMDRep) {
	id := a.ids[d.RemoteCommID]
	if id == nil {
		return
	}
	if !fromPeer(id, src, d.LocalCommID) || id.state != stateDReqSent {
		a.unmatchedLocked()
		return
	}
	a.enterTimewaitLocked(id)
}

func (a *agent) handleSIDRReqLocked(src verbs.MADSource, tid uint64, s *wire.CMSIDRReq) {
	key := remoteKey{id: s.RequestID, gid: src.GID}
	if a.sidr[key] != nil {
		return // a duplicate while we work on it (cm.c drops it)
	}
	l := a.listeners[s.ServiceID]
	if l == nil || l.qpType != verbs.QPTypeUD {
		if !a.mayAnswerLocked() {
			return
		}
		mad := newMAD(wire.CMSIDRRepAttr, tid)
		rep := wire.CMSIDRRep{RequestID: s.RequestID, Status: wire.SIDRUnsupportedService, ServiceID: s.ServiceID}
		rep.Encode(mad[wire.MADHeaderLen:])
		a.sendLocked(src.GID, mad)
		return
	}
	id := a.newIDLocked()
	id.tid, id.peer, id.remoteID, id.serviceID = tid, src.GID, s.RequestID, s.ServiceID
	id.state, id.passive = stateSIDRReqRcvd, true
	a.sidr[key] = id
	id.sidrKey, id.hasSIDRKey = key, true
	req := newSIDRRequest(l, id, src, s)
	select {
	case l.reqs <- req:
	default:
		a.removeLocked(id)
	}
}

// sendSIDRRepLocked answers a SIDR_REQ and forgets it (cm.c removes the
// remote SIDR entry once it has answered).
func (a *agent) sendSIDRRepLocked(id *cmID, status wire.SIDRStatus, qpn, qkey uint32, private []byte) {
	mad := newMAD(wire.CMSIDRRepAttr, id.tid)
	rep := wire.CMSIDRRep{RequestID: id.remoteID, Status: status, QPN: qpn, QKey: qkey, ServiceID: id.serviceID}
	copy(rep.PrivateData[:], private)
	rep.Encode(mad[wire.MADHeaderLen:])
	a.sendLocked(id.peer, mad)
	a.removeLocked(id)
}

func (a *agent) handleSIDRRepLocked(src verbs.MADSource, s *wire.CMSIDRRep) {
	id := a.ids[s.RequestID]
	if id == nil {
		return
	}
	if id.state != stateSIDRReqSent || src.GID != id.peer {
		a.unmatchedLocked()
		return
	}
	a.removeLocked(id)
	id.ev <- event{kind: wire.CMSIDRRepAttr, sidr: s}
}
