package rdmanet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// Conn is a stream connection carried by RDMA in rsocket's protocol. It
// implements net.Conn; Read and Write may run concurrently with each other
// (one reader and one writer at a time; more are serialized), and with
// Close, SetDeadline and CloseWrite.
//
// The data path, sending side:
//
//	Write(p) ─► copy a chunk into the send buffer (registered) ─► RDMA WRITE
//	WITH IMM(RS_OP_DATA, n) into the peer's ring at the target SGL entry
//	─► the send completion frees the send buffer bytes
//
// receiving side (the poller goroutine owns the CQ):
//
//	CQ ─► poll ─► RS_OP_DATA: rx.onData (checked) ─► wake Read
//	          ─► RS_OP_SGL: new credits; new target SGL entry ─► wake Write
//	          ─► RS_OP_CTRL: shutdown / disconnect ─► EOF
//	Read(p) ─► rx.read from the ring ─► credits back (RS_OP_SGL) when due
type Conn struct {
	sess  session // the CM connection, or the out-of-band one (Connect)
	pd    verbs.PD
	cq    verbs.CQ // sends and receives, as rsocket
	qp    verbs.QP
	ring  verbs.MR // the receive ring the peer writes into
	tgt   verbs.MR // the target SGL the peer writes ring areas into
	sbuf  verbs.MR // the send buffer, then qpCtrlSize control slots
	laddr net.Addr
	raddr net.Addr

	sendSize  uint32
	keepAlive time.Duration
	busyPoll  bool
	spinTime  time.Duration // Config.SpinTime, resolved
	sqSize    int
	inline    uint32
	peerOrder binary.ByteOrder // how the peer reads the SGEs we write

	ctx        context.Context // the poller's lifetime
	stop       context.CancelFunc
	pollerDone chan struct{}
	watchDone  chan struct{}

	rmu, wmu sync.Mutex // one Read, one Write at a time
	pollMu   sync.Mutex // one goroutine polls the CQ; guards wcs
	// spins counts the busy-polling spells of Read and Write; while it
	// moves, the poller does not wait on the CQ (see poll).
	spins    atomic.Uint64
	pollKick chan struct{}          // a spinner gave up: the poller waits on the CQ
	notify   atomic.Pointer[func()] // SetNotify's function

	mu sync.Mutex // guards what follows
	rx rx
	// Send half (rsocket's names).
	tsgl               [sglSize]sge // where to write next in the peer's ring
	tsge               int
	remoteSGL          sge // the peer's target SGL
	remoteSGE          int
	tgtNext            int     // the target SGL entry the peer fills next
	iomaps             []iomap // what the peer mapped for IOWrite
	remoteIOMap        sge     // where this side's mappings go at the peer
	remoteMaps         []bool  // which of those entries are in use
	mappings           []*Mapping
	sseqNo, sseqComp   uint16
	sqeAvail           int
	sbufAvail          uint32
	sbufHead           uint32 // next free byte in the send buffer
	ctrlSeqno, ctrlMax uint32
	ctrlSlot           int
	sending            int // sends posted and not completed
	// State.
	err        error // the connection failed; both directions return it
	closed     bool
	rdShut     bool // the peer will send no more (SHUTDOWN, DISCONNECT, DREQ)
	wrShut     bool // CloseWrite was called
	peerGone   bool // the peer disconnected: writes fail
	readWake   chan struct{}
	writeWake  chan struct{}
	closedCh   chan struct{}
	swr        verbs.SendWR
	ssge       [2]verbs.SGE
	rwr        verbs.RecvWR
	wcs        [64]verbs.WC // guarded by pollMu
	rdl, wdl   deadline
	owned      []func() error
	closeErr   error
	closeDone  chan struct{}
	closeStart sync.Once
}

// Config tunes the buffers of a connection. The zero value (or nil) is
// 512 KiB send and receive buffers (rsocket's are 128 KiB), and rsocket's
// 384 work requests each way and 64 bytes inline.
type Config struct {
	// Context is the device to use; nil finds it from the address (an
	// opened device that has the local address or reaches the remote one).
	Context verbs.Context
	// RecvBuffer is the ring the peer writes into (rsocket's SO_RCVBUF);
	// it is rounded up to an even number of bytes.
	RecvBuffer int
	// SendBuffer is the registered buffer writes are copied into.
	SendBuffer int
	// QueueDepth is the send and receive queue size (at least 16); the
	// receive depth is also the credits the peer gets.
	QueueDepth int
	// Inline is the largest write sent inline (RDMA_INLINE); 0 means 64,
	// a negative value none.
	Inline int
	// IOMapSize is how many buffers the peer may map for direct writes
	// (RDMA_IOMAPSIZE, riomap); 0 means none.
	IOMapSize int
	// BusyPoll makes Read and Write poll the CQ without ever sleeping
	// while they wait, as a program that retries rsocket's non-blocking
	// calls at once does (rstream's default). It takes a CPU per waiting
	// call and lowers the latency by the wake-up; by default they poll
	// for a while, then sleep.
	BusyPoll bool
	// SpinTime is how long a Read or Write that must wait polls the CQ
	// before it sleeps. Zero means what the device suggests (a device
	// with a SpinHint method: the shared-memory provider's is 25 µs) or
	// 100 µs; a negative value, one look before it sleeps.
	SpinTime time.Duration
	// KeepAlive, if positive, sends an RS_CTRL_KEEPALIVE that often
	// (rsocket's SO_KEEPALIVE), so that a peer that died while this side
	// only reads is found within KeepAlive plus the transport's retry
	// time. Zero means none, as for rsocket.
	KeepAlive time.Duration
	// HandshakeTimeout, for a listener, bounds each accepted request's
	// handshake (the REP until the dialer's RTU); 0 means
	// DefaultHandshakeTimeout. A request whose dialer does not complete
	// it in time is dropped; the others go on meanwhile.
	HandshakeTimeout time.Duration
	// MaxPendingHandshakes, for a listener, bounds the handshakes in
	// progress plus the connections waiting for Accept; requests beyond
	// it are rejected. 0 means DefaultMaxPendingHandshakes. Each pending
	// handshake holds an endpoint's buffers. Fixed when the listener is
	// created (SetConfig does not change it).
	MaxPendingHandshakes int
}

func (c *Config) withDefaults() Config {
	var d Config
	if c != nil {
		d = *c
	}
	if d.RecvBuffer <= 0 {
		d.RecvBuffer = defaultRecvBuffer
	}
	d.RecvBuffer = (d.RecvBuffer + 1) &^ 1
	if d.SendBuffer <= 0 {
		d.SendBuffer = defaultSendBuffer
	}
	d.SendBuffer = max(d.SendBuffer, sndLowat)
	if d.QueueDepth <= 0 {
		d.QueueDepth = defaultQueueDepth
	}
	d.QueueDepth = min(max(d.QueueDepth, minQueueDepth), 0xFFFE)
	if d.Inline == 0 {
		d.Inline = defaultInline
	}
	d.Inline = max(d.Inline, 0)
	if d.HandshakeTimeout <= 0 {
		d.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if d.MaxPendingHandshakes <= 0 {
		d.MaxPendingHandshakes = DefaultMaxPendingHandshakes
	}
	return d
}

// newConn creates the verbs objects of one endpoint on vctx, the QP in
// INIT with its receives posted (as rs_create_ep does before connecting),
// and the connection data to offer the peer.
func newConn(vctx verbs.Context, cfg Config) (c *Conn, cd connData, err error) {
	c = &Conn{readWake: make(chan struct{}, 1), writeWake: make(chan struct{}, 1), pollKick: make(chan struct{}, 1),
		closedCh: make(chan struct{}), closeDone: make(chan struct{}),
		pollerDone: make(chan struct{}), watchDone: make(chan struct{}),
		rdl: newDeadline(), wdl: newDeadline()}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	da, err := vctx.QueryDevice()
	if err != nil {
		return nil, cd, err
	}
	depth := cfg.QueueDepth
	if da.MaxQPWR > 0 {
		depth = min(depth, da.MaxQPWR)
	}
	inline := cfg.Inline
	if da.MaxInlineData > 0 {
		inline = min(inline, da.MaxInlineData)
	}
	if c.pd, err = vctx.AllocPD(); err != nil {
		return nil, cd, err
	}
	c.owned = append(c.owned, c.pd.Dealloc)
	if c.cq, err = vctx.CreateCQ(2*depth, nil); err != nil {
		return nil, cd, err
	}
	c.owned = append(c.owned, c.cq.Destroy)
	c.qp, err = c.pd.CreateQP(&verbs.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq, QPType: verbs.QPTypeRC, SigAll: true,
		Cap: verbs.QPCap{MaxSendWR: uint32(depth), MaxRecvWR: uint32(depth), MaxSendSGE: 2, MaxRecvSGE: 1, MaxInlineData: uint32(inline)}})
	if err != nil {
		return nil, cd, err
	}
	c.owned = append(c.owned, c.qp.Destroy)
	remote := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	if c.ring, err = c.pd.AllocMR(cfg.RecvBuffer, remote); err != nil {
		return nil, cd, err
	}
	c.owned = append(c.owned, c.ring.Dereg)
	iomaps := scaleToValue(valueToScale(max(cfg.IOMapSize, 0), 8), 8)
	if c.tgt, err = c.pd.AllocMR(sglSize*sgeLen+iomaps*iomapLen, remote); err != nil {
		return nil, cd, err
	}
	c.owned = append(c.owned, c.tgt.Dereg)
	if c.sbuf, err = c.pd.AllocMR(cfg.SendBuffer+qpCtrlSize*sgeLen, verbs.AccessLocalWrite); err != nil {
		return nil, cd, err
	}
	c.owned = append(c.owned, c.sbuf.Dereg)
	p := cm.DefaultParams()
	if err = cm.Init(c.qp, &p); err != nil {
		return nil, cd, err
	}
	for i := 0; i < depth; i++ {
		if err = c.postRecv(); err != nil {
			return nil, cd, err
		}
	}
	c.sendSize, c.sqSize, c.inline = uint32(cfg.SendBuffer), depth, uint32(inline)
	c.keepAlive = cfg.KeepAlive
	c.busyPoll = cfg.BusyPoll
	c.spinTime = spinTimeFor(vctx, cfg.SpinTime)
	c.rx = newRx(uint32(cfg.RecvBuffer), uint16(depth))
	c.sbufAvail = c.sendSize
	c.ctrlMax = qpCtrlSize
	c.sqeAvail = depth - qpCtrlSize
	c.iomaps = make([]iomap, iomaps)
	cd = connData{Version: 1, Flags: connFlagIOMap, Credits: uint16(depth), TargetIOMapExp: uint8(valueToScale(iomaps, 8)),
		TargetSGL: sge{Addr: c.tgt.Addr(), Key: c.tgt.RKey(), Length: sglSize},
		DataBuf:   sge{Addr: c.ring.Addr(), Key: c.ring.RKey(), Length: uint32(cfg.RecvBuffer / 2)}}
	return c, cd, nil
}

// session is what carries a connection's life besides its QP: the CM
// connection (Dial, Accept), or the out-of-band stream of Connect.
type session interface {
	// Done is closed when the peer disconnected or the QP failed.
	Done() <-chan struct{}
	// Err says why Done was closed (cm.ErrQPError: the QP failed).
	Err() error
	// Close disconnects (the CM's DREQ, or closing the stream).
	Close() error
}

// start takes the peer's connection data and the established session,
// and starts the poller.
func (c *Conn) start(sess session, laddr, raddr net.Addr, peer connData) {
	c.sess = sess
	c.laddr, c.raddr = laddr, raddr
	c.remoteSGL = peer.TargetSGL
	c.remoteSGL.Length = min(c.remoteSGL.Length, 1<<16)
	c.remoteSGE = 1
	c.tgtNext = 1
	c.peerOrder = binary.ByteOrder(binary.LittleEndian)
	if peer.Flags&connFlagNet != 0 {
		c.peerOrder = binary.BigEndian
	}
	c.tsgl[0] = peer.DataBuf
	if peer.Flags&connFlagIOMap != 0 {
		c.remoteIOMap = sge{Addr: peer.TargetSGL.Addr + sgeLen*uint64(peer.TargetSGL.Length), Key: peer.TargetSGL.Key,
			Length: uint32(scaleToValue(int(peer.TargetIOMapExp), 8))}
		c.remoteMaps = make([]bool, c.remoteIOMap.Length)
	}
	c.sseqComp = peer.Credits
	c.ctx, c.stop = context.WithCancel(context.Background())
	c.mu.Lock()
	c.updateCreditsLocked() // the second half of the ring, at once
	c.mu.Unlock()
	go c.poll()
	go c.watch()
}

func (c *Conn) postRecv() error {
	c.rwr = verbs.RecvWR{WRID: 1 << 63}
	return c.qp.PostRecv(&c.rwr)
}

// watch ends the poller when the cm connection ends (the peer's DREQ, or
// the QP failed).
func (c *Conn) watch() {
	defer close(c.watchDone)
	var tick <-chan time.Time
	if c.keepAlive > 0 {
		t := time.NewTicker(c.keepAlive)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-c.sess.Done():
			c.stop()
			return
		case <-c.ctx.Done():
			return
		case <-tick:
			c.mu.Lock()
			if !c.closed && c.err == nil && !c.peerGone && c.ctrlSeqno != c.ctrlMax {
				c.ctrlSeqno++
				c.postLocked(msgSet(opCtrl, ctrlKeepalive), 0, 0, 0, 0)
			}
			c.mu.Unlock()
		}
	}
}

// poll is the connection's background progress: it processes
// completions whenever the CQ has some and nobody else is polling, until
// the connection ends, then drains what is left.
//
// While Reads and Writes busy-poll, the poller steps aside instead of
// waiting on the CQ: on a software provider every CQ.Wait brings the
// device's receive loop back to spinning (it steps aside for busy
// pollers), and that third spinner took the CPUs the two ends needed (2
// cores: 62% of the CPU of a 64-byte ping-pong went to the devices'
// receive loops). A spinner that gives up kicks the poller before it
// sleeps; otherwise the poller looks every asideCheck whether anybody
// still spins. Completions that arrive meanwhile wait in the CQ, as they
// do for rsocket.
func (c *Conn) poll() {
	defer close(c.pollerDone)
	aside := time.NewTimer(asideCheck)
	defer aside.Stop()
	seen := c.spins.Load()
	for {
		n, err := c.progress(true)
		if err != nil {
			c.fail(fmt.Errorf("rdmanet: polling the CQ: %w", err))
			return
		}
		if n > 0 {
			// Let the Read or Write just woken run on this P now: it
			// is this P's next goroutine, and this loop's next step,
			// CQ.Wait, spins before it sleeps (a hand-off per message
			// that waited for the spin).
			runtime.Gosched()
			continue
		}
		if c.ctx.Err() != nil {
			c.mu.Lock()
			if !c.closed && c.err == nil {
				// The peer disconnected without (or after) its RS_CTRL
				// message: what is queued can still be read.
				c.rdShut, c.peerGone = true, true
				if e := c.sess.Err(); errors.Is(e, cm.ErrQPError) {
					c.failLocked(e)
				}
			}
			c.mu.Unlock()
			c.wake()
			return
		}
		if s := c.spins.Load(); s != seen && !c.closing() {
			c.stepAside(aside, s)
			seen = c.spins.Load()
			continue
		}
		c.cq.Wait(c.ctx)
	}
}

// asideCheck is how often a poller that stepped aside looks whether Reads
// and Writes still busy-poll.
const asideCheck = 10 * time.Millisecond

// stepAside waits while Reads and Writes busy-poll: until one gives up
// (kickPoller), a check finds no spell begun since the last (seen), or
// the connection closes or ends.
func (c *Conn) stepAside(t *time.Timer, seen uint64) {
	for {
		t.Reset(asideCheck)
		select {
		case <-c.pollKick:
			return
		case <-c.closedCh:
			return
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		s := c.spins.Load()
		if s == seen {
			return
		}
		seen = s
	}
}

// closing reports whether Close began: its linger needs the poller.
func (c *Conn) closing() bool {
	select {
	case <-c.closedCh:
		return true
	default:
		return false
	}
}

// kickPoller makes the poller wait on the CQ again (poll).
func (c *Conn) kickPoller() {
	select {
	case c.pollKick <- struct{}{}:
	default:
	}
}

// progress polls the CQ once and handles what it finds; only one
// goroutine polls at a time (others return 0 at once unless wait). Read
// and Write call it for a short while before they sleep, as rsocket
// polls before it blocks: on a software provider polling also runs the
// receive path, so the data is there without a goroutine hand-off.
func (c *Conn) progress(wait bool) (int, error) {
	if wait {
		c.pollMu.Lock()
	} else if !c.pollMu.TryLock() {
		return 0, nil
	}
	n, err := c.cq.Poll(c.wcs[:])
	if n > 0 {
		c.mu.Lock()
		reposts := 0
		for i := range c.wcs[:n] {
			reposts += c.completeLocked(&c.wcs[i])
		}
		if !c.closed && c.err == nil {
			for ; reposts > 0; reposts-- {
				if err := c.postRecv(); err != nil {
					c.failLocked(err)
					break
				}
			}
			c.updateCreditsLocked()
		}
		c.mu.Unlock()
	}
	c.pollMu.Unlock()
	if n > 0 {
		c.wake()
	}
	return n, err
}

// defaultSpinTime is how long Read and Write poll before they sleep on
// a device that suggests nothing: a few round trips of a 64-byte message
// over the soft provider, so that a request/response exchange finds its
// reply while it polls.
const defaultSpinTime = 100 * time.Microsecond

// spinTimeFor resolves Config.SpinTime for a connection on vctx.
//
// A device whose round trips take a microsecond (shared memory) suggests
// a shorter spin: each look of a spinning Read is a Gosched, and under
// gRPC a goroutine that yielded so waits on the global run queue while
// the server's other goroutines take the Ps. bench/compare, 2 alternating
// pairs of 3-round runs: gRPC p99 over shm 639 and 747 µs with 25 µs
// against 868 and 857 with 100 µs, p50 unchanged (34-47 µs). Over the soft
// provider 25 µs is shorter than the exchange: p50 249-258 µs against
// 73-113, so the soft devices keep the default.
func spinTimeFor(vctx verbs.Context, want time.Duration) time.Duration {
	switch {
	case want < 0:
		return 0
	case want > 0:
		return want
	}
	if h, ok := vctx.(interface{ SpinHint() time.Duration }); ok {
		if d := h.SpinHint(); d > 0 {
			return d
		}
	}
	return defaultSpinTime
}

// spin polls for up to c.spinTime; it reports whether the caller should
// look again: something completed, or Config.BusyPoll says never to
// sleep. When it reports false, the caller is about to sleep and the
// poller watches the CQ for it.
func (c *Conn) spin() bool {
	c.spins.Add(1)
	start := time.Now()
	for {
		if n, _ := c.progress(false); n > 0 {
			return true
		}
		runtime.Gosched()
		if time.Since(start) >= c.spinTime {
			if c.busyPoll {
				return true
			}
			c.kickPoller()
			return false
		}
	}
}

// completeLocked handles one completion; it returns 1 when a receive was
// consumed (to be posted again).
func (c *Conn) completeLocked(wc *verbs.WC) int {
	if wc.WRID&(1<<63) != 0 { // a receive
		if wc.Status != verbs.WCSuccess {
			if !c.closed && wc.Status != verbs.WCWRFlushErr {
				c.failLocked(fmt.Errorf("rdmanet: receive completed with %v", wc.Status))
			}
			return 0
		}
		if wc.WCFlags&verbs.WCWithImm == 0 {
			c.failLocked(fmt.Errorf("%w: a message without immediate data (%v)", errProtocol, wc.Opcode))
			return 1
		}
		if err := c.onMessageLocked(wc.ImmData, wc.ByteLen); err != nil {
			c.failLocked(err)
		}
		return 1
	}
	msg := uint32(wc.WRID)
	switch msgOp(msg) {
	case opSGL, opCtrl:
		c.ctrlMax++
	case opIOMapSGL:
		c.sqeAvail++
		c.sbufAvail += iomapLen
	default:
		c.sqeAvail++
		c.sbufAvail += msgData(msg)
	}
	c.sending--
	if wc.Status != verbs.WCSuccess && !c.closed {
		c.failLocked(fmt.Errorf("rdmanet: the peer did not take a write: %v", wc.Status))
	}
	return 0
}

// onMessageLocked is rs_poll_cq's receive case, with the checks rsocket
// leaves out.
func (c *Conn) onMessageLocked(imm, byteLen uint32) error {
	switch op, data := msgOp(imm), msgData(imm); op {
	case opData:
		if byteLen != data {
			return fmt.Errorf("%w: RS_OP_DATA announces %d bytes but %d were written", errProtocol, data, byteLen)
		}
		return c.rx.onData(data)
	case opSGL:
		c.sseqComp = uint16(data)
		switch byteLen {
		case 0: // credits only
		case sgeLen:
			return c.loadTargetLocked()
		default:
			return fmt.Errorf("%w: RS_OP_SGL with %d bytes", errProtocol, byteLen)
		}
	case opIOMapSGL:
		// riomap: the peer mapped a buffer at entry data of the iomap.
		if byteLen != iomapLen || int(data) >= len(c.iomaps) {
			return fmt.Errorf("%w: RS_OP_IOMAP_SGL for entry %d of %d with %d bytes", errProtocol, data, len(c.iomaps), byteLen)
		}
		off := sglSize*sgeLen + int(data)*iomapLen
		c.iomaps[data] = decodeIOMap(c.tgt.Bytes()[off:off+iomapLen], binary.LittleEndian)
	case opCtrl:
		switch data {
		case ctrlDisconnect:
			c.rdShut, c.peerGone = true, true
		case ctrlShutdown:
			c.rdShut = true
			if c.wrShut {
				c.peerGone = true
			}
		}
	default:
		return fmt.Errorf("%w: reserved operation %d in immediate %#08x", errProtocol, op, imm)
	}
	return nil
}

// loadTargetLocked takes the ring area the peer wrote into the next
// entry of the target SGL with the RS_OP_SGL just completed. rsocket
// reads the entries in place whenever it looks; this side reads an entry
// only after the completion of the WRITE that filled it (the peer fills
// entries 1, 0, 1, 0, ...), so it never sees one half written.
func (c *Conn) loadTargetLocked() error {
	i := c.tgtNext
	c.tgtNext = (c.tgtNext + 1) % sglSize
	if c.tsgl[i].Length != 0 {
		return fmt.Errorf("%w: a ring area for target SGL entry %d, which is still in use", errProtocol, i)
	}
	b := c.tgt.Bytes()[i*sgeLen : (i+1)*sgeLen]
	s := decodeSGE(b, binary.LittleEndian)
	if s.Length == 0 || s.Length > maxMsgData {
		return fmt.Errorf("%w: a ring area of %d bytes", errProtocol, s.Length)
	}
	c.tsgl[i] = s
	return nil
}

// updateCreditsLocked is rs_update_credits.
func (c *Conn) updateCreditsLocked() {
	if c.err != nil || c.closed || c.peerGone || c.ctrlSeqno == c.ctrlMax || !c.rx.needCredits() {
		return
	}
	c.ctrlSeqno++
	credit, off, area := c.rx.grant()
	imm := msgSet(opSGL, credit)
	if !area {
		c.postLocked(imm, 0, 0, 0, 0)
		return
	}
	slot := c.sendSize + uint32(c.ctrlSlot)*sgeLen
	c.ctrlSlot = (c.ctrlSlot + 1) % qpCtrlSize
	b := c.sbuf.Bytes()[slot : slot+sgeLen]
	sge{Addr: c.ring.Addr() + uint64(off), Key: c.ring.RKey(), Length: c.rx.half}.encode(b, c.peerOrder)
	c.ssge[0] = c.sbuf.SGE(int(slot), sgeLen)
	c.postLocked(imm, 1, c.remoteSGL.Addr+uint64(c.remoteSGE)*sgeLen, c.remoteSGL.Key, verbs.SendInline)
	c.remoteSGE++
	if c.remoteSGE == int(c.remoteSGL.Length) {
		c.remoteSGE = 0
	}
}

// postLocked posts one RDMA WRITE WITH IMM of the first nsge of c.ssge.
func (c *Conn) postLocked(imm uint32, nsge int, addr uint64, rkey uint32, flags verbs.SendFlags) {
	if nsge > 0 {
		n := uint32(0)
		for _, s := range c.ssge[:nsge] {
			n += s.Length
		}
		if n > c.inline {
			flags &^= verbs.SendInline
		}
	}
	c.swr = verbs.SendWR{WRID: uint64(imm), Opcode: verbs.WRRDMAWriteWithImm, SendFlags: verbs.SendSignaled | flags,
		ImmData: imm, RemoteAddr: addr, RKey: rkey, SGList: c.ssge[:nsge]}
	if err := c.qp.PostSend(&c.swr); err != nil {
		c.failLocked(fmt.Errorf("rdmanet: posting a write: %w", err))
		return
	}
	c.sending++
}

func (c *Conn) canSendLocked() bool {
	return c.sqeAvail > 0 && c.sbufAvail >= sndLowat && c.sseqNo != c.sseqComp && c.tsgl[c.tsge].Length != 0
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	c.failLocked(err)
	c.mu.Unlock()
	c.wake()
}

func (c *Conn) failLocked(err error) {
	if c.err == nil {
		c.err = err
		if c.stop != nil {
			c.stop()
		}
	}
}

func (c *Conn) wake() {
	if f := c.notify.Load(); f != nil {
		(*f)()
	}
	select {
	case c.readWake <- struct{}{}:
	default:
	}
	select {
	case c.writeWake <- struct{}{}:
	default:
	}
}

func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "rdma", Source: c.laddr, Addr: c.raddr, Err: err}
}

// Read reads what the peer wrote; io.EOF after the peer's CloseWrite or
// Close once everything before it was read.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		dl := c.rdl.wait()
		if isClosed(dl) {
			return 0, c.opError("read", os.ErrDeadlineExceeded)
		}
		c.mu.Lock()
		if n, done, err := c.readLocked(p); done {
			c.mu.Unlock()
			return n, err
		}
		c.mu.Unlock()
		if c.spin() {
			continue
		}
		select {
		case <-c.readWake:
		case <-c.closedCh:
		case <-dl:
		}
	}
}

// readLocked is what Read finds without waiting: done says it returns
// (n, err) now; otherwise it must wait. Precondition: mu held.
func (c *Conn) readLocked(p []byte) (n int, done bool, err error) {
	switch {
	case c.closed:
		return 0, true, c.opError("read", net.ErrClosed)
	case c.rx.count > 0 && c.err == nil:
		n := c.rx.read(p, c.ring.Bytes())
		c.updateCreditsLocked()
		return n, true, nil
	case c.err != nil:
		return 0, true, c.opError("read", c.err)
	case len(p) == 0:
		return 0, true, nil
	case c.rdShut:
		return 0, true, io.EOF
	}
	return 0, false, nil
}

// writeErrLocked is why a write cannot go on, or nil. Precondition: mu held.
func (c *Conn) writeErrLocked() error {
	switch {
	case c.closed:
		return net.ErrClosed
	case c.err != nil:
		return c.err
	case c.wrShut:
		return syscall.EPIPE
	case c.peerGone:
		return syscall.ECONNRESET
	}
	return nil
}

// Write writes p to the peer; it returns when all of p is in the send
// buffer or on the way, or with an error.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for n < len(p) || len(p) == 0 {
		dl := c.wdl.wait()
		if isClosed(dl) {
			return n, c.opError("write", os.ErrDeadlineExceeded)
		}
		c.mu.Lock()
		if err := c.writeErrLocked(); err != nil {
			c.mu.Unlock()
			return n, c.opError("write", err)
		}
		if len(p) == 0 {
			c.mu.Unlock()
			return 0, nil
		}
		if !c.canSendLocked() {
			c.mu.Unlock()
			if c.spin() {
				continue
			}
			select {
			case <-c.writeWake:
			case <-c.closedCh:
			case <-dl:
			}
			continue
		}
		n += c.writeChunkLocked(p[n:])
		c.mu.Unlock()
	}
	return n, nil
}

// writeChunkLocked sends the first chunk of p (not empty) and returns its
// length. Precondition: mu held and canSendLocked.
func (c *Conn) writeChunkLocked(p []byte) int {
	// rsend starts with RS_OLAP_START_SIZE (2 KiB) and doubles up to
	// RS_MAX_TRANSFER, so that the first bytes travel while the rest
	// is copied. Not here: a software provider sends within PostSend,
	// so nothing overlaps, and the small first messages only cost
	// work requests and packets (a 64 KiB Write took six messages;
	// one is 1.5 times the throughput on loopback).
	xfer := min(uint32(len(p)), maxTransfer, c.sbufAvail, c.tsgl[c.tsge].Length)
	nsge := c.stageLocked(p[:xfer])
	// rs_write_data
	c.sseqNo++
	c.sqeAvail--
	c.sbufAvail -= xfer
	t := &c.tsgl[c.tsge]
	addr, rkey := t.Addr, t.Key
	t.Addr += uint64(xfer)
	t.Length -= xfer
	if t.Length == 0 {
		c.tsge = (c.tsge + 1) % sglSize
	}
	c.postLocked(msgSet(opData, xfer), nsge, addr, rkey, verbs.SendInline)
	return int(xfer)
}

// CloseWrite shuts down the sending side (rshutdown SHUT_WR): the peer's
// Read returns io.EOF after what was written. Reading goes on.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock() // after a Write in progress
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opError("close", net.ErrClosed)
	}
	if c.wrShut || c.err != nil || c.peerGone {
		c.wrShut = true
		return nil
	}
	c.wrShut = true
	ctrl := uint32(ctrlShutdown)
	if c.rdShut {
		ctrl = ctrlDisconnect
	}
	return c.sendCtrlLocked(ctrl)
}

// sendCtrlLocked posts an RS_OP_CTRL message if a control slot is free
// (rsocket waits for one; a slot frees within a round trip).
func (c *Conn) sendCtrlLocked(ctrl uint32) error {
	deadline := time.Now().Add(time.Second)
	for c.ctrlSeqno == c.ctrlMax && c.err == nil && time.Now().Before(deadline) {
		c.mu.Unlock()
		if n, _ := c.progress(false); n == 0 { // the poller may be aside
			time.Sleep(100 * time.Microsecond)
		}
		c.mu.Lock()
	}
	if c.err != nil {
		return c.opError("close", c.err)
	}
	if c.ctrlSeqno == c.ctrlMax {
		return c.opError("close", errors.New("rdmanet: no control slot: the peer acknowledges nothing"))
	}
	c.ctrlSeqno++
	c.postLocked(msgSet(opCtrl, ctrl), 0, 0, 0, 0)
	return nil
}

// lingerTime bounds how long Close waits for written data to be
// acknowledged before it tears the connection down.
const lingerTime = 3 * time.Second

// Close closes the connection: blocked Reads and Writes return at once
// with net.ErrClosed; data already written is delivered (Close waits for
// the peer's acknowledgements, at most a few seconds) followed by
// RS_CTRL_DISCONNECT and the CM's DREQ; then the QP and memory are freed.
func (c *Conn) Close() error {
	c.closeStart.Do(func() { go c.close() })
	<-c.closeDone
	return c.closeErr
}

func (c *Conn) close() {
	defer close(c.closeDone)
	c.mu.Lock()
	alive := c.err == nil && !c.peerGone
	c.closed = true
	close(c.closedCh) // wakes blocked Reads and Writes now
	if alive {
		c.wrShut = true
		c.sendCtrlLocked(ctrlDisconnect)
	}
	c.mu.Unlock()
	if alive {
		t := time.NewTimer(lingerTime)
		for {
			c.mu.Lock()
			done := c.sending == 0 || c.err != nil
			c.mu.Unlock()
			if done {
				break
			}
			select {
			case <-c.writeWake:
				continue
			case <-c.pollerDone:
			case <-t.C:
			}
			break
		}
		t.Stop()
	}
	c.stop()
	<-c.pollerDone
	<-c.watchDone
	c.closeErr = c.sess.Close()
	c.mu.Lock()
	maps := c.mappings
	c.mappings = nil
	c.mu.Unlock()
	for _, m := range maps {
		m.mr.Dereg()
	}
	if err := c.release(); err != nil && c.closeErr == nil {
		c.closeErr = err
	}
	c.rdl.set(time.Time{})
	c.wdl.set(time.Time{})
}

// release destroys what newConn created, in reverse order. The PD goes
// last and the provider refuses it (ErrInUse) while an MR or QP remains,
// so a leak shows up as Close's error.
func (c *Conn) release() error {
	var first error
	for i := len(c.owned) - 1; i >= 0; i-- {
		if err := c.owned[i](); err != nil && first == nil {
			first = err
		}
	}
	c.owned = nil
	return first
}

// LocalAddr and RemoteAddr are the rdma_cm addresses (IP and port).
func (c *Conn) LocalAddr() net.Addr  { return c.laddr }
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline, SetReadDeadline and SetWriteDeadline behave as net.Conn
// says: a Read or Write past its deadline fails with an error that wraps
// os.ErrDeadlineExceeded and whose Timeout() is true.
func (c *Conn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}
func (c *Conn) SetReadDeadline(t time.Time) error  { c.rdl.set(t); return nil }
func (c *Conn) SetWriteDeadline(t time.Time) error { c.wdl.set(t); return nil }
