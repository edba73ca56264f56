// Package transport defines the batch-oriented datagram interface that the
// RoCEv2 engine sends and receives through.
//
// A Transport carries RoCEv2 packets: the UDP payload that starts with the
// InfiniBand Base Transport Header and ends with the 4-byte invariant CRC
// (ICRC). The ICRC covers parts of the IP and UDP headers that only the
// transport knows for certain (addresses, ports, the IPv4 identification), so
// the transport owns it: Send fills the last four bytes of every packet, and
// Recv reports whether the ICRC of every received packet checked out.
//
// Implementations: transport/udp (real UDP sockets, port 4791) and
// internal/netsim (an in-memory network with loss, delay, reordering,
// duplication and corruption for tests in virtual time).
package transport

import (
	"errors"
	"net/netip"
)

// Port is the IANA-assigned UDP destination port of RoCEv2.
const Port = 4791

// ICRCStatus says what a transport learned about a received packet's ICRC.
type ICRCStatus uint8

const (
	// ICRCOK means the ICRC was recomputed over the packet as it arrived,
	// including its real IP and UDP headers, and matched.
	ICRCOK ICRCStatus = iota
	// ICRCBad means the ICRC was recomputed and did not match: the packet
	// was corrupted and must be dropped.
	ICRCBad
	// ICRCUnverified means the transport could not see every header field
	// the ICRC covers (a plain UDP socket cannot see the IPv4 identification)
	// and the ICRC did not match under the assumption it had to make (ID 0).
	// Peers such as Linux rxe send non-zero identifications, so such a packet
	// is not necessarily corrupt; the receiver decides by policy.
	ICRCUnverified
)

func (s ICRCStatus) String() string {
	switch s {
	case ICRCOK:
		return "ok"
	case ICRCBad:
		return "bad"
	case ICRCUnverified:
		return "unverified"
	}
	return "ICRCStatus(?)"
}

// Datagram is one RoCEv2 packet in a batch: the UDP payload.
//
// On Send, Buf holds the whole packet from the BTH to the ICRC; the last four
// bytes are overwritten by the transport with the ICRC it computes for the
// headers it actually sends. Peer is the destination (normally port 4791) and
// Flow, usually the source QP number, selects the UDP source port so that
// packets of one QP share a flow, as rxe does (0xC000 + hash).
//
// Local, if valid, is the source address: one of the transport's
// addresses (MultiHomed), else Send fails; zero means LocalAddr's.
//
// On Recv, Buf is a caller-provided buffer that the transport reslices to the
// datagram's length; Peer is the source address and port, Local the local
// address the datagram was sent to, and ICRC the result of the check.
//
// A transport that implements Gatherer may also be given, on Send, a packet
// whose payload is not in Buf: the packet on the wire is then Buf[:Split],
// Payload, Buf[Split:] (the headers, the payload, the pad and ICRC), and
// the transport gathers the three without copying the payload, which
// stays where the application registered it.
type Datagram struct {
	Buf     []byte
	Payload []byte
	Split   int
	Peer    netip.AddrPort
	Local   netip.Addr
	Flow    uint32
	ICRC    ICRCStatus
	// TClass is the IPv4 Type of Service or IPv6 Traffic Class byte:
	// the DSCP in its top six bits, the ECN field (RFC 3168) in its
	// bottom two. On Send, the byte the packet leaves with (a transport
	// that cannot set it per packet sends its socket's); on Recv, the
	// byte it arrived with, so a receiver sees the CE mark a switch
	// set, or 0 if the transport cannot read it.
	TClass uint8
	// Sent is set by TrySend on the datagrams it handed to the network.
	Sent bool
}

// The ECN field of Datagram.TClass (RFC 3168 section 5).
const (
	ECNMask   = 0x03 // the two ECN bits
	ECNNotECT = 0x00 // not ECN-capable: a congested switch drops it
	ECNECT1   = 0x01 // ECN-capable transport (1)
	ECNECT0   = 0x02 // ECN-capable transport (0): what RoCEv2 senders use
	ECNCE     = 0x03 // congestion experienced: a switch marked it
)

// CE reports whether the packet arrived marked Congestion Experienced.
func (p *Datagram) CE() bool { return p.TClass&ECNMask == ECNCE }

// Len is the length of the packet on the wire.
func (p *Datagram) Len() int { return len(p.Buf) + len(p.Payload) }

// CopyTo copies the packet as it goes on the wire into dst, which must
// hold Len bytes, and returns Len.
func (p *Datagram) CopyTo(dst []byte) int {
	if len(p.Payload) == 0 {
		return copy(dst, p.Buf)
	}
	n := copy(dst, p.Buf[:p.Split])
	n += copy(dst[n:], p.Payload)
	return n + copy(dst[n:], p.Buf[p.Split:])
}

// Coalescer is implemented by transports that send runs of equal-sized
// packets to some peers as one datagram (UDP GSO on loopback), where a
// packet of another size ends the run.
type Coalescer interface {
	// Coalesces reports whether Send coalesces packets to peer.
	Coalesces(peer netip.AddrPort) bool
}

// MultiHomed is implemented by transports that send from and receive on
// several local addresses (a device with the addresses of a network
// interface in its GID table). A Datagram's Local names the source
// address on Send and the address it arrived on on Recv.
type MultiHomed interface {
	// LocalAddrs lists the addresses, LocalAddr's first, unmapped and
	// without zones. The caller must not modify the slice.
	LocalAddrs() []netip.Addr
}

// Gatherer is implemented by transports whose Send takes packets with a
// separate Payload (see Datagram).
type Gatherer interface {
	// Gathers reports whether Send takes packets with a Payload.
	Gathers() bool
}

// TrySender is implemented by transports that can also send without
// waiting for buffer space, for callers that must not block (a goroutine
// that polls a completion queue holds locks every QP needs).
type TrySender interface {
	// TrySend is Send that never waits: it hands to the network what the
	// network takes now, sets Sent on each of those datagrams and clears
	// it on the others, which the caller sends again later. For each
	// Flow, the datagrams sent are a prefix of that flow's datagrams in
	// pkts, so sending the rest later keeps every flow in order. It
	// returns how many datagrams it sent.
	TrySend(pkts []Datagram) (int, error)
}

// Transport sends and receives batches of RoCEv2 packets.
//
// Send and Recv may be called concurrently with each other and with
// themselves from several goroutines. Close unblocks a pending Recv, which
// then returns ErrClosed.
type Transport interface {
	// Send transmits pkts in order, filling the ICRC of each. It returns the
	// number of packets handed to the network. A packet that cannot be sent
	// (for example to an unreachable address) is counted as sent and dropped,
	// as a network would drop it; an error means the transport itself failed.
	// Send does not retain pkts or their buffers after it returns.
	Send(pkts []Datagram) (int, error)

	// Recv blocks until at least one packet arrives and fills pkts[0:n].
	// Each pkts[i].Buf is either the caller's buffer resliced to the
	// datagram (its capacity must hold the largest packet the caller
	// accepts; longer datagrams are truncated and reported with ICRCBad) or
	// memory of the transport's, valid until the next Recv or TryRecv call;
	// either way the caller must be done with the packets before it
	// receives again. It returns ErrClosed once the transport is closed.
	Recv(pkts []Datagram) (n int, err error)

	// LocalAddr is the address and port the transport receives on.
	LocalAddr() netip.AddrPort

	// LinkMTU is the IP MTU of the link the transport sends on (1500 for a
	// typical Ethernet, 65536 for Linux loopback); the engine derives the
	// InfiniBand path MTU from it as rxe does.
	LinkMTU() int

	// BatchSize is the largest batch Send and Recv handle in one call;
	// callers size their arrays with it.
	BatchSize() int

	// Close releases the transport. It is safe to call more than once.
	Close() error
}

// ErrClosed is returned by Send and Recv on a closed transport.
var ErrClosed = errors.New("transport: closed")

// Poller is implemented by transports that can also receive without
// blocking. A receive loop polls while traffic flows, which saves the
// wake-up through the kernel and the scheduler (tens of microseconds on a
// busy machine), and blocks in Recv once the link has been idle a while.
//
// TryRecv and Wait let several goroutines share receiving: whoever polls
// receives, and a goroutine that waits holds nothing that stops another
// from polling meanwhile.
type Poller interface {
	// TryRecv is Recv that returns 0 at once when nothing is waiting or
	// another goroutine is receiving.
	TryRecv(pkts []Datagram) (n int, err error)
	// Wait blocks until a packet is waiting to be received (it does not
	// receive it) or the transport is closed (ErrClosed).
	Wait() error
}
