package shm

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

func TestRCEveryOpcode(t *testing.T) {
	a, b := pair(t, sideOpts{}, sideOpts{})
	am, bm := a.mr.Bytes(), b.mr.Bytes()
	copy(am, "hello, shared memory")
	// SEND, SEND_WITH_IMM, WRITE_WITH_IMM into posted receives.
	postRecv(t, b.qp, 1, b.mr.SGE(0, 100))
	postRecv(t, b.qp, 2, b.mr.SGE(100, 100))
	postRecv(t, b.qp, 3, b.mr.SGE(200, 100))
	postSend(t, a.qp, verbs.SendWR{WRID: 10, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 5)}})
	postSend(t, a.qp, verbs.SendWR{WRID: 11, Opcode: verbs.WRSendWithImm, ImmData: 0xabcd, SGList: []verbs.SGE{a.mr.SGE(0, 20)}})
	postSend(t, a.qp, verbs.SendWR{WRID: 12, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 7, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(7, 13)}})
	for i, wc := range poll(t, a.cq, 3) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(10+i) {
			t.Errorf("send completion %d: %+v", i, wc)
		}
	}
	wcs := poll(t, b.cq, 3)
	want := []struct {
		op    verbs.WCOpcode
		n     uint32
		imm   uint32
		flags verbs.WCFlags
	}{{verbs.WCRecv, 5, 0, 0}, {verbs.WCRecv, 20, 0xabcd, verbs.WCWithImm}, {verbs.WCRecvRDMAWithImm, 13, 7, verbs.WCWithImm}}
	for i, wc := range wcs {
		w := want[i]
		if wc.Status != verbs.WCSuccess || wc.Opcode != w.op || wc.ByteLen != w.n || wc.ImmData != w.imm || wc.WCFlags != w.flags || wc.WRID != uint64(i+1) {
			t.Errorf("recv completion %d: %+v, want %+v", i, wc, w)
		}
	}
	if string(bm[:5]) != "hello" || string(bm[100:120]) != "hello, shared memory" || string(bm[4096:4109]) != "shared memory" {
		t.Errorf("received %q %q %q", bm[:5], bm[100:120], bm[4096:4109])
	}
	// WRITE, READ (with an inline WRITE).
	postSend(t, a.qp, verbs.SendWR{WRID: 20, Opcode: verbs.WRRDMAWrite, RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 20)}})
	postSend(t, a.qp, verbs.SendWR{WRID: 21, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendInline, RemoteAddr: b.mr.Addr() + 9000, RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 5)}})
	postSend(t, a.qp, verbs.SendWR{WRID: 22, Opcode: verbs.WRRDMARead, RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(1000, 20)}})
	for _, wc := range poll(t, a.cq, 3) {
		if wc.Status != verbs.WCSuccess {
			t.Errorf("%+v", wc)
		}
	}
	if string(bm[8192:8212]) != "hello, shared memory" || string(bm[9000:9005]) != "hello" || string(am[1000:1020]) != "hello, shared memory" {
		t.Errorf("WRITE/READ moved %q %q %q", bm[8192:8212], bm[9000:9005], am[1000:1020])
	}
	// Atomics.
	binary.LittleEndian.PutUint64(bm[16384:], 40)
	postSend(t, a.qp, verbs.SendWR{WRID: 30, Opcode: verbs.WRAtomicFetchAndAdd, CompareAdd: 2, RemoteAddr: b.mr.Addr() + 16384, RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(2000, 8)}})
	postSend(t, a.qp, verbs.SendWR{WRID: 31, Opcode: verbs.WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 99, RemoteAddr: b.mr.Addr() + 16384, RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(2008, 8)}})
	postSend(t, a.qp, verbs.SendWR{WRID: 32, Opcode: verbs.WRAtomicCmpAndSwp, CompareAdd: 42, Swap: 7, RemoteAddr: b.mr.Addr() + 16384, RKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(2016, 8)}})
	for _, wc := range poll(t, a.cq, 3) {
		if wc.Status != verbs.WCSuccess || (wc.WRID == 30 && wc.Opcode != verbs.WCFetchAdd) || (wc.WRID != 30 && wc.Opcode != verbs.WCCompSwap) {
			t.Errorf("%+v", wc)
		}
	}
	if got := [4]uint64{binary.LittleEndian.Uint64(am[2000:]), binary.LittleEndian.Uint64(am[2008:]), binary.LittleEndian.Uint64(am[2016:]), binary.LittleEndian.Uint64(bm[16384:])}; got != [4]uint64{40, 42, 99, 99} {
		t.Errorf("atomics: %v, want [40 42 99 99]", got)
	}
	// A multi-slot SEND (200 KiB) in both directions.
	big := bytes.Repeat([]byte("0123456789abcdef"), 200*1024/16)
	copy(am[100000:], big)
	postRecv(t, b.qp, 4, b.mr.SGE(500000, len(big)))
	postSend(t, a.qp, verbs.SendWR{WRID: 40, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(100000, len(big))}})
	poll(t, a.cq, 1)
	if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCSuccess || wc.ByteLen != uint32(len(big)) || !bytes.Equal(bm[500000:500000+len(big)], big) {
		t.Errorf("big SEND: %+v", wc)
	}
	// SEND_WITH_INV cannot invalidate a region from AllocMR (only memory
	// windows and fast-registered regions): an invalid request, as on soft
	// and rxe. verbstest checks that the rkey stays valid.
	postRecv(t, b.qp, 5, b.mr.SGE(0, 100))
	postSend(t, a.qp, verbs.SendWR{WRID: 50, Opcode: verbs.WRSendWithInv, InvalidateRKey: b.mr.RKey(), SGList: []verbs.SGE{a.mr.SGE(0, 5)}})
	if wc := poll(t, a.cq, 1)[0]; wc.Status != verbs.WCRemInvReqErr {
		t.Errorf("SEND_WITH_INV of an AllocMR rkey: %v, want %v", wc.Status, verbs.WCRemInvReqErr)
	}
	if wc := poll(t, b.cq, 1)[0]; wc.Status != verbs.WCRemInvReqErr {
		t.Errorf("SEND_WITH_INV at the responder: %+v", wc)
	}
}
