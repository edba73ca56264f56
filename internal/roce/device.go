// Package roce is softrdma's RoCEv2 protocol engine: the InfiniBand reliable
// connected (RC), unreliable connected (UC) and unreliable datagram (UD)
// transports carried over a transport.Transport, behind the verbs API.
//
// The data path, as in Linux rxe, is split by role:
//
//	PostSend ─► requester.go: WQE → PSN-numbered packets (FIRST/MIDDLE/LAST/ONLY)
//	                 │
//	                 ▼
//	            qp.tx ─► transport.Send (sendmmsg), under the QP's lock so a
//	                      QP's packets leave in PSN order
//
//	transport.Recv ─► recv.go: ICRC verdict, parse, QP lookup, state and
//	                  source checks; packets grouped per QP
//	                 ├─► responder.go: requests → execute (copy into the MR,
//	                 │    read out of it, atomic) → ACK/NAK, READ responses,
//	                 │    receive completions
//	                 └─► completer.go: ACK/NAK/READ responses/atomic ACKs →
//	                      retire WQEs in order → send completions; NAKs and
//	                      timeouts rewind the requester (go-back-N)
//
// Each QP's protocol state has one owner: the QP's mutex. The engine starts
// no goroutines of its own except the timers it arms with time.AfterFunc
// (virtual inside a testing/synctest bubble); the receive loop is Serve,
// which the provider runs.
package roce

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/internal/spin"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// Limits the device reports in DeviceAttr; they follow rxe's.
const (
	maxQP         = 1 << 16
	maxQPWR       = 1 << 14
	maxSGE        = 32
	maxCQE        = 1<<15 - 1
	maxInline     = 512
	maxRdAtomic   = 128
	maxSRQWR      = 1 << 14
	firstQPN      = 0x11 // QPNs below are reserved (QP0, QP1 and rxe's habit)
	vendorID      = 0xFFFFFF
	ackWindow     = 512 // unacknowledged PSNs a requester may have in flight (rxe: RXE_MAX_UNACKED_PSNS = 128)
	ackReqEvery   = 64  // AckReq at least every this many packets (rxe: RXE_MAX_PKT_PER_ACK)
	maxPacketSize = wire.BTHLen + wire.RETHLen + wire.ImmDtLen + 4096 + 3 + wire.ICRCLen + 16
)

// Config configures a Device.
type Config struct {
	// Name is the device name ("softrdma0" if empty).
	Name string
	// Transport carries the packets. The device owns it from now on and
	// closes it on Close.
	Transport transport.Transport
	// NetDev names the network interface under the device, for display.
	NetDev string
	// LinkLocal, if valid, is GID index 0; otherwise a link-local GID is
	// derived from the node GUID.
	LinkLocal netip.Addr
	// SpinPolls is how many empty non-blocking polls the receive loop makes
	// after the last packet before it sleeps in the kernel, when the
	// transport can poll (transport.Poller). 0 means 2000 (tens of
	// microseconds), or the value of the environment variable
	// SOFTRDMA_SPIN_POLLS; a negative value never polls.
	SpinPolls int
	// NoInlinePoll leaves all receiving to the Serve goroutine. By default
	// a goroutine that busy-polls (CQ.Poll on an empty CQ, or Progress)
	// receives and processes the device's waiting packets itself, and while
	// it keeps doing so Serve steps aside: one busy thread per process
	// instead of two, which is what lets two processes on two cores each
	// get a core (UCX progresses the same way, in the caller's poll).
	NoInlinePoll bool
	// NoDeferredAck sends a busy poller's ACKs at the end of the receive
	// batch that made them. By default an ACK due to a packet that a busy
	// poller received waits until that goroutine comes back to the device:
	// it leaves with the QP's next request if the goroutine posts one (in
	// the same system call: a ping-pong's answer carries the ACK of the
	// question), else at its next poll, else after 100 µs (a timer), and
	// destroying the QP sends it too. On loopback that takes one of the
	// two system calls of a ping-pong hop off the critical path.
	NoDeferredAck bool
	// NoGather copies every payload into its packet. By default a request
	// payload of 1 KiB or more that lies in one SGE stays in its MR and the
	// transport gathers it from there (transport.Gatherer), which saves a
	// copy per byte sent; an AllocMR buffer is then unmapped only when the
	// last packet pointing into it has gone, even after DeregMR.
	NoGather bool
	// NoSplitWrites sends a multi-packet RC RDMA WRITE as FIRST, MIDDLE
	// and LAST packets even to a peer the transport coalesces packets to
	// (transport.Coalescer: UDP GSO on loopback). By default such a WRITE
	// (without immediate) goes as one WRITE ONLY per path MTU, each with
	// its own RETH: UDP GSO needs equal-sized segments, and a FIRST packet
	// (with a RETH) is 16 bytes longer than a MIDDLE one, which would cut
	// every message into at least two datagrams. The responder sees valid
	// WRITEs to consecutive addresses; only its message count (MSN)
	// differs.
	NoSplitWrites bool
	// SplitWritesAlways splits WRITEs as above to every peer, coalesced
	// or not: a test switch, to show peers off loopback (Linux rxe) take
	// them. NoSplitWrites wins.
	SplitWritesAlways bool
	// AcceptUnverifiedICRC accepts packets whose ICRC the transport could
	// not check (an IPv4 peer that sends a non-zero IP identification, as
	// Linux rxe does, received on a plain UDP socket). Off, such packets are
	// dropped and counted as icrc_unverified.
	AcceptUnverifiedICRC bool
}

// Device is one softrdma RoCEv2 device with one port. It implements both
// verbs.Device and verbs.Context; Open returns the device itself.
type Device struct {
	cfg    Config
	tr     transport.Transport
	local  netip.Addr
	port   uint16 // UDP port of the fabric: peers are addressed on it too (4791)
	guid   uint64
	gids   [2]verbs.GID
	pmtu   verbs.MTU
	linkMT int

	keysMu sync.Mutex                     // serialises key table writers
	keys   atomic.Pointer[map[uint32]*MR] // rkey → MR, lkey → MR (disjoint key sets)

	qpMu    sync.Mutex
	qps     atomic.Pointer[[]*QP] // index qpn-firstQPN
	freeQPN []uint32

	randMu sync.Mutex
	rng    *mrand.Rand

	bufPool sync.Pool // *pktBuf

	nPD, nCQ, nMR, nAH, nSRQ atomic.Int32
	closed                   atomic.Bool
	serveDone                chan struct{}
	spinPolls                int
	poller                   transport.Poller

	inlinePoll  bool
	deferAck    bool
	gather      bool                // the transport gathers payloads (transport.Gatherer)
	coalescer   transport.Coalescer // nil: no split WRITEs (NoSplitWrites, or the transport cannot coalesce)
	splitAlways bool
	rxMu        sync.Mutex  // held by whoever receives: Serve or a polling CQ
	ackTimer    *time.Timer // sends ACKs a poller left waiting (ackDelay)
	rx          rxBuffers
	serving     atomic.Bool
	inlinePolls atomic.Uint64 // receive attempts by busy pollers (PollRx)
	asideCheck  time.Duration // stepAsideCheck when the device was created
	aside       atomic.Bool   // Serve has stepped aside for a busy poller
	serveKick   chan struct{} // wakes Serve from stepping aside

	// rnrWaits lists the QPs waiting out an RNR NAK, so that a busy
	// poller ends the wait on time (endRNRWaits). A QP's timer is a Go
	// runtime timer, which runs only when a P enters the scheduler: with
	// every P held by a poller that never yields, a 0.64 ms RNR wait
	// lasted until the runtime preempted a poller, 10-20 ms (issue 9).
	rnrMu    sync.Mutex
	rnrWaits []rnrWait
	rnrCount atomic.Int32 // len(rnrWaits), read without rnrMu

	Counters Counters
}

// rnrWait is a QP in an RNR wait and when the wait ends.
type rnrWait struct {
	qp    *QP
	until time.Time
}

// addRNRWait notes that qp waits out an RNR NAK until until.
// Precondition: qp.mu held (the lock order is qp.mu, then rnrMu).
func (d *Device) addRNRWait(qp *QP, until time.Time) {
	d.rnrMu.Lock()
	defer d.rnrMu.Unlock()
	for i := range d.rnrWaits {
		if d.rnrWaits[i].qp == qp {
			d.rnrWaits[i].until = until
			return
		}
	}
	d.rnrWaits = append(d.rnrWaits, rnrWait{qp, until})
	d.rnrCount.Store(int32(len(d.rnrWaits)))
}

// endRNRWaits runs the timer of every QP whose RNR wait is over, so that
// a busy poller resumes its requester without waiting for the Go timer.
// It costs one atomic load when no QP waits.
func (d *Device) endRNRWaits() {
	if d.rnrCount.Load() == 0 {
		return
	}
	now := time.Now()
	var dueBuf [8]*QP
	due := dueBuf[:0]
	d.rnrMu.Lock()
	kept := d.rnrWaits[:0]
	for _, w := range d.rnrWaits {
		if now.Before(w.until) {
			kept = append(kept, w)
		} else {
			due = append(due, w.qp)
		}
	}
	clear(d.rnrWaits[len(kept):])
	d.rnrWaits = kept
	d.rnrCount.Store(int32(len(kept)))
	d.rnrMu.Unlock()
	for _, qp := range due {
		qp.mu.Lock()
		if !qp.destroyed && qp.req.rnrWait && !now.Before(qp.req.rnrUntil) {
			qp.onTimerLocked(now)
		}
		qp.mu.Unlock()
	}
}

// New creates a device on cfg.Transport. Call Serve (in a goroutine) to
// start receiving.
func New(cfg Config) (*Device, error) {
	if cfg.Transport == nil {
		return nil, verbs.Errorf("roce.New", verbs.ErrInvalidArgument, "Config.Transport is nil")
	}
	if cfg.Name == "" {
		cfg.Name = "softrdma0"
	}
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("roce.New: seeding key generator: %w", err)
	}
	d := &Device{
		cfg:       cfg,
		tr:        cfg.Transport,
		local:     cfg.Transport.LocalAddr().Addr().Unmap(),
		port:      cfg.Transport.LocalAddr().Port(),
		rng:       mrand.New(mrand.NewChaCha8(seed)),
		serveDone: make(chan struct{}),
		serveKick: make(chan struct{}, 1),
	}
	d.rx = newRxBuffers(cfg.Transport.BatchSize())
	d.poller, _ = cfg.Transport.(transport.Poller)
	d.inlinePoll = !cfg.NoInlinePoll
	d.deferAck = d.inlinePoll && !cfg.NoDeferredAck
	if g, ok := cfg.Transport.(transport.Gatherer); ok && !cfg.NoGather {
		d.gather = g.Gathers()
	}
	if c, ok := cfg.Transport.(transport.Coalescer); ok && !cfg.NoSplitWrites {
		d.coalescer = c
	}
	d.splitAlways = cfg.SplitWritesAlways && !cfg.NoSplitWrites
	d.ackTimer = time.AfterFunc(time.Hour, d.sendLateAcks)
	d.ackTimer.Stop()
	d.asideCheck = stepAsideCheck
	d.spinPolls = cfg.SpinPolls
	if d.spinPolls == 0 {
		d.spinPolls = spinPollsDefault()
	}
	d.guid = binary.BigEndian.Uint64(seed[24:]) &^ (0xFF << 56) // locally administered range
	d.guid |= 0x02 << 56
	d.linkMT = cfg.Transport.LinkMTU()
	d.pmtu = linkToPathMTU(d.linkMT)
	ll := cfg.LinkLocal
	if !ll.IsValid() {
		var b [16]byte
		b[0], b[1] = 0xfe, 0x80
		binary.BigEndian.PutUint64(b[8:], d.guid)
		ll = netip.AddrFrom16(b)
	}
	d.gids[0] = verbs.GIDFromAddr(ll)
	d.gids[1] = verbs.GIDFromAddr(d.local)
	empty := map[uint32]*MR{}
	d.keys.Store(&empty)
	var qps []*QP
	d.qps.Store(&qps)
	d.bufPool.New = func() any { return new(pktBuf) }
	return d, nil
}

// linkToPathMTU derives the IB MTU from the link's IP MTU as rxe does: the
// largest IB MTU that fits with room for the RoCEv2 headers, at most 4096.
func linkToPathMTU(link int) verbs.MTU {
	m := verbs.MTUFromBytes(link - 80)
	if m == 0 {
		return verbs.MTU256
	}
	return m
}

// Serve receives and processes packets until the device is closed. The
// provider runs it in a goroutine.
//
// It polls the transport while traffic flows and, after SpinPolls empty
// polls, waits in the kernel. Receiving is shared: a goroutine busy-polling
// a CQ of this device (or calling Progress) receives and processes packets
// itself, which saves the hop through this goroutine; whoever holds rxMu
// receives. While such a poller keeps polling, Serve steps aside and
// sleeps, so that the process has one busy thread, not two.
func (d *Device) Serve() {
	if !d.serving.CompareAndSwap(false, true) {
		return
	}
	defer close(d.serveDone)
	poller, _ := d.tr.(transport.Poller)
	if poller == nil {
		d.serveBlocking()
		return
	}
	idle := 0
	var seen uint64 // inlinePolls at the last look
	for i := 0; !d.closed.Load(); i++ {
		if d.inlinePoll && i%stepAsideLook == 0 {
			n := d.inlinePolls.Load()
			if n-seen >= stepAsidePolls {
				d.stepAside(n)
				n = d.inlinePolls.Load()
			}
			seen = n
		}
		n, err := d.pollRx(poller, false)
		if err != nil {
			return
		}
		if n > 0 {
			idle = 0
			continue
		}
		if idle++; idle < d.spinPolls {
			spin.Idle(idle)
			continue
		}
		if err := poller.Wait(); err != nil {
			return
		}
		idle = 0
	}
}

// Serve looks every stepAsideLook iterations whether busy pollers made at
// least stepAsidePolls receive attempts since the last look; if they did,
// it sleeps, checking every stepAsideCheck that they still poll.
const (
	stepAsideLook  = 64
	stepAsidePolls = 32
)

// stepAsideCheck is long because each check wakes a thread that competes
// with the busy pollers for the CPUs; a poller that blocks in CQ.Wait
// brings Serve back at once (kickServe), so the check matters only for a
// program that stops polling without waiting. It is a variable so that
// tests can change it before they create devices.
var stepAsideCheck = 10 * time.Millisecond

// stepAside sleeps while busy pollers receive for the device: until a
// check finds that no poller tried to receive since the previous one, a
// CQ.Wait is about to block (kickServe), or the device closes.
func (d *Device) stepAside(seen uint64) {
	d.aside.Store(true)
	defer d.aside.Store(false)
	t := time.NewTimer(d.asideCheck)
	defer t.Stop()
	for !d.closed.Load() {
		select {
		case <-d.serveKick:
			return
		case <-t.C:
		}
		n := d.inlinePolls.Load()
		if n == seen {
			return
		}
		seen = n
		t.Reset(d.asideCheck)
	}
}

// kickServe brings Serve back to receiving if it stepped aside.
func (d *Device) kickServe() {
	if d.aside.Load() {
		select {
		case d.serveKick <- struct{}{}:
		default:
		}
	}
}

// serveBlocking is Serve for transports that cannot poll.
func (d *Device) serveBlocking() {
	for {
		d.rxMu.Lock()
		d.rx.reset()
		got, err := d.tr.Recv(d.rx.pkts)
		if err == nil {
			d.handleBatch(&d.rx.state, d.rx.pkts[:got])
		}
		d.rxMu.Unlock()
		if err != nil {
			return
		}
	}
}

// pollRx receives and processes one batch if no other goroutine is
// receiving. It returns the number of packets handled. inline says that a
// busy poller calls: the batch's ACKs may then wait for it to come back.
func (d *Device) pollRx(poller transport.Poller, inline bool) (int, error) {
	if !d.rxMu.TryLock() {
		return 0, nil
	}
	defer d.rxMu.Unlock()
	rx := &d.rx.state
	// ACKs left behind by the previous batch go now: with this batch's
	// responder packets if it has any, else on their own.
	rx.stageDeferredAcks()
	rx.deferAck = inline && d.deferAck
	d.rx.reset()
	got, err := poller.TryRecv(d.rx.pkts)
	if got > 0 {
		d.handleBatch(rx, d.rx.pkts[:got])
	} else {
		rx.stage.flush(d)
	}
	return got, err
}

// ackDelay bounds how long an ACK waits for the poller that left it
// (Config.NoDeferredAck): ackTimer sends it if the poller has not come
// back by then. Far below any retransmission timeout in use (IBTA Local
// ACK Timeout 8 is 1 ms; perftest uses 14, 67 ms). A variable so that
// tests can take the timer out of the way.
var ackDelay = 100 * time.Microsecond

// sendLateAcks is ackTimer's function. A goroutine that holds rxMu is
// receiving and sends the waiting ACKs itself.
func (d *Device) sendLateAcks() {
	if d.closed.Load() || !d.rxMu.TryLock() {
		return
	}
	d.rx.state.stageDeferredAcks()
	d.rx.state.stage.flush(d)
	d.rxMu.Unlock()
}

// PollRx lets a goroutine that busy-polls a CQ receive and process the
// packets waiting for this device itself. CQ.Poll calls it when the CQ is
// empty; it never blocks.
func (d *Device) PollRx() {
	d.endRNRWaits()
	if d.inlinePoll && d.poller != nil && d.serving.Load() {
		d.inlinePolls.Add(1)
		d.pollRx(d.poller, true)
	}
}

// Progress is PollRx for goroutines that busy-poll memory rather than a CQ
// (as ib_write_lat polls the last byte of its buffer): it receives and
// processes what is waiting (verbs.Progresser).
func (d *Device) Progress() { d.PollRx() }

// rxBuffers are the receive batch and its buffers, used by whoever holds
// rxMu.
type rxBuffers struct {
	pkts  []transport.Datagram
	bufs  [][]byte
	state rxState
}

func newRxBuffers(n int) rxBuffers {
	r := rxBuffers{pkts: make([]transport.Datagram, n), bufs: make([][]byte, n), state: rxState{stage: newTxStage()}}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, maxPacketSize+64)
	}
	return r
}

func (r *rxBuffers) reset() {
	for i := range r.pkts {
		r.pkts[i].Buf = r.bufs[i][:cap(r.bufs[i])]
	}
}

// HandleBatch processes received packets as Serve does; tests and fuzzers
// feed packets through it directly.
func (d *Device) HandleBatch(pkts []transport.Datagram) {
	d.handleBatch(&rxState{}, pkts)
}

func (d *Device) randUint32() uint32 {
	d.randMu.Lock()
	defer d.randMu.Unlock()
	return d.rng.Uint32()
}

// --- verbs.Device ---

// Name returns the device name.
func (d *Device) Name() string { return d.cfg.Name }

// GUID returns the node GUID.
func (d *Device) GUID() uint64 { return d.guid }

// Open returns the device itself: a Device is also its own Context.
func (d *Device) Open() (verbs.Context, error) {
	if d.closed.Load() {
		return nil, verbs.Errorf("Open", verbs.ErrDestroyed, "device %s is closed", d.cfg.Name)
	}
	return d, nil
}

// Closed reports whether Close has been called.
func (d *Device) Closed() bool { return d.closed.Load() }

// NetDev names the network interface under the device.
func (d *Device) NetDev() string { return d.cfg.NetDev }

// LocalAddr is the IP address the device sends from and receives on.
func (d *Device) LocalAddr() netip.Addr { return d.local }

// Transport returns the device's transport.
func (d *Device) Transport() transport.Transport { return d.tr }

// --- verbs.Context ---

// Device returns d.
func (d *Device) Device() verbs.Device { return d }

// QueryDevice returns the device attributes.
func (d *Device) QueryDevice() (verbs.DeviceAttr, error) {
	return verbs.DeviceAttr{
		FWVer:           "0.1.0",
		NodeGUID:        d.guid,
		SysImageGUID:    d.guid,
		MaxMRSize:       1<<63 - 1,
		PageSizeCap:     0xfffff000,
		VendorID:        vendorID,
		VendorPartID:    0,
		MaxQP:           maxQP,
		MaxQPWR:         maxQPWR,
		MaxSGE:          maxSGE,
		MaxSGERd:        maxSGE,
		MaxCQ:           1 << 16,
		MaxCQE:          maxCQE,
		MaxMR:           1 << 18,
		MaxPD:           1 << 16,
		MaxQPRdAtom:     maxRdAtomic,
		MaxResRdAtom:    maxRdAtomic * maxQP,
		MaxQPInitRdAtom: maxRdAtomic,
		AtomicCap:       verbs.AtomicHCA,
		MaxAH:           1 << 16,
		MaxSRQ:          1 << 16,
		MaxSRQWR:        maxSRQWR,
		MaxSRQSGE:       maxSGE,
		MaxPKeys:        1,
		PhysPortCnt:     1,
		MaxInlineData:   maxInline,
	}, nil
}

// QueryPort returns the attributes of port 1.
func (d *Device) QueryPort(port uint8) (verbs.PortAttr, error) {
	if port != 1 {
		return verbs.PortAttr{}, verbs.Errorf("QueryPort", verbs.ErrNotFound, "port %d: softrdma devices have one port, number 1", port)
	}
	return verbs.PortAttr{
		State:        verbs.PortActive,
		MaxMTU:       verbs.MTU4096,
		ActiveMTU:    d.pmtu,
		GIDTblLen:    len(d.gids),
		PortCapFlags: 0x00010000 | 0x04000000, // CM_SUP | IP_BASED_GIDS, as rxe reports
		MaxMsgSz:     0x80000000,
		PKeyTblLen:   1,
		ActiveWidth:  2, // 4X
		ActiveSpeed:  32,
		PhysState:    5, // LinkUp
		LinkLayer:    verbs.LinkLayerEthernet,
		LinkMTU:      d.linkMT,
	}, nil
}

// QueryGID returns GID index of port 1: index 0 is the link-local GID,
// index 1 the device's IP address (IPv4-mapped for IPv4), laid out as rxe
// lays out a netdev's GIDs so that "-g 1" / "-x 1" habits carry over.
func (d *Device) QueryGID(port uint8, index int) (verbs.GID, error) {
	if port != 1 {
		return verbs.GID{}, verbs.Errorf("QueryGID", verbs.ErrNotFound, "port %d: softrdma devices have one port, number 1", port)
	}
	if index < 0 || index >= len(d.gids) {
		return verbs.GID{}, verbs.Errorf("QueryGID", verbs.ErrNotFound, "GID index %d: the table has %d entries (0 link-local, 1 %v)", index, len(d.gids), d.local)
	}
	return d.gids[index], nil
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	if d.closed.Load() {
		return nil, verbs.Errorf("AllocPD", verbs.ErrDestroyed, "device %s is closed", d.cfg.Name)
	}
	d.nPD.Add(1)
	return &PD{dev: d}, nil
}

// Close stops the device: it closes the transport and waits for Serve to
// return. Every PD and CQ must have been released first.
func (d *Device) Close() error {
	if n := d.nPD.Load() + d.nCQ.Load(); n > 0 {
		return verbs.Errorf("Close", verbs.ErrInUse, "%d PDs and %d CQs remain; destroy them first", d.nPD.Load(), d.nCQ.Load())
	}
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	d.ackTimer.Stop()
	err := d.tr.Close()
	select {
	case d.serveKick <- struct{}{}:
	default:
	}
	if d.serving.Load() {
		<-d.serveDone
	}
	return err
}

// qpByNum returns the QP numbered qpn, or nil. It takes no lock.
func (d *Device) qpByNum(qpn uint32) *QP {
	i := qpn - firstQPN
	t := *d.qps.Load()
	if i >= uint32(len(t)) {
		return nil
	}
	return t[i]
}

func (d *Device) addQP(qp *QP) error {
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	old := *d.qps.Load()
	var qpn uint32
	if n := len(d.freeQPN); n > 0 {
		qpn = d.freeQPN[n-1]
		d.freeQPN = d.freeQPN[:n-1]
	} else {
		if len(old) >= maxQP {
			return verbs.Errorf("CreateQP", verbs.ErrQueueFull, "the device has its maximum of %d QPs; destroy some first", maxQP)
		}
		qpn = firstQPN + uint32(len(old))
	}
	i := int(qpn - firstQPN)
	t := make([]*QP, max(len(old), i+1))
	copy(t, old)
	t[i] = qp
	qp.qpn = qpn
	d.qps.Store(&t)
	return nil
}

func (d *Device) removeQP(qp *QP) {
	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	old := *d.qps.Load()
	t := append([]*QP(nil), old...)
	t[qp.qpn-firstQPN] = nil
	d.qps.Store(&t)
	d.freeQPN = append(d.freeQPN, qp.qpn)
}

// LinkLocalFromMAC returns the EUI-64 link-local address of a MAC address,
// the GID rxe puts at index 0.
func LinkLocalFromMAC(mac net.HardwareAddr) netip.Addr {
	if len(mac) != 6 {
		return netip.Addr{}
	}
	var b [16]byte
	b[0], b[1] = 0xfe, 0x80
	b[8] = mac[0] ^ 0x02
	b[9], b[10] = mac[1], mac[2]
	b[11], b[12] = 0xff, 0xfe
	b[13], b[14], b[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(b)
}

// spinPollsDefault is 2000, or SOFTRDMA_SPIN_POLLS for experiments.
func spinPollsDefault() int {
	if v, err := strconv.Atoi(os.Getenv("SOFTRDMA_SPIN_POLLS")); err == nil && v != 0 {
		return v
	}
	return 2000
}
