package roce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// The suite: each case runs on two connected nodes, over netsim in virtual
// time (netsim_test.go) and over real UDP sockets (udp_test.go).
type suiteCase struct {
	name string
	opts func(*qpOpts)
	run  func(t *testing.T, a, b *node)
}

var basicSuite = []suiteCase{
	{"send_sizes", nil, testSendSizes},
	{"send_imm_solicited", nil, testSendImm},
	{"send_inline_multi_sge", nil, testInlineAndSGL},
	{"write_sizes", nil, testWriteSizes},
	{"write_imm", nil, testWriteImm},
	{"read_sizes", nil, testReadSizes},
	{"atomics", nil, testAtomics},
	{"unsignaled_and_fence", nil, testUnsignaledFence},
	{"send_with_inv", nil, testSendWithInv},
	{"bad_rkey_flushes", nil, testBadRKey},
	{"no_remote_permission", nil, testNoPermission},
	{"rnr_retry_exceeded", func(o *qpOpts) { o.rnrRetry = 0 }, testRNRExceeded},
	{"rnr_then_recv", nil, testRNRThenRecv},
	{"dereg_revokes", nil, testDeregRevokes},
	{"mtu4096", func(o *qpOpts) { o.mtu = verbs.MTU4096 }, testSendSizes},
	{"mtu256", func(o *qpOpts) { o.mtu = verbs.MTU256 }, testWriteSizes},
}

// reliabilitySuite runs under loss, reordering and duplication.
var reliabilitySuite = []suiteCase{
	{"send_stream", nil, func(t *testing.T, a, b *node) { testSendStream(t, a, b, 200) }},
	{"write_stream", nil, func(t *testing.T, a, b *node) { testWriteStream(t, a, b, 200) }},
	{"read_stream", nil, func(t *testing.T, a, b *node) { testReadStream(t, a, b, 120) }},
	{"fetch_add_exactly_once", nil, func(t *testing.T, a, b *node) { testFetchAddN(t, a, b, 300) }},
	{"mixed", nil, testMixed},
}

var sizes = []int{0, 1, 2, 1023, 1024, 1025, 4096, 65536, 300000}

func testSendSizes(t *testing.T, a, b *node) {
	for i, n := range sizes {
		fill(a.buf[:n], uint64(i))
		b.postRecv(uint64(100+i), 0, len(b.buf))
		a.post(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, n)}})
		expectWC(t, a.waitWC(a.scq), uint64(i), verbs.WCSuccess, verbs.WCSend)
		wc := b.waitWC(b.rcq)
		expectWC(t, wc, uint64(100+i), verbs.WCSuccess, verbs.WCRecv)
		if int(wc.ByteLen) != n || wc.QPNum != b.qp.QPNum() || wc.WCFlags != 0 {
			t.Fatalf("size %d: recv completion %+v", n, wc)
		}
		if !bytes.Equal(b.buf[:n], a.buf[:n]) {
			t.Fatalf("size %d: received bytes differ", n)
		}
	}
}

func testSendImm(t *testing.T, a, b *node) {
	b.postRecv(1, 0, 4096)
	a.post(&verbs.SendWR{WRID: 7, Opcode: verbs.WRSendWithImm, ImmData: 0xdeadbeef, SendFlags: verbs.SendSignaled | verbs.SendSolicited, SGList: []verbs.SGE{a.mr.SGE(0, 3000)}})
	expectWC(t, a.waitWC(a.scq), 7, verbs.WCSuccess, verbs.WCSend)
	wc := b.waitWC(b.rcq)
	if wc.ImmData != 0xdeadbeef || wc.WCFlags&verbs.WCWithImm == 0 || wc.ByteLen != 3000 {
		t.Fatalf("recv completion %+v: want imm 0xdeadbeef, WITH_IMM, 3000 bytes", wc)
	}
}

func testInlineAndSGL(t *testing.T, a, b *node) {
	copy(a.buf[100:], "hello, ")
	copy(a.buf[900:], "inline world")
	// Two receive SGEs: the message is scattered across them.
	must(t, b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(0, 5), b.mr.SGE(5000, 100)}}))
	a.post(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled | verbs.SendInline,
		SGList: []verbs.SGE{a.mr.SGE(100, 7), a.mr.SGE(900, 12)}})
	// Inline data was copied at post time: changing the buffer now must not matter.
	copy(a.buf[100:], "XXXXXXX")
	expectWC(t, a.waitWC(a.scq), 2, verbs.WCSuccess, verbs.WCSend)
	wc := b.waitWC(b.rcq)
	got := string(b.buf[:5]) + string(b.buf[5000:5000+wc.ByteLen-5])
	if got != "hello, inline world" {
		t.Fatalf("scattered receive = %q", got)
	}
}

func testWriteSizes(t *testing.T, a, b *node) {
	for i, n := range sizes {
		fill(a.buf[:n], uint64(i)+50)
		off := 4096 + i
		a.post(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, n)},
			RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
		wc := a.waitWC(a.scq)
		expectWC(t, wc, uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
		b.settle()
		if !bytes.Equal(b.buf[off:off+n], a.buf[:n]) {
			t.Fatalf("size %d: written bytes differ", n)
		}
		b.settle()
	}
}

func testWriteImm(t *testing.T, a, b *node) {
	b.postRecv(9, 0, 0)
	fill(a.buf[:5000], 3)
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 42, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 5000)}, RemoteAddr: b.mr.Addr() + 10000, RKey: b.mr.RKey()})
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	wc := b.waitWC(b.rcq)
	expectWC(t, wc, 9, verbs.WCSuccess, verbs.WCRecvRDMAWithImm)
	if wc.ImmData != 42 || wc.ByteLen != 5000 || !bytes.Equal(b.buf[10000:15000], a.buf[:5000]) {
		t.Fatalf("write with imm: %+v", wc)
	}
}

func testReadSizes(t *testing.T, a, b *node) {
	fill(b.buf, 99)
	for i, n := range sizes {
		off := 777 * i
		a.post(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
		wc := a.waitWC(a.scq)
		expectWC(t, wc, uint64(i), verbs.WCSuccess, verbs.WCRDMARead)
		if !bytes.Equal(a.buf[:n], b.buf[off:off+n]) {
			t.Fatalf("size %d: read bytes differ", n)
		}
	}
}

func testAtomics(t *testing.T, a, b *node) {
	binary.LittleEndian.PutUint64(b.buf[64:], 100)
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled, CompareAdd: 5,
		SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey()})
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCFetchAdd)
	if got := binary.LittleEndian.Uint64(a.buf); got != 100 {
		t.Fatalf("fetch-add returned %d, want 100", got)
	}
	// Compare-and-swap that fails, then one that succeeds.
	a.post(&verbs.SendWR{WRID: 2, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled, CompareAdd: 1, Swap: 7,
		SGList: []verbs.SGE{a.mr.SGE(8, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey()})
	expectWC(t, a.waitWC(a.scq), 2, verbs.WCSuccess, verbs.WCCompSwap)
	a.post(&verbs.SendWR{WRID: 3, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled, CompareAdd: 105, Swap: 7,
		SGList: []verbs.SGE{a.mr.SGE(16, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey()})
	expectWC(t, a.waitWC(a.scq), 3, verbs.WCSuccess, verbs.WCCompSwap)
	b.settle()
	if o1, o2, v := binary.LittleEndian.Uint64(a.buf[8:]), binary.LittleEndian.Uint64(a.buf[16:]), binary.LittleEndian.Uint64(b.buf[64:]); o1 != 105 || o2 != 105 || v != 7 {
		t.Fatalf("cmp-swap: originals %d, %d and final %d; want 105, 105, 7", o1, o2, v)
	}
	b.settle()
	// A misaligned atomic is refused when posted, as rxe's
	// validate_send_wr refuses it (a peer's misaligned request is an
	// invalid request at the responder; the fuzz targets send those).
	err := a.qp.PostSend(&verbs.SendWR{WRID: 4, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled, CompareAdd: 1,
		SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 65, RKey: b.mr.RKey()})
	if !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("PostSend of a misaligned atomic: %v; want ErrInvalidArgument", err)
	}
}

func testUnsignaledFence(t *testing.T, a, b *node) {
	fill(b.buf[:8192], 5)
	// READ, then a fenced WRITE of what was read: the fence makes the WRITE
	// wait for the READ, so it sends the read bytes.
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SGList: []verbs.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(),
		Next: &verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendFence, SGList: []verbs.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr() + 8192, RKey: b.mr.RKey(),
			Next: &verbs.SendWR{WRID: 3, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 1)}, RemoteAddr: b.mr.Addr() + 20000, RKey: b.mr.RKey()}}})
	// Only the signaled WQE completes.
	expectWC(t, a.waitWC(a.scq), 3, verbs.WCSuccess, verbs.WCRDMAWrite)
	if k, _ := a.scq.Poll(a.wcs); k != 0 {
		t.Fatalf("unsignaled WQEs produced %d completions", k)
	}
	b.settle()
	if !bytes.Equal(b.buf[8192:8192+4096], b.buf[:4096]) {
		t.Fatal("fenced WRITE did not carry the data the READ fetched")
	}
	b.settle()
}

// testSendWithInv: a SEND_WITH_INV may not revoke a region registered
// with RegMR (only type 2 memory windows and fast-registered regions,
// mw_test.go): it fails as an invalid request at both ends,
// and the region still grants access to a new connection.
func testSendWithInv(t *testing.T, a, b *node) {
	b.postRecv(1, 0, 64)
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithInv, InvalidateRKey: b.mr.RKey(), SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}})
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCRemInvReqErr, 0)
	expectWC(t, b.waitWC(b.rcq), 1, verbs.WCRemInvReqErr, 0)
	mr := b.mr.(*MR)
	live, _, revoked := mr.pd().remoteMR(mr.rkey, mr.addr, 1, 0, 0)
	if revoked = live == nil; !revoked {
		live.mu.RUnlock()
	}
	if revoked || b.dev.Counters.DropBadInvalidate.Load() != 1 {
		t.Fatalf("revoked %v, bad_invalidate %d: a SEND_WITH_INV revoked a RegMR region", revoked, b.dev.Counters.DropBadInvalidate.Load())
	}
}

func testBadRKey(t *testing.T, a, b *node) {
	before := bytes.Clone(b.buf[:4096])
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 100)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 1,
		Next: &verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 1)}}})
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCRemAccessErr, 0)
	expectWC(t, a.waitWC(a.scq), 2, verbs.WCWRFlushErr, 0)
	if a.qp.State() != verbs.QPStateErr {
		t.Fatalf("requester QP in %v, want ERR", a.qp.State())
	}
	// Check that nothing was written and that later posts flush at once.
	b.settle()
	if !bytes.Equal(before, b.buf[:4096]) {
		t.Fatal("a write with a bad rkey changed memory")
	}
	b.settle()
	a.post(&verbs.SendWR{WRID: 3, Opcode: verbs.WRSend, SGList: []verbs.SGE{a.mr.SGE(0, 1)}})
	expectWC(t, a.waitWC(a.scq), 3, verbs.WCWRFlushErr, 0)
	// The responder went to ERR too (IBTA class C error).
	for i := 0; i < 1000 && b.qp.State() != verbs.QPStateErr; i++ {
		sleepTiny()
	}
	if b.qp.State() != verbs.QPStateErr {
		t.Fatalf("responder QP in %v after a remote access error, want ERR", b.qp.State())
	}
}

func testNoPermission(t *testing.T, a, b *node) {
	ro, err := b.pd.RegMR(make([]byte, 4096), verbs.AccessRemoteRead)
	must(t, err)
	defer ro.Dereg()
	// Out of bounds first, on the writable region.
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 100)},
		RemoteAddr: ro.Addr() + 4000, RKey: ro.RKey()})
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCRemAccessErr, 0)
}

func testRNRExceeded(t *testing.T, a, b *node) {
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 10)}})
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCRNRRetryExcErr, 0)
	if a.dev.Counters.RcvdRNRErr.Load() == 0 || b.dev.Counters.SendRNRErr.Load() == 0 {
		t.Fatal("RNR counters did not move")
	}
}

func testRNRThenRecv(t *testing.T, a, b *node) {
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 10)}})
	// Wait until the responder has refused at least once, then post.
	for b.dev.Counters.SendRNRErr.Load() == 0 {
		sleepTiny()
	}
	b.postRecv(5, 0, 100)
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCSend)
	expectWC(t, b.waitWC(b.rcq), 5, verbs.WCSuccess, verbs.WCRecv)
}

func testDeregRevokes(t *testing.T, a, b *node) {
	extra, err := b.pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(t, err)
	addr, rkey := extra.Addr(), extra.RKey()
	must(t, extra.Dereg())
	a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: addr, RKey: rkey})
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCRemAccessErr, 0)
}

// --- reliability ---

const slot = 4096

func msgLen(r *rand.Rand, pmtu int) int { return 1 + r.IntN(3*pmtu+pmtu/2) }

func testSendStream(t *testing.T, a, b *node, n int) {
	r := rand.New(rand.NewPCG(1, 2))
	lens := make([]int, n)
	for i := range lens {
		lens[i] = min(msgLen(r, 1024), slot)
		b.postRecv(uint64(i), i*slot%len(b.buf), slot)
		fill(a.buf[i*slot%len(a.buf):][:lens[i]], uint64(i))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			wc := b.waitWC(b.rcq)
			if wc.WRID != uint64(i) || wc.Status != verbs.WCSuccess || int(wc.ByteLen) != lens[i] {
				t.Errorf("receive %d: completion %+v (%v), want %d bytes", i, wc, wc.Status, lens[i])
				return
			}
			off := i * slot % len(b.buf)
			if !bytes.Equal(b.buf[off:off+lens[i]], a.buf[off:off+lens[i]]) {
				t.Errorf("message %d: bytes differ", i)
				return
			}
		}
	}()
	postWindowed(t, a, n, 32, func(i int) *verbs.SendWR {
		return &verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(i*slot%len(a.buf), lens[i])}}
	}, verbs.WCSend)
	<-done
}

// postWindowed posts n requests keeping at most window outstanding and
// checks that they complete successfully and in order.
func postWindowed(t *testing.T, a *node, n, window int, mk func(i int) *verbs.SendWR, op verbs.WCOpcode) {
	t.Helper()
	next := 0
	for i := 0; i < n; i++ {
		for next < n && next-i < window {
			a.post(mk(next))
			next++
		}
		expectWC(t, a.waitWC(a.scq), uint64(i), verbs.WCSuccess, op)
	}
}

func testWriteStream(t *testing.T, a, b *node, n int) {
	r := rand.New(rand.NewPCG(3, 4))
	lens := make([]int, n)
	for i := range lens {
		lens[i] = min(msgLen(r, 1024), slot)
		fill(a.buf[i*slot%len(a.buf):][:lens[i]], uint64(i)+1000)
	}
	postWindowed(t, a, n, 32, func(i int) *verbs.SendWR {
		off := i * slot % len(a.buf)
		return &verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(off, lens[i])}, RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}
	}, verbs.WCRDMAWrite)
	b.settle()
	for i := range lens {
		off := i * slot % len(a.buf)
		if !bytes.Equal(b.buf[off:off+lens[i]], a.buf[off:off+lens[i]]) {
			t.Fatalf("write %d: bytes differ", i)
		}
	}
}

func testReadStream(t *testing.T, a, b *node, n int) {
	fill(b.buf, 77)
	r := rand.New(rand.NewPCG(5, 6))
	lens := make([]int, n)
	for i := range lens {
		lens[i] = min(msgLen(r, 1024), slot)
	}
	postWindowed(t, a, n, 16, func(i int) *verbs.SendWR {
		off := i * slot % len(a.buf)
		return &verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(off, lens[i])}, RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}
	}, verbs.WCRDMARead)
	for i := range lens {
		off := i * slot % len(a.buf)
		if !bytes.Equal(a.buf[off:off+lens[i]], b.buf[off:off+lens[i]]) {
			t.Fatalf("read %d: bytes differ", i)
		}
	}
}

func testFetchAddN(t *testing.T, a, b *node, n int) {
	binary.LittleEndian.PutUint64(b.buf[:8], 0)
	postWindowed(t, a, n, 16, func(i int) *verbs.SendWR {
		return &verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled, CompareAdd: 1,
			SGList: []verbs.SGE{a.mr.SGE(8*i, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	}, verbs.WCFetchAdd)
	b.settle()
	if got := binary.LittleEndian.Uint64(b.buf[:8]); got != uint64(n) {
		t.Fatalf("%d fetch-adds of 1 left the counter at %d", n, got)
	}
	origs := make([]uint64, n)
	for i := range origs {
		origs[i] = binary.LittleEndian.Uint64(a.buf[8*i:])
	}
	slices.Sort(origs)
	for i, v := range origs {
		if v != uint64(i) {
			t.Fatalf("fetch-add results are not 0..%d exactly once: position %d holds %d", n-1, i, v)
		}
	}
}

// testMixed interleaves SEND, WRITE, READ and fetch-add on one QP.
func testMixed(t *testing.T, a, b *node) {
	const n = 160
	binary.LittleEndian.PutUint64(b.buf[len(b.buf)-8:], 0)
	fill(b.buf[:len(b.buf)/2], 11)
	for i := 0; i < n; i++ {
		b.postRecv(uint64(i), len(b.buf)/2+(i%64)*slot, slot)
	}
	r := rand.New(rand.NewPCG(8, 9))
	kinds := make([]verbs.WROpcode, n)
	lens := make([]int, n)
	ops := []verbs.WROpcode{verbs.WRSend, verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd}
	for i := range kinds {
		kinds[i] = ops[r.IntN(len(ops))]
		lens[i] = min(msgLen(r, 1024), slot)
	}
	var adds, sends int
	wcOp := map[verbs.WROpcode]verbs.WCOpcode{verbs.WRSend: verbs.WCSend, verbs.WRRDMAWrite: verbs.WCRDMAWrite, verbs.WRRDMARead: verbs.WCRDMARead, verbs.WRAtomicFetchAndAdd: verbs.WCFetchAdd}
	next := 0
	for i := 0; i < n; i++ {
		for next < n && next-i < 24 {
			k := next
			wr := &verbs.SendWR{WRID: uint64(k), Opcode: kinds[k], SendFlags: verbs.SendSignaled}
			off := (k % 64) * slot
			switch kinds[k] {
			case verbs.WRSend:
				sends++
				wr.SGList = []verbs.SGE{a.mr.SGE(off, lens[k])}
			case verbs.WRRDMAWrite:
				wr.SGList = []verbs.SGE{a.mr.SGE(off, lens[k])}
				wr.RemoteAddr, wr.RKey = b.mr.Addr()+uint64(len(b.buf)/4+off), b.mr.RKey()
			case verbs.WRRDMARead:
				wr.SGList = []verbs.SGE{a.mr.SGE(len(a.buf)/2+off, lens[k])}
				wr.RemoteAddr, wr.RKey = b.mr.Addr()+uint64(off), b.mr.RKey()
			case verbs.WRAtomicFetchAndAdd:
				adds++
				wr.SGList = []verbs.SGE{a.mr.SGE(len(a.buf)-8*(k+1), 8)}
				wr.RemoteAddr, wr.RKey, wr.CompareAdd = b.mr.Addr()+uint64(len(b.buf)-8), b.mr.RKey(), 1
			}
			a.post(wr)
			next++
		}
		wc := a.waitWC(a.scq)
		expectWC(t, wc, uint64(i), verbs.WCSuccess, wcOp[kinds[i]])
		if kinds[i] == verbs.WRRDMARead {
			off := (i % 64) * slot
			if !bytes.Equal(a.buf[len(a.buf)/2+off:][:lens[i]], b.buf[off:off+lens[i]]) {
				t.Fatalf("mixed READ %d: bytes differ", i)
			}
		}
	}
	for i := 0; i < sends; i++ {
		if wc := b.waitWC(b.rcq); wc.Status != verbs.WCSuccess {
			t.Fatalf("mixed receive %d: %v", i, wc.Status)
		}
	}
	b.settle()
	if got := binary.LittleEndian.Uint64(b.buf[len(b.buf)-8:]); got != uint64(adds) {
		t.Fatalf("%d fetch-adds left %d", adds, got)
	}
}

// sleepTiny lets the other side make progress (virtual time under synctest).
func sleepTiny() { time.Sleep(100 * time.Microsecond) }
