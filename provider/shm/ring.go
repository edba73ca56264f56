package shm

// A ring carries one QP's requests to its peer: a single-producer,
// single-consumer queue of fixed-size slots in a sealed memfd that both
// processes map. The requester produces, the peer's responder consumes.
//
//	requester                             shared memory                     responder
//	PostSend ─ SEND ──► slot[prod]: payload, header, seq=prod+1 ···· load slot[cons].seq
//	                                                ─► validate the header ─► receive WQE
//	         ─ WRITE ──► (memcpy into the peer's mapped MR, no slot)
//	retire ◄── load cons, nak ◄──────────────────── cons++ (the ACK) / nak (the NAK)
//
// A slot is published by its sequence word (the slot's index in the
// stream, plus one), stored after the rest of the slot: the consumer polls
// the slot itself, so a small SEND reaches it in one cache line, not a
// producer index and then the slot.
//
// The consumer index is the cumulative acknowledgement: a requester
// retires a message once cons has passed its last slot. A responder that
// fails a message writes nak (the completion status the requester reports)
// and nakSeq (the slot of the failed message) and stops consuming.
//
// Everything a side reads from the ring was written by the other process
// and is untrusted: the consumer's index is checked against what the
// producer knows (seen ≤ cons ≤ prod), a slot counts only if its
// sequence word is the one the consumer expects next, slot headers are
// copied once and checked before use, and a bad value ends the connection
// (the reader's QP moves to ERR), never a panic or an access outside the
// ring. A sequence word that never comes only stalls the peer's own
// connection.

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
)

// Ring geometry. Both sides use these constants; nothing about the
// geometry is read from shared memory.
const (
	ringSlots     = 64
	slotSize      = 8192
	slotHdrLen    = 32
	slotSeqOff    = 16 // uint64 in the slot header: the slot's sequence number + 1, stored last
	slotPayload   = slotSize - slotHdrLen
	ringHdrLen    = 256
	ringBytes     = ringHdrLen + ringSlots*slotSize
	offCons       = 64  // uint64, consumer writes: the cumulative ACK
	offNak        = 72  // uint32, consumer writes: a verbs.WCStatus, 0 none
	offNakSeq     = 80  // uint64, consumer writes: slot of the failed message
	offReqErr     = 128 // uint64, producer writes: 1+slot after which the requester failed
	offRNRRetry   = 136 // uint32, producer writes: the requester's rnr_retry
	offConsClosed = 192 // uint32, consumer writes 1 when it stops consuming
)

// Slot operations.
const (
	opSend     = 1 // a SEND fragment; consumes a receive WQE at its first slot
	opWriteImm = 2 // the immediate of an RDMA WRITE WITH IMM (data already placed)
)

// Slot flags.
const (
	flagFirst = 1 << 0
	flagLast  = 1 << 1
	flagSolic = 1 << 2 // solicited event
	flagImm   = 1 << 3 // imm is valid
	flagInv   = 1 << 4 // imm is an rkey to invalidate (SEND_WITH_INV)
	flagsAll  = flagFirst | flagLast | flagSolic | flagImm | flagInv
)

// slotHdr is a slot's header as the consumer copied it out of shared
// memory. Layout: op u8, flags u8, pad u16, len u32, imm u32, msgLen u32,
// seq u64 (slotSeqOff).
type slotHdr struct {
	op     uint8
	flags  uint8
	length uint32 // payload bytes in this slot
	imm    uint32
	msgLen uint32 // total message length (WRITE WITH IMM: the bytes written)
}

// ring is one side's view of a shared ring. The zero value is unusable;
// newRing wraps mapped memory of ringBytes bytes.
type ring struct {
	mem []byte
	// Producer side state (private to the requester).
	prod uint64
	// Consumer side state (private to the responder), and what the
	// producer last saw of cons.
	cons     uint64
	seenCons uint64
}

func newRing(mem []byte) *ring {
	if len(mem) < ringBytes {
		panic("shm: ring memory too small")
	}
	return &ring{mem: mem[:ringBytes:ringBytes]}
}

func (r *ring) word64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }
func (r *ring) word32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

func (r *ring) slot(seq uint64) []byte {
	i := int(seq%ringSlots) * slotSize
	return r.mem[ringHdrLen+i : ringHdrLen+i+slotSize : ringHdrLen+i+slotSize]
}

// --- producer (requester) ---

// free returns how many slots the producer may fill. It reads the
// consumer's index only when the index it last saw leaves no room: the
// consumer writes that index for every slot it takes, and a producer that
// read it for every slot it filled pulled its cache line across to its own
// CPU and back once per message, on the critical path of both sides. ok
// is false if the consumer's index is impossible (the peer broke the
// ring).
func (r *ring) free() (n int, ok bool) {
	if used := r.prod - r.seenCons; used < ringSlots {
		return ringSlots - int(used), true
	}
	return r.acked()
}

// acked reads the consumer's index into seenCons, the cumulative
// acknowledgement, and returns the room it leaves, as free does.
func (r *ring) acked() (n int, ok bool) {
	c := atomic.LoadUint64(r.word64(offCons))
	if c < r.seenCons || c > r.prod || r.prod-c > ringSlots {
		return 0, false
	}
	r.seenCons = c
	return ringSlots - int(r.prod-c), true
}

// payload returns the payload area of the next slot, to fill before
// publish. The caller checked free.
func (r *ring) payload() []byte { return r.slot(r.prod)[slotHdrLen:] }

// publish writes the next slot's header (its payload is in place) and
// makes the slot visible to the consumer: its sequence word last.
func (r *ring) publish(h *slotHdr) {
	s := r.slot(r.prod)
	s[0], s[1] = h.op, h.flags
	binary.LittleEndian.PutUint32(s[4:], h.length)
	binary.LittleEndian.PutUint32(s[8:], h.imm)
	binary.LittleEndian.PutUint32(s[12:], h.msgLen)
	r.prod++
	storeRelease64(slotSeq(s), r.prod)
	// The consumer read the header line of the slot prefetchAhead on a
	// ring ago and holds it; a store to it would wait for the line
	// (and every later locked instruction, the QP's unlock first, for
	// that store). Asked for now, it is here by the time it is written.
	prefetchw(unsafe.Pointer(&r.mem[ringHdrLen+int((r.prod+prefetchAhead)%ringSlots)*slotSize]))
}

// prefetchAhead is how many slots ahead of the next one publish asks for.
const prefetchAhead = 3

// slotSeq is the sequence word of slot s.
func slotSeq(s []byte) *uint64 { return (*uint64)(unsafe.Pointer(&s[slotSeqOff])) }

// put writes one slot with payload and publishes it.
func (r *ring) put(h *slotHdr, payload []byte) {
	h.length = uint32(copy(r.payload(), payload))
	r.publish(h)
}

// nak returns the status and slot the consumer failed a message with, if
// it did. The status is validated: an unknown one reads as WCRemOpErr.
func (r *ring) nak() (st verbs.WCStatus, seq uint64, ok bool) {
	n := atomic.LoadUint32(r.word32(offNak))
	if n == 0 {
		return 0, 0, false
	}
	seq = atomic.LoadUint64(r.word64(offNakSeq))
	switch st = verbs.WCStatus(n); st {
	case verbs.WCRemInvReqErr, verbs.WCRemAccessErr, verbs.WCRemOpErr, verbs.WCRNRRetryExcErr, verbs.WCRetryExcErr:
	default:
		st = verbs.WCRemOpErr
	}
	return st, seq, true
}

// failRequester tells the consumer that the requester failed after the
// slots produced so far (a local error or a refused rkey): the responder
// QP moves to ERR once it has consumed them, as after sending a NAK.
func (r *ring) failRequester() {
	atomic.StoreUint64(r.word64(offReqErr), r.prod+1)
}

// --- consumer (responder) ---

// errRing means the peer wrote something impossible into the ring.
type ringError string

func (e ringError) Error() string { return "shm: peer corrupted the ring: " + string(e) }

// peek returns the header of the next slot, and ok=false if none is
// published. A non-nil error means the ring is corrupt.
func (r *ring) peek() (h slotHdr, payload []byte, ok bool, err error) {
	s := r.slot(r.cons)
	if atomic.LoadUint64(slotSeq(s)) != r.cons+1 {
		return h, nil, false, nil
	}
	// Copy the header once: the peer may change it while we look.
	var hb [slotHdrLen]byte
	copy(hb[:], s[:slotHdrLen])
	h.op, h.flags = hb[0], hb[1]
	h.length = binary.LittleEndian.Uint32(hb[4:])
	h.imm = binary.LittleEndian.Uint32(hb[8:])
	h.msgLen = binary.LittleEndian.Uint32(hb[12:])
	if h.flags&^flagsAll != 0 {
		return h, nil, false, ringError("unknown slot flags")
	}
	switch h.op {
	case opSend:
		if h.length > slotPayload {
			return h, nil, false, ringError("slot length beyond the slot")
		}
	case opWriteImm:
		if h.length != 0 || h.flags&(flagFirst|flagLast) != flagFirst|flagLast {
			return h, nil, false, ringError("bad WRITE WITH IMM slot")
		}
	default:
		return h, nil, false, ringError("unknown slot op")
	}
	return h, s[slotHdrLen : slotHdrLen+int(h.length)], true, nil
}

// pop releases the slot peek returned: the cumulative ACK.
func (r *ring) pop() {
	r.cons++
	storeRelease64(r.word64(offCons), r.cons)
}

// setNak fails the message at the current slot with st.
func (r *ring) setNak(st verbs.WCStatus) {
	atomic.StoreUint64(r.word64(offNakSeq), r.cons)
	atomic.StoreUint32(r.word32(offNak), uint32(st))
}

// requesterFailed reports whether the producer declared itself failed at
// or before the current slot.
func (r *ring) requesterFailed() bool {
	v := atomic.LoadUint64(r.word64(offReqErr))
	return v != 0 && v-1 <= r.cons
}

// rnrRetry is the requester's rnr_retry (0..7; anything else reads as 0).
func (r *ring) rnrRetry() uint8 {
	v := atomic.LoadUint32(r.word32(offRNRRetry))
	if v > 7 {
		return 0
	}
	return uint8(v)
}

func (r *ring) setRNRRetry(v uint8) { atomic.StoreUint32(r.word32(offRNRRetry), uint32(v)) }
