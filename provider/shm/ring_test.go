package shm

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
)

func TestRingRoundTrip(t *testing.T) {
	mem := make([]byte, ringBytes)
	p, c := newRing(mem), newRing(mem)
	for i := range ringSlots * 3 {
		if n, ok := p.free(); !ok || n == 0 {
			t.Fatalf("step %d: free %d %v", i, n, ok)
		}
		p.put(&slotHdr{op: opSend, flags: flagFirst | flagLast | flagImm, imm: uint32(i), msgLen: 3}, []byte{1, 2, byte(i)})
		h, payload, ok, err := c.peek()
		if err != nil || !ok || h.imm != uint32(i) || len(payload) != 3 || payload[2] != byte(i) {
			t.Fatalf("step %d: %+v %v %v %v", i, h, payload, ok, err)
		}
		c.pop()
	}
	if _, _, ok, _ := c.peek(); ok {
		t.Error("peek on an empty ring found a slot")
	}
	// A slot counts only with the sequence word the consumer expects:
	// the previous lap's, or a later one's, is not published.
	for _, seq := range []uint64{c.cons + 1 - ringSlots, c.cons + 1 + ringSlots, 1 << 60} {
		*slotSeq(c.slot(c.cons)) = seq
		if _, _, ok, err := c.peek(); ok || err != nil {
			t.Errorf("slot with sequence %d (expecting %d): ok %v, err %v", seq, c.cons+1, ok, err)
		}
	}
	c.setNak(verbs.WCRemAccessErr)
	if st, seq, ok := p.nak(); !ok || st != verbs.WCRemAccessErr || seq != ringSlots*3 {
		t.Errorf("nak %v %d %v", st, seq, ok)
	}
}

// FuzzRingConsumer feeds arbitrary ring headers and slots to the
// consumer: it must never panic, and whatever payload it returns must lie
// inside the slot it read.
func FuzzRingConsumer(f *testing.F) {
	good := make([]byte, ringHdrLen+slotSize)
	good[ringHdrLen], good[ringHdrLen+1] = opSend, flagFirst|flagLast
	binary.LittleEndian.PutUint32(good[ringHdrLen+4:], 8)
	binary.LittleEndian.PutUint64(good[ringHdrLen+slotSeqOff:], 1)
	f.Add(good, uint64(0))
	f.Add(make([]byte, 64), uint64(5))
	f.Fuzz(func(t *testing.T, data []byte, cons uint64) {
		mem := make([]byte, ringBytes)
		copy(mem[:ringHdrLen], data)
		if len(data) > ringHdrLen {
			// The fuzzed slot goes where the consumer will look.
			i := ringHdrLen + int(cons%ringSlots)*slotSize
			copy(mem[i:i+slotSize], data[ringHdrLen:])
		}
		r := newRing(mem)
		r.cons = cons
		lo := uintptr(unsafe.Pointer(&mem[0]))
		for range 4 {
			h, payload, ok, err := r.peek()
			if err != nil || !ok {
				break
			}
			if len(payload) > slotPayload || int(h.length) != len(payload) {
				t.Fatalf("payload of %d bytes for a slot header saying %d", len(payload), h.length)
			}
			if len(payload) > 0 {
				p := uintptr(unsafe.Pointer(&payload[0]))
				if p < lo || p+uintptr(len(payload)) > lo+uintptr(len(mem)) {
					t.Fatal("payload outside the ring")
				}
			}
			r.pop()
		}
		r.requesterFailed()
		r.rnrRetry()
		if v := r.rnrRetry(); v > 7 {
			t.Fatalf("rnr_retry %d", v)
		}
	})
}

// FuzzRingProducer feeds arbitrary consumer-written words to the
// producer: impossible indices must read as a broken ring when it reads
// them (acked; free reads them only when out of room), and a NAK
// status must be one a responder can send.
func FuzzRingProducer(f *testing.F) {
	f.Add(uint64(0), uint64(0), uint32(0), uint64(0), uint64(3))
	f.Add(uint64(5), uint64(2), uint32(10), uint64(1), uint64(3))
	f.Fuzz(func(t *testing.T, cons, seen uint64, nak uint32, nakSeq, prod uint64) {
		mem := make([]byte, ringBytes)
		r := newRing(mem)
		r.prod, r.seenCons = prod, min(seen, prod)
		binary.LittleEndian.PutUint64(mem[offCons:], cons)
		binary.LittleEndian.PutUint32(mem[offNak:], nak)
		binary.LittleEndian.PutUint64(mem[offNakSeq:], nakSeq)
		n, ok := r.acked()
		if ok && (n < 0 || n > ringSlots || cons > prod) {
			t.Fatalf("acked %d accepted cons %d prod %d", n, cons, prod)
		}
		// free answers from the index acked accepted, or reads it again.
		if n, ok := r.free(); ok && (n < 0 || n > ringSlots || r.seenCons > prod) {
			t.Fatalf("free %d with seen %d prod %d", n, r.seenCons, prod)
		}
		if st, _, ok := r.nak(); ok {
			switch st {
			case verbs.WCRemInvReqErr, verbs.WCRemAccessErr, verbs.WCRemOpErr, verbs.WCRNRRetryExcErr, verbs.WCRetryExcErr:
			default:
				t.Fatalf("NAK status %v", st)
			}
		}
	})
}
