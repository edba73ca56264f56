// Package cmattack is a hostile connection-manager peer for tests: a
// plain UDP socket, as any process on the network can open, that sends
// and receives CM MADs as RoCEv2 UD SEND ONLY packets to and from QP1,
// with correct ICRCs and whatever comm IDs, GIDs and timers a test
// chooses. Tests in cm and rdmanet mount attacks on the connection
// manager with it through the wire, the way they were found.
package cmattack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/wire"
)

// GSIQKey is QP1's Q_Key (IBTA 13.4.6.1).
const GSIQKey = 0x80010000

// Peer is the hostile peer. It is used by one goroutine.
type Peer struct {
	conn *net.UDPConn
	port uint16
	psn  uint32
	buf  [2048]byte
}

// Listen opens a peer at local, on the UDP port the victims use for
// RoCEv2 (the answers of a victim's CM go to that port of the address
// they answer).
func Listen(local netip.Addr, port uint16) (*Peer, error) { return Open(local, port, port) }

// Open opens a peer bound to local:bindPort (0: any free port) that
// sends to port dstPort: from another port of an address a victim's peer
// has, it sends as that peer's GID but does not get the answers.
func Open(local netip.Addr, bindPort, dstPort uint16) (*Peer, error) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, bindPort)))
	if err != nil {
		return nil, err
	}
	if err := dontFragment(c); err != nil {
		c.Close()
		return nil, err
	}
	return &Peer{conn: c, port: dstPort}, nil
}

// Addr is the peer's address: the source of what it sends, so the GID
// the victim sees.
func (p *Peer) Addr() netip.Addr { return p.conn.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap() }

// Close closes the socket.
func (p *Peer) Close() error { return p.conn.Close() }

// Send sends a CM MAD of attribute attr and transaction ID tid to QP1 at
// dst; body writes the attribute (wire.CMReq.Encode and the like) into
// the slice it is given.
func (p *Peer) Send(dst netip.Addr, attr wire.CMAttr, tid uint64, body func([]byte)) error {
	mad := make([]byte, wire.MADLen)
	wire.EncodeCMHeader(mad, attr, tid)
	body(mad[wire.MADHeaderLen:])
	return p.SendMAD(dst, mad)
}

// SendMAD sends a whole MAD to QP1 at dst.
func (p *Peer) SendMAD(dst netip.Addr, mad []byte) error {
	info := wire.UDSendOnly.Info()
	pad := wire.PadFor(len(mad))
	b := make([]byte, info.Length+len(mad)+pad+wire.ICRCLen)
	p.psn++
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: wire.UDSendOnly, PadCount: pad, PKey: 0xFFFF, DestQP: 1, PSN: wire.PSN(p.psn & 0xFFFFFF)})
	wire.DETH(b[info.DETHOff:]).Encode(&wire.DETHFields{QKey: GSIQKey, SrcQP: 1})
	copy(b[info.Length:], mad)
	to := netip.AddrPortFrom(dst.Unmap(), p.port)
	src := p.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	wire.PutICRC(b, &wire.IPInfo{Src: src.Addr().Unmap(), Dst: to.Addr(), SrcPort: src.Port(), DstPort: p.port, DF: true})
	_, err := p.conn.WriteToUDPAddrPort(b, to)
	return err
}

// MAD is a CM MAD the peer received.
type MAD struct {
	From netip.Addr
	Attr wire.CMAttr
	TID  uint64
	Data []byte // the attribute (parse with wire.ParseCMRep and the like)
	Raw  []byte // the whole MAD
}

// ErrTimeout is returned by Recv when nothing came in time.
var ErrTimeout = errors.New("cmattack: no MAD in time")

// Recv returns the next CM MAD sent to the peer within timeout.
func (p *Peer) Recv(timeout time.Duration) (MAD, error) {
	deadline := time.Now().Add(timeout)
	for {
		p.conn.SetReadDeadline(deadline)
		n, from, err := p.conn.ReadFromUDPAddrPort(p.buf[:])
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return MAD{}, ErrTimeout
			}
			return MAD{}, err
		}
		var pkt wire.Packet
		if wire.Parse(p.buf[:n], &pkt) != nil || pkt.BTH.DestQP() != 1 || len(pkt.Payload) < wire.MADLen {
			continue
		}
		m, err := wire.ParseMAD(pkt.Payload[:wire.MADLen])
		if err != nil || m.MgmtClass() != wire.MgmtClassCM {
			continue
		}
		raw := append([]byte(nil), pkt.Payload[:wire.MADLen]...)
		return MAD{From: from.Addr().Unmap(), Attr: wire.CMAttr(m.AttrID()), TID: m.TransactionID(),
			Data: raw[wire.MADHeaderLen:], Raw: raw}, nil
	}
}

// Expect returns the next MAD of attribute attr within timeout, skipping
// others.
func (p *Peer) Expect(attr wire.CMAttr, timeout time.Duration) (MAD, error) {
	deadline := time.Now().Add(timeout)
	for {
		m, err := p.Recv(time.Until(deadline))
		if err != nil {
			return MAD{}, fmt.Errorf("waiting for CM attribute %#x: %w", uint16(attr), err)
		}
		if m.Attr == attr {
			return m, nil
		}
	}
}

// Count counts the MADs of attribute attr received within d.
func (p *Peer) Count(attr wire.CMAttr, d time.Duration) int {
	n := 0
	deadline := time.Now().Add(d)
	for {
		m, err := p.Recv(time.Until(deadline))
		if err != nil {
			return n
		}
		if m.Attr == attr {
			n++
		}
	}
}
