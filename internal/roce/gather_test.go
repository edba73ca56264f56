package roce

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// TestGatherSend: over a transport that gathers, a WRITE and a SEND of
// gatherMinMessage or more leave with their MTU-sized payloads in the MR,
// not copied, and arrive intact; sub-KiB payloads, and every payload of a
// shorter request, are still copied.
func TestGatherSend(t *testing.T) {
	ta, tb := udpPair(t)
	al, bl := &sendLog{Transport: ta}, &sendLog{Transport: tb}
	a, b := pair(t, al, bl, realOpts()) // MTU 1024
	if !a.dev.gather {
		t.Fatal("a UDP transport gathers, and the device does not use it")
	}
	for i := range a.buf[:64<<10] {
		a.buf[i] = byte(i*7 + i>>8)
	}
	a.write(1, 0, 64<<10)
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	b.settle()
	if !bytes.Equal(b.buf[:64<<10], a.buf[:64<<10]) {
		t.Fatal("the gathered WRITE did not land intact")
	}
	g, bad := al.counts()
	if g < 64 || bad != 0 {
		t.Fatalf("%d of the WRITE's 64 packets were gathered, %d packets against the rule", g, bad)
	}

	// An unaligned WRITE whose last packet is gathered with a pad:
	// gatherMinMessage+3 bytes from offset 3 are 31 packets of 1024 and
	// one of 1027 (pad 1).
	const unaligned = gatherMinMessage + 3
	clear(b.buf[:unaligned+8])
	b.settle()
	a.write(9, 3, unaligned)
	expectWC(t, a.waitWC(a.scq), 9, verbs.WCSuccess, verbs.WCRDMAWrite)
	b.settle()
	if !bytes.Equal(b.buf[3:3+unaligned], a.buf[3:3+unaligned]) || b.buf[2] != 0 || b.buf[3+unaligned] != 0 {
		t.Fatal("the unaligned gathered WRITE did not land exactly")
	}
	g1, bad := al.counts()
	g, g1 = g1, g1-g
	if g1 < 32 || bad != 0 {
		t.Fatalf("WRITE of 31*1024+1027 bytes: %d packets gathered (want 32), %d against the rule", g1, bad)
	}

	// A SEND of a request's gathering length: 32 packets of 1024 gathered,
	// the last (952 bytes) copied.
	const long = gatherMinMessage + 952
	b.postRecv(7, 0, long)
	a.post(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(100, long)}})
	expectWC(t, a.waitWC(a.scq), 2, verbs.WCSuccess, verbs.WCSend)
	wc := b.waitWC(b.rcq)
	expectWC(t, wc, 7, verbs.WCSuccess, verbs.WCRecv)
	b.settle()
	if wc.ByteLen != long || !bytes.Equal(b.buf[:long], a.buf[100:100+long]) {
		t.Fatalf("SEND of %d bytes: got %d bytes, equal %v", long, wc.ByteLen, bytes.Equal(b.buf[:long], a.buf[100:100+long]))
	}
	g2, bad := al.counts()
	g, g2 = g2, g2-g
	if g2 < 32 || bad != 0 {
		t.Fatalf("SEND of %d bytes: %d packets gathered (want 32), %d against the rule", long, g2, bad)
	}

	// Shorter requests copy every payload: their packets may then wait
	// for the doorbell batch of a QP with packets in flight.
	for i, n := range []uint32{3000, gatherMinMessage - 1} {
		b.postRecv(uint64(20+i), 0, int(n))
		a.post(&verbs.SendWR{WRID: uint64(10 + i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(100, int(n))}})
		expectWC(t, a.waitWC(a.scq), uint64(10+i), verbs.WCSuccess, verbs.WCSend)
		expectWC(t, b.waitWC(b.rcq), uint64(20+i), verbs.WCSuccess, verbs.WCRecv)
		b.settle()
		if !bytes.Equal(b.buf[:n], a.buf[100:100+n]) {
			t.Fatalf("SEND of %d bytes did not land intact", n)
		}
		if g3, _ := al.counts(); g3 != g {
			t.Fatalf("SEND of %d bytes (under gatherMinMessage): %d packets gathered, want 0", n, g3-g)
		}
	}
	if n := a.mr.(*MR).pins.Load(); n != 0 {
		t.Fatalf("%d pins left on the requester's MR after every completion", n)
	}
}

// TestGatherRead: the responder's READ responses gather their payload
// from its MR too.
func TestGatherRead(t *testing.T) {
	ta, tb := udpPair(t)
	bl := &sendLog{Transport: tb}
	a, b := pair(t, ta, bl, realOpts())
	for i := range b.buf[:10000] {
		b.buf[i] = byte(i*13 + 5)
	}
	a.post(&verbs.SendWR{WRID: 4, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 10000)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.waitWC(a.scq), 4, verbs.WCSuccess, verbs.WCRDMARead)
	a.settle()
	if !bytes.Equal(a.buf[:10000], b.buf[:10000]) {
		t.Fatal("the READ did not bring the data back intact")
	}
	// 10000 bytes at MTU 1024: nine responses of 1024 gathered, the last
	// (784 bytes) copied.
	g, bad := bl.counts()
	if g < 9 || bad != 0 {
		t.Fatalf("%d READ responses gathered (want 9, more if some were sent again), %d against the rule", g, bad)
	}
	// Sent responses let go of the MR (b unpins right after its sendmmsg,
	// which may be a moment after a saw the data).
	mr := b.mr.(*MR)
	for deadline := time.Now().Add(5 * time.Second); mr.pins.Load() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d pins left on the responder's MR", mr.pins.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGatherZeroAllocs: a gathered WRITE, its ACK and its completion
// allocate nothing in steady state.
func TestGatherZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector (sync.Pool drops items)")
	}
	ta, tb := udpPair(t)
	a, _ := pair(t, ta, tb, realOpts())
	wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, gatherMinMessage)},
		RemoteAddr: a.peer.mr.Addr(), RKey: a.peer.mr.RKey()}
	round := func() {
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if wc := a.busyPoll(a.scq, nil, "no completion"); wc.Status != verbs.WCSuccess {
			t.Fatalf("completion %v", wc.Status)
		}
	}
	round()
	if n := testing.AllocsPerRun(100, round); n != 0 {
		t.Errorf("gathered WRITE of 32 KiB + ACK + poll: %.1f allocations per operation, want 0", n)
	}
}

// TestGatherPinsAllocMR: DeregMR of a buffer that queued packets point
// into waits until the last of them lets go (after it returns no byte of
// the region is read again), and a deregistered MR is never pinned again.
func TestGatherPinsAllocMR(t *testing.T) {
	ta, _ := udpPair(t)
	d := newDevice(t, Config{Transport: ta})
	defer d.Close()
	pd, _ := d.AllocPD()
	defer pd.Dealloc()
	m, err := pd.AllocMR(1<<16, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	mr := m.(*MR)
	var s sgl
	s.load(pd.(*PD), []verbs.SGE{mr.SGE(0, 1<<16)}, false)
	p1, pin1 := s.pin(4096, 4096)
	p2, pin2 := s.pin(0, 1024)
	if pin1 != mr || pin2 != mr || len(p1) != 4096 || len(p2) != 1024 {
		t.Fatalf("pin: %v %v %d %d", pin1, pin2, len(p1), len(p2))
	}
	if _, no := s.pin(60000, 8192); no != nil {
		t.Fatal("pinned a range past the SGE")
	}
	done := make(chan error)
	go func() { done <- mr.Dereg() }()
	for !mr.isDead() {
		runtime.Gosched()
	}
	if _, again := s.pin(0, 1024); again != nil {
		t.Fatal("pinned a deregistered MR")
	}
	p1[0] = 1 // still mapped: this must not fault
	pin1.unpin()
	select {
	case err := <-done:
		t.Fatalf("DeregMR returned (%v) with a packet still pointing into the buffer", err)
	case <-time.After(20 * time.Millisecond):
	}
	pin2.unpin()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSplitWrites: to a peer the transport coalesces packets to (UDP GSO
// on loopback), a multi-packet WRITE goes as one WRITE ONLY per MTU, whose
// RETHs cover consecutive addresses, and lands intact; a WRITE with
// immediate keeps FIRST/MIDDLE/LAST (its receiver reports the length the
// FIRST carries), and so does every WRITE with NoSplitWrites.
func TestSplitWrites(t *testing.T) {
	ta, tb := udpPair(t)
	if !ta.Coalesces(tb.LocalAddr()) {
		t.Skip("no UDP GSO on loopback here")
	}
	al := &sendLog{Transport: ta}
	a, b := pair(t, al, tb, realOpts()) // MTU 1024
	fill(a.buf[:4000], 5)
	a.write(1, 0, 4000)
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	b.settle()
	if !bytes.Equal(b.buf[:4000], a.buf[:4000]) {
		t.Fatal("the split WRITE did not land intact")
	}
	if ops := al.opsSince(0); !equalOps(ops, wire.RCWriteOnly, wire.RCWriteOnly, wire.RCWriteOnly, wire.RCWriteOnly) {
		t.Fatalf("a 4000-byte WRITE at MTU 1024 went as %v, want four WRITE ONLY", ops)
	}

	mark := al.count()
	b.postRecv(9, 0, 0)
	a.post(&verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 7, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 3000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.waitWC(a.scq), 2, verbs.WCSuccess, verbs.WCRDMAWrite)
	if wc := b.waitWC(b.rcq); wc.ByteLen != 3000 {
		t.Fatalf("WRITE with immediate: the receiver reports %d bytes, want 3000", wc.ByteLen)
	}
	if ops := al.opsSince(mark); !equalOps(ops, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLastImm) {
		t.Fatalf("a 3000-byte WRITE with immediate went as %v", ops)
	}

	tc, td := udpPair(t)
	cl := &sendLog{Transport: tc}
	c, e := pairWith(t, Config{Transport: cl, NoSplitWrites: true}, Config{Transport: td}, realOpts())
	c.write(3, 0, 3000)
	expectWC(t, c.waitWC(c.scq), 3, verbs.WCSuccess, verbs.WCRDMAWrite)
	e.settle()
	if ops := cl.opsSince(0); !equalOps(ops, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast) {
		t.Fatalf("NoSplitWrites: a 3000-byte WRITE went as %v", ops)
	}
}

// opsSince returns the request opcodes of the Send calls after the first
// mark calls, in order.
func (s *sendLog) opsSince(mark int) []wire.Opcode {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []wire.Opcode
	for _, c := range s.calls[mark:] {
		for _, o := range c {
			if o.Info().Has(wire.FlagRequest) {
				out = append(out, o)
			}
		}
	}
	return out
}

func (s *sendLog) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

func equalOps(got []wire.Opcode, want ...wire.Opcode) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
