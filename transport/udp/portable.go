package udp

// The portable transport: a net.UDPConn, one datagram per system call,
// for systems without sendmmsg, recvmmsg and UDP GSO.
//
// This file has no build constraint, although only udp_other.go (!linux)
// puts it behind Listen: built on Linux too, it is compiled and tested by
// CI on the Linux machines the project runs on, against the same tests as
// the Linux transport, rather than only by whoever builds on macOS or
// FreeBSD. On Linux nothing outside the tests uses it.
//
//	Send:  for each packet: the ICRC for (local, peer, source port, ID 0, DF)
//	       → WriteToUDPAddrPort on the flow's sending socket
//	Recv:  ReadFromUDPAddrPort into the transport's 64 KiB buffer
//	       → check the ICRC for (peer, local, ID 0, DF) → one packet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/wire"
)

// portable is a transport.Transport over net.UDPConn. Send and Recv are
// safe for concurrent use; each serialises its callers.
type portable struct {
	conn   *net.UDPConn // the receiving socket, bound to local
	local  netip.AddrPort
	v6     bool
	mtu    int
	batch  int
	tclass uint8 // Config.TClass: every packet leaves with it

	sendMu  sync.Mutex
	senders []portableSender
	gather  []byte // a packet with a separate Payload, assembled

	recvMu sync.Mutex
	rbuf   []byte // where Recv puts the datagram it hands out

	closed atomic.Bool
	stats  counters
}

// portableSender is one sending socket.
type portableSender struct {
	conn *net.UDPConn
	port uint16
}

var _ transport.Transport = (*portable)(nil)

// maxDatagram holds any UDP payload, so a received datagram is never
// truncated.
const maxDatagram = 65536

// listenPortable opens the portable transport on cfg.Addr.
func listenPortable(cfg Config) (*portable, error) {
	if _, err := cfg.localAddrs(); err != nil {
		return nil, err
	}
	if len(cfg.Addrs) > 0 {
		return nil, fmt.Errorf("udp.Listen: Config.Addrs: the portable transport binds one address: %w", errors.ErrUnsupported)
	}
	cfg = cfg.withDefaults()
	addr := netip.AddrPortFrom(cfg.Addr.Unmap(), cfg.Port)
	t := &portable{local: addr, v6: addr.Addr().Is6(), batch: cfg.BatchSize, mtu: linkMTU(addr.Addr()), rbuf: make([]byte, maxDatagram)}
	var err error
	t.tclass = cfg.TClass
	if t.conn, err = t.open(addr, cfg.SocketBuffer); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("udp.Listen: %v is in use: another softrdma device or Linux rxe is bound there; use another address", addr)
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, fmt.Errorf("udp.Listen: %v: no interface has this address", addr)
		}
		return nil, fmt.Errorf("udp.Listen: %v: %w", addr, err)
	}
	if cfg.SourcePorts < 0 {
		t.senders = []portableSender{{conn: t.conn, port: addr.Port()}}
		return t, nil
	}
	for i := range cfg.SourcePorts {
		c, err := t.open(netip.AddrPortFrom(addr.Addr(), 0), cfg.SocketBuffer)
		if err != nil {
			t.closeConns()
			return nil, fmt.Errorf("udp.Listen: opening sending socket %d on %v: %w", i, addr.Addr(), err)
		}
		t.senders = append(t.senders, portableSender{conn: c, port: c.LocalAddr().(*net.UDPAddr).AddrPort().Port()})
	}
	return t, nil
}

// open binds a UDP socket to addr (port 0: an ephemeral port), sizes its
// buffers and sets Don't Fragment where the system can.
func (t *portable) open(addr netip.AddrPort, bufSize int) (*net.UDPConn, error) {
	network := "udp4"
	if t.v6 {
		network = "udp6" // also sets IPV6_V6ONLY
	}
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, err
	}
	// Best effort: the system may cap the sizes, and a system without a
	// Don't Fragment option still gets packets whose ICRC softrdma peers
	// check under the same assumption (see the package comment).
	c.SetReadBuffer(bufSize)
	c.SetWriteBuffer(bufSize)
	// The traffic class, best effort too: one per socket (Config.TClass).
	// Received datagrams report 0: reading each one's needs control
	// messages this transport does not ask for.
	if t.v6 {
		ipv6.NewConn(c).SetTrafficClass(int(t.tclass))
	} else {
		ipv4.NewConn(c).SetTOS(int(t.tclass))
	}
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { setDontFragment(int(fd), t.v6) })
	}
	return c, nil
}

// closeConns closes every socket the transport opened.
func (t *portable) closeConns() error {
	err := t.conn.Close()
	for _, s := range t.senders {
		if s.conn != t.conn {
			s.conn.Close()
		}
	}
	return err
}

// LocalAddr returns the bound address and port.
func (t *portable) LocalAddr() netip.AddrPort { return t.local }

// LocalAddrs returns the one bound address (transport.MultiHomed).
func (t *portable) LocalAddrs() []netip.Addr { return []netip.Addr{t.local.Addr().WithZone("")} }

// LinkMTU returns the MTU of the interface under the bound address.
func (t *portable) LinkMTU() int { return t.mtu }

// BatchSize returns the configured batch size. Send takes batches of any
// length; Recv returns one packet per call.
func (t *portable) BatchSize() int { return t.batch }

// Gathers reports false: Send takes packets whose payload is in Buf
// (transport.Gatherer). A packet with a separate Payload is still sent,
// after a copy.
func (t *portable) Gathers() bool { return false }

// Coalesces reports false: every packet is its own datagram
// (transport.Coalescer).
func (t *portable) Coalesces(peer netip.AddrPort) bool { return false }

// Stats returns the counters.
func (t *portable) Stats() Stats {
	return t.stats.snapshot()
}

// Close closes the sockets, which ends blocking Recv and Send calls. It
// is safe to call more than once.
func (t *portable) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	return t.closeConns()
}

// TrySend is Send, marking every datagram it handed over
// (transport.TrySender). On the BSDs and macOS a UDP socket has no send
// buffer to wait for (a full interface queue is ENOBUFS: a drop), so Send
// does not wait there in practice; this transport does not promise more
// than that.
func (t *portable) TrySend(pkts []transport.Datagram) (int, error) {
	n, err := t.Send(pkts)
	for i := range pkts {
		pkts[i].Sent = i < n
	}
	return n, err
}

// Send sends pkts one datagram at a time, each from the sending socket
// of its Flow. Gathers reports false, so callers put the payload in Buf;
// a packet that has a separate Payload anyway is assembled into one
// buffer first.
func (t *portable) Send(pkts []transport.Datagram) (int, error) {
	if t.closed.Load() {
		return 0, transport.ErrClosed
	}
	t.sendMu.Lock()
	defer t.sendMu.Unlock()
	for i := range pkts {
		p := &pkts[i]
		if p.Local.IsValid() && p.Local.Unmap().WithZone("") != t.local.Addr().WithZone("") {
			return i, fmt.Errorf("udp: packet %d: source address %v is not the transport's (%v)", i, p.Local, t.local.Addr())
		}
		s := &t.senders[flowSender(p.Flow, len(t.senders))]
		ip := wire.IPInfo{Src: t.local.Addr(), Dst: p.Peer.Addr().Unmap(), SrcPort: s.port, DstPort: p.Peer.Port(), DF: true}
		buf := p.Buf
		if len(p.Payload) == 0 {
			if len(p.Buf) < wire.BTHLen+wire.ICRCLen {
				return i, fmt.Errorf("udp: packet %d of %d bytes is shorter than a BTH and an ICRC", i, len(p.Buf))
			}
			wire.PutICRC(p.Buf, &ip)
		} else {
			if p.Split < wire.BTHLen || len(p.Buf)-p.Split < wire.ICRCLen {
				return i, fmt.Errorf("udp: packet %d: %d bytes of headers and %d of trailer cannot hold a BTH and an ICRC", i, p.Split, len(p.Buf)-p.Split)
			}
			wire.PutICRCv(p.Buf[:p.Split], p.Payload, p.Buf[p.Split:], &ip)
			if cap(t.gather) < p.Len() {
				t.gather = make([]byte, p.Len())
			}
			buf = t.gather[:p.CopyTo(t.gather[:p.Len()])]
		}
		t.stats.sendCalls.Add(1)
		if _, err := s.conn.WriteToUDPAddrPort(buf, p.Peer); err != nil {
			if t.closed.Load() || errors.Is(err, net.ErrClosed) {
				return i, transport.ErrClosed
			}
			// An unreachable peer, a full interface queue (ENOBUFS on
			// the BSDs), a packet too large: dropped, as a network would.
			t.stats.sendErrors.Add(1)
		}
		t.stats.sent.Add(1)
	}
	return len(pkts), nil
}

// Recv blocks until a datagram arrives and returns it as pkts[0]. Its
// Buf is the transport's memory, valid until the next Recv.
func (t *portable) Recv(pkts []transport.Datagram) (int, error) {
	if len(pkts) == 0 {
		return 0, nil
	}
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	if t.closed.Load() {
		return 0, transport.ErrClosed
	}
	n, peer, err := t.conn.ReadFromUDPAddrPort(t.rbuf)
	t.stats.recvCalls.Add(1)
	if err != nil {
		if t.closed.Load() || errors.Is(err, net.ErrClosed) {
			return 0, transport.ErrClosed
		}
		return 0, err
	}
	t.stats.received.Add(1)
	p := &pkts[0]
	p.Buf = t.rbuf[:n]
	p.Payload, p.Split = nil, 0
	p.Peer = netip.AddrPortFrom(peer.Addr().Unmap(), peer.Port())
	p.Local = t.local.Addr()
	p.Flow = 0
	p.TClass = 0
	ip := wire.IPInfo{Src: p.Peer.Addr(), Dst: p.Local, SrcPort: p.Peer.Port(), DstPort: t.local.Port(), DF: true}
	switch {
	case n < wire.BTHLen+wire.ICRCLen:
		// maxDatagram holds any UDP payload: only a runt is cut short.
		t.stats.truncated.Add(1)
		p.ICRC = transport.ICRCBad
	case wire.CheckICRC(p.Buf, &ip):
		p.ICRC = transport.ICRCOK
	case t.v6:
		t.stats.icrcBad.Add(1)
		p.ICRC = transport.ICRCBad
	default:
		t.stats.icrcUnverified.Add(1)
		p.ICRC = transport.ICRCUnverified
	}
	return 1, nil
}
