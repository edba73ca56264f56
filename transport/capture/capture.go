// Package capture wraps a transport.Transport and writes every packet it
// sends and receives to a pcapng file that Wireshark and tshark dissect as
// RoCEv2: each packet is framed as Ethernet / IPv4 (or IPv6) / UDP with
// destination port 4791, around the RoCEv2 packet exactly as it went on the
// wire (BTH to ICRC).
//
// What the capture reconstructs: the Ethernet addresses (locally
// administered 02:00:00:00:00:00 plus the IP address's last four bytes),
// the IPv4 identification (0, which is what Linux gives the unconnected
// Don't-Fragment sockets softrdma sends from), TTL 64, and the UDP checksum
// (0 on IPv4, as rxe sends; computed on IPv6, where 0 is not allowed). The
// ICRC is not touched: a sent packet carries the ICRC the transport
// computed. It verifies against the captured headers when the UDP source
// port is the one the capture shows, which is the transport's LocalAddr port
// unless the transport sends from other ports (transport/udp's SourcePorts:
// provider/soft sends from its receiving socket when it captures). A
// received packet carries the ICRC its sender computed, over the sender's
// IP identification, which the capture cannot see (rxe's is non-zero).
package capture

import (
	"bufio"
	"encoding/binary"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"

	"github.com/softrdma/softrdma/transport"
)

// Writer writes framed packets to a pcapng stream. It is safe for
// concurrent use.
type Writer struct {
	mu  sync.Mutex
	bw  *bufio.Writer
	ng  *pcapgo.NgWriter
	buf []byte
	err error
	n   uint64
}

// NewWriter starts a pcapng stream (Ethernet link type) on w.
func NewWriter(w io.Writer) (*Writer, error) {
	bw := bufio.NewWriterSize(w, 1<<16)
	ng, err := pcapgo.NewNgWriter(bw, layers.LinkTypeEthernet)
	if err != nil {
		return nil, err
	}
	return &Writer{bw: bw, ng: ng}, nil
}

// Packets returns how many packets were written.
func (c *Writer) Packets() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Write frames one RoCEv2 packet (the UDP payload p) from src to dst and
// writes it with timestamp ts. The first write error sticks; Flush
// returns it.
func (c *Writer) Write(ts time.Time, src, dst netip.AddrPort, p *transport.Datagram) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.buf = Frame(c.buf[:0], src, dst, p)
	c.err = c.ng.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(c.buf), Length: len(c.buf)}, c.buf)
	c.n++
}

// Flush writes out what is buffered.
func (c *Writer) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if c.err = c.ng.Flush(); c.err != nil {
		return c.err
	}
	c.err = c.bw.Flush()
	return c.err
}

// Frame appends to b the Ethernet frame that carries p from src to dst.
func Frame(b []byte, src, dst netip.AddrPort, p *transport.Datagram) []byte {
	s, d := src.Addr().Unmap(), dst.Addr().Unmap()
	v4 := s.Is4() && d.Is4()
	ethType := uint16(0x0800)
	if !v4 {
		ethType = 0x86DD
		s, d = netip.AddrFrom16(s.As16()), netip.AddrFrom16(d.As16())
	}
	b = appendMAC(b, d)
	b = appendMAC(b, s)
	b = binary.BigEndian.AppendUint16(b, ethType)
	udpLen := 8 + p.Len()
	ipStart := len(b)
	if v4 {
		b = append(b, 0x45, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(20+udpLen))
		b = append(b, 0, 0, 0x40, 0, 64, 17, 0, 0) // ID 0, DF, TTL 64, UDP
		sa, da := s.As4(), d.As4()
		b = append(b, sa[:]...)
		b = append(b, da[:]...)
		binary.BigEndian.PutUint16(b[ipStart+10:], ipChecksum(b[ipStart:]))
	} else {
		b = append(b, 0x60, 0, 0, 0)
		b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
		b = append(b, 17, 64)
		sa, da := s.As16(), d.As16()
		b = append(b, sa[:]...)
		b = append(b, da[:]...)
	}
	udp := len(b)
	b = binary.BigEndian.AppendUint16(b, src.Port())
	b = binary.BigEndian.AppendUint16(b, dst.Port())
	b = binary.BigEndian.AppendUint16(b, uint16(udpLen))
	b = append(b, 0, 0)
	n := len(b)
	b = append(b, make([]byte, p.Len())...)
	p.CopyTo(b[n:])
	if !v4 {
		binary.BigEndian.PutUint16(b[udp+6:], udp6Checksum(b[ipStart+8:ipStart+40], b[udp:]))
	}
	return b
}

func appendMAC(b []byte, a netip.Addr) []byte {
	s := a.AsSlice()
	return append(b, 0x02, 0, s[len(s)-4], s[len(s)-3], s[len(s)-2], s[len(s)-1])
}

func sum16(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

func fold(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xFFFF + sum>>16
	}
	return ^uint16(sum)
}

func ipChecksum(h []byte) uint16 { return fold(sum16(0, h[:20])) }

// udp6Checksum is the UDP checksum over the IPv6 pseudo-header (addrs: the
// 32 address bytes) and the UDP datagram (checksum field zero).
func udp6Checksum(addrs, udp []byte) uint16 {
	sum := sum16(0, addrs)
	sum += uint32(len(udp)) + 17
	c := fold(sum16(sum, udp))
	if c == 0 {
		c = 0xFFFF
	}
	return c
}

// Transport is a transport.Transport that captures what passes through
// it. It implements transport.Poller, Coalescer and Gatherer when the
// wrapped transport does (Wrap picks the type).
type Transport struct {
	inner transport.Transport
	w     *Writer
	local netip.AddrPort
	now   func() time.Time
}

type pollingTransport struct {
	*Transport
	poller transport.Poller
}

// Wrap returns inner with every packet it sends and receives written to
// w. Closing the returned transport closes inner and flushes w.
func Wrap(inner transport.Transport, w *Writer) transport.Transport {
	t := &Transport{inner: inner, w: w, local: inner.LocalAddr(), now: time.Now}
	if p, ok := inner.(transport.Poller); ok {
		return &pollingTransport{Transport: t, poller: p}
	}
	return t
}

// Send sends pkts through the wrapped transport, then writes those it
// sent, with the ICRC it filled in.
func (t *Transport) Send(pkts []transport.Datagram) (int, error) {
	n, err := t.inner.Send(pkts)
	ts := t.now()
	for i := range pkts[:n] {
		p := &pkts[i]
		src := p.Local
		if !src.IsValid() {
			src = t.local.Addr()
		}
		t.w.Write(ts, netip.AddrPortFrom(src, t.local.Port()), p.Peer, p)
	}
	return n, err
}

func (t *Transport) captureRecv(pkts []transport.Datagram, n int) {
	if n <= 0 {
		return
	}
	ts := t.now()
	for i := range pkts[:n] {
		p := &pkts[i]
		local := p.Local
		if !local.IsValid() {
			local = t.local.Addr()
		}
		t.w.Write(ts, p.Peer, netip.AddrPortFrom(local, t.local.Port()), p)
	}
}

// Recv receives through the wrapped transport and writes what arrived.
func (t *Transport) Recv(pkts []transport.Datagram) (int, error) {
	n, err := t.inner.Recv(pkts)
	t.captureRecv(pkts, n)
	return n, err
}

// LocalAddr is the wrapped transport's.
func (t *Transport) LocalAddr() netip.AddrPort { return t.inner.LocalAddr() }

// LocalAddrs is the wrapped transport's (transport.MultiHomed), or its
// one address.
func (t *Transport) LocalAddrs() []netip.Addr {
	if m, ok := t.inner.(transport.MultiHomed); ok {
		return m.LocalAddrs()
	}
	return []netip.Addr{t.local.Addr()}
}

// LinkMTU is the wrapped transport's.
func (t *Transport) LinkMTU() int { return t.inner.LinkMTU() }

// BatchSize is the wrapped transport's.
func (t *Transport) BatchSize() int { return t.inner.BatchSize() }

// Close closes the wrapped transport and flushes the capture.
func (t *Transport) Close() error {
	err := t.inner.Close()
	if ferr := t.w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// Coalesces is the wrapped transport's answer, false if it has none.
func (t *Transport) Coalesces(peer netip.AddrPort) bool {
	c, ok := t.inner.(transport.Coalescer)
	return ok && c.Coalesces(peer)
}

// Gathers is the wrapped transport's answer, false if it has none.
func (t *Transport) Gathers() bool {
	g, ok := t.inner.(transport.Gatherer)
	return ok && g.Gathers()
}

// TryRecv receives without blocking and writes what arrived.
func (t *pollingTransport) TryRecv(pkts []transport.Datagram) (int, error) {
	n, err := t.poller.TryRecv(pkts)
	t.captureRecv(pkts, n)
	return n, err
}

// Wait is the wrapped transport's.
func (t *pollingTransport) Wait() error { return t.poller.Wait() }
