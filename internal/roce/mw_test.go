package roce

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// Memory windows, as suite cases (netsim and UDP): binding, access
// through a window's rkey and nothing beyond it, invalidation (local and
// by the peer's SEND_WITH_INV), the errors of each step, and their order
// in the send queue.
var mwSuite = []suiteCase{
	{"mw_type1", nil, testMWType1},
	{"mw_type1_bounds", nil, testMWType1Bounds},
	{"mw_type2_invalidate", nil, testMWType2Invalidate},
	{"mw_type2_other_qp", nil, testMWType2OtherQP},
	{"mw_bind_errors", nil, testMWBindErrors},
	{"mw_order", nil, testMWOrder},
	{"mw_in_use", nil, testMWInUse},
	{"mw_type2_qp_reset", nil, testMWType2QPReset},
}

// testMWType2QPReset: a type 2 window is for the connection that bound
// it; resetting the QP (or destroying it) invalidates it, and the region
// may go.
func testMWType2QPReset(t *testing.T, a, b *node) {
	buf := make([]byte, 4096)
	mr, err := b.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessMWBind)
	must(t, err)
	mw := allocMW(t, b, verbs.MWType2)
	q, peer := secondQP(t, b), secondQP(t, a)
	connect(t, q, peer, defaultOpts())
	connect(t, peer, q, defaultOpts())
	rkey := bind2(t, q, mw, mr, 0, 4096, verbs.AccessRemoteWrite)
	if st := write(t, peer, 1, 8, mr.Addr(), rkey); st != verbs.WCSuccess {
		t.Fatalf("WRITE through the window: %v", st)
	}
	if err := mr.Dereg(); !errors.Is(err, verbs.ErrInUse) {
		t.Fatalf("Dereg with the window bound: %v", err)
	}
	must(t, q.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateReset}, verbs.QPAttrState))
	// The window is free again: the region may go, and a bind with the
	// next key through another QP works.
	must(t, mr.Dereg())
	mr2, _ := windowMR(t, b, 4096)
	bind2(t, b, mw, mr2, 0, 64, verbs.AccessRemoteRead)
}

// windowMR registers n bytes of fresh memory of node n that windows may
// be bound to; it grants no remote access of its own.
func windowMR(t *testing.T, n *node, size int) (verbs.MR, []byte) {
	t.Helper()
	buf := make([]byte, size)
	mr, err := n.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessMWBind)
	must(t, err)
	t.Cleanup(func() { mr.Dereg() })
	return mr, buf
}

func allocMW(t *testing.T, n *node, typ verbs.MWType) verbs.MW {
	t.Helper()
	mw, err := n.pd.AllocMW(typ)
	must(t, err)
	return mw
}

// bind2 binds a type 2 window through n's QP with the next rkey and waits
// for the completion; it returns the rkey.
func bind2(t *testing.T, n *node, mw verbs.MW, mr verbs.MR, off, length int, access verbs.Access) uint32 {
	t.Helper()
	rkey := verbs.IncRKey(mw.RKey())
	n.post(&verbs.SendWR{WRID: 50, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled,
		Bind: &verbs.MWBind{MW: mw, RKey: rkey, MR: mr, Addr: mr.Addr() + uint64(off), Length: uint64(length), Access: access}})
	expectWC(t, n.waitWC(n.scq), 50, verbs.WCSuccess, verbs.WCBindMW)
	if mw.RKey() != rkey {
		t.Fatalf("window rkey %#x after the bind, want %#x", mw.RKey(), rkey)
	}
	return rkey
}

// write posts a signaled RDMA WRITE of length bytes of n's MR to raddr
// and waits for its completion status.
func write(t *testing.T, n *node, id uint64, length int, raddr uint64, rkey uint32) verbs.WCStatus {
	t.Helper()
	n.post(&verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{n.mr.SGE(0, length)}, RemoteAddr: raddr, RKey: rkey})
	wc := n.waitWC(n.scq)
	if wc.WRID != id {
		t.Fatalf("completion for wr_id %d, want %d", wc.WRID, id)
	}
	return wc.Status
}

func testMWType1(t *testing.T, a, b *node) {
	mr, mem := windowMR(t, b, 8192)
	mw := allocMW(t, b, verbs.MWType1)
	if mw.Type() != verbs.MWType1 {
		t.Fatalf("type %v", mw.Type())
	}
	before := mw.RKey()
	rkey, err := verbs.BindMW(b.qp, mw, 7, verbs.SendSignaled, verbs.MWBind{MR: mr, Addr: mr.Addr() + 1024, Length: 4096, Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead})
	must(t, err)
	if rkey != verbs.IncRKey(before) || rkey>>8 != before>>8 {
		t.Fatalf("bind gave rkey %#x; the window had %#x", rkey, before)
	}
	wc := b.waitWC(b.scq)
	expectWC(t, wc, 7, verbs.WCSuccess, verbs.WCBindMW)
	if wc.QPNum != b.qp.QPNum() || mw.RKey() != rkey {
		t.Fatalf("bind completion %+v, window rkey %#x want %#x", wc, mw.RKey(), rkey)
	}

	fill(a.buf[:4096], 1)
	if st := write(t, a, 1, 4096, mr.Addr()+1024, rkey); st != verbs.WCSuccess {
		t.Fatalf("WRITE through the window: %v", st)
	}
	Settle(mr)
	if !bytes.Equal(mem[1024:1024+4096], a.buf[:4096]) || !allZero(mem[:1024]) || !allZero(mem[1024+4096:]) {
		t.Fatal("the WRITE did not land exactly in the window")
	}
	a.post(&verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(8192, 100)}, RemoteAddr: mr.Addr() + 1024 + 3996, RKey: rkey})
	expectWC(t, a.waitWC(a.scq), 2, verbs.WCSuccess, verbs.WCRDMARead)
	a.settle()
	if !bytes.Equal(a.buf[8192:8192+100], mem[1024+3996:1024+4096]) {
		t.Fatal("READ through the window returned other bytes")
	}
	// The old rkey no longer opens the window, and the region's own
	// rkey opens nothing (it grants no remote access).
	if st := write(t, a, 3, 8, mr.Addr()+1024, before); st != verbs.WCRemAccessErr {
		t.Fatalf("WRITE with the rkey before the bind: %v, want %v", st, verbs.WCRemAccessErr)
	}
}

func allZero(b []byte) bool { return bytes.Count(b, []byte{0}) == len(b) }

func testMWType1Bounds(t *testing.T, a, b *node) {
	mr, mem := windowMR(t, b, 8192)
	mw := allocMW(t, b, verbs.MWType1)
	rkey, err := verbs.BindMW(b.qp, mw, 7, verbs.SendSignaled, verbs.MWBind{MR: mr, Addr: mr.Addr() + 1024, Length: 4096, Access: verbs.AccessRemoteWrite})
	must(t, err)
	expectWC(t, b.waitWC(b.scq), 7, verbs.WCSuccess, verbs.WCBindMW)
	// One byte past the window, inside the region: refused, nothing
	// written (rxe checks only the region's bounds here).
	fill(a.buf[:16], 2)
	if st := write(t, a, 1, 16, mr.Addr()+1024+4096-8, rkey); st != verbs.WCRemAccessErr {
		t.Fatalf("WRITE across the window's end: %v, want %v", st, verbs.WCRemAccessErr)
	}
	Settle(mr)
	if !allZero(mem) {
		t.Fatal("a refused WRITE changed the region")
	}
	if a.qp.State() != verbs.QPStateErr {
		t.Fatalf("requester in %v after a remote access error", a.qp.State())
	}
}

func testMWType2Invalidate(t *testing.T, a, b *node) {
	mr, mem := windowMR(t, b, 8192)
	mw := allocMW(t, b, verbs.MWType2)
	rkey := bind2(t, b, mw, mr, 0, 8192, verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	fill(a.buf[:64], 3)
	if st := write(t, a, 1, 64, mr.Addr(), rkey); st != verbs.WCSuccess {
		t.Fatalf("WRITE through a type 2 window: %v", st)
	}
	Settle(mr)
	if !bytes.Equal(mem[:64], a.buf[:64]) {
		t.Fatal("WRITE did not land")
	}
	// A bound type 2 window cannot be bound again (o10-37.2.30): the bind
	// fails and takes b's QP down, so it is checked in testMWBindErrors.

	// LOCAL_INV, then a bind with the next key.
	b.post(&verbs.SendWR{WRID: 51, Opcode: verbs.WRLocalInv, InvalidateRKey: rkey, SendFlags: verbs.SendSignaled})
	expectWC(t, b.waitWC(b.scq), 51, verbs.WCSuccess, verbs.WCLocalInv)
	rkey2 := bind2(t, b, mw, mr, 4096, 4096, verbs.AccessRemoteWrite)
	if rkey2 == rkey {
		t.Fatal("rebind kept the rkey")
	}
	if st := write(t, a, 2, 64, mr.Addr()+4096, rkey2); st != verbs.WCSuccess {
		t.Fatalf("WRITE after the rebind: %v", st)
	}

	// The peer's SEND_WITH_INV revokes it; the receive says which rkey.
	b.postRecv(9, 0, 64)
	a.post(&verbs.SendWR{WRID: 3, Opcode: verbs.WRSendWithInv, InvalidateRKey: rkey2, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	expectWC(t, a.waitWC(a.scq), 3, verbs.WCSuccess, verbs.WCSend)
	wc := b.waitWC(b.rcq)
	expectWC(t, wc, 9, verbs.WCSuccess, verbs.WCRecv)
	if wc.WCFlags&verbs.WCWithInv == 0 || wc.ImmData != rkey2 {
		t.Fatalf("receive %+v: want WCWithInv and the rkey %#x", wc, rkey2)
	}
	Settle(mr)
	snap := bytes.Clone(mem)
	if st := write(t, a, 4, 64, mr.Addr()+4096, rkey2); st != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through an invalidated window: %v, want %v", st, verbs.WCRemAccessErr)
	}
	Settle(mr)
	if !bytes.Equal(mem, snap) {
		t.Fatal("a WRITE through an invalidated window changed memory")
	}
}

// testMWType2OtherQP: a type 2 window is reachable only through the QP
// that bound it (type 2B), and only that QP's peer may invalidate it.
func testMWType2OtherQP(t *testing.T, a, b *node) {
	mr, mem := windowMR(t, b, 4096)
	mw := allocMW(t, b, verbs.MWType2)
	rkey := bind2(t, b, mw, mr, 0, 4096, verbs.AccessRemoteWrite)
	a2, b2 := secondQP(t, a), secondQP(t, b)
	o := defaultOpts()
	connect(t, a2, b2, o)
	connect(t, b2, a2, o)
	fill(a.buf[:32], 4)
	if st := write(t, a2, 1, 32, mr.Addr(), rkey); st != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through another QP of the PD: %v, want %v", st, verbs.WCRemAccessErr)
	}
	Settle(mr)
	if !allZero(mem) {
		t.Fatal("the other QP's WRITE landed")
	}
	// The bound QP's path still works, and another connection's
	// SEND_WITH_INV cannot revoke it.
	if st := write(t, a, 2, 32, mr.Addr(), rkey); st != verbs.WCSuccess {
		t.Fatalf("WRITE through the binding QP: %v", st)
	}
	a3, b3 := secondQP(t, a), secondQP(t, b)
	connect(t, a3, b3, o)
	connect(t, b3, a3, o)
	b3.postRecv(9, 0, 64)
	a3.post(&verbs.SendWR{WRID: 3, Opcode: verbs.WRSendWithInv, InvalidateRKey: rkey, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	expectWC(t, a3.waitWC(a3.scq), 3, verbs.WCRemInvReqErr, 0)
	if st := write(t, a, 4, 32, mr.Addr(), rkey); st != verbs.WCSuccess {
		t.Fatalf("WRITE after another connection tried to invalidate: %v", st)
	}
}

// secondQP returns a node sharing n's device, PD, MR and CQs, with a QP
// of its own.
func secondQP(t *testing.T, n *node) *node {
	t.Helper()
	m := *n
	m.peer = nil
	var err error
	m.scq, err = n.dev.CreateCQ(64, nil)
	must(t, err)
	m.rcq, err = n.dev.CreateCQ(64, nil)
	must(t, err)
	m.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: m.scq, RecvCQ: m.rcq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4}})
	must(t, err)
	t.Cleanup(func() { m.qp.Destroy(); m.scq.Destroy(); m.rcq.Destroy() })
	return &m
}

func testMWBindErrors(t *testing.T, a, b *node) {
	mr, _ := windowMR(t, b, 4096)
	plain, err := b.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	must(t, err)
	t.Cleanup(func() { plain.Dereg() })
	ro, err := b.pd.RegMR(make([]byte, 4096), verbs.AccessMWBind)
	must(t, err)
	t.Cleanup(func() { ro.Dereg() })
	mw1, mw2 := allocMW(t, b, verbs.MWType1), allocMW(t, b, verbs.MWType2)

	// Refused at post time, as rxe's post path does (EINVAL).
	for _, c := range []struct {
		name string
		wr   verbs.SendWR
	}{
		{"no Bind", verbs.SendWR{Opcode: verbs.WRBindMW}},
		{"rkey of another index", verbs.SendWR{Opcode: verbs.WRBindMW, Bind: &verbs.MWBind{MW: mw2, RKey: mw2.RKey() ^ 0x100, MR: mr, Addr: mr.Addr(), Length: 8}}},
		{"SGEs", verbs.SendWR{Opcode: verbs.WRBindMW, SGList: []verbs.SGE{mr.SGE(0, 8)}, Bind: &verbs.MWBind{MW: mw2, RKey: mw2.RKey(), MR: mr, Addr: mr.Addr(), Length: 8}}},
		{"zero-based or unknown access", verbs.SendWR{Opcode: verbs.WRBindMW, Bind: &verbs.MWBind{MW: mw2, RKey: mw2.RKey(), MR: mr, Addr: mr.Addr(), Length: 8, Access: 1 << 5}}},
		{"no MR but a length", verbs.SendWR{Opcode: verbs.WRBindMW, Bind: &verbs.MWBind{MW: mw1, RKey: mw1.RKey(), Length: 8}}},
		{"LOCAL_INV with SGEs", verbs.SendWR{Opcode: verbs.WRLocalInv, SGList: []verbs.SGE{mr.SGE(0, 8)}}},
	} {
		err := b.qp.PostSend(&c.wr)
		if !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("%s: PostSend returned %v, want ErrInvalidArgument", c.name, err)
		}
	}
	if _, err := verbs.BindMW(b.qp, mw2, 1, 0, verbs.MWBind{MR: mr, Length: 8}); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("BindMW of a type 2 window: %v, want ErrInvalidArgument", err)
	}
	if _, err := b.pd.AllocMW(3); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("AllocMW(3): %v", err)
	}

	// Refused when carried out (C10-73..75, o10-37.2.30): the bind
	// completes with WCMWBindErr and the QP goes to ERR.
	failing := []struct {
		name string
		b    verbs.MWBind
	}{
		{"region without MW_BIND", verbs.MWBind{MW: mw2, MR: plain, Addr: plain.Addr(), Length: 8, Access: verbs.AccessRemoteRead}},
		{"writable window on a region without local write", verbs.MWBind{MW: mw2, MR: ro, Addr: ro.Addr(), Length: 8, Access: verbs.AccessRemoteWrite}},
		{"range outside the region", verbs.MWBind{MW: mw2, MR: mr, Addr: mr.Addr() + 4000, Length: 200, Access: verbs.AccessRemoteRead}},
		{"type 2 with length 0", verbs.MWBind{MW: mw2, MR: mr, Addr: mr.Addr(), Length: 0}},
	}
	for i, c := range failing {
		q := secondQP(t, b)
		peer := secondQP(t, a)
		o := defaultOpts()
		connect(t, q, peer, o)
		connect(t, peer, q, o)
		bind := c.b
		bind.RKey = verbs.IncRKey(bind.MW.RKey())
		q.post(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRBindMW, Bind: &bind,
			Next: &verbs.SendWR{WRID: 100, Opcode: verbs.WRSend, SGList: []verbs.SGE{b.mr.SGE(0, 1)}}})
		wc := q.waitWC(q.scq)
		if wc.WRID != uint64(i) || wc.Status != verbs.WCMWBindErr {
			t.Errorf("%s: completion %+v, want wr_id %d %v", c.name, wc, i, verbs.WCMWBindErr)
			continue
		}
		if wc := q.waitWC(q.scq); wc.WRID != 100 || wc.Status != verbs.WCWRFlushErr {
			t.Errorf("%s: the SEND after it completed %+v, want flushed", c.name, wc)
		}
		if q.qp.State() != verbs.QPStateErr {
			t.Errorf("%s: QP in %v after a failed bind", c.name, q.qp.State())
		}
	}
	// A bound type 2 window cannot be bound again before it is
	// invalidated; a failed LOCAL_INV is a local QP operation error.
	rkey := bind2(t, b, mw2, mr, 0, 64, verbs.AccessRemoteRead)
	again := verbs.MWBind{MW: mw2, RKey: verbs.IncRKey(rkey), MR: mr, Addr: mr.Addr(), Length: 64}
	b.post(&verbs.SendWR{WRID: 60, Opcode: verbs.WRBindMW, Bind: &again})
	expectWC(t, b.waitWC(b.scq), 60, verbs.WCMWBindErr, 0)
	q := secondQP(t, b)
	peer := secondQP(t, a)
	connect(t, q, peer, defaultOpts())
	connect(t, peer, q, defaultOpts())
	q.post(&verbs.SendWR{WRID: 61, Opcode: verbs.WRLocalInv, InvalidateRKey: mr.RKey()})
	expectWC(t, q.waitWC(q.scq), 61, verbs.WCLocQPOpErr, 0)
}

// testMWOrder: local operations complete in order with the requests
// around them, including after a READ (retired by its response, not an
// ACK) and unsignaled.
func testMWOrder(t *testing.T, a, b *node) {
	mr, _ := windowMR(t, a, 4096)
	mw := allocMW(t, a, verbs.MWType2)
	rkey := verbs.IncRKey(mw.RKey())
	bind := verbs.MWBind{MW: mw, RKey: rkey, MR: mr, Addr: mr.Addr(), Length: 4096, Access: verbs.AccessRemoteRead}
	b.postRecv(9, 0, 64)
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 3000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(),
		Next: &verbs.SendWR{WRID: 2, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled, Bind: &bind,
			Next: &verbs.SendWR{WRID: 3, Opcode: verbs.WRLocalInv, InvalidateRKey: rkey,
				Next: &verbs.SendWR{WRID: 4, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}}}}})
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMARead)
	expectWC(t, a.waitWC(a.scq), 2, verbs.WCSuccess, verbs.WCBindMW)
	expectWC(t, a.waitWC(a.scq), 4, verbs.WCSuccess, verbs.WCSend)
	expectWC(t, b.waitWC(b.rcq), 9, verbs.WCSuccess, verbs.WCRecv)
	// The unsignaled LOCAL_INV took effect: the window is free again.
	rkey2 := bind2(t, a, mw, mr, 0, 64, verbs.AccessRemoteRead)
	// A bind as the last request after a READ completes with it.
	bind = verbs.MWBind{MW: mw, RKey: verbs.IncRKey(rkey2), MR: mr, Addr: mr.Addr(), Length: 64}
	a.post(&verbs.SendWR{WRID: 5, Opcode: verbs.WRLocalInv, InvalidateRKey: rkey2,
		Next: &verbs.SendWR{WRID: 6, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(),
			Next: &verbs.SendWR{WRID: 7, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled, Bind: &bind}}})
	expectWC(t, a.waitWC(a.scq), 6, verbs.WCSuccess, verbs.WCRDMARead)
	expectWC(t, a.waitWC(a.scq), 7, verbs.WCSuccess, verbs.WCBindMW)
	// Nothing was lost: a local request that waited for the ACK timer to
	// complete would show as a timeout.
	if n := a.dev.Counters.Timeouts.Load(); n != 0 {
		t.Fatalf("%d local ACK timeouts: a local request completed only when the timer fired", n)
	}
}

func testMWInUse(t *testing.T, a, b *node) {
	mr, _ := windowMR(t, b, 4096)
	mw := allocMW(t, b, verbs.MWType2)
	rkey := bind2(t, b, mw, mr, 0, 4096, verbs.AccessRemoteWrite)
	if err := mr.Dereg(); !errors.Is(err, verbs.ErrInUse) {
		t.Fatalf("Dereg of a region with a bound window: %v, want ErrInUse", err)
	}
	if err := b.pd.Dealloc(); !errors.Is(err, verbs.ErrInUse) {
		t.Fatalf("Dealloc of a PD with a window: %v, want ErrInUse", err)
	}
	must(t, mw.Dealloc())
	if err := mw.Dealloc(); !errors.Is(err, verbs.ErrDestroyed) {
		t.Fatalf("second Dealloc: %v", err)
	}
	if st := write(t, a, 1, 8, mr.Addr(), rkey); st != verbs.WCRemAccessErr {
		t.Fatalf("WRITE through a deallocated window: %v", st)
	}
	must(t, mr.Dereg())
}

// scriptedSource is a random source that returns vals, in turn, as the
// high 32 bits (what rand.Rand.Uint32 takes).
type scriptedSource struct {
	vals []uint32
	i    int
}

func (s *scriptedSource) Uint64() uint64 {
	v := s.vals[s.i%len(s.vals)]
	s.i++
	return uint64(v) << 32
}

// TestMWKeysDisjoint: a window's index (an rkey's high 24 bits) is never
// the index of an MR key, whichever comes first, so an rkey names at most
// one object. The device's random numbers are scripted to collide.
func TestMWKeysDisjoint(t *testing.T) {
	ta, _ := udpPair(t)
	d := newDevice(t, Config{Transport: ta})
	t.Cleanup(func() { d.Close() })
	pd, err := d.AllocPD()
	must(t, err)
	script := func(vals ...uint32) {
		d.randMu.Lock()
		d.rng = rand.New(&scriptedSource{vals: vals})
		d.randMu.Unlock()
	}
	// An MR: two numbers for its address, then lkey and rkey.
	script(1, 2, 0x11223344, 0x55667788)
	mr, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessMWBind)
	must(t, err)
	if mr.LKey() != 0x11223344 || mr.RKey() != 0x55667788 {
		t.Fatalf("script off: keys %#x %#x", mr.LKey(), mr.RKey())
	}
	// A window: the first index drawn is the lkey's, and is skipped.
	script(0x11223344, 0x99aabbcc, 0x07)
	mw, err := pd.AllocMW(verbs.MWType2)
	must(t, err)
	if got := mw.RKey() >> 8; got != 0x99aabb {
		t.Fatalf("window index %#x; want %#x (the first draw named the MR's lkey)", got, 0x99aabb)
	}
	// Another MR: the first key drawn has the window's index, and is
	// skipped.
	script(1, 2, 0x99aabb01, 0x01020304, 0x05060708)
	mr2, err := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	must(t, err)
	if mr2.LKey() != 0x01020304 || mr2.RKey() != 0x05060708 {
		t.Fatalf("keys %#x %#x; want 0x01020304 0x05060708 (the first draw had the window's index)", mr2.LKey(), mr2.RKey())
	}
	script(0x9e3779b9, 0x7f4a7c15, 0x2545f491, 0x4f6cdd1d) // the rest of the test draws freely
	attr, err := d.QueryDevice()
	must(t, err)
	if attr.MaxMW == 0 || attr.DeviceCapFlags&verbs.DeviceMemWindow == 0 || attr.DeviceCapFlags&verbs.DeviceMemWindowType2B == 0 {
		t.Fatalf("QueryDevice: MaxMW %d, caps %#x", attr.MaxMW, attr.DeviceCapFlags)
	}
	must(t, mw.Dealloc())
	must(t, mr.Dereg())
	must(t, mr2.Dereg())
}
