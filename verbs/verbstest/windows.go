package verbstest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// Memory windows (IBTA 10.6.7): B binds windows to a region of its own
// that grants no remote access, A reaches them through the windows'
// rkeys. rxe is the reference, except where it departs from the IBTA
// (WindowBounds, InvalidateFlag).

func init() {
	register(
		testCase{"mw/type 2: bind, access, local and remote invalidation", testMWType2},
		testCase{"mw/type 1: bind, rebind, and nothing beyond the window", testMWType1},
		testCase{"mw/a region with a window bound stays registered", testMWInUse},
	)
}

// windowRegion allocates a region of s's PD that windows may be bound
// to and that grants no remote access of its own.
func (s *side) windowRegion(t *testing.T) verbs.MR {
	t.Helper()
	mr, err := s.pd.AllocMR(8192, verbs.AccessLocalWrite|verbs.AccessMWBind)
	if err != nil {
		t.Fatalf("AllocMR with AccessMWBind: %v", err)
	}
	t.Cleanup(func() { mr.Dereg() })
	return mr
}

func (s *side) allocMW(t *testing.T, typ verbs.MWType) verbs.MW {
	t.Helper()
	mw, err := s.pd.AllocMW(typ)
	if err != nil {
		t.Fatalf("AllocMW(%v): %v", typ, err)
	}
	if mw.Type() != typ {
		t.Fatalf("AllocMW(%v) made a %v window", typ, mw.Type())
	}
	t.Cleanup(func() { mw.Dealloc() })
	return mw
}

// bind binds mw through s's QP to length bytes at off of mr with a new
// rkey, expects the completion, and returns the rkey.
func (s *side) bind(mw verbs.MW, id uint64, mr verbs.MR, off, length int, access verbs.Access) uint32 {
	s.t.Helper()
	rkey := verbs.IncRKey(mw.RKey())
	s.post(verbs.SendWR{WRID: id, Opcode: verbs.WRBindMW, Bind: &verbs.MWBind{MW: mw, RKey: rkey, MR: mr,
		Addr: mr.Addr() + uint64(off), Length: uint64(length), Access: access}})
	if w := s.expect(s.scq, id, verbs.WCSuccess); w.Opcode != verbs.WCBindMW {
		s.t.Errorf("bind completed as %v; want %v", w.Opcode, verbs.WCBindMW)
	}
	return rkey
}

// writeThrough WRITEs 64 bytes of pattern seed from a to addr through
// rkey and checks that they landed in b's region mr.
func writeThrough(t *testing.T, a *side, id uint64, mr verbs.MR, addr uint64, rkey uint32, seed byte) {
	t.Helper()
	pattern(a.mr.Bytes()[:64], seed)
	a.post(verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.sge(0, 64)}, RemoteAddr: addr, RKey: rkey})
	a.expect(a.scq, id, verbs.WCSuccess)
	off := addr - mr.Addr()
	if got := mr.Bytes()[off : off+64]; !bytes.Equal(got, a.mr.Bytes()[:64]) {
		t.Fatalf("the WRITE through rkey %#x did not land at offset %d", rkey, off)
	}
}

func testMWType2(t *testing.T, p *Pair) {
	p.need(t, MemoryWindows)
	a, b := connect(t, p, opts{})
	mr := b.windowRegion(t)
	mw := b.allocMW(t, verbs.MWType2)
	rkey := b.bind(mw, 1, mr, 0, 4096, verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	writeThrough(t, a, 10, mr, mr.Addr()+100, rkey, 1)

	// LOCAL_INV frees the window; a bind with the next key reopens it,
	// and two more rounds of LOCAL_INV and bind in one chain do it
	// again.
	b.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRLocalInv, InvalidateRKey: rkey})
	if w := b.expect(b.scq, 2, verbs.WCSuccess); w.Opcode != verbs.WCLocalInv {
		t.Errorf("LOCAL_INV completed as %v", w.Opcode)
	}
	rkey1 := b.bind(mw, 3, mr, 4096, 4096, verbs.AccessRemoteWrite)
	writeThrough(t, a, 11, mr, mr.Addr()+4096, rkey1, 2)
	rkeyX := verbs.IncRKey(rkey1)
	rkey2 := verbs.IncRKey(rkeyX)
	bindX := verbs.MWBind{MW: mw, RKey: rkeyX, MR: mr, Addr: mr.Addr(), Length: 64, Access: verbs.AccessRemoteRead}
	bind2 := verbs.MWBind{MW: mw, RKey: rkey2, MR: mr, Addr: mr.Addr() + 4096, Length: 4096, Access: verbs.AccessRemoteWrite}
	b.post(verbs.SendWR{WRID: 4, Opcode: verbs.WRLocalInv, InvalidateRKey: rkey1,
		Next: &verbs.SendWR{WRID: 5, Opcode: verbs.WRBindMW, Bind: &bindX,
			Next: &verbs.SendWR{WRID: 6, Opcode: verbs.WRLocalInv, InvalidateRKey: rkeyX,
				Next: &verbs.SendWR{WRID: 7, Opcode: verbs.WRBindMW, SendFlags: verbs.SendSignaled, Bind: &bind2}}}})
	b.expect(b.scq, 4, verbs.WCSuccess) // post signals the chain's first; 5 and 6 are not
	if w := b.expect(b.scq, 7, verbs.WCSuccess); w.Opcode != verbs.WCBindMW || mw.RKey() != rkey2 {
		t.Errorf("chained bind completed as %v; the window's rkey %#x, want %#x", w.Opcode, mw.RKey(), rkey2)
	}
	writeThrough(t, a, 13, mr, mr.Addr()+4096, rkey2, 5)

	// The peer's SEND_WITH_INV on the binding QP revokes it; the receive
	// names the rkey.
	b.recv(5, 0, 64)
	a.post(verbs.SendWR{WRID: 12, Opcode: verbs.WRSendWithInv, InvalidateRKey: rkey2, SGList: []verbs.SGE{a.sge(0, 8)}})
	a.expect(a.scq, 12, verbs.WCSuccess)
	w := b.expect(b.rcq, 5, verbs.WCSuccess)
	if _, lacks := p.Lacks[InvalidateFlag]; !lacks && (w.WCFlags&verbs.WCWithInv == 0 || w.ImmData != rkey2) {
		t.Errorf("receive of SEND_WITH_INV: flags %v, rkey %#x; want WCWithInv and %#x", w.WCFlags, w.ImmData, rkey2)
	}
	remoteFails(t, p, a, b, verbs.WRRDMAWrite, mr.Addr()+4096, rkey2)
}

func testMWType1(t *testing.T, p *Pair) {
	p.need(t, MemoryWindows)
	a, b := connect(t, p, opts{})
	mr := b.windowRegion(t)
	mw := b.allocMW(t, verbs.MWType1)
	old := mw.RKey()
	rkey, err := verbs.BindMW(b.qp, mw, 1, verbs.SendSignaled, verbs.MWBind{MR: mr, Addr: mr.Addr() + 1024, Length: 2048, Access: verbs.AccessRemoteWrite | verbs.AccessRemoteRead})
	if err != nil {
		t.Fatal(err)
	}
	if w := b.expect(b.scq, 1, verbs.WCSuccess); w.Opcode != verbs.WCBindMW {
		t.Errorf("bind completed as %v", w.Opcode)
	}
	if rkey != verbs.IncRKey(old) || mw.RKey() != rkey {
		t.Errorf("BindMW gave rkey %#x, the window says %#x; it had %#x", rkey, mw.RKey(), old)
	}
	writeThrough(t, a, 10, mr, mr.Addr()+1024, rkey, 3)
	// A READ through it returns the region's bytes.
	a.post(verbs.SendWR{WRID: 12, Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{a.sge(4096, 64)}, RemoteAddr: mr.Addr() + 1024, RKey: rkey})
	a.expect(a.scq, 12, verbs.WCSuccess)
	if !bytes.Equal(a.mr.Bytes()[4096:4096+64], mr.Bytes()[1024:1024+64]) {
		t.Error("READ through the window returned other bytes")
	}
	// A rebind moves the key on: the old one stops working at once.
	rkey2, err := verbs.BindMW(b.qp, mw, 2, verbs.SendSignaled, verbs.MWBind{MR: mr, Addr: mr.Addr() + 1024, Length: 2048, Access: verbs.AccessRemoteWrite})
	if err != nil {
		t.Fatal(err)
	}
	b.expect(b.scq, 2, verbs.WCSuccess)
	writeThrough(t, a, 11, mr, mr.Addr()+1024+2048-64, rkey2, 4)
	p.need(t, WindowBounds)
	remoteFails(t, p, a, b, verbs.WRRDMAWrite, mr.Addr()+1024+2048-32, rkey2)
	if !allZero(mr.Bytes()[1024+2048:]) {
		t.Error("a WRITE beyond the window changed the region")
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func testMWInUse(t *testing.T, p *Pair) {
	p.need(t, MemoryWindows)
	_, b := connect(t, p, opts{})
	mr, err := b.pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessMWBind)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := b.pd.AllocMW(verbs.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	b.bind(mw, 1, mr, 0, 4096, verbs.AccessRemoteRead)
	if err := mr.Dereg(); err == nil {
		t.Fatal("Dereg of a region with a window bound succeeded")
	} else if !errors.Is(err, verbs.ErrInUse) && !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Errorf("Dereg of a region with a window bound: %v; want ErrInUse (rxe: EINVAL)", err)
	}
	if err := mw.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Dereg(); err != nil {
		t.Fatalf("Dereg once the window is gone: %v", err)
	}
}
