// Package soft is softrdma's software RoCEv2 provider: the protocol engine
// (internal/roce) over UDP port 4791, bit-compatible with Linux soft-RoCE
// (rxe) and RoCE NICs.
//
// Open creates a device bound to one IP address:
//
//	dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.0.0.2")})
//	pd, err := dev.AllocPD()
//	...
//
// Several processes on one host each open their own device on their own
// address (127.0.0.1, 127.0.0.2, ... all reach loopback on Linux): RoCEv2
// addresses peers by IP address and always uses UDP port 4791, so two
// devices cannot share one address.
//
// The package also registers a verbs.Provider that lists one device per
// network interface with an IP address (softrdma_lo, softrdma_eth0, ...);
// opening one of those binds the interface's first address.
package soft

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/transport/capture"
	"github.com/softrdma/softrdma/transport/udp"
	"github.com/softrdma/softrdma/verbs"
)

// Config says where a device lives.
type Config struct {
	// Name is the device name; default "softrdma_<netdev>" or "softrdma0".
	Name string
	// Addr is the IP address to bind. Required unless Transport is set.
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
	// microseconds), or the value of the environment variable
	// SOFTRDMA_SPIN_POLLS; a negative value never polls.
	SpinPolls int
	// NoInlinePoll leaves all receiving to the device's receive goroutine.
	// By default a goroutine that busy-polls (CQ.Poll on an empty CQ, or
	// Progress) receives and processes the device's waiting packets
	// itself, and while it keeps doing so the receive goroutine steps
	// aside: one busy thread per process instead of two, which is what
	// lets two processes on two cores each get a core (UCX progresses the
	// same way, in the caller's poll). SOFTRDMA_NO_INLINE_POLL=1 sets it.
	NoInlinePoll bool
	// NoDeferredAck sends each receive batch's ACKs at once. By default an
	// ACK due to a packet that a busy poller received waits until that
	// goroutine comes back to the device: it leaves with the QP's next
	// request if the goroutine posts one (in the same system call: a
	// ping-pong's answer carries the ACK of the question), else at its
	// next poll, else after 100 µs (a timer), and destroying the QP sends
	// it too. On loopback that takes one of the two system calls of a
	// ping-pong hop off the critical path. SOFTRDMA_NO_DEFERRED_ACK=1
	// sets it.
	NoDeferredAck bool
	// NoGather copies every payload into its packet instead of letting the
	// UDP socket gather payloads of 1 KiB and more from the MR
	// (SOFTRDMA_NO_GATHER=1 sets it too).
	NoGather bool
	// NoSplitWrites keeps multi-packet WRITEs to loopback peers as FIRST,
	// MIDDLE and LAST packets. By default such a WRITE (without
	// immediate) goes as one WRITE ONLY per path MTU, each with its own
	// RETH, to a peer the transport coalesces packets to (UDP GSO on
	// loopback needs equal-sized segments). A split WRITE that fails on a
	// bad range leaves the packets before the bad one in the target
	// memory (IBTA leaves a failed WRITE's target undefined); as FIRST/
	// MIDDLE/LAST the range is checked up front and nothing lands.
	// SOFTRDMA_NO_SPLIT_WRITES=1 sets it; SOFTRDMA_SPLIT_WRITES=always
	// splits them to every peer (the interop suite uses it).
	NoSplitWrites bool
	// Logger, if set, receives the device's QP errors, retransmissions,
	// RNR waits and asynchronous events, and once a second the counts of
	// what it dropped and why, rate-limited (a burst of 10, then 1 a
	// second per kind, with a count of what was left out).
	Logger *slog.Logger
	// Transport, if set, is used instead of a UDP socket (tests use
	// internal/netsim).
	Transport transport.Transport
	// UDP tunes the UDP transport.
	UDP udp.Config
	// Capture, if set, receives a pcapng capture of every packet the
	// device sends and receives (transport/capture: Ethernet/IPv4/UDP
	// framing that Wireshark dissects as RoCEv2). The device then sends
	// from its receiving socket (UDP.SourcePorts -1, unless set) so that
	// the captured source port is the real one and each sent packet's
	// ICRC verifies against the captured headers. Close flushes it; the
	// caller closes the file.
	Capture io.Writer
}

// Open creates a device and starts its receive loop.
func Open(cfg Config) (*Device, error) {
	tr := cfg.Transport
	netdev := ""
	if tr == nil {
		if !cfg.Addr.IsValid() {
			return nil, verbs.Errorf("soft.Open", verbs.ErrInvalidArgument, "Config.Addr is required: the IP address the device sends from and receives on")
		}
		ucfg := cfg.UDP
		ucfg.Addr = cfg.Addr
		ucfg.Port = cfg.Port
		if cfg.Capture != nil && ucfg.SourcePorts == 0 {
			ucfg.SourcePorts = -1
		}
		t, err := udp.Listen(ucfg)
		if err != nil {
			return nil, err
		}
		tr = t
		netdev, _ = InterfaceOf(cfg.Addr)
	}
	if cfg.Capture != nil {
		w, err := capture.NewWriter(cfg.Capture)
		if err != nil {
			tr.Close()
			return nil, err
		}
		tr = capture.Wrap(tr, w)
	}
	name := cfg.Name
	if name == "" {
		name = "softrdma0"
		if netdev != "" {
			name = DeviceName(netdev, cfg.Addr)
		}
	}
	var ll netip.Addr
	var guid uint64
	if ifi, err := net.InterfaceByName(netdev); err == nil {
		guid = NodeGUID(ifi, cfg.Addr)
		ll = roce.LinkLocalFromMAC(ifi.HardwareAddr)
		if len(ifi.HardwareAddr) != 6 {
			ll = linkLocalFromGUID(guid)
		}
	}
	d := newDevice(tr, cfg)
	d.guid = guid
	var notify func(roce.Note)
	if cfg.Logger != nil {
		d.log = newLogger(cfg.Logger, name)
		notify = d.log.note
	}
	eng, err := roce.New(roce.Config{
		Name: name, Transport: tr, NetDev: netdev, LinkLocal: ll,
		AcceptUnverifiedICRC: cfg.AcceptUnverifiedICRC,
		NoGather:             cfg.NoGather || os.Getenv("SOFTRDMA_NO_GATHER") == "1",
		NoSplitWrites:        cfg.NoSplitWrites || os.Getenv("SOFTRDMA_NO_SPLIT_WRITES") == "1",
		SplitWritesAlways:    os.Getenv("SOFTRDMA_SPLIT_WRITES") == "always",
		Clock:                time.Now,
		SetTimer:             d.setTimer,
		Poll:                 d.inlinePoll,
		BeforeWait:           d.kickServe,
		Context:              d,
		Notify:               notify,
	})
	if err != nil {
		tr.Close()
		return nil, err
	}
	d.eng = eng
	if d.log != nil {
		go d.log.watchDrops(d.Counters)
	}
	go d.serve()
	opened.add(d)
	return d, nil
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
		out = append(out, &ifaceDevice{name: name, addr: addr, guid: NodeGUID(&ifi, addr)})
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
	name string
	addr netip.Addr
	guid uint64
}

func (d *ifaceDevice) Name() string { return d.name }
func (d *ifaceDevice) GUID() uint64 { return d.guid }
func (d *ifaceDevice) Open() (verbs.Context, error) {
	return Open(Config{Name: d.name, Addr: d.addr})
}

func init() { verbs.Register(provider{}) }

// DeviceAddr returns the IP address a listed device binds (or has bound).
func DeviceAddr(d verbs.Device) (netip.Addr, bool) {
	switch d := d.(type) {
	case *ifaceDevice:
		return d.addr, true
	case *Device:
		return d.LocalAddr(), true
	}
	return netip.Addr{}, false
}
