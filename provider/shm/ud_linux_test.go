package shm

import (
	"context"
	"encoding/binary"
	"testing"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

// udSides is two UD QPs on two devices, ready (Q_Key 0x1234), and an AH
// from a to b; the caller closes them.
func udSides(t testing.TB) (a, b *side, ah verbs.AH) {
	t.Helper()
	a, b = newSide(t, sideOpts{typ: verbs.QPTypeUD}), newSide(t, sideOpts{typ: verbs.QPTypeUD})
	p := cm.DefaultParams()
	p.QKey = 0x1234
	for _, s := range []*side{a, b} {
		if err := cm.Connect(s.qp, s.endpoint(), cm.Endpoint{}, &p); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1, GRH: verbs.GlobalRoute{DGID: b.dev.GID()}})
	if err != nil {
		t.Fatal(err)
	}
	return a, b, ah
}

// udPair is udSides, closed when the test ends.
func udPair(t testing.TB) (a, b *side, ah verbs.AH) {
	t.Helper()
	a, b, ah = udSides(t)
	t.Cleanup(func() {
		ah.Destroy()
		b.close(t)
		a.close(t)
	})
	return a, b, ah
}

func udSend(a *side, ah verbs.AH, b *side, wrID uint64, n int) *verbs.SendWR {
	return &verbs.SendWR{WRID: wrID, Opcode: verbs.WRSend, AH: ah, RemoteQPN: b.qp.QPNum(), RemoteQKey: 0x1234, SGList: []verbs.SGE{a.mr.SGE(0, n)}}
}

// connOf returns s's connection to peer's device.
func connOf(t testing.TB, s, peer *side) *conn {
	t.Helper()
	s.dev.mu.Lock()
	defer s.dev.mu.Unlock()
	c := s.dev.conns[peer.dev.id]
	if c == nil {
		t.Fatal("no connection to the peer")
	}
	return c
}

// inboxOf waits for s's device to hold the UD ring of peer's device.
func inboxOf(t testing.TB, s, peer *side) *udInbox {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if p := s.dev.ud.inboxes.Load(); p != nil {
			for _, in := range *p {
				if in.c.peerID == peer.dev.id {
					return in
				}
			}
		}
	}
	t.Fatal("the peer's UD ring never arrived")
	return nil
}

// TestUDRing: datagrams go through the ring between the devices, in
// order, each with its GRH, and none through the socket.
func TestUDRing(t *testing.T) {
	a, b, ah := udPair(t)
	const n, window = 300, 32 // more than the ring holds: slots are reused
	got := 0
	for i := range n {
		postRecv(t, b.qp, uint64(i), b.mr.SGE(4096*(i%window), 4096))
		binary.LittleEndian.PutUint64(a.mr.Bytes(), uint64(i))
		postSend(t, a.qp, *udSend(a, ah, b, uint64(i), 8))
		poll(t, a.cq, 1)
		if i-got == window-1 {
			checkUDRecv(t, a, b, poll(t, b.cq, 1)[0], uint64(got), window)
			got++
		}
	}
	for ; got < n; got++ {
		checkUDRecv(t, a, b, poll(t, b.cq, 1)[0], uint64(got), window)
	}
	if d := a.dev.ud.drops.Load() + b.dev.ud.drops.Load(); d != 0 {
		t.Errorf("%d datagrams dropped", d)
	}
	if c := connOf(t, a, b); c.ud.out == nil {
		t.Error("a has no UD ring to b")
	}
}

func checkUDRecv(t *testing.T, a, b *side, wc verbs.WC, i uint64, window int) {
	t.Helper()
	if wc.Status != verbs.WCSuccess || wc.WRID != i || wc.ByteLen != 48 || wc.SrcQP != a.qp.QPNum() || wc.WCFlags != verbs.WCWithGRH {
		t.Fatalf("datagram %d: %+v", i, wc)
	}
	buf := b.mr.Bytes()[4096*(int(i)%window):]
	ga, gb := a.dev.GID(), b.dev.GID()
	if buf[0] != 0x60 || binary.BigEndian.Uint16(buf[4:]) != 8 || string(buf[8:24]) != string(ga[:]) || string(buf[24:40]) != string(gb[:]) {
		t.Fatalf("datagram %d: GRH % x", i, buf[:40])
	}
	if v := binary.LittleEndian.Uint64(buf[40:]); v != i {
		t.Fatalf("datagram %d carries %d", i, v)
	}
}

// TestUDRingFull: a receiver that does not consume its ring makes the
// sender drop datagrams (counted) rather than wait; what fit arrives.
func TestUDRingFull(t *testing.T) {
	a, b, ah := udPair(t)
	postRecv(t, b.qp, 0, b.mr.SGE(0, 4096))
	postSend(t, a.qp, *udSend(a, ah, b, 0, 8))
	poll(t, a.cq, 1)
	poll(t, b.cq, 1)
	in := inboxOf(t, b, a)
	in.mu.Lock() // b's progress passes the ring by
	const extra = 5
	for i := range ringSlots + extra {
		postSend(t, a.qp, *udSend(a, ah, b, uint64(i), 8))
		poll(t, a.cq, 1)
	}
	if d := a.dev.ud.drops.Load(); d != extra {
		t.Errorf("sender dropped %d datagrams, want %d", d, extra)
	}
	for i := range ringSlots {
		postRecv(t, b.qp, uint64(i), b.mr.SGE(64*i, 64))
	}
	in.mu.Unlock()
	if wcs := poll(t, b.cq, ringSlots); wcs[ringSlots-1].Status != verbs.WCSuccess {
		t.Errorf("%+v", wcs[ringSlots-1])
	}
	// No receive WQE: dropped at the receiver, counted.
	postSend(t, a.qp, *udSend(a, ah, b, 99, 8))
	poll(t, a.cq, 1)
	for deadline := time.Now().Add(5 * time.Second); b.dev.ud.drops.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("a datagram without a receive WQE was not counted as dropped")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestUDDestroyedQP: a datagram for a QP destroyed since the last one is
// dropped; a new QP gets what is sent to it.
func TestUDDestroyedQP(t *testing.T) {
	a, b, ah := udPair(t)
	postRecv(t, b.qp, 0, b.mr.SGE(0, 4096))
	postSend(t, a.qp, *udSend(a, ah, b, 0, 8))
	poll(t, a.cq, 1)
	poll(t, b.cq, 1)
	old := b.qp
	dead := old.QPNum()
	b.qp.Destroy()
	wr := udSend(a, ah, b, 1, 8)
	wr.RemoteQPN = dead
	postSend(t, a.qp, *wr)
	poll(t, a.cq, 1)
	for deadline := time.Now().Add(5 * time.Second); b.dev.ud.drops.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("a datagram for a destroyed QP was not dropped")
		}
		time.Sleep(time.Millisecond)
	}
	var err error
	b.qp, err = b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.cq, RecvCQ: b.cq, QPType: verbs.QPTypeUD, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	p := cm.DefaultParams()
	p.QKey = 0x1234
	if err := cm.Connect(b.qp, b.endpoint(), cm.Endpoint{}, &p); err != nil {
		t.Fatal(err)
	}
	postRecv(t, b.qp, 2, b.mr.SGE(0, 4096))
	postSend(t, a.qp, *udSend(a, ah, b, 2, 8))
	poll(t, a.cq, 1)
	if wc := poll(t, b.cq, 1)[0]; wc.WRID != 2 || wc.QPNum != b.qp.QPNum() || wc.Status != verbs.WCSuccess {
		t.Errorf("%+v", wc)
	}
}

// TestUDHostileRing: a peer that writes an impossible slot into its UD
// ring, or an impossible consumer index into ours, loses the connection;
// nothing panics, and the next datagram goes through a new connection.
func TestUDHostileRing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(out *ring)
	}{
		{"bad slot", func(out *ring) {
			out.put(&slotHdr{op: opWriteImm, flags: flagFirst | flagLast}, nil) // not a datagram
		}},
		{"short slot", func(out *ring) {
			out.put(&slotHdr{op: opSend, flags: flagFirst | flagLast, msgLen: 0}, make([]byte, udHdrLen-1))
		}},
		{"bad consumer index", func(out *ring) {
			*(*uint64)(unsafe.Pointer(&out.mem[offCons])) = out.prod + 5
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, ah := udPair(t)
			postRecv(t, b.qp, 0, b.mr.SGE(0, 4096))
			postSend(t, a.qp, *udSend(a, ah, b, 0, 8))
			poll(t, a.cq, 1)
			poll(t, b.cq, 1)
			c := connOf(t, a, b)
			c.ud.outMu.Lock()
			tc.break_(c.ud.out)
			c.ud.outMu.Unlock()
			// The next send (bad index) or b's progress (bad slot) ends
			// the connection.
			postSend(t, a.qp, *udSend(a, ah, b, 1, 8))
			poll(t, a.cq, 1)
			select {
			case <-c.done:
			case <-time.After(5 * time.Second):
				t.Fatal("the connection survived a broken UD ring")
			}
			postRecv(t, b.qp, 2, b.mr.SGE(0, 4096))
			for i := 0; ; i++ { // a new connection, a new ring
				postSend(t, a.qp, *udSend(a, ah, b, 2, 8))
				poll(t, a.cq, 1)
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				err := b.cq.Wait(ctx)
				cancel()
				if err == nil {
					break
				}
				if i == 20 {
					t.Fatal("no datagram arrived after the broken connection")
				}
			}
			if wc := poll(t, b.cq, 1)[0]; wc.WRID != 2 || wc.Status != verbs.WCSuccess {
				t.Errorf("%+v", wc)
			}
		})
	}
}

// TestUDZeroAllocs holds the UD data path to no allocation per datagram:
// post, the ring, delivery, polling.
func TestUDZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b, ah := udPair(t)
	wc := make([]verbs.WC, 4)
	wr := udSend(a, ah, b, 0, 8)
	wr.SendFlags = verbs.SendSignaled
	rwr := verbs.RecvWR{SGList: []verbs.SGE{b.mr.SGE(0, 64)}}
	once := func() {
		if err := b.qp.PostRecv(&rwr); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		for n := 0; n < 1; {
			k, _ := a.cq.Poll(wc)
			n += k
		}
		for n := 0; n < 1; {
			k, _ := b.cq.Poll(wc)
			n += k
		}
	}
	once() // the first datagram sets the ring up
	if n := testing.AllocsPerRun(200, once); n != 0 {
		t.Errorf("%v allocations per datagram", n)
	}
}

// FuzzUDSlot feeds arbitrary slots to the UD consumer: it must never
// panic, and a datagram it accepts must lie inside its slot and fit the
// MTU.
func FuzzUDSlot(f *testing.F) {
	good := make([]byte, slotSize)
	good[0], good[1] = opSend, flagFirst|flagLast|flagImm
	binary.LittleEndian.PutUint32(good[4:], udHdrLen+8)
	binary.LittleEndian.PutUint32(good[12:], 8)
	binary.LittleEndian.PutUint64(good[slotSeqOff:], 1)
	binary.LittleEndian.PutUint32(good[slotHdrLen+udDestQPOff:], 0x123456)
	f.Add(good)
	f.Add(good[:slotHdrLen])
	f.Fuzz(func(t *testing.T, slot []byte) {
		mem := make([]byte, ringBytes)
		copy(mem[ringHdrLen:ringHdrLen+slotSize], slot)
		r := newRing(mem)
		dg, ok, err := peekUD(r)
		if err != nil || !ok {
			return
		}
		if len(dg.data) > maxInline || dg.dest > 0xFFFFFF || dg.src > 0xFFFFFF || dg.flags&^(flagSolic|flagImm) != 0 {
			t.Fatalf("accepted %+v", dg)
		}
		lo := uintptr(unsafe.Pointer(&mem[ringHdrLen+slotHdrLen+udHdrLen]))
		if len(dg.data) > 0 {
			if p := uintptr(unsafe.Pointer(&dg.data[0])); p != lo || p+uintptr(len(dg.data)) > lo+slotPayload-udHdrLen {
				t.Fatal("datagram outside its slot")
			}
		}
	})
}

// TestMADAfterBlockingSend: the deadline of a blocking control message
// (handing over an RC ring) bounds that write only. Left on the socket,
// it would make every datagram sent over it after the deadline passed
// (a MAD, so an rdma_cm exchange) vanish without an error.
func TestMADAfterBlockingSend(t *testing.T) {
	defer func(d time.Duration) { sendTimeout = d }(sendTimeout)
	sendTimeout = 20 * time.Millisecond
	a, b := newSide(t, sideOpts{}), newSide(t, sideOpts{})
	defer b.close(t)
	defer a.close(t)
	got := make(chan []byte, 4)
	b.dev.HandleMADs(1, func(src verbs.MADSource, mad []byte) { got <- append([]byte(nil), mad...) })
	c, err := a.dev.connTo(b.dev.id, "test")
	if err != nil {
		t.Fatal(err)
	}
	// A blocking send (what handing over an RC ring is), then more time
	// than its deadline.
	if err := c.send(&ctrl{typ: mRevokeAck}, nil, -1, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * sendTimeout)
	if err := a.dev.SendMAD(1, b.dev.GID(), gsiQPN, verbs.GSIQKey, []byte("mad")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if string(m) != "mad" {
			t.Errorf("MAD %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a MAD sent after a blocking send's deadline passed never arrived")
	}
}

// TestUDLastDatagramsBeforeClose: datagrams a device sends just before it
// closes still arrive, as they would on a wire (udaddy's server sends its
// replies and exits at once).
func TestUDLastDatagramsBeforeClose(t *testing.T) {
	for round := range 5 {
		a, b, ah := udSides(t)
		// One datagram first, so the devices' connection is up (b
		// checks a's identity by calling back, which a closed device
		// cannot answer), as udaddy's exchange has it before the end.
		postRecv(t, b.qp, 99, b.mr.SGE(0, 4096))
		postSend(t, a.qp, *udSend(a, ah, b, 99, 8))
		poll(t, a.cq, 1)
		poll(t, b.cq, 1)
		const n = 16
		for i := range n {
			postRecv(t, b.qp, uint64(i), b.mr.SGE(4096*i, 4096))
		}
		for i := range n {
			postSend(t, a.qp, *udSend(a, ah, b, uint64(i), 8))
		}
		poll(t, a.cq, n)
		a.dev.Close() // at once, as a process that exits
		if got := len(poll(t, b.cq, n)); got != n {
			t.Fatalf("round %d: %d of %d datagrams arrived", round, got, n)
		}
		b.close(t)
	}
}
