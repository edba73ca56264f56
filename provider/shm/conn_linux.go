package shm

// A conn is the Unix socket between this device and one peer device: the
// control path. It carries, as SOCK_SEQPACKET messages:
//
//	HELLO       device ids, and the doorbell memfd (SCM_RIGHTS)
//	RING        "here is the ring my QP a produces requests for your QP b into"
//	GRANT_REQ   "my QP a asks your QP b to map rkey c for access d"
//	GRANT_RESP  yes (with the memfd, address, length, access) or the status
//	REVOKE      "unmap rkey c now" (DeregMR, SEND_WITH_INV) → REVOKE_ACK
//	UD          a MAD for QP 1, the connection manager's (gsi_linux.go)
//	UD_RING     "here is the ring my UD QPs produce datagrams for yours
//	            into" (ud_linux.go)
//	COPY_WRITE  WRITE data for a region that cannot be mapped (RegMR'd Go
//	COPY_READ   memory), a READ of one, an atomic on one: the owner checks
//	COPY_ATOMIC and applies it (copy.go) → COPY_RESP, the status and the
//	            data read or the original value
//	WAKE        "I changed a ring of yours and you sleep": wake the
//	            progress goroutine (the doorbell, sys_linux.go)
//
// Every message is checked: its length, its type, the fds it carries. The
// socket closing (the peer exited or was killed: the kernel closes it at
// once) moves every QP connected through it to ERR and unmaps the peer's
// memory. A conn's reader goroutine never takes a QP's mu except a UD
// QP's, whose holders never wait for a reader, so requesters may wait for
// a GRANT_RESP while holding theirs.

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/verbs"
)

const (
	mHello = iota + 1
	mRing
	mGrantReq
	mGrantResp
	mRevoke
	mRevokeAck
	mUD
	mCopyWrite
	mCopyRead
	mCopyAtomic
	mCopyResp
	mWake
	mUDRing
)

const (
	ctrlHdr   = 64
	ctrlSmall = ctrlHdr + maxInline + 64 // every message but COPY_WRITE and COPY_RESP fits
	ctrlMax   = ctrlHdr + copyChunk
)

// ctrl is a control message's header.
type ctrl struct {
	typ        uint8
	reqID      uint32
	a, b, c, d uint32
	e          uint32
	x, y       uint64
}

func (m *ctrl) encode(b []byte) {
	b[0] = m.typ
	binary.LittleEndian.PutUint32(b[4:], m.reqID)
	binary.LittleEndian.PutUint32(b[8:], m.a)
	binary.LittleEndian.PutUint32(b[12:], m.b)
	binary.LittleEndian.PutUint32(b[16:], m.c)
	binary.LittleEndian.PutUint32(b[20:], m.d)
	binary.LittleEndian.PutUint32(b[24:], m.e)
	binary.LittleEndian.PutUint64(b[32:], m.x)
	binary.LittleEndian.PutUint64(b[40:], m.y)
}

func decodeCtrl(b []byte) (m ctrl, ok bool) {
	if len(b) < ctrlHdr {
		return m, false
	}
	m.typ = b[0]
	m.reqID = binary.LittleEndian.Uint32(b[4:])
	m.a = binary.LittleEndian.Uint32(b[8:])
	m.b = binary.LittleEndian.Uint32(b[12:])
	m.c = binary.LittleEndian.Uint32(b[16:])
	m.d = binary.LittleEndian.Uint32(b[20:])
	m.e = binary.LittleEndian.Uint32(b[24:])
	m.x = binary.LittleEndian.Uint64(b[32:])
	m.y = binary.LittleEndian.Uint64(b[40:])
	return m, m.typ >= mHello && m.typ <= mUDRing
}

// Grant statuses in GRANT_RESP.
const (
	grantOK     = 0
	grantInvReq = 1 // the responder QP does not allow the access
	grantAccess = 2 // bad rkey, PD, region access or bounds
	grantCopy   = 3 // allowed, but the region cannot be mapped: use COPY_* messages
)

type conn struct {
	dev     *Device
	uc      *net.UnixConn
	peerID  uint64
	peerUID uint32
	bell    doorbell // the peer's doorbell, mapped read-only
	wakeFd  int      // a dup of uc's socket, for WAKE messages that never wait (ring)
	dead    atomic.Bool
	done    chan struct{}

	wmu sync.Mutex // serialises writes

	pmu     sync.Mutex
	nextReq uint32
	pending map[uint32]chan ctrlReply

	gmu    sync.RWMutex
	grants map[grantKey]*grant // what peers let our QPs map

	copySlots chan struct{} // one token per COPY_* request awaiting its answer (copyWindow)

	rings int // rings parked at dev.inboxes that came over this conn; guarded by dev.mu

	// users counts the QPs that hold the conn (qp.conn) and so may ring
	// it; connFreed is set once bell and wakeFd are released, when the
	// conn is dead and no QP holds it.
	users atomic.Int64

	ud udConn // UD rings to and from the peer (ud_linux.go)

	// fence is ring's store-load barrier: a locked operation on a word
	// of this conn's own, on a cache line of its own, so that it costs
	// no transfer of a line the peer or another conn writes.
	_     [64]byte
	fence uint32
	_     [60]byte
}

const connFreed = 1 << 62

// acquire makes a QP a user of the conn, which then keeps its doorbell
// mapped; false if the conn is gone.
func (c *conn) acquire() bool {
	for {
		n := c.users.Load()
		if n&connFreed != 0 || c.dead.Load() {
			return false
		}
		if c.users.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release ends a QP's use of the conn.
func (c *conn) release() {
	if c.users.Add(-1) == 0 && c.dead.Load() {
		c.free()
	}
}

// free unmaps the peer's doorbell and closes the wake socket, once the
// conn is dead and no QP can ring it any more. Each conn costs a map
// entry and an fd only while it lives or a QP holds it.
func (c *conn) free() {
	if !c.users.CompareAndSwap(0, connFreed) {
		return
	}
	if c.bell != nil {
		unix.Munmap(c.bell)
	}
	if c.wakeFd >= 0 {
		unix.Close(c.wakeFd)
	}
}

type ctrlReply struct {
	m       ctrl
	fd      int
	payload []byte // COPY_RESP only: a copy of the message's payload
}

type grantKey struct {
	qpn  uint32 // our requester QP
	rkey uint32
}

// grant is a peer MR our QP may access, mapped.
type grant struct {
	mu       sync.RWMutex // RLock around every access; Lock to unmap
	mem      []byte       // nil once revoked
	addr     uint64       // the owner's virtual address of mem[0]
	mrAccess verbs.Access
	qpAccess verbs.Access
	copy     bool // the owner applies each access (grantCopy); mem stays nil
}

// live reports whether the grant may be used. Precondition: mu held.
func (g *grant) live() bool { return g.mem != nil || g.copy }

// drop unmaps the grant and makes it unusable, waiting out accesses in
// flight.
func (g *grant) drop() {
	g.mu.Lock()
	if g.mem != nil {
		unix.Munmap(g.mem)
		g.mem = nil
	}
	g.copy = false
	g.mu.Unlock()
}

// connTo connects to the device peer names, or returns the live conn;
// op names the caller in errors. A device nobody listens for any more
// (its process exited) is verbs.ErrUnreachable.
func (d *Device) connTo(peer uint64, op string) (*conn, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, verbs.Errorf(op, verbs.ErrDestroyed, "device %s is closed", d.name)
	}
	if c := d.conns[peer]; c != nil && !c.dead.Load() {
		d.mu.Unlock()
		return c, nil
	}
	d.mu.Unlock()
	name := d.sockName(peer)
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		return nil, verbs.Errorf(op, verbs.ErrUnreachable, "no shm device at %s (is the peer process running, with the same Config.Dir?): %v", name, err)
	}
	c, err := d.handshake(uc, peer)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (d *Device) acceptLoop() {
	defer d.wg.Done()
	for {
		uc, err := d.ln.AcceptUnix()
		if err != nil {
			return
		}
		d.connWG.Add(1)
		go func() {
			defer d.connWG.Done()
			if _, err := d.handshake(uc, 0); err != nil {
				uc.Close()
			}
		}()
	}
}

// handshake checks the peer's credentials and exchanges HELLOs; want is
// the peer id the dialer expects (0 when accepting).
func (d *Device) handshake(uc *net.UnixConn, want uint64) (*conn, error) {
	fail := func(format string, args ...any) (*conn, error) {
		uc.Close()
		return nil, verbs.Errorf("shm.connect", verbs.ErrInvalidArgument, format, args...)
	}
	var cred *unix.Ucred
	raw, err := uc.SyscallConn()
	if err != nil {
		return fail("%v", err)
	}
	raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil {
		return fail("SO_PEERCRED: %v", err)
	}
	if !d.uidAllowed(cred.Uid) {
		return fail("peer pid %d runs as uid %d; only uid %d (and Config.AllowUIDs) may connect", cred.Pid, cred.Uid, d.uid)
	}
	var b [ctrlHdr]byte
	(&ctrl{typ: mHello, x: d.id}).encode(b[:])
	uc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := uc.WriteMsgUnix(b[:], unix.UnixRights(d.bellFD), nil); err != nil {
		return fail("hello: %v", err)
	}
	buf := make([]byte, ctrlMax)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return fail("hello: %v", err)
	}
	fds := parseFds(oob[:oobn])
	m, ok := decodeCtrl(buf[:n])
	if !ok || m.typ != mHello || len(fds) != 1 || (want != 0 && m.x != want) {
		closeFds(fds)
		return fail("bad hello from peer pid %d", cred.Pid)
	}
	if want == 0 && !d.verifyPeerID(m.x, cred.Pid) {
		closeFds(fds)
		d.ctr.helloRefused.Add(1)
		return fail("peer pid %d says it is device %016x, but does not listen for it", cred.Pid, m.x)
	}
	bell, err := mapPeerFd(fds[0], bellBytes, false)
	if err != nil {
		return fail("peer doorbell: %v", err)
	}
	uc.SetDeadline(time.Time{})
	return d.addConn(uc, m.x, cred.Uid, doorbell(bell), buf, oob)
}

// addConn starts serving a connection whose peer proved its uid and
// device id, and whose doorbell is mapped.
func (d *Device) addConn(uc *net.UnixConn, peerID uint64, peerUID uint32, bell doorbell, buf, oob []byte) (*conn, error) {
	c := &conn{dev: d, uc: uc, peerID: peerID, peerUID: peerUID, bell: bell, wakeFd: -1, done: make(chan struct{}),
		pending: map[uint32]chan ctrlReply{}, grants: map[grantKey]*grant{}, copySlots: make(chan struct{}, copyWindow)}
	if raw, err := uc.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) { c.wakeFd, _ = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		c.closeNow() // frees bell and wakeFd: no QP uses c
		return nil, verbs.Errorf("shm.connect", verbs.ErrDestroyed, "device closed")
	}
	d.all[c] = true
	if old := d.conns[c.peerID]; old == nil || old.dead.Load() {
		d.conns[c.peerID] = c
	}
	d.mu.Unlock()
	d.connWG.Add(1)
	go c.readLoop(buf, oob)
	return c, nil
}

// ring wakes the peer's progress goroutine if it sleeps: a futex wake
// and a WAKE message, sent without waiting: a full socket means the peer's reader has this
// connection's messages to read, and it wakes its device after each.
// No system call if the peer is awake. A QP's hot paths do not call it
// under the QP's lock (QP.ringLocked).
func (c *conn) ring() {
	if c.sleeps() {
		c.wake()
	}
}

// wakeHook, when set (by a test), is called at each wake.
var wakeHook func(*conn)

// sleeps reports whether the peer's progress goroutine sleeps (or is
// about to), so that what the caller has just published needs a wake.
func (c *conn) sleeps() bool {
	if c.dead.Load() || c.wakeFd < 0 {
		return false
	}
	// The caller has just published slots (or a consumer index) with
	// release stores, which on x86 are plain stores. The peer publishes
	// its sleeping flag, then looks at the rings; we publish the rings,
	// then look at the flag. Without a barrier between our store and
	// our load, x86 lets the load pass the store (it waits in the store
	// buffer): we read "awake", the peer reads the rings before our
	// slot, and it sleeps with our message unseen (until safetyWake).
	storeLoadFence(&c.fence)
	return atomic.LoadUint32(c.bell.word(bellSleeping)) != 0
}

// wake wakes the peer's progress goroutine.
func (c *conn) wake() {
	if wakeHook != nil {
		wakeHook(c)
	}
	// FUTEX_WAKE needs only read access to the word: it wakes the device
	// at once. It may come just before the device's futex wait and be
	// lost; the WAKE message cannot be: the device's reader bumps the
	// word, which that wait checks.
	futexWake(c.bell.word(bellSeq))
	var b [ctrlHdr]byte
	b[0] = mWake
	unix.Sendmsg(c.wakeFd, b[:], nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
}

func (d *Device) uidAllowed(uid uint32) bool {
	if uid == d.uid {
		return true
	}
	for _, u := range d.cfg.AllowUIDs {
		if u == uid {
			return true
		}
	}
	return false
}

func parseFds(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

func closeFds(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

var errConnDead = errors.New("peer gone")

// send writes one message, with fd attached if fd ≥ 0.
func (c *conn) send(m *ctrl, payload []byte, fd int, dontWait bool) error {
	if c.dead.Load() {
		return errConnDead
	}
	var small [ctrlSmall]byte
	b := small[:]
	if ctrlHdr+len(payload) > len(b) {
		b = make([]byte, ctrlHdr+len(payload)) // COPY_WRITE, COPY_RESP: the slow path
	}
	m.encode(b)
	n := ctrlHdr + copy(b[ctrlHdr:], payload)
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if dontWait {
		// UD is unreliable: a full socket drops the datagram rather than
		// block a poster.
		raw, err := c.uc.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := raw.Write(func(s uintptr) bool {
			serr = unix.Sendmsg(int(s), b[:n], oob, nil, unix.MSG_DONTWAIT)
			return true
		}); err != nil {
			return err
		}
		return serr
	}
	// A peer that stops reading its socket must not hold our writers,
	// and a conn reader answering it, forever: a write that cannot finish
	// within sendTimeout drops the connection. The deadline is for this
	// write only: left in place, it would fail every later write on the
	// socket once it passed, the unreliable ones above without a word.
	c.uc.SetWriteDeadline(time.Now().Add(sendTimeout))
	_, _, err := c.uc.WriteMsgUnix(b[:n], oob, nil)
	if err != nil {
		c.uc.Close() // the reader ends, and closeNow runs
		return err
	}
	c.uc.SetWriteDeadline(time.Time{})
	return nil
}

// sendTimeout is how long a control message may wait for room in a
// peer's socket: a live peer's reader drains it in microseconds. A
// variable so that a test can shorten it (for the devices it opens
// after).
var sendTimeout = 5 * time.Second

// call sends a request (with payload) and waits for its reply.
func (c *conn) call(m *ctrl, payload []byte, timeout time.Duration) (ctrlReply, error) {
	p, err := c.start(m, payload)
	if err != nil {
		return ctrlReply{}, err
	}
	return c.finish(p, timeout)
}

// pendingCall is a request sent whose reply finish waits for.
type pendingCall struct {
	id uint32
	ch chan ctrlReply
}

// start sends a request (with payload) and returns what finish needs to
// wait for its reply; every successful start must be finished.
func (c *conn) start(m *ctrl, payload []byte) (pendingCall, error) {
	p := pendingCall{ch: make(chan ctrlReply, 1)}
	c.pmu.Lock()
	c.nextReq++
	m.reqID, p.id = c.nextReq, c.nextReq
	c.pending[p.id] = p.ch
	c.pmu.Unlock()
	if err := c.send(m, payload, -1, false); err != nil {
		c.forget(p.id)
		return p, err
	}
	return p, nil
}

// finish waits for the reply to a request start sent.
func (c *conn) finish(p pendingCall, timeout time.Duration) (ctrlReply, error) {
	defer c.forget(p.id)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-p.ch:
		return r, nil
	case <-c.done:
		return ctrlReply{}, errConnDead
	case <-t.C:
		return ctrlReply{}, errors.New("peer did not answer")
	}
}

func (c *conn) forget(id uint32) {
	c.pmu.Lock()
	delete(c.pending, id)
	c.pmu.Unlock()
}

func (c *conn) readLoop(buf, oob []byte) {
	defer c.dev.connWG.Done()
	defer c.closeNow()
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return
	}
	var n, oobn int
	read := func(fd uintptr) bool {
		for n, oobn, err = recvmsg(int(fd), buf, oob); err == unix.EINTR; {
			n, oobn, err = recvmsg(int(fd), buf, oob)
		}
		return err != unix.EAGAIN
	}
	reset := false
	for {
		if rerr := rc.Read(read); rerr != nil {
			err = rerr
		}
		if errors.Is(err, unix.ECONNRESET) && !reset {
			// The peer closed its end while messages from us waited
			// unread in it (WAKEs, say): the kernel reports that once,
			// before the messages the peer sent until it closed. Those
			// are read still: a process that sends its last datagrams
			// or its UD ring and exits loses none of them.
			reset = true
			continue
		}
		if err != nil || n == 0 {
			return
		}
		fds := parseFds(oob[:oobn])
		m, ok := decodeCtrl(buf[:n])
		if !ok {
			closeFds(fds)
			c.dev.ctr.ctrlDropped.Add(1)
			return // a peer that speaks nonsense loses its connection
		}
		if !c.handle(&m, buf[ctrlHdr:n], fds) {
			c.dev.ctr.ctrlDropped.Add(1)
			return
		}
		if atomic.LoadUint32(c.dev.bell.word(bellSleeping)) != 0 {
			// A WAKE the peer could not send (its socket to us was
			// full) is made up for by any message after it.
			c.dev.kick()
		}
	}
}

// handle acts on one message. It returns false to drop the connection.
func (c *conn) handle(m *ctrl, payload []byte, fds []int) bool {
	d := c.dev
	wantFds := 0
	if m.typ == mRing || m.typ == mUDRing || (m.typ == mGrantResp && m.d == grantOK) {
		wantFds = 1
	}
	if len(fds) != wantFds {
		closeFds(fds)
		return false
	}
	switch m.typ {
	case mRing:
		return c.takeRing(m, fds[0])
	case mUDRing:
		return c.acceptUDRing(fds[0])
	case mGrantReq:
		c.answerGrant(m)
	case mCopyWrite, mCopyRead, mCopyAtomic:
		return c.applyCopy(m, payload)
	case mGrantResp, mRevokeAck, mCopyResp:
		if m.typ != mCopyResp && len(payload) != 0 {
			return false
		}
		c.pmu.Lock()
		ch := c.pending[m.reqID]
		c.pmu.Unlock()
		fd := -1
		if len(fds) == 1 {
			fd = fds[0]
		}
		if ch == nil {
			closeFds(fds)
			return true
		}
		r := ctrlReply{m: *m, fd: fd}
		if len(payload) > 0 {
			r.payload = append([]byte(nil), payload...)
		}
		ch <- r
	case mRevoke:
		c.revokeGrants(m.a, m.c)
		c.send(&ctrl{typ: mRevokeAck, reqID: m.reqID}, nil, -1, false)
	case mWake:
		if len(payload) != 0 {
			return false
		}
		d.kick()
	case mUD:
		if len(payload) > maxInline {
			return false
		}
		if m.b == gsiQPN {
			d.deliverMAD(c, m, payload)
			break
		}
		d.deliverUD(c, m, payload)
	default:
		return false
	}
	return true
}

// answerGrant checks a peer's request to map an rkey, as a responder
// checks a RETH: the QP must exist, be connected to the asking QP, serve
// it and allow the access; the rkey must name a live MR of the QP's PD
// that allows it and lives in shareable memory. The fd sent is
// read-only unless the QP and the MR allow a remote write or atomic
// (grants_linux.go). A refusal fails the QP (refuse_linux.go); a
// grantCheck request also checks a range and gets no fd.
func (c *conn) answerGrant(m *ctrl) {
	d := c.dev
	resp := ctrl{typ: mGrantResp, reqID: m.reqID, d: grantAccess}
	check := m.d&grantCheck != 0 // refuse_linux.go
	want := verbs.Access(m.d &^ grantCheck)
	d.mu.Lock()
	qp := d.qpByNum[m.b]
	d.mu.Unlock()
	fd, closeFd := -1, false
	switch {
	case qp == nil || qp.typ != verbs.QPTypeRC || qp.peer.Load() != c.peerID || qp.destQPN.Load() != m.a:
		resp.d = grantInvReq
	case verbs.Access(qp.access.Load())&want != want:
		resp.d = grantInvReq
	default:
		d.mrMu.RLock()
		mr := d.mrs[m.c]
		d.mrMu.RUnlock()
		if mr == nil {
			break
		}
		qpAccess := verbs.Access(qp.access.Load())
		mr.mu.Lock()
		switch {
		case mr.dead || mr.pd != qp.pd || mr.access&want != want:
		case check:
			if inRegion(mr, m.x, m.y) {
				resp.d = grantInRange
			}
		case mr.fd < 0:
			// Go memory: each access comes as a COPY_* message, checked
			// then; there is no mapping to revoke.
			resp.d = grantCopy
		default:
			var ok bool
			if fd, closeFd, ok = grantFd(mr, mr.access&qpAccess); !ok {
				resp.d = grantCopy // no read-only fd: the owner copies
			} else if !qp.noteGrant(c, m.c) {
				resp.d = grantInvReq // the QP stopped serving
			} else {
				resp.d = grantOK
				resp.x, resp.y = mr.addr, uint64(len(mr.buf))
				resp.a, resp.e = uint32(mr.access), uint32(qpAccess)
				mr.grantees[c] = true
			}
		}
		mr.mu.Unlock()
		if resp.d == grantCopy && !qp.serving() {
			resp.d = grantInvReq
		}
	}
	sendFd := fd
	if resp.d != grantOK {
		sendFd = -1
	}
	c.refused(m, resp.d)
	c.send(&resp, nil, sendFd, false)
	if closeFd {
		unix.Close(fd)
	}
}

// revokeGrants unmaps the grants of rkey to our QP qpn (0: to every
// QP), waiting out accesses in flight.
func (c *conn) revokeGrants(qpn, rkey uint32) {
	var gs []*grant
	c.gmu.Lock()
	for k, g := range c.grants {
		if k.rkey == rkey && (qpn == 0 || k.qpn == qpn) {
			gs = append(gs, g)
			delete(c.grants, k)
		}
	}
	c.gmu.Unlock()
	for _, g := range gs {
		g.drop()
	}
}

// grant returns the mapping of rkey for QP qpn, asking the owner first if
// there is none. It returns with g.mu read-locked on success.
func (c *conn) grant(qpn, destQPN, rkey uint32, want verbs.Access) (*grant, verbs.WCStatus) {
	k := grantKey{qpn, rkey}
	c.gmu.RLock()
	g := c.grants[k]
	if g != nil {
		g.mu.RLock()
		c.gmu.RUnlock()
		if g.live() {
			return g, verbs.WCSuccess
		}
		g.mu.RUnlock()
	} else {
		c.gmu.RUnlock()
	}
	r, err := c.call(&ctrl{typ: mGrantReq, a: qpn, b: destQPN, c: rkey, d: uint32(want)}, nil, 10*time.Second)
	if err != nil {
		return nil, verbs.WCRetryExcErr // the peer is gone: as a transport timeout
	}
	switch r.m.d {
	case grantOK:
	case grantCopy:
		g = &grant{copy: true}
		c.gmu.Lock()
		if old := c.grants[k]; old != nil {
			g = old // a racing request's answer, mapped or not: as good
		} else {
			c.grants[k] = g
		}
		g.mu.RLock()
		c.gmu.Unlock()
		return g, verbs.WCSuccess
	case grantInvReq:
		return nil, verbs.WCRemInvReqErr
	default:
		return nil, verbs.WCRemAccessErr
	}
	if r.m.y == 0 || r.m.y > 1<<40 {
		unix.Close(r.fd)
		return nil, verbs.WCRemAccessErr
	}
	mrAcc, qpAcc := verbs.Access(r.m.a), verbs.Access(r.m.e)
	// The owner sends a read-only fd unless the QP and the region both
	// allow a remote write or atomic.
	writable := mrAcc&qpAcc&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0
	mem, err := mapPeerFd(r.fd, int(r.m.y), writable)
	if err != nil {
		return nil, verbs.WCRemAccessErr
	}
	g = &grant{mem: mem, addr: r.m.x, mrAccess: mrAcc, qpAccess: qpAcc}
	c.gmu.Lock()
	if old := c.grants[k]; old != nil {
		c.gmu.Unlock()
		unix.Munmap(mem)
		return c.grant(qpn, destQPN, rkey, want)
	}
	c.grants[k] = g
	g.mu.RLock()
	c.gmu.Unlock()
	return g, verbs.WCSuccess
}

// close shuts the connection down and waits for nothing.
func (c *conn) close() {
	c.uc.Close()
}

// closeNow runs once, when the reader ends: the peer is gone (or we
// closed). QPs connected through the peer move to ERR, its memory is
// unmapped.
func (c *conn) closeNow() {
	if c.dead.Swap(true) {
		return
	}
	if c.wakeFd >= 0 {
		// The dup keeps the socket open: shut it down, so that the peer
		// sees the connection end now.
		unix.Shutdown(c.wakeFd, unix.SHUT_RDWR)
	}
	c.uc.Close()
	close(c.done)
	c.closeUD()
	d := c.dev
	c.gmu.Lock()
	for k, g := range c.grants {
		delete(c.grants, k)
		g.drop()
	}
	c.gmu.Unlock()
	d.mu.Lock()
	delete(d.all, c)
	if d.conns[c.peerID] == c {
		delete(d.conns, c.peerID)
	}
	var qps []*QP
	for _, qp := range d.qpByNum {
		if qp.peer.Load() == c.peerID {
			qps = append(qps, qp)
		}
	}
	for k, m := range d.inboxes {
		if m.from == c {
			d.dropInboxLocked(k, m)
		}
	}
	// Another live conn to the same peer (both dialed at once) keeps it.
	alive := false
	for o := range d.all {
		if o.peerID == c.peerID && !o.dead.Load() {
			alive = true
		}
	}
	d.mu.Unlock()
	// c.bell stays mapped, c.wakeFd open, while a QP holds c: it may be
	// ringing them.
	c.free()
	if alive {
		return
	}
	for _, qp := range qps {
		qp.peerGone()
	}
}
