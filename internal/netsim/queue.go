package netsim

import "net/netip"

// packet is the network's copy of one datagram, from Send until Recv copies
// it out. Packets are recycled through Network.free.
type packet struct {
	buf    []byte
	from   netip.Addr // source address
	sport  uint16     // UDP source port, derived from the flow
	tclass uint8      // the IP traffic class byte: DSCP and ECN field
	to     *Endpoint
	at     int64  // delivery time, nanoseconds since Network.epoch
	seq    uint64 // send order; breaks ties between equal delivery times
	// toPort: at is when the packet reaches its destination's switch
	// port, not the destination (switch.go).
	toPort bool
}

// before orders packets in flight: by delivery time, then by send order.
func (p *packet) before(q *packet) bool {
	if p.at != q.at {
		return p.at < q.at
	}
	return p.seq < q.seq
}

// flightQueue is a binary min-heap of packets in flight, earliest first.
type flightQueue []*packet

func (h *flightQueue) push(p *packet) {
	*h = append(*h, p)
	q := *h
	i := len(q) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if !q[i].before(q[parent]) {
			break
		}
		q[i], q[parent] = q[parent], q[i]
		i = parent
	}
}

// pop removes and returns the earliest packet. Precondition: len(*h) > 0.
func (h *flightQueue) pop() *packet {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = nil
	q = q[:last]
	i := 0
	for {
		l, r, least := 2*i+1, 2*i+2, i
		if l < len(q) && q[l].before(q[least]) {
			least = l
		}
		if r < len(q) && q[r].before(q[least]) {
			least = r
		}
		if least == i {
			break
		}
		q[i], q[least] = q[least], q[i]
		i = least
	}
	*h = q
	return top
}

// rxQueue is an endpoint's FIFO of delivered packets waiting for Recv.
type rxQueue struct {
	buf  []*packet
	head int
}

func (q *rxQueue) len() int { return len(q.buf) - q.head }

func (q *rxQueue) push(p *packet) {
	if len(q.buf) == cap(q.buf) && q.head > 0 {
		// Reuse the consumed prefix instead of growing.
		n := copy(q.buf, q.buf[q.head:])
		clear(q.buf[n:])
		q.buf = q.buf[:n]
		q.head = 0
	}
	q.buf = append(q.buf, p)
}

// pop removes and returns the oldest packet. Precondition: q.len() > 0.
func (q *rxQueue) pop() *packet {
	p := q.buf[q.head]
	q.buf[q.head] = nil
	q.head++
	if q.head == len(q.buf) {
		q.buf = q.buf[:0]
		q.head = 0
	}
	return p
}
