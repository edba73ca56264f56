package shm

// UD datagrams travel through shared rings, as RC SENDs do: one ring per
// pair of devices and direction, which every UD QP of the sending device
// produces into and the receiving device's progress consumes.
//
//	sender                                 shared memory                       receiver
//	PostSend ─ AH → conn (cached per QP) ─► udOut.mu ─► slot[prod]: UD header ···· progress: peek slot[cons]
//	         (no room: the datagram is      (dest QP, src QP, Q_Key),            ─► check the header
//	          dropped, as on a wire)        payload, seq=prod+1                  ─► QP by number (cached)
//	         ─► ring the peer's bell (a system call only if its progress sleeps) ─► Q_Key, receive WQE
//	                                                                             ─► GRH (40 bytes) + payload
//	                                                                             ─► complete ─► pop
//
// The sender creates the ring (a sealed memfd) the first time one of its
// QPs sends to the peer, and hands it over with a UD_RING message; the
// receiver maps it and polls it with its QPs' rings. A slot is a ring
// slot with op SEND, flags FIRST|LAST (and SOLICITED, IMM), its payload
// the UD header then the datagram: nothing in ring.go is specific to UD.
//
// UD is unreliable and the sender never waits: a full ring (the
// receiver's process does not progress), a datagram for a QP that does
// not exist, a wrong Q_Key or no receive WQE each drop the datagram,
// counted. The receiver frees a slot as soon as it looked at it.
//
// As for RC rings, what the peer wrote is untrusted: the header is copied
// once and checked, and a ring that breaks its rules (an impossible
// consumer index at the sender; an impossible slot at the receiver) ends
// the connection to that peer, never a panic or an access outside the
// ring.

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/verbs"
)

// The UD header at the start of a UD slot's payload, little-endian.
const (
	udDestQPOff = 0  // uint32: the destination QP (24 bits)
	udSrcQPOff  = 4  // uint32: the sending QP (24 bits)
	udQKeyOff   = 8  // uint32: the Q_Key the datagram carries
	udHdrLen    = 16 // the rest is reserved, zero
)

// udConn is one connection's UD state: the ring this device produces
// datagrams for the peer into, and the peer's ring it consumes.
type udConn struct {
	outMu     sync.Mutex // serialises producers, and unmapping
	out       *ring      // nil until the first datagram to the peer
	outMem    []byte
	outBroken bool // no ring could be set up, or the peer broke it: datagrams to it are dropped

	in atomic.Pointer[udInbox]
}

// udInbox is a peer's UD ring, mapped.
type udInbox struct {
	mu     sync.Mutex // held by the goroutine consuming it; progress only TryLocks
	c      *conn
	r      *ring // nil once unmapped
	mem    []byte
	srcGID verbs.GID // the peer device's GID: the GRH's source
	// The QP the last datagram went to: datagrams come in runs to one QP.
	lastQPN uint32
	lastQP  *QP
}

// udDevice is a device's UD state.
type udDevice struct {
	mu      sync.Mutex                 // serialises updates of inboxes
	inboxes atomic.Pointer[[]*udInbox] // immutable snapshot, for progress
	drops   atomic.Uint64              // datagrams dropped, at either end
}

// udQP is a UD QP's requester state. Precondition for every access: the
// QP's mu held.
type udQP struct {
	peer uint64 // the device conn reaches, 0 none
	c    *conn
}

// sendUDLocked puts a datagram into the ring to the AH's device. UD is
// unreliable: a datagram that cannot be sent is dropped, as on a wire;
// the send completes successfully either way unless its local memory is
// bad.
func (qp *QP) sendUDLocked(w *sendWQE) {
	if w.status != verbs.WCSuccess {
		return
	}
	d := qp.dev
	c := qp.udConnLocked(w.ah.peer)
	if c == nil {
		d.ud.drops.Add(1)
		return
	}
	u := &c.ud
	u.outMu.Lock()
	defer u.outMu.Unlock()
	if u.out == nil && !u.openOutLocked(c) {
		d.ud.drops.Add(1)
		return
	}
	// acked, not free: a UD ring has no retire pass to read the peer's
	// index, so every send does, and a broken one is caught at once.
	n, ok := u.out.acked()
	if !ok {
		// The peer wrote an impossible consumer index.
		u.outBroken = true
		c.close()
		d.ud.drops.Add(1)
		return
	}
	if n == 0 {
		d.ud.drops.Add(1) // the peer is not keeping up
		return
	}
	dst := u.out.payload()
	binary.LittleEndian.PutUint32(dst[udDestQPOff:], w.remoteQPN)
	binary.LittleEndian.PutUint32(dst[udSrcQPOff:], qp.qpn)
	binary.LittleEndian.PutUint32(dst[udQKeyOff:], w.qkey)
	clear(dst[udQKeyOff+4 : udHdrLen])
	data := dst[udHdrLen : udHdrLen+w.length]
	if w.isInline {
		copy(data, w.inline)
	} else if !w.sgl.gather(qp.pd, 0, data) {
		w.status = verbs.WCLocProtErr // deregistered since PostSend checked it; nothing published
		return
	}
	h := slotHdr{op: opSend, flags: flagFirst | flagLast | qp.solic(w), length: uint32(udHdrLen + w.length), msgLen: uint32(w.length)}
	if w.opcode == verbs.WRSendWithImm {
		h.flags, h.imm = h.flags|flagImm, w.imm
	}
	u.out.publish(&h)
	qp.ringConnLocked(c)
}

// udConnLocked returns the live connection to device peer, cached for
// the next datagram, or nil if the peer cannot be reached.
// The QP holds the cached conn (acquire), which keeps its doorbell
// mapped, until it caches another or unmapLocked drops it.
func (qp *QP) udConnLocked(peer uint64) *conn {
	if c := qp.ud.c; c != nil && qp.ud.peer == peer && !c.dead.Load() {
		return c
	}
	qp.dropUDLocked()
	c, err := qp.dev.connTo(peer, "PostSend")
	if err != nil || !c.acquire() {
		return nil
	}
	qp.ud = udQP{peer: peer, c: c}
	return c
}

// dropUDLocked releases the cached conn.
func (qp *QP) dropUDLocked() {
	if qp.ud.c != nil {
		qp.ud.c.release()
	}
	qp.ud = udQP{}
}

// openOutLocked creates the ring to c's peer and hands it over.
// Precondition: u.outMu held.
func (u *udConn) openOutLocked(c *conn) bool {
	if u.outBroken || c.dead.Load() {
		return false
	}
	fd, mem, err := newMemfd("softrdma-shm-udring", ringBytes)
	if err != nil {
		u.outBroken = true
		return false
	}
	err = c.send(&ctrl{typ: mUDRing}, nil, fd, false)
	unix.Close(fd) // the message carries its own copy
	if err != nil {
		unix.Munmap(mem)
		u.outBroken = true
		return false
	}
	u.out, u.outMem = newRing(mem), mem
	return true
}

// acceptUDRing maps the UD ring a peer handed over and adds it to the
// rings progress consumes. It reports false, to drop the connection, if
// the ring is unusable or the peer already sent one.
func (c *conn) acceptUDRing(fd int) bool {
	mem, err := mapPeerFd(fd, ringBytes, true)
	if err != nil {
		return false
	}
	in := &udInbox{c: c, r: newRing(mem), mem: mem, srcGID: gidOf(c.peerUID, c.peerID)}
	if !c.ud.in.CompareAndSwap(nil, in) || c.dead.Load() {
		unix.Munmap(mem)
		return false
	}
	d := c.dev
	d.ud.mu.Lock()
	var old []*udInbox
	if p := d.ud.inboxes.Load(); p != nil {
		old = *p
	}
	s := make([]*udInbox, 0, len(old)+1)
	s = append(append(s, old...), in)
	d.ud.inboxes.Store(&s)
	d.ud.mu.Unlock()
	d.kick()
	return true
}

// closeUD delivers what the peer published in its UD ring, then unmaps
// both UD rings of a connection that ended, waiting for a
// producer or consumer in them to finish.
func (c *conn) closeUD() {
	u := &c.ud
	u.outMu.Lock()
	if u.outMem != nil {
		unix.Munmap(u.outMem)
		u.out, u.outMem = nil, nil
	}
	u.outBroken = true
	u.outMu.Unlock()
	in := u.in.Swap(nil)
	if in == nil {
		return
	}
	d := c.dev
	d.ud.mu.Lock()
	var old []*udInbox
	if p := d.ud.inboxes.Load(); p != nil {
		old = *p
	}
	s := make([]*udInbox, 0, len(old))
	for _, o := range old {
		if o != in {
			s = append(s, o)
		}
	}
	d.ud.inboxes.Store(&s)
	d.ud.mu.Unlock()
	in.mu.Lock()
	// What the peer published before it went is delivered, as datagrams
	// on a wire arrive after their sender exits: a process that sends its
	// last replies and closes its device at once (udaddy's server does)
	// loses none of them. The ring is still mapped here.
	for in.consume() {
	}
	unix.Munmap(in.mem)
	in.r, in.mem, in.lastQP = nil, nil, nil
	in.mu.Unlock()
}

// pollUD consumes the peers' UD rings once. Like progress, it reports
// whether anything moved or a ring was busy with another goroutine.
func (d *Device) pollUD() bool {
	p := d.ud.inboxes.Load()
	if p == nil {
		return false
	}
	moved := false
	for _, in := range *p {
		if !in.mu.TryLock() {
			moved = true
			continue
		}
		if in.consume() {
			moved = true
		}
		in.mu.Unlock()
	}
	return moved
}

// udBatch bounds the datagrams one pass takes from one ring, so that one
// busy peer does not starve the others (or the RC rings).
const udBatch = ringSlots

// consume delivers the datagrams in the ring. Precondition: in.mu held.
func (in *udInbox) consume() bool {
	if in.r == nil {
		return false
	}
	d := in.c.dev
	moved := false
	for range udBatch {
		dg, ok, err := peekUD(in.r)
		if err != nil {
			// The peer broke its ring: it loses the connection (the
			// reader then unmaps the ring, once we let go of it).
			in.r = nil
			in.c.close()
			return true
		}
		if !ok {
			break
		}
		qp := in.lastQP
		if qp == nil || in.lastQPN != dg.dest {
			qp = d.udQP(dg.dest)
			in.lastQPN, in.lastQP = dg.dest, qp
		}
		var placed, dead bool
		if qp != nil {
			if placed, dead = qp.placeUD(in.srcGID, &dg); dead {
				// Destroyed since we cached it: its number may name a new QP.
				if qp = d.udQP(dg.dest); qp != nil {
					placed, _ = qp.placeUD(in.srcGID, &dg)
				}
				in.lastQP = qp
			}
		}
		if !placed {
			d.ud.drops.Add(1)
		}
		in.r.pop()
		moved = true
	}
	return moved
}

// udDatagram is a UD slot as the consumer checked it.
type udDatagram struct {
	dest, src, qkey uint32
	imm             uint32
	flags           uint8  // flagSolic, flagImm
	data            []byte // in the slot: the peer may still change it
}

// peekUD returns the next datagram in r, and ok=false if none is
// published. A non-nil error means the ring is corrupt: a slot that is
// not one whole SEND of a UD header and at most maxInline bytes.
func peekUD(r *ring) (dg udDatagram, ok bool, err error) {
	h, payload, ok, err := r.peek()
	if err != nil || !ok {
		return dg, false, err
	}
	if h.op != opSend || h.flags&(flagFirst|flagLast) != flagFirst|flagLast || h.flags&flagInv != 0 ||
		len(payload) < udHdrLen || len(payload)-udHdrLen > maxInline || h.msgLen != h.length-udHdrLen {
		return dg, false, ringError("bad UD slot")
	}
	var hb [udHdrLen]byte
	copy(hb[:], payload) // once: the peer may change it while we look
	dg.dest = binary.LittleEndian.Uint32(hb[udDestQPOff:]) & 0xFFFFFF
	dg.src = binary.LittleEndian.Uint32(hb[udSrcQPOff:]) & 0xFFFFFF
	dg.qkey = binary.LittleEndian.Uint32(hb[udQKeyOff:])
	dg.imm, dg.flags = h.imm, h.flags&(flagSolic|flagImm)
	dg.data = payload[udHdrLen:]
	return dg, true, nil
}

// udQP returns the UD QP numbered qpn, or nil.
func (d *Device) udQP(qpn uint32) *QP {
	d.mu.Lock()
	qp := d.qpByNum[qpn]
	d.mu.Unlock()
	if qp == nil || qp.typ != verbs.QPTypeUD {
		return nil
	}
	return qp
}

// deliverUD places a datagram a peer sent over the socket (rather than
// its ring) into a UD QP's receive WQE.
func (d *Device) deliverUD(c *conn, m *ctrl, payload []byte) {
	placed := false
	if qp := d.udQP(m.b); qp != nil {
		dg := udDatagram{dest: m.b, src: m.a & 0xFFFFFF, qkey: m.c, imm: m.d, flags: uint8(m.e), data: payload}
		placed, _ = qp.placeUD(gidOf(c.peerUID, c.peerID), &dg)
	}
	if !placed {
		d.ud.drops.Add(1)
	}
}

// placeUD places a datagram into the QP's next receive WQE: the 40-byte
// GRH (an IPv6 header from the source device's GID to ours), then the
// payload. It reports placed false if the datagram was dropped: a QP
// destroyed (dead) or not ready to receive, a wrong Q_Key or no receive
// WQE. A receive WQE too short or with bad memory completes in error, as
// on a wire.
func (qp *QP) placeUD(src verbs.GID, dg *udDatagram) (placed, dead bool) {
	payload, flags := dg.data, dg.flags
	qp.mu.Lock()
	defer qp.unlock()
	if qp.dead {
		return false, true
	}
	if (qp.state != verbs.QPStateRTR && qp.state != verbs.QPStateRTS) || dg.qkey != qp.attr.QKey || !qp.takeRecvLocked() {
		return false, false
	}
	qp.haveCur = false
	w := &qp.cur
	var grh [40]byte
	grh[0] = 0x60
	binary.BigEndian.PutUint16(grh[4:], uint16(len(payload)))
	grh[6], grh[7] = 0x1B, 64
	copy(grh[8:], src[:])
	copy(grh[24:], qp.dev.gid[:])
	n := uint64(len(grh) + len(payload))
	wc := verbs.WC{WRID: w.wrID, QPNum: qp.qpn, Opcode: verbs.WCRecv, SrcQP: dg.src, WCFlags: verbs.WCWithGRH}
	switch {
	case w.bad:
		wc.Status = verbs.WCLocProtErr
	case n > w.length:
		wc.Status = verbs.WCLocLenErr
	case !w.sgl.scatter(qp.pd, 0, grh[:]) || !w.sgl.scatter(qp.pd, 40, payload):
		wc.Status = verbs.WCLocProtErr
	default:
		wc.ByteLen = uint32(n)
		if flags&flagImm != 0 {
			wc.WCFlags |= verbs.WCWithImm
			wc.ImmData = dg.imm
		}
	}
	if wc.Status != verbs.WCSuccess {
		wc.ByteLen, wc.WCFlags = 0, 0
	}
	qp.recvCQ.push(&wc, wc.Status != verbs.WCSuccess || flags&flagSolic != 0)
	return true, false
}
