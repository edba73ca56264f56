// Package netsim is an in-memory network of transport.Transport endpoints
// for testing the RoCEv2 engine in virtual time.
//
// A Network connects Endpoints by IP address. Each packet handed to
// Endpoint.Send is copied, given its RoCEv2 ICRC, and put through the knobs
// of the network's Config: it may be dropped, duplicated, held back past
// later packets, corrupted, delayed and serialized at a bandwidth, and is
// then queued at the destination endpoint, where Endpoint.Recv picks it up
// and checks its ICRC. Every random decision comes from one generator seeded
// with Config.Seed, drawn in send order, so a run is reproducible from its
// seed. Stats counts what happened to every packet, and SetFilter lets a
// test drop chosen packets ("the third ACK") deterministically.
//
// The data path of one packet:
//
//	Send ─► TooBig? NoRoute? ─► copy, ICRC ─► sender's link (Bandwidth)
//	     ─► filter ─► Loss ─► Duplicate ─► Corrupt ─► Delay + Jitter
//	     (in order per sender and destination) + ReorderDelay if Reorder
//	     ─► in flight (ordered by delivery time, then send order)
//	     ─► timer ─► QueueLimit ─► receive queue ─► Recv: copy out, ICRC check
//
// Delivery is driven by the time package (one time.AfterFunc timer per
// network), so a Network runs in real time anywhere and in virtual time
// inside a testing/synctest bubble, where a test of a protocol with a 5 µs
// link and a 100 ms retransmission timer runs in microseconds of wall time:
//
//	synctest.Test(t, func(t *testing.T) {
//		n := netsim.New(netsim.Config{Delay: 5 * time.Microsecond, Loss: 0.1, Seed: seed})
//		defer n.Close()
//		a, _ := n.Endpoint(netip.MustParseAddr("10.0.0.1"))
//		b, _ := n.Endpoint(netip.MustParseAddr("10.0.0.2"))
//		// run the protocol over a and b; time.Now() advances only when
//		// every goroutine in the bubble is blocked, for example in Recv.
//	})
//
// A goroutine waiting in Recv is durably blocked in the synctest sense, so
// the fake clock advances to the next delivery while protocol goroutines
// wait. Create the Network inside the bubble that uses it (its clock and
// timer belong to the bubble) and Close it, together with every goroutine
// that receives from it, before the bubble's function returns.
package netsim

import (
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/transport"
)

// Defaults that New and SetConfig apply to zero Config fields.
const (
	// DefaultQueueLimit is the receive queue length used when
	// Config.QueueLimit is zero.
	DefaultQueueLimit = 4096
	// DefaultMTU is the link MTU used when Config.MTU is zero.
	DefaultMTU = 1500
)

// batchSize is what Endpoint.BatchSize reports.
const batchSize = 64

// IP and UDP header lengths, which the link MTU includes and a packet does
// not.
const (
	ipv4UDPHeaderLen = 20 + 8
	ipv6UDPHeaderLen = 40 + 8
)

// maxFree bounds the network's free list of packet copies.
const maxFree = 1 << 14

// ErrAddrInUse is returned (wrapped) by Network.Endpoint when another open
// endpoint already has the address.
var ErrAddrInUse = errors.New("netsim: address already in use")

// Config sets the behavior of a Network. Its zero value is a lossless
// network with no latency beyond asynchronous delivery, unlimited bandwidth,
// a 1500-byte MTU and 4096-packet receive queues.
//
// The probabilities are independent per packet; a duplicated packet gets its
// own Reorder, Corrupt and Jitter decisions. Each is drawn whether or not its
// knob is set, so the decisions for a packet depend only on the seed and the
// packet's place in the network-wide send order, not on the other knobs.
type Config struct {
	// Loss is the probability that a packet is dropped (Stats.Dropped).
	Loss float64
	// Duplicate is the probability that a packet is delivered twice
	// (Stats.Duplicated). The copy follows the original.
	Duplicate float64
	// Reorder is the probability that a packet is held back by
	// ReorderDelay beyond its in-order delivery time, so that packets sent
	// after it can overtake it (Stats.Reordered). It has no visible
	// effect while ReorderDelay is zero.
	Reorder float64
	// Corrupt is the probability that one byte of a packet is changed on
	// the wire (Stats.Corrupted). The receiver's ICRC check then reports
	// transport.ICRCBad: the changed byte is never BTH byte 4, which the
	// ICRC does not cover.
	Corrupt float64

	// Delay is the one-way base latency. Zero delivers each packet as soon
	// as possible, still asynchronously: from the network's timer, never
	// from within Send.
	Delay time.Duration
	// Jitter adds a uniform extra delay in [0, Jitter) to each packet.
	// Jitter does not reorder: a packet is never delivered before one that
	// the same endpoint sent earlier to the same destination, unless the
	// Reorder knob fires for the earlier one.
	Jitter time.Duration
	// ReorderDelay is how long a packet picked by Reorder is held back.
	ReorderDelay time.Duration

	// Bandwidth is the serialization rate of each endpoint's link, in bytes
	// (of RoCEv2 packet, IP and UDP headers not counted) per second: a
	// packet leaves its sender's link only after the packets the sender
	// sent before it. Zero means unlimited.
	Bandwidth int64
	// QueueLimit is the most packets an endpoint's receive queue holds;
	// a packet that arrives at a full queue is dropped (Stats.QueueDrops).
	// Zero means DefaultQueueLimit.
	QueueLimit int
	// MTU is the link MTU that LinkMTU reports. A packet longer than
	// MTU-28 (IPv4) or MTU-48 (IPv6) bytes is dropped by Send
	// (Stats.TooBig). Zero means DefaultMTU.
	MTU int

	// Seed seeds the PCG generator (math/rand/v2) behind every random
	// decision. Only New reads it: SetConfig keeps the generator running.
	Seed uint64
}

// withDefaults returns cfg with its zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.QueueLimit <= 0 {
		cfg.QueueLimit = DefaultQueueLimit
	}
	if cfg.MTU <= 0 {
		cfg.MTU = DefaultMTU
	}
	cfg.Delay = max(cfg.Delay, 0)
	cfg.Jitter = max(cfg.Jitter, 0)
	cfg.ReorderDelay = max(cfg.ReorderDelay, 0)
	return cfg
}

// Stats counts what a Network did with the packets it was given. Every
// packet that Send accepted is counted in Sent and, once it is no longer in
// flight, in exactly one of Delivered, Dropped, QueueDrops, TooBig, NoRoute
// Filtered and SwitchDrops; a duplicate adds one to Duplicated and is then counted like
// any other packet, so Sent+Duplicated is the sum of those seven once the
// network is idle. Reordered and Corrupted count packets that are also
// counted in one of those seven.
type Stats struct {
	Sent       uint64 // packets accepted by Send
	Delivered  uint64 // packets placed in a receive queue
	Dropped    uint64 // packets dropped by the Loss knob
	Duplicated uint64 // extra copies made by the Duplicate knob
	Reordered  uint64 // packets held back by the Reorder knob
	Corrupted  uint64 // packets changed by the Corrupt knob
	QueueDrops uint64 // packets that found their receive queue full
	TooBig     uint64 // packets longer than the MTU allows
	NoRoute    uint64 // packets to an address:port without an open endpoint
	Filtered   uint64 // packets the filter dropped
	// SwitchDrops counts packets a switch port dropped (tail drop or
	// RED); SwitchStats says which.
	SwitchDrops uint64
}

// Verdict is a filter's decision about one packet.
type Verdict uint8

const (
	// Pass lets the packet continue through the network's knobs.
	Pass Verdict = iota
	// Drop drops the packet (Stats.Filtered).
	Drop
)

// String returns "pass" or "drop".
func (v Verdict) String() string {
	switch v {
	case Pass:
		return "pass"
	case Drop:
		return "drop"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Network is an in-memory network of Endpoints. Create one with New; the
// zero value is not usable. Its methods, and those of its endpoints, are
// safe for concurrent use.
type Network struct {
	epoch time.Time // time zero of packet.at

	mu        sync.Mutex // guards everything below and every Endpoint's state
	cfg       Config
	rng       *rand.Rand
	endpoints map[netip.Addr]*Endpoint
	filter    func(p *transport.Datagram, from, to netip.Addr) Verdict
	stats     Stats
	flight    flightQueue // packets not yet delivered
	seq       uint64      // send order of the next packet
	timer     *time.Timer // runs deliver; created by the first send
	armed     bool        // timer will run deliver at timerAt
	timerAt   int64
	free      []*packet
	ports     map[netip.Addr]*port // switch ports in front of endpoints (switch.go)
	closed    bool
}

// New returns a network with the given configuration and no endpoints.
// Create it inside the synctest bubble, if any, that uses it.
func New(cfg Config) *Network {
	return &Network{
		epoch:     time.Now(),
		cfg:       cfg.withDefaults(),
		rng:       rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9E3779B97F4A7C15)),
		endpoints: make(map[netip.Addr]*Endpoint),
	}
}

// SetConfig replaces the network's knobs, for example to make a network
// that carried a connection setup losslessly lossy. Packets already in
// flight keep their delivery times. cfg.Seed is ignored: the random stream
// continues, so a run stays reproducible from the seed given to New.
func (n *Network) SetConfig(cfg Config) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cfg = cfg.withDefaults()
}

// Endpoint opens an endpoint that receives at addr:4791 (transport.Port).
// An IPv4-mapped IPv6 address is taken as the IPv4 address. It returns an
// error wrapping ErrAddrInUse if an open endpoint already has addr, and one
// wrapping transport.ErrClosed if the network is closed.
func (n *Network) Endpoint(addr netip.Addr) (*Endpoint, error) {
	addr = addr.Unmap()
	if !addr.IsValid() {
		return nil, errors.New("netsim: endpoint needs a valid IP address")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("netsim: endpoint %v: %w", addr, transport.ErrClosed)
	}
	if _, ok := n.endpoints[addr]; ok {
		return nil, fmt.Errorf("%w: %v", ErrAddrInUse, addr)
	}
	e := &Endpoint{net: n, addr: addr, lastInOrder: make(map[*Endpoint]int64)}
	e.ready.L = &n.mu
	n.endpoints[addr] = e
	return e, nil
}

// Stats returns the network's counters so far.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// SetFilter installs f, which sees every packet that gets past the MTU and
// route checks, in send order per sender, before the random knobs, and
// decides whether it is dropped. f(p, from, to) gets the packet as it goes on
// the wire: p.Buf is the network's copy with the ICRC filled in, p.Peer the
// destination, p.Local the source address and p.Flow the sender's flow. f
// must not retain p or p.Buf; changes it makes to the bytes of p.Buf are
// delivered, like corruption on the wire. f is called without the network's
// lock held, possibly from several sending goroutines at once, and may call
// the network's methods. A nil f removes the filter.
func (n *Network) SetFilter(f func(p *transport.Datagram, from, to netip.Addr) Verdict) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.filter = f
}

// Close closes the network and all its endpoints: pending and later Recv
// and Send calls return transport.ErrClosed, and packets in flight are
// discarded. It is safe to call more than once.
func (n *Network) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.closed = true
	if n.timer != nil {
		n.timer.Stop()
	}
	for len(n.flight) > 0 {
		n.flight.pop()
	}
	for _, e := range n.endpoints {
		e.closeLocked()
	}
	clear(n.endpoints)
	n.free = nil
}

// nowLocked is the current time in nanoseconds since n.epoch.
func (n *Network) nowLocked() int64 { return int64(time.Since(n.epoch)) }

// draws holds the random numbers drawn for one packet sent: a fixed number,
// whatever the knobs, so that one packet's decisions never shift another's.
type draws struct {
	loss, dup float64
	copies    [2]copyDraws // the packet and its duplicate, if any
}

type copyDraws struct {
	reorder, corrupt, jitter float64
	spot                     uint64 // which byte to corrupt, and how
}

func (n *Network) drawLocked() draws {
	r := n.rng
	d := draws{loss: r.Float64(), dup: r.Float64()}
	for i := range d.copies {
		c := &d.copies[i]
		c.reorder, c.corrupt, c.jitter, c.spot = r.Float64(), r.Float64(), r.Float64(), r.Uint64()
	}
	return d
}

// sendLocked puts one packet from e into the network. It returns an error
// only for a packet that is not a RoCEv2 packet at all. It may release and
// reacquire n.mu to call the filter.
//
// Precondition: n.mu held, e open.
func (n *Network) sendLocked(e *Endpoint, p *transport.Datagram) error {
	size := p.Len()
	if size < icrcLen || len(p.Payload) > 0 && len(p.Buf)-p.Split < icrcLen {
		return fmt.Errorf("netsim: a %d-byte packet cannot hold its %d-byte ICRC", size, icrcLen)
	}
	n.stats.Sent++
	d := n.drawLocked()

	limit := n.cfg.MTU - ipv4UDPHeaderLen
	if e.addr.Is6() {
		limit = n.cfg.MTU - ipv6UDPHeaderLen
	}
	if size > limit {
		n.stats.TooBig++
		return nil
	}
	dst := n.endpoints[p.Peer.Addr().Unmap()]
	if dst == nil || p.Peer.Port() != transport.Port || dst.addr.Is4() != e.addr.Is4() {
		n.stats.NoRoute++
		return nil
	}

	now := n.nowLocked()
	sent := e.serializeLocked(size, now, n.cfg.Bandwidth)
	pkt := n.getLocked(size)
	p.CopyTo(pkt.buf)
	pkt.from, pkt.sport, pkt.to, pkt.tclass = e.addr, flowPort(p.Flow), dst, p.TClass
	putICRC(pkt.buf, pkt.from, dst.addr, pkt.sport)

	if f := n.filter; f != nil {
		wire := &transport.Datagram{Buf: pkt.buf, Peer: p.Peer, Local: e.addr, Flow: p.Flow, TClass: p.TClass}
		n.mu.Unlock()
		v := f(wire, e.addr, dst.addr)
		n.mu.Lock()
		if v == Drop {
			n.stats.Filtered++
		}
		if v == Drop || n.closed {
			n.putLocked(pkt)
			return nil
		}
	}

	if d.loss < n.cfg.Loss {
		n.stats.Dropped++
		n.putLocked(pkt)
		return nil
	}
	var dup *packet
	if d.dup < n.cfg.Duplicate {
		n.stats.Duplicated++
		dup = n.getLocked(size)
		copy(dup.buf, pkt.buf)
		dup.from, dup.sport, dup.to, dup.tclass = pkt.from, pkt.sport, pkt.to, pkt.tclass
	}
	n.scheduleLocked(e, pkt, now, sent, &d.copies[0])
	if dup != nil {
		n.scheduleLocked(e, dup, now, sent, &d.copies[1])
	}
	return nil
}

// scheduleLocked applies the per-copy knobs to p, which left e's link at
// sent, and puts it in flight.
//
// Precondition: n.mu held.
func (n *Network) scheduleLocked(e *Endpoint, p *packet, now, sent int64, c *copyDraws) {
	cfg := &n.cfg
	if c.corrupt < cfg.Corrupt {
		n.stats.Corrupted++
		corrupt(p.buf, c.spot)
	}
	if n.portOfLocked(p.to) != nil {
		// To the switch port first, at once and in order; the port
		// adds its queue and the Delay (switch.go).
		p.at, p.seq, p.toPort = sent, n.seq, true
		n.seq++
		n.flight.push(p)
		n.armLocked(now)
		return
	}
	at := sent + int64(cfg.Delay)
	if cfg.Jitter > 0 {
		at += min(int64(c.jitter*float64(cfg.Jitter)), int64(cfg.Jitter)-1)
	}
	at = max(at, e.lastInOrder[p.to])
	if c.reorder < cfg.Reorder {
		n.stats.Reordered++
		at += int64(cfg.ReorderDelay)
	} else {
		e.lastInOrder[p.to] = at
	}
	p.at, p.seq = at, n.seq
	n.seq++
	n.flight.push(p)
	n.armLocked(now)
}

// corrupt changes one byte of pkt, chosen by spot, to another value. It
// never picks BTH byte 4, which the ICRC masks, so that the change is always
// detected: a CRC-32 catches every error burst of 32 bits or fewer.
func corrupt(pkt []byte, spot uint64) {
	mask := byte(1 + (spot&0xFF)%255)
	spot >>= 8
	if len(pkt) <= 4 {
		pkt[spot%uint64(len(pkt))] ^= mask
		return
	}
	i := int(spot % uint64(len(pkt)-1))
	if i >= 4 {
		i++
	}
	pkt[i] ^= mask
}

// armLocked makes sure the delivery timer fires when the earliest packet in
// flight is due.
//
// Precondition: n.mu held.
func (n *Network) armLocked(now int64) {
	if len(n.flight) == 0 {
		return
	}
	next := n.flight[0].at
	if n.armed && n.timerAt <= next {
		return // already armed early enough; deliver re-arms
	}
	n.armed, n.timerAt = true, next
	d := time.Duration(max(next-now, 0))
	if n.timer == nil {
		n.timer = time.AfterFunc(d, n.deliver)
	} else {
		n.timer.Reset(d)
	}
}

// deliver moves every packet that is due from flight to its destination's
// receive queue, in delivery-time then send order, and re-arms the timer.
func (n *Network) deliver() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.armed = false
	now := n.nowLocked()
	for len(n.flight) > 0 && n.flight[0].at <= now {
		p := n.flight.pop()
		if p.toPort {
			p.toPort = false
			pt := n.portOfLocked(p.to)
			if pt == nil {
				n.enqueueLocked(p)
				continue
			}
			at, ok := n.switchLocked(pt, p, p.at)
			if !ok {
				n.stats.SwitchDrops++
				n.putLocked(p)
				continue
			}
			p.at, p.seq = at, n.seq
			n.seq++
			n.flight.push(p)
			continue
		}
		n.enqueueLocked(p)
	}
	n.armLocked(now)
}

// enqueueLocked hands p to its destination.
//
// Precondition: n.mu held.
func (n *Network) enqueueLocked(p *packet) {
	dst := p.to
	switch {
	case dst.closed:
		n.stats.NoRoute++
		n.putLocked(p)
	case dst.rx.len() >= n.cfg.QueueLimit:
		n.stats.QueueDrops++
		n.putLocked(p)
	default:
		n.stats.Delivered++
		dst.rx.push(p)
		dst.ready.Signal()
	}
}

// getLocked returns a packet copy with a buffer of size bytes.
//
// Precondition: n.mu held.
func (n *Network) getLocked(size int) *packet {
	var p *packet
	if k := len(n.free); k > 0 {
		p = n.free[k-1]
		n.free[k-1] = nil
		n.free = n.free[:k-1]
	} else {
		p = new(packet)
	}
	if cap(p.buf) < size {
		p.buf = make([]byte, size, max(size, 2048))
	}
	p.buf = p.buf[:size]
	return p
}

// putLocked recycles p.
//
// Precondition: n.mu held.
func (n *Network) putLocked(p *packet) {
	p.to, p.toPort = nil, false
	if len(n.free) < maxFree && !n.closed {
		n.free = append(n.free, p)
	}
}

// Endpoint is one host on a Network, receiving at its address and port
// 4791. It implements transport.Transport; its methods are safe for
// concurrent use. Get one from Network.Endpoint.
type Endpoint struct {
	net  *Network
	addr netip.Addr

	// Guarded by net.mu:
	rx          rxQueue
	ready       sync.Cond // signaled when rx gains a packet or the endpoint closes
	closed      bool
	linkFree    int64               // when the link finishes sending what it has
	linkRem     uint64              // remainder of the division that gave linkFree: its fraction of a nanosecond, times Bandwidth
	lastInOrder map[*Endpoint]int64 // per destination: latest in-order delivery time
}

var _ transport.Transport = (*Endpoint)(nil)

// serializeLocked returns when a packet of size bytes handed to e's link at
// now has been sent, at bw bytes per second (0: at once).
//
// Precondition: e.net.mu held.
func (e *Endpoint) serializeLocked(size int, now, bw int64) int64 {
	if bw <= 0 {
		return now
	}
	if e.linkFree <= now {
		e.linkFree, e.linkRem = now, 0
	}
	// size·1e9 < 2^47 and linkRem < bw < 2^63, so the sum fits.
	num := uint64(size)*uint64(time.Second) + e.linkRem
	q, r := bits.Div64(0, num, uint64(bw))
	e.linkFree += int64(q)
	e.linkRem = r
	return e.linkFree
}

// Gathers reports that Send takes packets with a separate payload
// (transport.Gatherer); it copies them into the network whole.
func (e *Endpoint) Gathers() bool { return true }

// Send copies each packet into the network, writes the ICRC into the copy
// (not into pkts[i].Buf, which Send leaves untouched) and applies the
// network's knobs. The UDP source port is 0xC000 | (pkts[i].Flow & 0x3FFF).
// A packet to an address without an open endpoint, to a port other than
// 4791, or too long for the MTU is counted as sent and dropped. Send returns
// an error only for a closed endpoint (transport.ErrClosed) or a packet
// shorter than its 4-byte ICRC.
func (e *Endpoint) Send(pkts []transport.Datagram) (int, error) {
	n := e.net
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range pkts {
		if e.closed {
			return i, transport.ErrClosed
		}
		if err := n.sendLocked(e, &pkts[i]); err != nil {
			return i, err
		}
	}
	return len(pkts), nil
}

// Recv waits until at least one packet is queued for e and copies up to
// len(pkts) of them into pkts[i].Buf, resliced to the packet's length within
// its capacity. It sets Peer to the sender's address and UDP source port,
// Local to e's address, TClass to the traffic class byte the packet
// arrived with (what the sender gave, with CE if a Switch marked it) and ICRC to transport.ICRCOK or, for a packet that
// was changed on the way or truncated to fit Buf, transport.ICRCBad. Flow is
// left alone. Recv with an empty pkts returns at once. Once e or its network
// is closed, Recv returns transport.ErrClosed.
func (e *Endpoint) Recv(pkts []transport.Datagram) (int, error) {
	n := e.net
	n.mu.Lock()
	defer n.mu.Unlock()
	for !e.closed && e.rx.len() == 0 && len(pkts) > 0 {
		e.ready.Wait()
	}
	if e.closed {
		return 0, transport.ErrClosed
	}
	k := 0
	for ; k < len(pkts) && e.rx.len() > 0; k++ {
		p := e.rx.pop()
		out := &pkts[k]
		buf := out.Buf[:cap(out.Buf)]
		m := copy(buf, p.buf)
		out.Buf = buf[:m]
		out.Peer = netip.AddrPortFrom(p.from, p.sport)
		out.Local = e.addr
		out.TClass = p.tclass
		out.ICRC = transport.ICRCBad
		if m == len(p.buf) && checkICRC(p.buf, p.from, e.addr, p.sport) {
			out.ICRC = transport.ICRCOK
		}
		n.putLocked(p)
	}
	if e.rx.len() > 0 {
		e.ready.Signal() // more for another waiting receiver
	}
	return k, nil
}

// LocalAddr returns e's address and port 4791.
func (e *Endpoint) LocalAddr() netip.AddrPort { return netip.AddrPortFrom(e.addr, transport.Port) }

// LinkMTU returns the network's current Config.MTU.
func (e *Endpoint) LinkMTU() int {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	return e.net.cfg.MTU
}

// BatchSize returns 64. Send and Recv accept batches of any length.
func (e *Endpoint) BatchSize() int { return batchSize }

// Close closes e: pending and later Recv and Send calls return
// transport.ErrClosed, queued packets are discarded, packets still in flight
// to e are counted as NoRoute when they arrive, and e's address becomes free
// for a new Endpoint. It always returns nil and is safe to call more than
// once.
func (e *Endpoint) Close() error {
	n := e.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if e.closed {
		return nil
	}
	if n.endpoints[e.addr] == e {
		delete(n.endpoints, e.addr)
	}
	for _, other := range n.endpoints {
		delete(other.lastInOrder, e)
	}
	e.closeLocked()
	return nil
}

// closeLocked marks e closed, drops its queue and wakes its receivers.
//
// Precondition: e.net.mu held.
func (e *Endpoint) closeLocked() {
	e.closed = true
	for e.rx.len() > 0 {
		e.net.putLocked(e.rx.pop())
	}
	e.ready.Broadcast()
}
