//go:build ibverbs && cgo && linux

package ibverbs

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
)

func TestDevicesAndGIDs(t *testing.T) {
	c := openOrSkip(t)
	ds, err := verbs.Devices()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range ds {
		if d.Name() == c.Device().Name() {
			found = true
		}
	}
	if !found {
		t.Fatalf("verbs.Devices() = %v lacks %s: the provider is not registered", ds, c.Device().Name())
	}
	attr, err := c.QueryDevice()
	if err != nil || attr.PhysPortCnt == 0 || attr.MaxQP == 0 {
		t.Fatalf("QueryDevice = %+v, %v", attr, err)
	}
	pa, err := c.QueryPort(1)
	if err != nil || pa.State != verbs.PortActive {
		t.Fatalf("QueryPort(1) = %+v, %v; want an active port", pa, err)
	}
	n := 0
	for i := 0; i < pa.GIDTblLen; i++ {
		e, err := c.QueryGIDEntry(1, i)
		if errors.Is(err, verbs.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("QueryGIDEntry(1, %d): %v", i, err)
		}
		g, err := c.QueryGID(1, i)
		if err != nil || g != e.GID {
			t.Fatalf("QueryGID(1, %d) = %v, %v; QueryGIDEntry says %v", i, g, err, e.GID)
		}
		t.Logf("GID %d: %v %v ifindex %d", i, e.GID, e.Type, e.IfIndex)
		n++
	}
	if n == 0 {
		t.Fatal("no GID entries")
	}
	if _, err := c.QueryPort(9); !errors.Is(err, verbs.ErrNotFound) {
		t.Fatalf("QueryPort(9) = %v; want ErrNotFound", err)
	}
}

func TestOpenUnknown(t *testing.T) {
	_, err := Open(Config{Name: "no-such-device"})
	if !errors.Is(err, verbs.ErrNotFound) {
		t.Fatalf("Open(no-such-device) = %v; want ErrNotFound", err)
	}
}

// A post list of WRITE, WRITE_WITH_IMM, SEND and READ crosses once; the
// bytes arrive and the completions name each request.
func TestPostListRC(t *testing.T) {
	c := openOrSkip(t)
	a, b := pair(t, c, verbs.QPTypeRC, 64)
	copy(a.mr.Bytes(), bytes.Repeat([]byte("softrdma"), 512))
	if err := b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{b.mr.SGE(8192, 4096)},
		Next: &verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{b.mr.SGE(16384, 4096)}}}); err != nil {
		t.Fatal(err)
	}
	read := &verbs.SendWR{WRID: 13, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(65536, 100)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	send := &verbs.SendWR{WRID: 12, Next: read, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, 300)}}
	imm := &verbs.SendWR{WRID: 11, Next: send, Opcode: verbs.WRRDMAWriteWithImm, ImmData: 0xC0FFEE, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()}
	write := &verbs.SendWR{WRID: 10, Next: imm, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if err := a.qp.PostSend(write); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{10, 11, 12, 13} {
		w := wait(t, a.cq)
		if w.WRID != id || w.Status != verbs.WCSuccess {
			t.Fatalf("send completion %+v; want wr_id %d success", w, id)
		}
	}
	r1, r2 := wait(t, b.cq), wait(t, b.cq)
	if r1.WRID != 1 || r1.Opcode != verbs.WCRecvRDMAWithImm || r1.ImmData != 0xC0FFEE || r1.WCFlags&verbs.WCWithImm == 0 {
		t.Fatalf("WRITE_WITH_IMM's completion %+v", r1)
	}
	if r2.WRID != 2 || r2.Opcode != verbs.WCRecv || r2.ByteLen != 300 {
		t.Fatalf("SEND's completion %+v", r2)
	}
	if !bytes.Equal(b.mr.Bytes()[:4096], a.mr.Bytes()[:4096]) || !bytes.Equal(b.mr.Bytes()[16384:16384+300], a.mr.Bytes()[:300]) {
		t.Fatal("the bytes did not arrive")
	}
	if !bytes.Equal(a.mr.Bytes()[65536:65536+100], a.mr.Bytes()[:100]) {
		t.Fatal("READ returned other bytes")
	}
}

func TestAtomics(t *testing.T) {
	c := openOrSkip(t)
	a, b := pair(t, c, verbs.QPTypeRC, 16)
	word := b.mr.Bytes()[64:72]
	copy(word, []byte{5, 0, 0, 0, 0, 0, 0, 0})
	if err := a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRAtomicFetchAndAdd, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 3,
		Next: &verbs.SendWR{WRID: 2, Opcode: verbs.WRAtomicCmpAndSwp, SendFlags: verbs.SendSignaled,
			SGList: []verbs.SGE{a.mr.SGE(8, 8)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 8, Swap: 42}}); err != nil {
		t.Fatal(err)
	}
	if w := wait(t, a.cq); w.Status != verbs.WCSuccess || w.Opcode != verbs.WCFetchAdd {
		t.Fatalf("FETCH_ADD: %+v", w)
	}
	if w := wait(t, a.cq); w.Status != verbs.WCSuccess || w.Opcode != verbs.WCCompSwap {
		t.Fatalf("CMP_SWAP: %+v", w)
	}
	if got := a.mr.Bytes()[0]; got != 5 {
		t.Fatalf("FETCH_ADD returned %d; want 5", got)
	}
	if got := a.mr.Bytes()[8]; got != 8 {
		t.Fatalf("CMP_SWAP returned %d; want 8", got)
	}
	if word[0] != 42 {
		t.Fatalf("remote word %d; want 42", word[0])
	}
}

// UD: an AH to the device's own GID, inline data, the GRH in front.
func TestUDInline(t *testing.T) {
	c := openOrSkip(t)
	a, b := pair(t, c, verbs.QPTypeUD, 16)
	ah, err := a.pd.CreateAH(&verbs.AHAttr{IsGlobal: true, PortNum: 1,
		GRH: verbs.GlobalRoute{DGID: b.gid, SGIDIndex: uint8(roceIndex(t, c)), HopLimit: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer ah.Destroy()
	if err := b.qp.PostRecv(&verbs.RecvWR{WRID: 7, SGList: []verbs.SGE{b.mr.SGE(0, 40+64)}}); err != nil {
		t.Fatal(err)
	}
	msg := []byte("inline ud datagram")
	copy(a.mr.Bytes()[4096:], msg)
	if err := a.qp.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WRSendWithImm, ImmData: 77, SendFlags: verbs.SendSignaled | verbs.SendInline,
		SGList: []verbs.SGE{a.mr.SGE(4096, len(msg))}, AH: ah, RemoteQPN: b.qp.QPNum(), RemoteQKey: cm.DefaultParams().QKey}); err != nil {
		t.Fatal(err)
	}
	if w := wait(t, a.cq); w.Status != verbs.WCSuccess {
		t.Fatalf("send: %+v", w)
	}
	w := wait(t, b.cq)
	if w.Status != verbs.WCSuccess || w.SrcQP != a.qp.QPNum() || w.ImmData != 77 || w.WCFlags&verbs.WCWithGRH == 0 || int(w.ByteLen) != 40+len(msg) {
		t.Fatalf("receive: %+v", w)
	}
	if !bytes.Equal(b.mr.Bytes()[40:40+len(msg)], msg) {
		t.Fatalf("payload %q", b.mr.Bytes()[40:40+len(msg)])
	}
}

// RegMR of Go memory: pinned, registered, written by the device.
func TestRegMRGoMemory(t *testing.T) {
	c := openOrSkip(t)
	a, b := pair(t, c, verbs.QPTypeRC, 16)
	buf := make([]byte, 8192)
	mr, err := b.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	copy(a.mr.Bytes(), "written into Go memory")
	if err := a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 22)}, RemoteAddr: mr.Addr() + 100, RKey: mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	if w := wait(t, a.cq); w.Status != verbs.WCSuccess {
		t.Fatalf("%+v", w)
	}
	if string(buf[100:122]) != "written into Go memory" {
		t.Fatalf("buf = %q", buf[100:122])
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
}

// Wait blocks in the netpoller and honours its context.
func TestWaitContext(t *testing.T) {
	c := openOrSkip(t)
	cq, err := c.CreateCQ(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := cq.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ = %v; want DeadlineExceeded", err)
	}
}

// PostSend and Poll of a batch allocate nothing.
func TestZeroAllocs(t *testing.T) {
	c := openOrSkip(t)
	const batch = 16
	a, peer := pair(t, c, verbs.QPTypeRC, 64)
	b := peer.mr
	wrs := make([]verbs.SendWR, batch)
	sges := make([]verbs.SGE, batch)
	for i := range wrs {
		sges[i] = a.mr.SGE(i*64, 64)
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRRDMAWrite, SGList: sges[i : i+1],
			RemoteAddr: b.Addr() + uint64(i*64), RKey: b.RKey()}
		if i+1 < batch {
			wrs[i].Next = &wrs[i+1]
		}
	}
	wrs[batch-1].SendFlags = verbs.SendSignaled
	wc := make([]verbs.WC, batch)
	allocs := testing.AllocsPerRun(50, func() {
		if err := a.qp.PostSend(&wrs[0]); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 1; {
			n, err := a.cq.Poll(wc)
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	})
	if allocs != 0 {
		t.Fatalf("a post list of %d and its poll allocate %v times; want 0", batch, allocs)
	}
}

// TestWaitKeepsSolicitedArm: a goroutine in Wait does not widen the
// application's ReqNotify(true): a completion without the solicited bit
// ends the Wait but raises no event on the CompChannel; the solicited one
// after it does.
func TestWaitKeepsSolicitedArm(t *testing.T) {
	c := openOrSkip(t)
	ch := verbs.NewCompChannel(1)
	a, b := pairCh(t, c, verbs.QPTypeRC, 16, ch)
	for i := uint64(0); i < 2; i++ {
		if err := b.qp.PostRecv(&verbs.RecvWR{WRID: 10 + i, SGList: []verbs.SGE{b.mr.SGE(int(64*i), 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waited := make(chan error, 1)
	go func() { waited <- b.cq.Wait(ctx) }()
	time.Sleep(100 * time.Millisecond) // Wait is past its spinning: asleep
	send := func(flags verbs.SendFlags) {
		t.Helper()
		if err := a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled | flags,
			SGList: []verbs.SGE{a.mr.SGE(0, 8)}}); err != nil {
			t.Fatal(err)
		}
		if wc := wait(t, a.cq); wc.Status != verbs.WCSuccess {
			t.Fatalf("send completion: %v", wc.Status)
		}
	}
	send(0)
	if err := <-waited; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	var wc [1]verbs.WC
	if n, err := b.cq.Poll(wc[:]); n != 1 || err != nil || wc[0].WRID != 10 {
		t.Fatalf("Poll after Wait: %d, %v, WRID %d", n, err, wc[0].WRID)
	}
	select {
	case <-ch.C():
		t.Fatal("a completion without the solicited bit raised the event of ReqNotify(true)")
	case <-time.After(300 * time.Millisecond):
	}
	send(verbs.SendSolicited)
	select {
	case cq := <-ch.C():
		if cq != b.cq {
			t.Errorf("the event is for %v", cq)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the solicited completion raised no event")
	}
}
