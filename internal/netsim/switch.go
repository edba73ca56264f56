package netsim

// The switch model: an egress port in front of one endpoint, where
// traffic from many senders meets a link of a given rate and a buffer of
// a given size — the bottleneck of an incast. A packet to a switched
// endpoint leaves its sender's link (Config.Bandwidth), reaches the
// port at once, waits behind the bytes queued there, is serialized at
// the port's rate and then travels Config.Delay to the endpoint:
//
//	sender's link ─► port: queue q bytes ─► tail drop if q+size > Buffer
//	               ─► RED: with probability p(q), mark ECT packets CE,
//	                  drop the others ─► serialize at Rate ─► Delay ─► endpoint
//
// p(q) is 0 up to Kmin bytes, rises linearly to Pmax at Kmax and is 1
// beyond (the instantaneous queue, as data-center switches mark for
// DCQCN and DCTCP). Packets reach the port in the order they arrive (the
// network's delivery queue orders them), so the port is an exact FIFO.

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/transport"
)

// Switch configures an egress port (Network.SetSwitch).
type Switch struct {
	// Rate is the port's link rate in bytes (of RoCEv2 packet) per
	// second. Required.
	Rate int64
	// Buffer is the most bytes the port queues; a packet that would
	// exceed it is dropped (SwitchStats.TailDrops). Required.
	Buffer int
	// Kmin, Kmax and Pmax are the RED/ECN marking curve, in bytes of
	// queue and a probability. Kmax zero turns marking off (tail drop
	// only).
	Kmin, Kmax int
	Pmax       float64
}

// SwitchStats counts what a port did.
type SwitchStats struct {
	Packets   uint64 // packets that reached the port
	Forwarded uint64 // packets it sent on
	Bytes     uint64 // bytes it sent on
	Marked    uint64 // ECT packets it marked CE
	REDDrops  uint64 // non-ECT packets RED dropped instead of marking
	TailDrops uint64 // packets that found the buffer full
	MaxQueue  int    // the deepest queue a packet found, in bytes
	// QueueSum is the sum over arriving packets of the queue each found,
	// in bytes: QueueSum/Packets is the mean queue an arrival sees.
	QueueSum uint64
}

// MeanQueue is the mean queue, in bytes, that a packet found on arrival.
func (s SwitchStats) MeanQueue() float64 {
	if s.Packets == 0 {
		return 0
	}
	return float64(s.QueueSum) / float64(s.Packets)
}

// port is a switch's egress port toward one endpoint.
type port struct {
	cfg   Switch
	free  int64  // when the link finishes what is queued (ns since epoch)
	rem   uint64 // remainder of free's division, as in Endpoint.linkRem
	rng   *rand.Rand
	stats SwitchStats
}

// SetSwitch puts an egress port with configuration s in front of the
// endpoint at addr (which need not exist yet): every packet sent to addr
// from then on goes through it. It fails if s has no rate or buffer, or
// its marking curve is not Kmin ≤ Kmax ≤ Buffer, 0 ≤ Pmax ≤ 1.
func (n *Network) SetSwitch(addr netip.Addr, s Switch) error {
	switch {
	case s.Rate <= 0 || s.Buffer <= 0:
		return errors.New("netsim: a switch port needs a positive Rate and Buffer")
	case s.Kmax != 0 && (s.Kmin < 0 || s.Kmin > s.Kmax || s.Pmax < 0 || s.Pmax > 1):
		return fmt.Errorf("netsim: switch marking curve Kmin %d, Kmax %d, Pmax %v: want 0 ≤ Kmin ≤ Kmax and 0 ≤ Pmax ≤ 1", s.Kmin, s.Kmax, s.Pmax)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ports == nil {
		n.ports = make(map[netip.Addr]*port)
	}
	seed := n.cfg.Seed + uint64(len(n.ports)) + 1
	n.ports[addr.Unmap()] = &port{cfg: s, rng: rand.New(rand.NewPCG(seed, seed^0x5851F42D4C957F2D))}
	return nil
}

// SwitchStats returns the counters of the port in front of addr (zero if
// there is none).
func (n *Network) SwitchStats(addr netip.Addr) SwitchStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.ports[addr.Unmap()]; p != nil {
		return p.stats
	}
	return SwitchStats{}
}

// ResetSwitchStats zeroes the counters of the port in front of addr, to
// measure from now on (a steady state after a warm-up).
func (n *Network) ResetSwitchStats(addr netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.ports[addr.Unmap()]; p != nil {
		p.stats = SwitchStats{}
	}
}

// portOfLocked returns the port in front of dst, or nil.
//
// Precondition: n.mu held.
func (n *Network) portOfLocked(dst *Endpoint) *port {
	if n.ports == nil {
		return nil
	}
	return n.ports[dst.addr]
}

// switchLocked passes p, which reaches its port at now, through it: it
// returns false if the port dropped p, else p's delivery time.
//
// Precondition: n.mu held.
func (n *Network) switchLocked(pt *port, p *packet, now int64) (int64, bool) {
	s := &pt.stats
	s.Packets++
	if pt.free < now {
		pt.free, pt.rem = now, 0
	}
	// The bytes still queued: what the link has yet to send.
	q := int(uint64(pt.free-now) * uint64(pt.cfg.Rate) / uint64(time.Second))
	s.QueueSum += uint64(q)
	s.MaxQueue = max(s.MaxQueue, q)
	size := len(p.buf)
	if q+size > pt.cfg.Buffer {
		s.TailDrops++
		return 0, false
	}
	if c := &pt.cfg; c.Kmax > 0 && q > c.Kmin {
		prob := 1.0
		if q < c.Kmax {
			prob = c.Pmax * float64(q-c.Kmin) / float64(c.Kmax-c.Kmin)
		}
		if pt.rng.Float64() < prob {
			if p.tclass&transport.ECNMask == transport.ECNNotECT {
				s.REDDrops++
				return 0, false
			}
			p.tclass |= transport.ECNCE
			s.Marked++
		}
	}
	num := uint64(size)*uint64(time.Second) + pt.rem
	d, r := bits.Div64(0, num, uint64(pt.cfg.Rate))
	pt.free += int64(d)
	pt.rem = r
	s.Forwarded++
	s.Bytes += uint64(size)
	return pt.free + int64(n.cfg.Delay), true
}
