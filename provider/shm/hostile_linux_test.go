package shm

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// TestHostilePeer scribbles on the shared rings as a hostile peer could:
// the victim's QP moves to ERR, and nothing else happens to it.
func TestHostilePeer(t *testing.T) {
	cases := []struct {
		name     string
		scribble func(a, b *side)
		victim   func(a, b *side) *side
	}{
		{"slot length beyond the slot", func(a, b *side) {
			m := a.qp.(*QP).outMem
			m[ringHdrLen], m[ringHdrLen+1] = opSend, flagFirst|flagLast
			binary.LittleEndian.PutUint32(m[ringHdrLen+4:], 1<<31)
			binary.LittleEndian.PutUint64(m[ringHdrLen+slotSeqOff:], 1)
		}, func(a, b *side) *side { return b }},
		{"unknown opcode", func(a, b *side) {
			m := a.qp.(*QP).outMem
			m[ringHdrLen], m[ringHdrLen+1] = 99, flagFirst|flagLast
			binary.LittleEndian.PutUint64(m[ringHdrLen+slotSeqOff:], 1)
		}, func(a, b *side) *side { return b }},
		{"unknown slot flags", func(a, b *side) {
			m := a.qp.(*QP).outMem
			m[ringHdrLen], m[ringHdrLen+1] = opSend, 0xE0
			binary.LittleEndian.PutUint64(m[ringHdrLen+slotSeqOff:], 1)
		}, func(a, b *side) *side { return b }},
		{"consumer index beyond the producer", func(a, b *side) {
			// b consumes a's ring: b writes cons there.
			binary.LittleEndian.PutUint64(a.qp.(*QP).outMem[offCons:], 1<<50)
			postSend(t, a.qp, verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
		}, func(a, b *side) *side { return a }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, sideOpts{}, sideOpts{})
			postRecv(t, b.qp, 7, b.mr.SGE(0, 64))
			c.scribble(a, b)
			v := c.victim(a, b)
			deadline := time.Now().Add(5 * time.Second)
			for v.qp.State() != verbs.QPStateErr && time.Now().Before(deadline) {
				v.dev.Progress()
				time.Sleep(time.Millisecond)
			}
			if s := v.qp.State(); s != verbs.QPStateErr {
				t.Fatalf("victim QP in %v, want ERR", s)
			}
		})
	}
}
