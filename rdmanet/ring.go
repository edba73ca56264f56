package rdmanet

import (
	"errors"
	"fmt"
)

// rx is the receive half of an rsocket: the ring the peer WRITEs into,
// the data messages it announced and not yet read, and the credits this
// side granted. It is plain state: no goroutines, no clock, no verbs; the
// Conn calls it under its lock.
//
//	peer WRITE_WITH_IMM(RS_OP_DATA, n) ──► onData(n): checked against credits
//	                                        and granted ring space, queued
//	Read(p) ──► read(p, ring): copies from readOff, frees ring space
//	        ──► needCredits? grant(): next half of the ring and/or credits
//	                                  (RS_OP_SGL) back to the peer
//
// The peer can only write inside the ring (its rkey covers exactly the
// ring), so a hostile peer can at worst scribble over the ring itself;
// it cannot make this side read or write outside it, and a peer that
// announces more messages or bytes than it was granted is a protocol
// error.
type rx struct {
	size    uint32 // ring bytes (rbuf_size)
	half    uint32
	credits uint16 // rq_size: data messages the peer may have unread

	lens        []uint32 // queued data messages' unread lengths
	head, count int
	queued      uint32 // bytes queued and unread

	readOff    uint32 // rbuf_offset: where the next unread byte is
	bytesAvail uint32 // rbuf_bytes_avail: read bytes not yet granted again
	freeOff    uint32 // rbuf_free_offset: the next half to grant
	granted    uint32 // bytes granted to the peer and not yet read

	rseqNo, rseqComp uint16
}

// errProtocol: the peer broke rsocket's rules; the connection is closed.
var errProtocol = errors.New("rdmanet: peer violated the rsocket protocol")

func newRx(size uint32, credits uint16) rx {
	return rx{size: size, half: size / 2, credits: credits, lens: make([]uint32, int(credits)+1),
		freeOff: size / 2, bytesAvail: size / 2, granted: size / 2, rseqComp: credits / 2}
}

// onData accounts for an RS_OP_DATA message of n bytes.
func (r *rx) onData(n uint32) error {
	if r.count >= int(r.credits) {
		return fmt.Errorf("%w: a data message beyond the %d credits granted", errProtocol, r.credits)
	}
	if uint64(r.queued)+uint64(n) > uint64(r.granted) {
		return fmt.Errorf("%w: %d bytes announced with %d queued, but only %d bytes of the ring were granted", errProtocol, n, r.queued, r.granted)
	}
	if n == 0 {
		r.rseqNo++ // consumed at once, as rrecv would
		return nil
	}
	r.lens[(r.head+r.count)%len(r.lens)] = n
	r.count++
	r.queued += n
	return nil
}

// read copies queued bytes from ring into p, as rrecv does.
func (r *rx) read(p []byte, ring []byte) int {
	n := 0
	for n < len(p) && r.count > 0 {
		size := r.lens[r.head]
		if left := uint32(len(p) - n); left < size {
			r.lens[r.head] -= left
			size = left
		} else {
			r.rseqNo++
			r.head = (r.head + 1) % len(r.lens)
			r.count--
		}
		r.queued -= size
		r.granted -= size
		for size > 0 {
			c := min(size, r.size-r.readOff)
			copy(p[n:], ring[r.readOff:r.readOff+c])
			n += int(c)
			size -= c
			r.readOff += c
			if r.readOff == r.size {
				r.readOff = 0
			}
			r.bytesAvail += c
		}
	}
	return n
}

// needCredits is rs_give_credits without the control-slot test.
func (r *rx) needCredits() bool {
	return r.bytesAvail >= r.half || int16(r.rseqNo-r.rseqComp) >= 0
}

// grant is rs_send_credits' bookkeeping: it returns the credit message's
// argument and, when half the ring is free again, that half's offset.
func (r *rx) grant() (credit uint32, off uint32, area bool) {
	r.rseqComp = r.rseqNo + r.credits/2
	credit = uint32(r.rseqNo) + uint32(r.credits) // C adds in int: no 16-bit wrap on the wire
	if r.bytesAvail >= r.half {
		off, area = r.freeOff, true
		r.bytesAvail -= r.half
		r.granted += r.half
		r.freeOff += r.half
		if r.freeOff >= r.size {
			r.freeOff = 0
		}
	}
	return credit, off, area
}
