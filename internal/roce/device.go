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
// Each QP's protocol state has one owner: the QP's mutex. The engine reads
// no clock and starts no goroutine or timer (timers.go): its driver, the
// provider, runs the receive loop (handing batches to HandleBatch), serves
// the deadlines (NextDeadline, OnTimeout) and tells it the time
// (Config.Clock), so tests drive it in virtual time.
package roce

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// Limits the device reports in DeviceAttr; they follow rxe's.
const (
	maxQP       = 1 << 16
	maxQPWR     = 1 << 14
	maxSGE      = 32
	maxCQE      = 1<<15 - 1
	maxInline   = 512
	maxRdAtomic = 128
	maxSRQWR    = 1 << 14
	maxMW       = 1 << 16
	firstQPN    = 0x11 // QPNs below are reserved (QP0, QP1 and rxe's habit)
	vendorID    = 0xFFFFFF
	ackWindow   = 512 // unacknowledged PSNs a requester may have in flight (rxe: RXE_MAX_UNACKED_PSNS = 128)
	ackReqEvery = 64  // AckReq at least every this many packets (rxe: RXE_MAX_PKT_PER_ACK)
	// MaxPacketSize is the largest RoCEv2 packet (UDP payload) the engine
	// builds or accepts: a receive buffer of this size holds any packet.
	MaxPacketSize = wire.BTHLen + wire.RETHLen + wire.ImmDtLen + 4096 + 3 + wire.ICRCLen + 16 + secTrailerLen
)

// Config configures a Device.
type Config struct {
	// Clock returns the current time. The engine reads no other clock:
	// the provider passes time.Now, tests a virtual clock. Required.
	Clock func() time.Time
	// SetTimer asks the driver to call Device.OnTimeout at at, replacing
	// the time it was given before. The engine calls it (under a lock of
	// its own: it must not call back into the device) whenever its next
	// deadline becomes earlier than the one it last gave. Required.
	SetTimer func(at time.Time)
	// Poll, if set, is called by CQ.Poll when it finds the CQ empty: the
	// driver may receive and process waiting packets on the polling
	// goroutine (a busy poller then needs no hop through a receive
	// goroutine). It must not block.
	Poll func()
	// BeforeWait, if set, is called when CQ.Wait begins and again when it
	// is about to block: a driver that left receiving to busy pollers
	// must receive again, and must not leave it again while
	// Device.Waiting reports a blocked waiter.
	BeforeWait func()
	// OnArm, if set, is called by CQ.ReqNotify in place of BeforeWait:
	// a program armed a CQ to wait for its event on the channel, where no
	// poll of its drives the device. A driver that knows the program's
	// waits drive it anyway may receive again later rather than at once.
	OnArm func()
	// Context, if set, is the verbs.Context that PD.Context returns: the
	// provider's own device type that wraps this engine.
	Context verbs.Context
	// Notify, if set, receives a Note for each QP error, go-back-N
	// retransmission, RNR wait and asynchronous event, for logging. It
	// runs under the QP's lock: it must not block or call into the device.
	Notify func(Note)
	// Name is the device name ("softrdma0" if empty).
	Name string
	// Transport carries the packets. The device sends through it and
	// closes it on Close; the driver receives from it.
	Transport transport.Transport
	// NetDev names the network interface under the device, for display.
	NetDev string
	// LinkLocal, if valid, is GID index 0; otherwise a link-local GID is
	// derived from the node GUID.
	LinkLocal netip.Addr
	// Addrs, if set, are the rest of the GID table, in order (rxe's:
	// every IPv4 address of the interface, then every IPv6 one); by
	// default the table's one further entry is the transport's address.
	// The device sends from a GID (link-local included) when its
	// transport has the address (transport.MultiHomed); the others are
	// listed, and a QP that names one as its source is refused.
	Addrs []netip.Addr
	// NoGather copies every payload into its packet. By default, in a
	// request of 32 KiB or more (and in READ responses), a packet payload
	// of 1 KiB or more that lies in one SGE stays in its MR and the
	// transport gathers it from there (transport.Gatherer), which saves a
	// copy per byte sent; DeregMR waits for the packets that point into
	// the region to leave (they never wait for a doorbell).
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
	// ProcessAddrs makes an MR's address (MR.Addr) the address of its
	// memory in this process, as rdma-core's are, instead of a random
	// one (virtAddr): C programs over the libibverbs ABI use pointers as
	// SGE and remote addresses, and tell them to their peers.
	ProcessAddrs bool
	// AcceptUnverifiedICRC accepts packets whose ICRC the transport could
	// not check (an IPv4 peer that sends a non-zero IP identification, as
	// Linux rxe does, received on a plain UDP socket). Off, such packets are
	// dropped and counted as icrc_unverified.
	AcceptUnverifiedICRC bool
	// QPNSlotBits, if positive, puts QPNSlot in the top QPNSlotBits bits
	// of every QPN the device allocates (the rest stay random): devices
	// in several processes that share one address (transport/udp with
	// internal/reuseport) have their packets steered by these bits.
	QPNSlotBits int
	QPNSlot     uint32
	// Keepalive is how long an idle RC QP in RTS waits to hear from its
	// peer before it probes it with a zero-length RDMA WRITE that
	// repeats the last acknowledged PSN (see keepalive.go); retry_cnt failed retries of the probe move the QP
	// to ERR. 0 means DefaultKeepalive; negative turns probing off.
	Keepalive time.Duration
	// CC configures congestion control (cc.go): DCQCN with the paper's
	// parameters by default.
	CC CCConfig
}

// Device is one softrdma RoCEv2 device with one port. It implements both
// verbs.Device and verbs.Context; Open returns the device itself.
type Device struct {
	cfg    Config
	tr     transport.Transport
	local  netip.Addr
	port   uint16 // UDP port of the fabric: peers are addressed on it too (4791)
	guid   uint64
	gids   []verbs.GID
	srcs   []netip.Addr // per GID index: the address to send from, or invalid: cannot
	pmtu   verbs.MTU
	linkMT int

	keys    keyTable    // rkey → MR, lkey → MR (disjoint key sets)
	windows windowTable // rkey>>8 → memory window (mw.go)
	qps     qpTable

	randMu sync.Mutex
	rng    *mrand.Rand

	bufPool sync.Pool // *pktBuf

	nPD, nCQ, nMR, nAH, nSRQ, nMW atomic.Int32
	closed                        atomic.Bool
	cqWaits                       atomic.Int32 // goroutines blocking in CQ.Wait (Waiting)

	gather      bool                // the transport gathers payloads (transport.Gatherer)
	coalescer   transport.Coalescer // nil: no split WRITEs (NoSplitWrites, or the transport cannot coalesce)
	splitAlways bool
	clock       func() time.Time
	keepalive   time.Duration // Config.Keepalive with its default; ≤ 0: off
	cc          ccParams      // Config.CC with its defaults
	timers      timerQueue
	trySender   transport.TrySender // nil: the transport cannot send without blocking
	gsi         gsi
	objs        objects
	events      verbsobj.Events
	backlog     backlog
	doorbells   doorbells
	held        heldEvents

	Counters Counters
}

// New creates a device on cfg.Transport. The driver then receives from the
// transport and hands each batch to HandleBatch, and serves the deadlines
// it is given (Config.SetTimer) with OnTimeout.
func New(cfg Config) (*Device, error) {
	if cfg.Transport == nil {
		return nil, verbs.Errorf("roce.New", verbs.ErrInvalidArgument, "Config.Transport is nil")
	}
	if cfg.Clock == nil || cfg.SetTimer == nil {
		return nil, verbs.Errorf("roce.New", verbs.ErrInvalidArgument, "Config.Clock and Config.SetTimer are required: the engine's driver supplies the time and serves its deadlines")
	}
	if cfg.Name == "" {
		cfg.Name = "softrdma0"
	}
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("roce.New: seeding key generator: %w", err)
	}
	d := &Device{
		cfg:   cfg,
		tr:    cfg.Transport,
		local: cfg.Transport.LocalAddr().Addr().Unmap(),
		port:  cfg.Transport.LocalAddr().Port(),
		rng:   mrand.New(mrand.NewChaCha8(seed)),
		clock: cfg.Clock,
	}
	if cfg.QPNSlotBits > 0 {
		if err := d.qps.setSlot(cfg.QPNSlot, cfg.QPNSlotBits); err != nil {
			return nil, verbs.Errorf("roce.New", verbs.ErrInvalidArgument, "%v", err)
		}
	}
	d.timers.set = cfg.SetTimer
	d.cc = newCCParams(cfg.CC)
	d.keepalive = cfg.Keepalive
	if d.keepalive == 0 {
		d.keepalive = DefaultKeepalive
	}
	d.objs.init()
	d.events.Init()
	if g, ok := cfg.Transport.(transport.Gatherer); ok && !cfg.NoGather {
		d.gather = g.Gathers()
	}
	if c, ok := cfg.Transport.(transport.Coalescer); ok && !cfg.NoSplitWrites {
		d.coalescer = c
	}
	d.splitAlways = cfg.SplitWritesAlways && !cfg.NoSplitWrites
	d.trySender, _ = cfg.Transport.(transport.TrySender)
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
	addrs := cfg.Addrs
	if len(addrs) == 0 {
		addrs = []netip.Addr{d.local}
	}
	own := []netip.Addr{d.local}
	if m, ok := cfg.Transport.(transport.MultiHomed); ok {
		own = m.LocalAddrs()
	}
	for _, a := range append([]netip.Addr{ll}, addrs...) {
		a = a.Unmap().WithZone("")
		d.gids = append(d.gids, verbs.GIDFromAddr(a))
		var src netip.Addr
		for _, o := range own {
			if o.Unmap().WithZone("") == a {
				src = a
			}
		}
		d.srcs = append(d.srcs, src)
	}
	d.bufPool.New = func() any { return new(pktBuf) }
	return d, nil
}

// linkToPathMTU derives the IB MTU from the link's IP MTU as rxe does.
func linkToPathMTU(link int) verbs.MTU { return verbs.MTUFromLinkMTU(link) }

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

// Waiting reports whether a goroutine blocks in CQ.Wait on one of the
// device's CQs (past its short spin): it counts on the driver to receive
// for it. CQ.Wait counts itself before it calls Config.BeforeWait again
// and blocks, so a driver that publishes that it left receiving to busy
// pollers and then sees Waiting false will get that call from any Wait
// that blocks after.
func (d *Device) Waiting() bool { return d.cqWaits.Load() > 0 }

// WaitOutside counts (n = 1) or uncounts (n = -1) a thread that waits for
// the device's completions outside CQ.Wait, where Waiting must see it: a
// C program blocked on a completion channel's descriptor. As in CQ.Wait,
// the caller counts itself before it calls Config.BeforeWait.
func (d *Device) WaitOutside(n int32) { d.cqWaits.Add(n) }

// NetDev names the network interface under the device.
func (d *Device) NetDev() string { return d.cfg.NetDev }

// LocalAddr is the IP address the device sends from and receives on.
func (d *Device) LocalAddr() netip.Addr { return d.local }

// --- verbs.Context ---

// Device returns d, or the provider's device that wraps it
// (Config.Context).
func (d *Device) Device() verbs.Device {
	if d.cfg.Context != nil {
		return d.cfg.Context.Device()
	}
	return d
}

// context is the verbs.Context the device's objects report.
func (d *Device) context() verbs.Context {
	if d.cfg.Context != nil {
		return d.cfg.Context
	}
	return d
}

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
		MaxMW:           maxMW,
		DeviceCapFlags:  verbs.DeviceMemWindow | verbs.DeviceMemWindowType2B,
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
// then the device's IP addresses (IPv4-mapped for IPv4; Config.Addrs),
// laid out as rxe lays out a netdev's GIDs so that "-g 1" / "-x 1" habits
// carry over.
func (d *Device) QueryGID(port uint8, index int) (verbs.GID, error) {
	if port != 1 {
		return verbs.GID{}, verbs.Errorf("QueryGID", verbs.ErrNotFound, "port %d: softrdma devices have one port, number 1", port)
	}
	if index < 0 || index >= len(d.gids) {
		return verbs.GID{}, verbs.Errorf("QueryGID", verbs.ErrNotFound, "GID index %d: the table has %d entries (%v)", index, len(d.gids), d.gidList())
	}
	return d.gids[index], nil
}

// gidList describes the GID table for error messages: "0 fe80::1, 1 10.0.0.1, ...".
func (d *Device) gidList() string {
	var b strings.Builder
	for i, g := range d.gids {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %v", i, g.Addr().Unmap())
		if !d.srcs[i].IsValid() {
			b.WriteString(" (cannot send)")
		}
	}
	return b.String()
}

// sourceFor returns the address the device sends MADs to dst from: the
// first sendable GID of dst's family and scope (link-local or not), as
// the kernel's source address selection would pick on one interface.
func (d *Device) sourceFor(dst netip.Addr) (netip.Addr, bool) {
	dst = dst.Unmap()
	var other netip.Addr
	for _, a := range d.srcs {
		if !a.IsValid() || a.Is4() != dst.Is4() {
			continue
		}
		if a.IsLinkLocalUnicast() == dst.IsLinkLocalUnicast() {
			return a, true
		}
		if !other.IsValid() {
			other = a
		}
	}
	return other, other.IsValid()
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	if d.closed.Load() {
		return nil, verbs.Errorf("AllocPD", verbs.ErrDestroyed, "device %s is closed", d.cfg.Name)
	}
	d.nPD.Add(1)
	pd := &PD{dev: d}
	add(&d.objs, d.objs.pds, pd)
	return pd, nil
}

// qpByNum returns the QP numbered qpn, or nil. It takes no lock.
func (d *Device) qpByNum(qpn uint32) *QP { return d.qps.get(qpn) }

func (d *Device) addQP(qp *QP) error {
	if !d.qps.add(qp, d.randUint32) {
		return verbs.Errorf("CreateQP", verbs.ErrQueueFull, "the device has its maximum of %d QPs; destroy some first", maxQP)
	}
	return nil
}

func (d *Device) removeQP(qp *QP) { d.qps.remove(qp) }

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
