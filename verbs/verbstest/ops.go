package verbstest

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// Every opcode, end to end: the completions on both sides and the bytes.

func init() {
	register(
		testCase{"opcode/SEND", testSend},
		testCase{"opcode/SEND_WITH_IMM", testSendImm},
		testCase{"opcode/RDMA_WRITE", testWrite},
		testCase{"opcode/RDMA_WRITE_WITH_IMM", testWriteImm},
		testCase{"opcode/RDMA_READ", testRead},
		testCase{"opcode/ATOMIC_CMP_AND_SWP", testCAS},
		testCase{"opcode/ATOMIC_FETCH_AND_ADD", testFAA},
		testCase{"opcode/SEND gathers and scatters over two SGEs", testSGL},
	)
}

func testSend(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{init: func(a, _ []byte) { pattern(a[:3000], 1) }})
	b.recv(7, 8192, 4096)
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(0, 3000)}})
	sw := a.expect(a.scq, 1, verbs.WCSuccess)
	if sw.Opcode != verbs.WCSend || sw.QPNum != a.qp.QPNum() {
		t.Errorf("send completion opcode %v qp %#x; want SEND on %#x", sw.Opcode, sw.QPNum, a.qp.QPNum())
	}
	rw := b.expect(b.rcq, 7, verbs.WCSuccess)
	if rw.Opcode != verbs.WCRecv || rw.ByteLen != 3000 || rw.WCFlags&(verbs.WCWithImm|verbs.WCWithInv) != 0 {
		t.Errorf("receive completion %v, %d bytes, flags %#x; want RECV, 3000, no imm/inv", rw.Opcode, rw.ByteLen, rw.WCFlags)
	}
	if !bytes.Equal(b.mr.Bytes()[8192:8192+3000], a.mr.Bytes()[:3000]) {
		t.Error("received bytes differ from those sent")
	}
}

func testSendImm(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{})
	b.recv(7, 0, 64)
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithImm, ImmData: 0xDEADBEEF, SGList: []verbs.SGE{a.sge(0, 16)}})
	a.expect(a.scq, 1, verbs.WCSuccess)
	rw := b.expect(b.rcq, 7, verbs.WCSuccess)
	if rw.Opcode != verbs.WCRecv || rw.WCFlags&verbs.WCWithImm == 0 || rw.ImmData != 0xDEADBEEF || rw.ByteLen != 16 {
		t.Errorf("receive completion %v flags %#x imm %#x len %d; want RECV with imm 0xdeadbeef, 16 bytes", rw.Opcode, rw.WCFlags, rw.ImmData, rw.ByteLen)
	}
}

func testWrite(t *testing.T, p *Pair) {
	const n = 10000 // several packets at any path MTU
	a, b := connect(t, p, opts{init: func(a, _ []byte) { pattern(a[:n], 3) }})
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{a.sge(0, n)},
		RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()})
	if w := a.expect(a.scq, 1, verbs.WCSuccess); w.Opcode != verbs.WCRDMAWrite {
		t.Errorf("completion opcode %v; want RDMA_WRITE", w.Opcode)
	}
	b.quiet(b.rcq) // a WRITE consumes no receive and completes nothing at the target
	if got := a.read(b, 100, n, 20000); !bytes.Equal(got, a.mr.Bytes()[:n]) {
		t.Error("the target's memory differs from the bytes written")
	}
}

func testWriteImm(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{init: func(a, _ []byte) { pattern(a[:500], 5) }})
	b.recv(9, 0, 0)
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 42, SGList: []verbs.SGE{a.sge(0, 500)},
		RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()})
	a.expect(a.scq, 1, verbs.WCSuccess)
	rw := b.expect(b.rcq, 9, verbs.WCSuccess)
	if rw.Opcode != verbs.WCRecvRDMAWithImm || rw.ImmData != 42 || rw.WCFlags&verbs.WCWithImm == 0 || rw.ByteLen != 500 {
		t.Errorf("receive completion %v imm %d flags %#x len %d; want RECV_RDMA_WITH_IMM, 42, 500 bytes", rw.Opcode, rw.ImmData, rw.WCFlags, rw.ByteLen)
	}
	if !bytes.Equal(b.mr.Bytes()[4096:4096+500], a.mr.Bytes()[:500]) {
		t.Error("the target's memory differs from the bytes written")
	}
}

func testRead(t *testing.T, p *Pair) {
	const n = 9000
	a, b := connect(t, p, opts{init: func(_, b []byte) { pattern(b[:n], 9) }})
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{a.sge(1000, n)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	w := a.expect(a.scq, 1, verbs.WCSuccess)
	if w.Opcode != verbs.WCRDMARead || w.ByteLen != n {
		t.Errorf("completion %v, %d bytes; want RDMA_READ, %d", w.Opcode, w.ByteLen, n)
	}
	want := make([]byte, n)
	pattern(want, 9)
	if !bytes.Equal(a.mr.Bytes()[1000:1000+n], want) {
		t.Error("bytes read differ from the source's")
	}
}

func word(b []byte, off int) uint64 { return binary.NativeEndian.Uint64(b[off:]) }

func testCAS(t *testing.T, p *Pair) {
	p.need(t, Atomics)
	a, b := connect(t, p, opts{init: func(_, b []byte) { binary.NativeEndian.PutUint64(b[64:], 5) }})
	cas := func(id, cmp, swap uint64) uint64 {
		a.post(verbs.SendWR{WRID: id, Opcode: verbs.WRAtomicCmpAndSwp, SGList: []verbs.SGE{a.sge(0, 8)},
			RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: cmp, Swap: swap})
		w := a.expect(a.scq, id, verbs.WCSuccess)
		if w.Opcode != verbs.WCCompSwap || w.ByteLen != 8 {
			t.Errorf("completion %v, %d bytes; want COMP_SWAP, 8", w.Opcode, w.ByteLen)
		}
		return word(a.mr.Bytes(), 0)
	}
	if old := cas(1, 5, 9); old != 5 {
		t.Errorf("CAS(5→9) returned %d; want the old value 5", old)
	}
	if old := cas(2, 5, 11); old != 9 {
		t.Errorf("CAS(5→11) on 9 returned %d; want 9 (and no swap)", old)
	}
	if v := word(a.read(b, 64, 8, 100), 0); v != 9 {
		t.Errorf("the target word is %d; want 9", v)
	}
}

func testFAA(t *testing.T, p *Pair) {
	p.need(t, Atomics)
	a, b := connect(t, p, opts{init: func(_, b []byte) { binary.NativeEndian.PutUint64(b[128:], 10) }})
	for i, want := range []uint64{10, 17} {
		id := uint64(i + 1)
		a.post(verbs.SendWR{WRID: id, Opcode: verbs.WRAtomicFetchAndAdd, SGList: []verbs.SGE{a.sge(8, 8)},
			RemoteAddr: b.mr.Addr() + 128, RKey: b.mr.RKey(), CompareAdd: 7})
		if w := a.expect(a.scq, id, verbs.WCSuccess); w.Opcode != verbs.WCFetchAdd {
			t.Errorf("completion %v; want FETCH_ADD", w.Opcode)
		}
		if got := word(a.mr.Bytes(), 8); got != want {
			t.Errorf("fetch-and-add %d returned %d; want %d", i, got, want)
		}
	}
	if v := word(a.read(b, 128, 8, 100), 0); v != 24 {
		t.Errorf("the target word is %d; want 24", v)
	}
}

func testSGL(t *testing.T, p *Pair) {
	a, b := connect(t, p, opts{init: func(a, _ []byte) { pattern(a[:2000], 11) }})
	if err := b.qp.PostRecv(&verbs.RecvWR{WRID: 3, SGList: []verbs.SGE{b.sge(0, 700), b.sge(5000, 2000)}}); err != nil {
		t.Fatal(err)
	}
	a.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.sge(0, 1000), a.sge(1000, 1000)}})
	a.expect(a.scq, 1, verbs.WCSuccess)
	if w := b.expect(b.rcq, 3, verbs.WCSuccess); w.ByteLen != 2000 {
		t.Errorf("received %d bytes; want 2000", w.ByteLen)
	}
	got := append(append([]byte(nil), b.mr.Bytes()[:700]...), b.mr.Bytes()[5000:5000+1300]...)
	if !bytes.Equal(got, a.mr.Bytes()[:2000]) {
		t.Error("scattered bytes differ from the gathered ones")
	}
}
