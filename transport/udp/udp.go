// Package udp carries RoCEv2 over UDP sockets: port 4791 on one IP address,
// the ICRC written on send and checked on receive.
//
// The IPv4 identification is covered by the ICRC but invisible to a UDP
// socket. Linux sends identification 0 from an unconnected socket with
// Don't Fragment set (IP_PMTUDISC_DO), so every packet this transport sends
// carries an ICRC computed for ID 0, DF set; received IPv4 packets are
// checked under the same assumption, and a mismatch is reported as
// transport.ICRCUnverified (the sender may be Linux rxe, which uses
// non-zero IDs). IPv6 has no identification: its ICRC is always checked.
//
// There are two implementations behind one Config and one Listen:
//
//   - On Linux (udp_linux.go), batches move with sendmmsg and recvmmsg,
//     runs of equal-sized packets to loopback peers with UDP GSO and GRO,
//     payloads are gathered from the caller's memory without a copy, and
//     the transport can be polled without blocking (transport.Poller).
//   - Elsewhere (portable.go, chosen by udp_other.go), a net.UDPConn moves
//     one datagram per system call. It sets Don't Fragment where the
//     system has a socket option for it (macOS, FreeBSD) and computes the
//     same ICRC as on Linux, so softrdma peers agree; FreeBSD sends ID 0
//     for datagrams with DF set, other systems may not, in which case
//     peers that check the ICRC against the real IP header (rxe, NICs)
//     drop what it sends.
package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/softrdma/softrdma/transport"
)

// Config says where the transport lives.
type Config struct {
	// Addr is the local IP address to bind; required. LocalAddr reports
	// it, and a packet sent without a source address (Datagram.Local)
	// leaves from it.
	Addr netip.Addr
	// Addrs are further local addresses to bind, each with its own
	// receiving socket on Port and its own sending sockets: a device on a
	// network interface sends from and receives on every address of its
	// GID table. A link-local IPv6 address needs its zone (fe80::1%eth0).
	// At most 15; on Linux only (elsewhere Listen fails with an error
	// that matches errors.ErrUnsupported).
	Addrs []netip.Addr
	// Port is the UDP port; 0 means 4791. Peers are addressed on the port
	// they give; softrdma devices use their own port for peers too.
	Port uint16
	// BatchSize is the most packets one Send or Recv system call moves
	// (on Linux; elsewhere a call moves one and BatchSize only sizes
	// callers' arrays); default 64.
	BatchSize int
	// SocketBuffer sets the sockets' receive and send buffer sizes
	// (SO_RCVBUF and SO_SNDBUF, on Linux beyond the system limit where
	// the process may); default 16 MiB. The receive buffer is where
	// packets wait while the device's process is not running, so it
	// bounds the burst a UD or UC receiver survives (defaultSocketBuffer).
	SocketBuffer int
	// SourcePorts is how many sockets send, each from its own ephemeral
	// UDP port; a packet's Flow (its QP number) picks one, so one QP always
	// uses one source port and many QPs spread over several, which gives
	// ECMP and RSS the entropy rxe's 0xC000+hash source ports give. 0 means
	// 8; a negative value sends from the receiving socket (source port =
	// Port). On Linux, loopback peers get every flow from the first of
	// them: loopback spreads nothing by port, and one socket sends a batch
	// for many QPs in one sendmmsg.
	SourcePorts int
	// DisableGSO turns off UDP generic segmentation offload (Linux only;
	// the portable transport never coalesces). With it on, runs of
	// equal-sized packets of one QP to a loopback peer leave in one
	// sendmsg (UDP_SEGMENT) and arrive in one recvmsg (UDP_GRO), which
	// spares the kernel's per-packet cost. Only loopback peers get GSO:
	// every segment's ICRC is computed for IP ID 0, which holds when the
	// super-packet is never split on a wire.
	DisableGSO bool
	// TClass is the sending sockets' IPv4 TOS / IPv6 Traffic Class byte
	// (DSCP and ECN field, transport.Datagram.TClass): a packet whose
	// TClass is this leaves without a control message; any other value
	// goes in a per-message IP_TOS / IPV6_TCLASS control message (Linux;
	// the portable transport sends every packet with this one).
	// Receiving always reads each datagram's byte (IP_RECVTOS,
	// IPV6_RECVTCLASS) into Datagram.TClass.
	TClass uint8
	// Exclusive binds the addresses alone, as Linux rxe binds its port,
	// even when Share is set.
	Exclusive bool
	// Share, if set (and Exclusive is not), lets the receiving sockets
	// share their addresses with transports in other processes (on
	// Linux only; elsewhere the address is bound alone): Listen calls it
	// with the addresses before binding them, binds them with
	// SO_REUSEPORT and hands the bound sockets to Share.Join, which puts
	// them in a group that steers each datagram to the process whose QP
	// (or connection-manager ID or listener) it names (provider/soft
	// passes internal/reuseport's eBPF steering, docs/sharing.md). The
	// device must then number its QPs with the transport's slot
	// (Transport.Slot). When Share fails, the address is bound alone and
	// a second device on it fails with an error that says why sharing
	// was not possible. Nil binds alone.
	Share func(addrs []netip.AddrPort) (Share, error)
	// PeerShared, if set, reports whether processes on this host share
	// a loopback peer's address (Config.Share on their side), or an
	// error when it cannot tell (Linux only). To a peer known not to
	// share it, packets to any of its QPs may leave in one GSO datagram;
	// otherwise only packets whose destination QPNs carry one slot
	// (SlotBits) do, since a shared address steers a datagram as a whole
	// by its first packet. The transport asks again for a peer after
	// 100 ms, so a peer address that becomes shared is seen within that
	// time (docs/sharing.md). provider/soft passes internal/reuseport's
	// check of the address's pinned steering maps. Nil: every peer is
	// treated as shared.
	PeerShared func(peer netip.AddrPort) (bool, error)
}

// Share is a transport's membership of the groups of processes that
// share its addresses (Config.Share). The transport calls Join once,
// after binding its sockets, and Close after closing them.
type Share interface {
	// Join puts fds, the bound receiving sockets of the addresses given
	// to Config.Share (in order), in the groups and takes a slot in
	// them.
	Join(fds []int) error
	// Slot is the slot Join took: the top SlotBits bits of the device's
	// QPNs and connection-manager IDs.
	Slot() uint32
	// ClaimService steers connection requests for an rdma_cm service ID
	// to this process; it fails if a live process claimed it first.
	ClaimService(serviceID uint64) error
	// ReleaseService undoes one ClaimService.
	ReleaseService(serviceID uint64)
	// Close gives up the claims and the group's resources.
	Close()
}

// SlotBits is how many top bits of a destination QPN (and of a
// connection-manager ID) name the process that owns it on an address
// that processes share (Config.Share): the transport keeps packets to
// two slots out of one GSO datagram, which the destination steers as a
// whole.
const SlotBits = 6

var _ transport.Transport = (*Transport)(nil)

// maxHomes bounds the local addresses of one transport (Config.Addrs).
const maxHomes = 16

// localAddrs checks Addr and Addrs and returns them, unmapped, Addr first.
func (cfg Config) localAddrs() ([]netip.Addr, error) {
	if !cfg.Addr.IsValid() {
		return nil, errors.New("udp.Listen: Config.Addr is required")
	}
	if len(cfg.Addrs)+1 > maxHomes {
		return nil, fmt.Errorf("udp.Listen: %d addresses: at most %d", len(cfg.Addrs)+1, maxHomes)
	}
	out := []netip.Addr{cfg.Addr.Unmap()}
	for _, a := range cfg.Addrs {
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
			return nil, fmt.Errorf("udp.Listen: Config.Addrs: %v is not a unicast address", a)
		}
		a = a.Unmap()
		if a.IsLinkLocalUnicast() && a.Is6() && a.Zone() == "" {
			return nil, fmt.Errorf("udp.Listen: Config.Addrs: link-local %v needs its interface as zone (%v%%eth0)", a, a)
		}
		for _, b := range out {
			if b.WithZone("") == a.WithZone("") {
				return nil, fmt.Errorf("udp.Listen: Config.Addrs: %v is listed twice", a)
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// defaultSocketBuffer is Config.SocketBuffer's default. The receiving
// socket is where packets wait while the device's process is not running:
// a NIC or Linux rxe places them in the posted receive WQEs meanwhile, a
// user-space device only when its process next reads. A burst the
// program has posted receives for must therefore fit in the socket, or
// the kernel drops the rest, and on UD and UC nothing sends them again
// (perftest's UD and UC servers post a receive for every message of the
// run and wait for each). Linux charges a 4 KiB-MTU packet about 8.4 KiB
// against the buffer (twice the value set): 16 MiB holds about 3970 of
// them, 4 MiB only 992, fewer than one 1000-message run of ib_send_bw -c
// UD. Without CAP_NET_ADMIN the kernel caps the value at
// net.core.rmem_max (wmem_max for sending).
const defaultSocketBuffer = 16 << 20

// withDefaults returns cfg with its zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Port == 0 {
		cfg.Port = transport.Port
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 64
	}
	if cfg.SocketBuffer <= 0 {
		cfg.SocketBuffer = defaultSocketBuffer
	}
	if cfg.SourcePorts == 0 {
		cfg.SourcePorts = 8
	}
	return cfg
}

// Stats counts what the transport did. Read it with Transport.Stats.
type Stats struct {
	Sent, Received, SendErrors, Truncated, ICRCBad, ICRCUnverified, SendCalls, RecvCalls uint64
	// NetErrors counts the ICMP (and local) errors read from the sockets'
	// error queues (Linux; see Transport.OnUnreachable).
	NetErrors uint64
}

// counters are the live form of Stats, updated from the data path.
type counters struct {
	sent, received, sendErrors, truncated, icrcBad, icrcUnverified, sendCalls, recvCalls, netErrors atomic.Uint64
	// sendMsgs counts the datagrams the Linux transport handed the
	// kernel, a GSO datagram once (tests).
	sendMsgs atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{Sent: c.sent.Load(), Received: c.received.Load(), SendErrors: c.sendErrors.Load(), Truncated: c.truncated.Load(),
		ICRCBad: c.icrcBad.Load(), ICRCUnverified: c.icrcUnverified.Load(), SendCalls: c.sendCalls.Load(), RecvCalls: c.recvCalls.Load(), NetErrors: c.netErrors.Load()}
}

// flowSender picks which of n sending sockets carries a flow.
func flowSender(flow uint32, n int) int {
	return int((flow * 2654435761) >> 16 % uint32(n))
}

// linkMTU returns the MTU of the interface that has addr (65536 for
// loopback), or 1500 if none is found.
func linkMTU(addr netip.Addr) int {
	ifs, err := net.Interfaces()
	if err != nil {
		return 1500
	}
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			p, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			if p.Addr() == addr || (ifi.Flags&net.FlagLoopback != 0 && p.Contains(addr)) {
				return ifi.MTU
			}
		}
	}
	return 1500
}
