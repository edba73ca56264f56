package udp

import (
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/transport"
)

// Coalescing packets to many QPs of a loopback peer
//
// The kernel steers a GSO datagram as a whole, by its first packet. On a
// destination address that processes share (Config.Share), packets for
// two processes' QPs must therefore leave in two datagrams: their
// destination QPNs differ in their top SlotBits bits. A destination
// nobody shares has one receiving socket, which takes every datagram, so
// any of its packets (but MADs to QP1, which never coalesce) may share
// one; and its QPNs are random in all 24 bits, so the slot rule would
// rarely let two QPs' packets meet.
//
// Config.PeerShared tells which case a loopback peer is. Its answer is
// kept per peer address for steeringRefresh, then asked again on the next
// use: a peer address that starts being shared (its device closed and a
// group of devices took the address) is seen within that time. In the
// window, a GSO datagram that mixes two processes' QPs may reach the
// wrong one, which drops the packets for QPs it does not own (counted as
// packets to unknown QPs); RC retransmits them, UD loses them as it may
// lose any datagram. Nothing is delivered to the wrong QP: each packet
// still carries its own destination QPN, so the window costs
// retransmissions, never correctness. A peer that PeerShared cannot
// judge, or a transport without it, keeps the slot rule.

// steeringRefresh is how long a peer's PeerShared answer is kept.
const steeringRefresh = 100 * time.Millisecond

// maxSteeringPeers bounds the cache; past it the cache starts again.
const maxSteeringPeers = 1024

// peerSteering is a loopback peer's cached PeerShared answer.
type peerSteering struct {
	unshared bool          // PeerShared said no, without error
	checked  time.Duration // when, since the transport's epoch
}

// unsharedPeer reports whether peer's address is known not to be shared,
// asking Config.PeerShared when its cached answer is older than
// steeringRefresh.
func (t *Transport) unsharedPeer(peer netip.AddrPort) bool {
	if t.peerShared == nil {
		return false
	}
	t.steerMu.Lock()
	defer t.steerMu.Unlock()
	now := time.Since(t.epoch)
	ps, ok := t.steering[peer]
	if ok && now-ps.checked < steeringRefresh {
		return ps.unshared
	}
	shared, err := t.peerShared(peer)
	ps = peerSteering{unshared: err == nil && !shared, checked: now}
	if t.steering == nil || !ok && len(t.steering) >= maxSteeringPeers {
		t.steering = make(map[netip.AddrPort]peerSteering)
	}
	t.steering[peer] = ps
	return ps.unshared
}

// sameSteering reports whether two packets reach the same process at
// their destination, and so may share a GSO datagram: neither is QP1,
// whose MADs a shared address steers by their contents, and, unless
// anyQP (the destination address is known not to be shared), their
// destination QPNs carry the same slot in their top SlotBits bits. A
// device that shares its address numbers its QPs with its slot.
func sameSteering(a, b *transport.Datagram, anyQP bool) bool {
	if len(a.Buf) < 8 || len(b.Buf) < 8 {
		return false
	}
	const shift = 8 - SlotBits
	qp1 := func(p []byte) bool { return p[5] == 0 && p[6] == 0 && p[7] == 1 }
	if qp1(a.Buf) || qp1(b.Buf) {
		return false
	}
	return anyQP || a.Buf[5]>>shift == b.Buf[5]>>shift
}
