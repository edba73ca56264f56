// Package soft is softrdma's software RoCEv2 provider: the protocol engine
// (internal/roce) over UDP port 4791, bit-compatible with Linux soft-RoCE
// (rxe) and RoCE NICs.
//
// Open creates a device on a network interface, as rxe has one per
// netdev, or bound to one IP address:
//
//	dev, err := soft.Open(soft.Config{Interface: "eth0"})
//	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.0.0.2")})
//	pd, err := dev.AllocPD()
//	...
//
// A device on an interface lays out its GID table as rxe does: index 0
// the IPv6 link-local GID derived from the MAC address, then every IPv4
// address of the interface (IPv4-mapped), then every other IPv6 address;
// it sends from and receives on each of them, so RoCEv2 over IPv4 and
// over IPv6 both work (from GID 0 only where the interface has that
// link-local address).
//
// Several processes on one host each open their own device on their own
// address (127.0.0.1, 127.0.0.2, ... all reach loopback on Linux): RoCEv2
// addresses peers by IP address and always uses UDP port 4791, so two
// devices cannot share one address.
//
// The package also registers a verbs.Provider that lists one device per
// network interface with an IP address (softrdma_lo, softrdma_eth0, ...);
// opening one of those opens the device on the interface.
package soft

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/internal/reuseport"
	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/transport/udp"
	"github.com/softrdma/softrdma/verbs"
)

// Config says where a device lives.
type Config struct {
	// Name is the device name; default "softrdma_<netdev>" or "softrdma0".
	Name string
	// Interface, if set, names the network interface the device is on:
	// its GID table holds every address of the interface (see the package
	// comment) and it binds each. Addr must then be zero.
	Interface string
	// Addr is the one IP address to bind; its GID table is the link-local
	// GID (index 0, not sendable) and Addr (index 1). Required unless
	// Interface or Transport is set.
	Addr netip.Addr
	// Port is the UDP port; 0 means 4791. All peers must use the same port
	// (RoCEv2 has no way to name another); only tests change it.
	Port uint16
	// AcceptUnverifiedICRC accepts IPv4 packets whose ICRC the UDP socket
	// cannot verify because the sender used a non-zero IP identification,
	// as Linux rxe does. Needed to talk to rxe.
	AcceptUnverifiedICRC bool
	// SpinPolls is how many empty non-blocking polls the receive loop makes
	// after the last packet before it sleeps in the kernel, when the
	// transport can poll (transport.Poller). 0 means 2000 (tens of
	// microseconds); a negative value never polls.
	SpinPolls int
	// NoInlinePoll leaves all receiving to the device's receive goroutine.
	// By default a goroutine that busy-polls (CQ.Poll on an empty CQ, or
	// Progress) receives and processes the device's waiting packets
	// itself, and while it keeps doing so the receive goroutine steps
	// aside: one busy thread per process instead of two, which is what
	// lets two processes on two cores each get a core (UCX progresses the
	// same way, in the caller's poll).
	NoInlinePoll bool
	// NoDeferredAck sends each receive batch's ACKs at once. By default an
	// ACK due to a packet that a busy poller received waits until that
	// goroutine comes back to the device: it leaves with the QP's next
	// request if the goroutine posts one (in the same system call: a
	// ping-pong's answer carries the ACK of the question), else at its
	// next poll, else after 100 µs (a timer) or, while the receive
	// goroutine has stepped aside for busy pollers, when it comes back (at
	// once if the poller blocks in CQ.Wait, else within 20 ms: far below
	// the 67 ms retransmission timeout perftest and cm use, and no timer
	// wakes a thread while pollers poll), and destroying the QP sends it
	// too. On loopback that takes one of the two system calls of a
	// ping-pong hop off the critical path.
	NoDeferredAck bool
	// StepAsideCheck is how often the receive loop, while it has stepped
	// aside for busy pollers (NoInlinePoll), looks whether they still
	// poll; 0 means 10 ms. A packet that arrives while no poller polls
	// waits up to two checks, so a program that waits for packets
	// without polling between its polls (a C program spinning on memory
	// for an RDMA WRITE, as perftest's WRITE latency test does; Go
	// programs call Progress instead) wants a short one. Each check wakes
	// a thread that competes with the busy pollers for the CPUs, so the
	// interval doubles, up to 10 ms, while the checks find no packet
	// waiting, and comes back to this one when one does.
	StepAsideCheck time.Duration
	// NoGather copies every payload into its packet instead of letting the
	// UDP socket gather payloads of 1 KiB and more from the MR (in requests
	// of 32 KiB and more, and in READ responses).
	NoGather bool
	// NoSplitWrites keeps multi-packet WRITEs to loopback peers as FIRST,
	// MIDDLE and LAST packets. By default such a WRITE (without
	// immediate) goes as one WRITE ONLY per path MTU, each with its own
	// RETH, to a peer the transport coalesces packets to (UDP GSO on
	// loopback needs equal-sized segments). A split WRITE that fails on a
	// bad range leaves the packets before the bad one in the target
	// memory (IBTA leaves a failed WRITE's target undefined); as FIRST/
	// MIDDLE/LAST the range is checked up front and nothing lands.
	NoSplitWrites bool
	// SplitWritesAlways splits multi-packet WRITEs into WRITE ONLY
	// packets to every peer, not only to loopback peers (the interop
	// suite uses it to test Linux rxe against them). NoSplitWrites wins.
	SplitWritesAlways bool
	// ProcessAddrs makes MR.Addr the memory's address in this process,
	// as rdma-core's MRs have, instead of a random address that reveals
	// nothing of the process's memory layout. The C library
	// (libibverbs.so.1, docs/clib.md) sets it: C programs use pointers as
	// SGE and remote addresses.
	ProcessAddrs bool
	// Logger, if set, receives the device's QP errors, retransmissions,
	// RNR waits and asynchronous events, and once a second the counts of
	// what it dropped and why, rate-limited (a burst of 10, then 1 a
	// second per kind, with a count of what was left out).
	Logger *slog.Logger
	// Transport, if set, is used instead of a UDP socket (tests use
	// internal/netsim).
	Transport transport.Transport
	// Keepalive is how long an idle RC QP in RTS waits to hear from its
	// peer before it probes it (a zero-length RDMA WRITE repeating the
	// last acknowledged PSN: a duplicate, which every RoCEv2 responder
	// acknowledges whatever the QP's access); when its retries run out the QP
	// goes to ERR with EventQPFatal, and cm's Conn.Done fires. A dead
	// peer is found within about Keepalive + (retry_cnt + 1) × 1.25 ×
	// the QP's local ACK timeout: with cm's settings (timeout 19, about
	// 2.1 s; retry_cnt 7) and the default of 5 s, under 30 s. 0 means
	// 5 s; a negative value sends no probes (an idle connection to a
	// dead peer then lasts until the application sends).
	Keepalive time.Duration
	// UDP tunes the UDP transport. Its Share defaults to the address
	// sharing of docs/sharing.md; UDP.Exclusive turns it off.
	UDP udp.Config
	// Clock, if set, supplies the device's time and timers: the engine's
	// retransmission, RNR and ACK deadlines and the receive loop's own
	// timers. Nil means the system clock; tests give a virtual one.
	Clock Clock
	// Tap, if set, wraps the device's transport (the UDP socket Open
	// makes, or Transport): every packet the device sends and receives
	// passes through the transport it returns, which must forward to the
	// one it was given. transport/capture's Tap writes a pcapng capture
	// that Wireshark dissects as RoCEv2. A tapped device sends from its
	// receiving socket (UDP.SourcePorts -1, unless set) so that the source
	// port a tap sees is the real one and each sent packet's ICRC verifies
	// against headers rebuilt from it. Close closes the tapped transport.
	Tap func(transport.Transport) (transport.Transport, error)
	// CC configures congestion control: DCQCN by default (see
	// CongestionControl and docs/congestion.md).
	CC CongestionControl
}

// Open creates a device and starts its receive loop.
func Open(cfg Config) (*Device, error) {
	tr := cfg.Transport
	netdev := ""
	var gids *interfaceGIDs
	var ut *udp.Transport // the transport Open made, nil if cfg.Transport
	if tr == nil {
		ucfg := cfg.UDP
		ucfg.Port = cfg.Port
		if ucfg.TClass == 0 {
			ucfg.TClass = socketTClass(&cfg.CC)
		}
		if ucfg.Share == nil {
			ucfg.Share = shareAddrs
		}
		if ucfg.PeerShared == nil {
			ucfg.PeerShared = reuseport.Shared
		}
		if cfg.Tap != nil && ucfg.SourcePorts == 0 {
			ucfg.SourcePorts = -1
		}
		switch {
		case cfg.Interface != "" && cfg.Addr.IsValid():
			return nil, verbs.Errorf("soft.Open", verbs.ErrInvalidArgument, "Config.Interface %q and Config.Addr %v: set one (a device on the interface has all of its addresses)", cfg.Interface, cfg.Addr)
		case cfg.Interface != "":
			g, err := gidsOf(cfg.Interface)
			if err != nil {
				return nil, err
			}
			gids, netdev = g, cfg.Interface
			ucfg.Addr, ucfg.Addrs = g.bind[0], g.bind[1:]
		case cfg.Addr.IsValid():
			ucfg.Addr = cfg.Addr
			netdev, _ = InterfaceOf(cfg.Addr)
		default:
			return nil, verbs.Errorf("soft.Open", verbs.ErrInvalidArgument, "Config.Interface or Config.Addr is required: the network interface or the IP address the device sends from and receives on")
		}
		t, err := udp.Listen(ucfg)
		if err != nil && gids != nil && errors.Is(err, errors.ErrUnsupported) {
			// This system's transport binds one address: the others stay
			// in the GID table, not sendable.
			ucfg.Addrs = nil
			t, err = udp.Listen(ucfg)
		}
		if err != nil {
			return nil, err
		}
		tr, ut = t, t
	}
	if cfg.Tap != nil {
		t, err := cfg.Tap(tr)
		if err != nil {
			tr.Close()
			return nil, err
		}
		tr = t
	}
	name := cfg.Name
	switch {
	case name != "":
	case gids != nil:
		name = "softrdma_" + netdev
	case netdev != "":
		name = DeviceName(netdev, cfg.Addr)
	default:
		name = "softrdma0"
	}
	var ll netip.Addr
	var guid uint64
	var addrs []netip.Addr
	if gids != nil {
		guid, ll, addrs = gids.guid, gids.linkLocal, gids.addrs
	} else if ifi, err := net.InterfaceByName(netdev); err == nil {
		guid = NodeGUID(ifi, cfg.Addr)
		ll = roce.LinkLocalFromMAC(ifi.HardwareAddr)
		if len(ifi.HardwareAddr) != 6 {
			ll = linkLocalFromGUID(guid)
		}
	}
	d := newDevice(tr, cfg)
	d.guid = guid
	d.udp = ut
	// On an address shared with other processes, QPNs carry the device's
	// slot among them in their top bits: the destination steers by it.
	// A device that does not share its address has all 24 bits random.
	var slot uint32
	slotBits := 0
	if ut != nil {
		if s, shared := ut.Slot(); shared {
			slot, slotBits = s, reuseport.SlotBits
		}
	}
	var notify func(roce.Note)
	if cfg.Logger != nil {
		d.log = newLogger(cfg.Logger, name)
		notify = d.log.note
	}
	eng, err := roce.New(roce.Config{
		Name: name, Transport: tr, NetDev: netdev, LinkLocal: ll, Addrs: addrs,
		AcceptUnverifiedICRC: cfg.AcceptUnverifiedICRC,
		NoGather:             cfg.NoGather,
		NoSplitWrites:        cfg.NoSplitWrites,
		SplitWritesAlways:    cfg.SplitWritesAlways,
		ProcessAddrs:         cfg.ProcessAddrs,
		Clock:                d.clock.Now,
		SetTimer:             d.setTimer,
		Poll:                 d.inlinePoll,
		BeforeWait:           d.kickServe,
		OnArm:                d.armed,
		Context:              d,
		Notify:               notify,
		QPNSlot:              slot,
		QPNSlotBits:          slotBits,
		Keepalive:            cfg.Keepalive,
		CC:                   cfg.CC,
	})
	if err != nil {
		tr.Close()
		return nil, err
	}
	d.eng = eng
	if ut != nil {
		ut.OnUnreachable(eng.PeerUnreachable)
	}
	if d.log != nil {
		go d.log.watchDrops(d.Counters)
	}
	go d.serve()
	opened.add(d)
	return d, nil
}

// shareAddrs is the udp.Config.Share a device's transport gets unless
// the caller gave one: internal/reuseport's eBPF steering, which lets
// devices in several processes share an address (docs/sharing.md).
func shareAddrs(addrs []netip.AddrPort) (udp.Share, error) {
	s, err := reuseport.Prepare(addrs)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// The transport keeps packets for two slots out of one GSO datagram, and
// the steering program reads the slot from the same bits.
const _ = uint(reuseport.SlotBits-udp.SlotBits) + uint(udp.SlotBits-reuseport.SlotBits)

// interfaceGIDs is the GID table of a device on an interface, rxe's way.
type interfaceGIDs struct {
	guid      uint64
	linkLocal netip.Addr   // GID 0
	addrs     []netip.Addr // GID 1...: every IPv4 address, then every other IPv6 one
	bind      []netip.Addr // the addresses to bind, the first IPv4 one (else the first IPv6) first; link-local ones zoned
}

// gidsOf returns the GID table of the device on interface name: GID 0 the
// link-local address derived from the MAC address (rxe's default GID; from
// the node GUID where there is no MAC), then every IPv4 address, then every
// IPv6 address that is not GID 0 (the kernel's RoCE GID management adds
// them in this order). Each address the interface has is bound; GID 0 is
// too when the interface has it.
func gidsOf(name string) (*interfaceGIDs, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, verbs.Errorf("soft.Open", verbs.ErrNotFound, "interface %q: %v", name, err)
	}
	ads, err := ifi.Addrs()
	if err != nil {
		return nil, verbs.Errorf("soft.Open", verbs.ErrNotFound, "addresses of interface %s: %v", name, err)
	}
	var v4, v6 []netip.Addr
	for _, ad := range ads {
		p, err := netip.ParsePrefix(ad.String())
		if err != nil {
			continue
		}
		if a := p.Addr().Unmap(); a.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	if len(v4)+len(v6) == 0 {
		return nil, verbs.Errorf("soft.Open", verbs.ErrNotFound, "interface %s has no IP address: a RoCEv2 device needs one", name)
	}
	g := &interfaceGIDs{}
	first := v6[0:0:0]
	if len(v4) > 0 {
		first = v4[:1]
	}
	if fa, ok := firstAddr(*ifi); ok {
		g.guid = NodeGUID(ifi, fa)
	} else {
		g.guid = NodeGUID(ifi, append(first, v6...)[0])
	}
	g.linkLocal = roce.LinkLocalFromMAC(ifi.HardwareAddr)
	if !g.linkLocal.IsValid() {
		g.linkLocal = linkLocalFromGUID(g.guid)
	}
	g.addrs = append(g.addrs, v4...)
	var llBound netip.Addr
	for _, a := range v6 {
		if a == g.linkLocal {
			llBound = a
			continue
		}
		g.addrs = append(g.addrs, a)
	}
	zoned := func(a netip.Addr) netip.Addr {
		if a.Is6() && a.IsLinkLocalUnicast() {
			return a.WithZone(name)
		}
		return a
	}
	// The first bound address is the device's LocalAddr: an IPv4 one if
	// any, else a routable IPv6 one, else the link-local one.
	for _, a := range g.addrs {
		if !a.IsLinkLocalUnicast() {
			g.bind = append(g.bind, zoned(a))
		}
	}
	for _, a := range g.addrs {
		if a.IsLinkLocalUnicast() {
			g.bind = append(g.bind, zoned(a))
		}
	}
	if llBound.IsValid() {
		g.bind = append(g.bind, zoned(llBound))
	}
	return g, nil
}

// InterfaceOf returns the name of the network interface that has address
// a (any 127.0.0.0/8 address is loopback's): the interface a device
// opened on a is named after.
func InterfaceOf(a netip.Addr) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, ad := range addrs {
			if p, err := netip.ParsePrefix(ad.String()); err == nil {
				if p.Addr().Unmap() == a.Unmap() {
					return ifi.Name, nil
				}
				if ifi.Flags&net.FlagLoopback != 0 && a.Is4() && p.Contains(a) {
					return ifi.Name, nil // 127.0.0.0/8 is all loopback
				}
			}
		}
	}
	return "", fmt.Errorf("no interface has address %v", a)
}

// openedDevices are the devices this process opened, for the provider.
type openedDevices struct {
	mu   sync.Mutex
	devs []*Device
}

var opened openedDevices

func (o *openedDevices) add(d *Device) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.devs = append(o.devs, d)
}

// provider lists opened devices and one candidate per interface.
type provider struct{}

func (provider) Name() string { return "soft" }

// Devices lists the devices opened in this process, then one unopened
// device per network interface that has an address and is up.
func (provider) Devices() ([]verbs.Device, error) {
	var out []verbs.Device
	seen := map[string]bool{}
	opened.mu.Lock()
	live := opened.devs[:0]
	for _, d := range opened.devs {
		if d.Closed() {
			continue // closed devices leave the list
		}
		live = append(live, d)
		out = append(out, d)
		seen[d.Name()] = true
	}
	clear(opened.devs[len(live):])
	opened.devs = live
	opened.mu.Unlock()
	ifs, err := net.Interfaces()
	if err != nil {
		return out, nil
	}
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 {
			continue
		}
		addr, ok := firstAddr(ifi)
		name := "softrdma_" + ifi.Name
		if !ok || seen[name] {
			continue
		}
		out = append(out, &ifaceDevice{name: name, netdev: ifi.Name, addr: addr, guid: NodeGUID(&ifi, addr)})
	}
	return out, nil
}

func firstAddr(ifi net.Interface) (netip.Addr, bool) {
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, false
	}
	var v6 netip.Addr
	for _, ad := range addrs {
		p, err := netip.ParsePrefix(ad.String())
		if err != nil {
			continue
		}
		a := p.Addr()
		if a.Is4() {
			return a, true
		}
		if !a.IsLinkLocalUnicast() && !v6.IsValid() {
			v6 = a
		}
	}
	return v6, v6.IsValid()
}

// ifaceDevice is a device not yet opened: opening binds the address.
type ifaceDevice struct {
	name   string
	netdev string
	addr   netip.Addr
	guid   uint64
}

func (d *ifaceDevice) Name() string { return d.name }
func (d *ifaceDevice) GUID() uint64 { return d.guid }
func (d *ifaceDevice) Open() (verbs.Context, error) {
	return Open(Config{Name: d.name, Interface: d.netdev})
}

func init() { verbs.Register(provider{}) }

// DeviceInterface returns the network interface of a listed, not yet
// opened device (Config.Interface opens it).
func DeviceInterface(d verbs.Device) (string, bool) {
	if d, ok := d.(*ifaceDevice); ok {
		return d.netdev, true
	}
	return "", false
}

// DeviceAddr returns the first IP address a listed device binds (or has bound).
func DeviceAddr(d verbs.Device) (netip.Addr, bool) {
	switch d := d.(type) {
	case *ifaceDevice:
		return d.addr, true
	case *Device:
		return d.LocalAddr(), true
	}
	return netip.Addr{}, false
}
