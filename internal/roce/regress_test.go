package roce

// Regression tests for bugs an engine review found. Each was
// checked to fail with its fix taken out.

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// gatherCapture is a capture transport that takes gathered payloads and
// has a jumbo link, so 1 KiB+ payloads are gathered from their MR.
type gatherCapture struct{ *capture }

func (gatherCapture) Gathers() bool { return true }
func (gatherCapture) LinkMTU() int  { return 9000 }

// clean reports the first slot at or past n that is not empty.
func (t *txq) clean() error {
	for i := t.n; i < txBatch; i++ {
		if t.pkts[i].Buf != nil || t.pkts[i].Payload != nil || t.bufs[i] != nil || t.mrs[i] != nil || t.req[i] {
			return fmt.Errorf("slot %d of %d queued packets is not empty: %+v buf=%v mr=%v req=%v", i, t.n, t.pkts[i], t.bufs[i] != nil, t.mrs[i] != nil, t.req[i])
		}
	}
	return nil
}

// rcTowards creates an RC QP in RTS on pd towards a peer that never
// answers, with path MTU mtu.
func rcTowards(tb testing.TB, pd verbs.PD, cq verbs.CQ, mtu verbs.MTU, timeout, retry uint8) *QP {
	tb.Helper()
	qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}})
	must(tb, err)
	p := cm.DefaultParams()
	p.Access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	p.PathMTU, p.SGIDIndex, p.Timeout, p.RetryCnt, p.MinRNRTimer = mtu, 1, timeout, retry, 1
	p.MaxRdAtomic, p.MaxDestRdAtomic = 4, 4
	peer := cm.Endpoint{QPN: 0x99, PSN: 100, GID: verbs.GIDFromAddr(netip.MustParseAddr("10.9.0.2"))}
	must(tb, cm.Connect(qp, cm.Endpoint{QPN: qp.QPNum(), PSN: 500}, peer, &p))
	return qp.(*QP)
}

// TestDestroyReleasesQueuedPackets: destroying a QP releases the packets
// that wait for its doorbell, with their MR pins, so a DeregMR of their
// memory (an AllocMR region) returns and unmaps it.
func TestDestroyReleasesQueuedPackets(t *testing.T) {
	d := newDevice(t, Config{Transport: gatherCapture{newCapture("10.9.0.1")}})
	defer d.Close()
	pd, _ := d.AllocPD()
	defer pd.Dealloc()
	cq, _ := d.CreateCQ(64, nil)
	defer cq.Destroy()
	m, err := pd.AllocMR(1<<16, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	must(t, err)
	qp := rcTowards(t, pd, cq, verbs.MTU1024, 14, 7)
	write := func(n int) {
		must(t, qp.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGList: []verbs.SGE{m.SGE(0, n)}, RemoteAddr: 0x1000, RKey: 7}))
	}
	write(8)    // sent: the QP was idle
	write(2048) // gathered from the AllocMR region
	write(8)    // waits for the doorbell (the first is unacknowledged)
	must(t, qp.Destroy())
	qp.mu.Lock()
	n, clean := qp.tx.n, qp.tx.clean()
	qp.mu.Unlock()
	if n != 0 || clean != nil {
		t.Fatalf("after Destroy %d packets are still queued (%v)", n, clean)
	}
	done := make(chan error, 1)
	go func() { done <- m.Dereg() }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("DeregMR waits for packets of a destroyed QP")
	}
}

// TestKeepResponsesKeepsOrder: when a QP fails, its queued requests are
// dropped and its responses kept; a kept NAK is still a response, so on
// the receive path it joins the batch's stage behind earlier responses
// instead of leaving ahead of them.
func TestKeepResponsesKeepsOrder(t *testing.T) {
	c := newCapture("10.9.0.1")
	d := newDevice(t, Config{Transport: c})
	defer d.Close()
	pd, _ := d.AllocPD()
	defer pd.Dealloc()
	cq, _ := d.CreateCQ(64, nil)
	defer cq.Destroy()
	qp := rcTowards(t, pd, cq, verbs.MTU1024, 14, 7)
	defer qp.Destroy()

	qp.mu.Lock()
	bth := wire.BTHFields{PSN: 9, DestQP: 0x99}
	qp.newPacketLocked(qp.route(), wire.RCSendOnly, &bth, 4) // a request
	qp.sendAckLocked(wire.PSN(5), wire.NAKSyndrome(wire.NAKRemoteAccessError))
	qp.tx.keepResponses(d)
	st := newTxStage()
	qp.tx.attach(st)
	qp.flushLocked()
	qp.tx.detach()
	clean := qp.tx.clean()
	qp.mu.Unlock()
	if clean != nil {
		t.Fatal(clean)
	}
	c.mu.Lock()
	sent := len(c.sent)
	c.mu.Unlock()
	if sent != 0 || len(st.pkts) != 1 || wire.BTH(st.pkts[0].Buf).Opcode() != wire.RCAck {
		t.Fatalf("the kept NAK was sent directly (%d sent, %d staged): it would overtake the batch's earlier responses", sent, len(st.pkts))
	}
	st.flush(d)
}

// TestUnqueueReleases: a packet the requester cannot complete (its MR was
// deregistered between post and transmission) leaves the queue through
// the same release as every other packet: no slot keeps a pooled buffer.
func TestUnqueueReleases(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	other, err := f.pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
	must(t, err)
	read := &verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMARead, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{f.mr.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 1}
	must(t, f.rc.PostSend(read))
	// Fenced behind the READ: built only once the READ completes.
	write := &verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled | verbs.SendFence, SGList: []verbs.SGE{other.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 1}
	must(t, f.rc.PostSend(write))
	must(t, other.Dereg())
	resp := buildPacket(wire.RCReadResponseOnly, wire.BTHFields{DestQP: f.rc.QPNum(), PSN: 500}, make([]byte, 8), func(b []byte, info *wire.OpInfo) {
		wire.AETH(b[info.AETHOff:]).Encode(&wire.AETHFields{Syndrome: wire.ACKSyndrome(0x1F)})
	})
	f.handle([]transport.Datagram{{Buf: resp, Peer: f.peer, ICRC: transport.ICRCOK}})
	qp := f.rc.(*QP)
	qp.mu.Lock()
	clean := qp.tx.clean()
	qp.mu.Unlock()
	if clean != nil {
		t.Fatal(clean)
	}
	wcs := make([]verbs.WC, 4)
	n, _ := f.cq.Poll(wcs)
	if n < 2 || wcs[0].Status != verbs.WCSuccess || wcs[1].WRID != 2 || wcs[1].Status != verbs.WCLocProtErr {
		t.Fatalf("completions %+v; want the READ, then the WRITE with a local protection error", wcs[:n])
	}
}

// TestRetryCount7IsFinite: retry_cnt 7 means seven retransmissions, as
// IBTA 9.7.6.1.3 has it (unlike rxe, which retries forever at 7): a peer
// that never answers fails the WQE with WCRetryExcErr after the original
// transmission and seven retries, one local ACK timeout apart.
func TestRetryCount7IsFinite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCapture("10.9.0.1")
		d := newDevice(t, Config{Transport: c})
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(64, nil)
		mr, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
		qp := rcTowards(t, pd, cq, verbs.MTU1024, 14, 7) // 67 ms
		start := time.Now()
		must(t, qp.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 7}))
		wcs := make([]verbs.WC, 1)
		for {
			if n, _ := cq.Poll(wcs); n == 1 {
				break
			}
			time.Sleep(time.Millisecond)
			if time.Since(start) > time.Minute {
				t.Fatal("retry_cnt 7 retried for a minute")
			}
		}
		elapsed := time.Since(start)
		c.mu.Lock()
		sent := len(c.sent)
		c.mu.Unlock()
		if wcs[0].Status != verbs.WCRetryExcErr || sent != 8 {
			t.Fatalf("status %v after %d transmissions; want WCRetryExcErr after 8 (1 + 7 retries)", wcs[0].Status, sent)
		}
		// Each timeout is 67 ms plus a jitter of less than a quarter of it.
		if want := 8 * wire.LocalACKTimeout(14); elapsed < want || elapsed > want+want/4+100*time.Millisecond {
			t.Fatalf("failed after %v; want 8 timeouts, %v to %v", elapsed, want, want+want/4)
		}
		qp.Destroy()
		mr.Dereg()
		cq.Destroy()
		pd.Dealloc()
		d.Close()
	})
}

// TestSplitWriteError states what a failed multi-packet WRITE leaves in
// the target memory. Split into one WRITE ONLY per MTU (towards a peer
// the transport coalesces packets to), each packet is checked against the
// MR on its own: the packets before the first one out of bounds land, and
// the WQE fails with WCRemAccessErr. As FIRST/MIDDLE/LAST the range is
// checked on the FIRST packet: nothing lands. IBTA (C9-? / 9.7.5.2.8)
// leaves the target memory of a failed WRITE undefined, and both forms
// stay inside the MR.
func TestSplitWriteError(t *testing.T) {
	for _, split := range []bool{true, false} {
		t.Run(fmt.Sprintf("split=%v", split), func(t *testing.T) {
			ta, tb := udpPair(t)
			a, b := pairWith(t, Config{Transport: ta, SplitWritesAlways: split, NoSplitWrites: !split}, Config{Transport: tb}, realOpts())
			const mtu, size = 1024, 3 * 1024
			fill(a.buf[:size], 11)
			// The target starts 2500 bytes before the end of b's MR: the
			// third packet would cross it.
			at := len(b.buf) - 2500
			b.settle()
			before := bytes.Clone(b.buf[at:])
			a.post(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, size)},
				RemoteAddr: b.mr.Addr() + uint64(at), RKey: b.mr.RKey()})
			expectWC(t, a.waitWC(a.scq), 1, verbs.WCRemAccessErr, verbs.WCRDMAWrite)
			b.settle()
			landed := b.buf[at:]
			if split {
				if !bytes.Equal(landed[:2*mtu], a.buf[:2*mtu]) || !bytes.Equal(landed[2*mtu:], before[2*mtu:]) {
					t.Fatal("split WRITE: want the two packets before the bad one landed, nothing after")
				}
			} else if !bytes.Equal(landed, before) {
				t.Fatal("FIRST/MIDDLE/LAST WRITE out of bounds changed the target")
			}
		})
	}
}

// TestInlinePostVsDereg: an inline post copies MR memory under the MR's
// lock, so it never overlaps DeregMR (under -race, the detector reports
// the overlap; with AllocMR memory, the copy could fault after the unmap).
func TestInlinePostVsDereg(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	qp, err := f.pd.CreateQP(&verbs.QPInitAttr{SendCQ: f.cq, RecvCQ: f.cq, QPType: verbs.QPTypeUC, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxInlineData: 64}})
	must(t, err)
	defer qp.Destroy()
	must(t, qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags))
	must(t, qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTR, PathMTU: verbs.MTU256, DestQPNum: 0x99, RQPSN: 1,
		AHAttr: verbs.AHAttr{IsGlobal: true, GRH: verbs.GlobalRoute{DGID: verbs.GIDFromAddr(f.peer.Addr()), SGIDIndex: 1}}},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN))
	must(t, qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateRTS, SQPSN: 1}, verbs.QPAttrState|verbs.QPAttrSQPSN))
	for range 20 {
		m, err := f.pd.AllocMR(4096, verbs.AccessLocalWrite)
		must(t, err)
		var wg sync.WaitGroup
		var stop atomic.Bool
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := &verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendInline, SGList: []verbs.SGE{m.SGE(0, 32)}, RemoteAddr: 0x1000, RKey: 1}
			for !stop.Load() {
				qp.PostSend(wr)
				f.cq.Poll(f.wcs)
			}
		}()
		time.Sleep(time.Millisecond)
		must(t, m.Dereg())
		stop.Store(true)
		wg.Wait()
		f.cq.Poll(f.wcs)
	}
}

// TestDeferWorthIt: a QP whose poller keeps coming back to poll rather
// than to post stops deferring its ACKs, and tries again now and then.
func TestDeferWorthIt(t *testing.T) {
	var r responder
	for i := 0; i < deferMissLimit; i++ {
		if !r.deferWorthIt() {
			t.Fatalf("no deferral after %d misses", i)
		}
		r.deferMisses++
	}
	for i := 1; i < deferRetry; i++ {
		if r.deferWorthIt() {
			t.Fatalf("deferral %d ACKs after %d misses in a row", i, deferMissLimit)
		}
	}
	if !r.deferWorthIt() {
		t.Fatalf("no retry after %d ACKs", deferRetry)
	}
	r.deferMisses = 0 // a post sent the retried one
	if !r.deferWorthIt() {
		t.Fatal("no deferral after a post sent the last one")
	}
}

// TestLastByteLast: a reader that polls the last word of a WRITE target
// with sync/atomic, as the tools' latency loops do, and sees the new last
// byte sees the whole message — on arm64 too, where plain stores may be
// seen out of order (under -race, a plain store of the last byte is a
// reported race with the reader's atomic load).
func TestLastByteLast(t *testing.T) {
	const size = 64
	dst := make([]byte, size)
	word := (*uint32)(unsafe.Pointer(&dst[size-4]))
	done := make(chan struct{})
	go func() {
		defer close(done)
		src := make([]byte, size)
		for round := 1; round <= 200; round++ {
			for i := range src {
				src[i] = byte(round)
			}
			copyLastByteLast(dst, src)
			for atomic.LoadUint32(word)>>24 == uint32(byte(round)) && round < 200 {
				runtime.Gosched() // wait for the reader to see it
				if atomic.LoadUint32(&seen) == uint32(round) {
					break
				}
			}
		}
	}()
	for round := 1; round <= 200; round++ {
		for atomic.LoadUint32(word)>>24 != uint32(byte(round)) {
			runtime.Gosched()
		}
		for i, b := range dst[:size-1] {
			if b != byte(round) {
				t.Fatalf("round %d: byte %d is %d though the last byte landed", round, i, b)
			}
		}
		atomic.StoreUint32(&seen, uint32(round))
	}
	<-done
}

var seen uint32

// fullCapture is a capture transport whose buffer can be full: TrySend
// then takes nothing, and Send must not be called (it would block).
type fullCapture struct {
	*capture
	full atomic.Bool
	t    *testing.T
}

func (f *fullCapture) Send(pkts []transport.Datagram) (int, error) {
	if f.full.Load() {
		f.t.Error("Send called on a full transport by a path that must not block")
	}
	return f.capture.Send(pkts)
}

func (f *fullCapture) TrySend(pkts []transport.Datagram) (int, error) {
	for i := range pkts {
		pkts[i].Sent = false
	}
	if f.full.Load() {
		return 0, nil
	}
	for i := range pkts {
		pkts[i].Sent = true
	}
	return f.capture.Send(pkts)
}

// TestReceiveMustNotBlock: a receive batch that must not block (a busy
// poller's) leaves what the transport cannot take: its responses in the
// batch's stage, the requests an ACK lets go in their QP's queue with the
// QP on the backlog. Once the transport has room, the driver's flushes
// send them, each QP's packets in order.
func TestReceiveMustNotBlock(t *testing.T) {
	fc := &fullCapture{capture: newCapture("10.9.0.1"), t: t}
	d := newDevice(t, Config{Transport: fc})
	defer d.Close()
	pd, _ := d.AllocPD()
	defer pd.Dealloc()
	cq, _ := d.CreateCQ(64, nil)
	defer cq.Destroy()
	mem := make([]byte, 4096)
	mr, _ := pd.RegMR(mem, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	defer mr.Dereg()
	qp := rcTowards(t, pd, cq, verbs.MTU1024, 14, 7)
	defer qp.Destroy()
	write := func(id uint64) {
		must(t, qp.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 8)}, RemoteAddr: 0x1000, RKey: 7}))
	}
	write(1) // sent at once (PSN 500)
	for id := uint64(2); id <= 5; id++ {
		write(id) // wait for the doorbell: 1 is unacknowledged
	}
	fc.full.Store(true)
	sentBefore := fc.count
	rx := NewRxBatch()
	rx.MustNotBlock(true)
	ack := buildPacket(wire.RCAck, wire.BTHFields{DestQP: qp.QPNum(), PSN: 500}, nil, func(b []byte, info *wire.OpInfo) {
		wire.AETH(b[info.AETHOff:]).Encode(&wire.AETHFields{Syndrome: wire.ACKSyndrome(0x1F)})
	})
	// A WRITE from the peer too, so the batch has a response (its ACK).
	req := buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: qp.QPNum(), PSN: 100, AckReq: true}, make([]byte, 8), func(b []byte, info *wire.OpInfo) {
		wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: mr.Addr(), RKey: mr.RKey(), DMALen: 8})
	})
	peer := netip.MustParseAddrPort("10.9.0.2:4791")
	d.HandleBatch(rx, []transport.Datagram{{Buf: ack, Peer: peer}, {Buf: req, Peer: peer}}, time.Now())
	if fc.count != sentBefore || !rx.Unsent() || !d.Backlogged() {
		t.Fatalf("with the transport full: %d sent, responses waiting %v, backlog %v; want 0, true, true", fc.count-sentBefore, rx.Unsent(), d.Backlogged())
	}
	fc.full.Store(false)
	rx.MustNotBlock(false)
	rx.FlushStage(d)
	d.FlushBacklog(time.Now())
	if rx.Unsent() || d.Backlogged() {
		t.Fatal("the flushes left packets behind")
	}
	fc.mu.Lock()
	sent := fc.sent[len(fc.sent)-5:]
	fc.mu.Unlock()
	ops := []wire.Opcode{wire.RCAck, wire.RCWriteOnly, wire.RCWriteOnly, wire.RCWriteOnly, wire.RCWriteOnly}
	for i, b := range sent {
		if wire.BTH(b).Opcode() != ops[i] || (i > 0 && wire.BTH(b).PSN() != wire.PSN(500+i)) {
			t.Fatalf("packet %d after the flushes: %v PSN %d; want %v PSN %d", i, wire.BTH(b).Opcode(), wire.BTH(b).PSN(), ops[i], 500+i)
		}
	}
}

// TestAckAfterRewindCompletes: a sequence NAK and an ACK of everything
// sent arrive in one batch. The NAK rewinds the requester into the second
// SEND before it is sent again; the ACK must still complete it (its PSN
// went out once). Treating it as partly sent moved the completer's PSN
// past the SEND, so no later ACK was inside the window and the QP ran out
// of retries although the peer had everything (TestReliabilityUDP's
// send_stream, about 1 run in 60).
func TestAckAfterRewindCompletes(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	for id := uint64(1); id <= 2; id++ {
		must(t, f.rc.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{f.mr.SGE(0, 8)}}))
	}
	qpn := f.rc.QPNum()
	ack := func(psn wire.PSN) []byte { return nak(qpn, psn, wire.ACKSyndrome(0x1F)) }
	dg := func(b []byte) transport.Datagram {
		return transport.Datagram{Buf: b, Peer: f.peer, ICRC: transport.ICRCOK}
	}
	// PSNs 500 and 501 are out. The peer got 500, then 501 after
	// NAKing a gap at 501.
	f.handle([]transport.Datagram{dg(nak(qpn, 501, 0x60)), dg(ack(501))})
	// The ACK of the retransmission, had the first one been lost on the
	// way in: a duplicate, harmless.
	f.handle([]transport.Datagram{dg(ack(501))})
	n, _ := f.cq.Poll(f.wcs)
	if n != 2 || f.wcs[0].WRID != 1 || f.wcs[1].WRID != 2 || f.wcs[0].Status != verbs.WCSuccess || f.wcs[1].Status != verbs.WCSuccess {
		t.Fatalf("completions %+v; want SENDs 1 and 2, both successful", f.wcs[:n])
	}
	qp := f.rc.(*QP)
	qp.mu.Lock()
	psn, next := qp.comp.psn, qp.req.psn
	qp.mu.Unlock()
	if psn != 502 || next != 502 {
		t.Fatalf("completer at PSN %d, requester at %d; want both at 502", psn, next)
	}
}

// TestSendQueueAcrossWrap: the send queue's counters wrap at 2^32 while it
// grows from its first slots to the depth the QP was created with. Every
// WQE must complete once, in order: a ring indexed by counter modulo a
// length that is not a power of two (as it was: MaxSendWR) put two WQEs in
// one slot across the wrap.
func TestSendQueueAcrossWrap(t *testing.T) {
	for _, depth := range []uint32{5, 100, 128} {
		t.Run(fmt.Sprint(depth), func(t *testing.T) {
			d := newDevice(t, Config{Transport: newCapture("10.9.0.1")})
			pd, _ := d.AllocPD()
			cq, _ := d.CreateCQ(256, nil)
			mr, _ := pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
			vqp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: 3, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16}})
			must(t, err)
			p := cm.DefaultParams()
			p.PathMTU, p.SGIDIndex = verbs.MTU1024, 1
			peer := netip.MustParseAddrPort("10.9.0.2:4791")
			must(t, cm.Connect(vqp, cm.Endpoint{QPN: vqp.QPNum(), PSN: 500}, cm.Endpoint{QPN: 0x99, PSN: 100, GID: verbs.GIDFromAddr(peer.Addr())}, &p))
			qp := vqp.(*QP)
			qp.mu.Lock()
			start := ^uint32(0) - depth/2
			qp.sq.head, qp.sq.next, qp.sq.tail = start, start, start
			qp.mu.Unlock()
			for id := uint64(1); id <= uint64(depth); id++ {
				flags := verbs.SendSignaled
				if id%2 == 0 {
					flags |= verbs.SendInline
				}
				must(t, vqp.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: flags, SGList: []verbs.SGE{mr.SGE(0, 8)}}))
			}
			if err := vqp.PostSend(&verbs.SendWR{WRID: 999, Opcode: verbs.WRSend, SGList: []verbs.SGE{mr.SGE(0, 8)}}); err == nil {
				t.Fatalf("post %d to a queue of %d succeeded", depth+1, depth)
			}
			rx := NewRxBatch()
			var got []uint64
			wcs := make([]verbs.WC, 64)
			for range 4 * depth {
				qp.mu.Lock()
				last := qp.req.maxPSN.Add(^uint32(0))
				qp.mu.Unlock()
				d.HandleBatch(rx, []transport.Datagram{{Buf: nak(vqp.QPNum(), last, wire.ACKSyndrome(0x1F)), Peer: peer, ICRC: transport.ICRCOK}}, time.Now())
				n, _ := cq.Poll(wcs)
				for _, wc := range wcs[:n] {
					if wc.Status != verbs.WCSuccess {
						t.Fatalf("completion %+v", wc)
					}
					got = append(got, wc.WRID)
				}
				if len(got) == int(depth) {
					break
				}
			}
			for i, id := range got {
				if id != uint64(i+1) {
					t.Fatalf("completions %v; want 1..%d in order", got, depth)
				}
			}
			if len(got) != int(depth) {
				t.Fatalf("%d completions %v; want %d", len(got), got, depth)
			}
			qp.mu.Lock()
			n := len(qp.sq.wqes)
			qp.mu.Unlock()
			if n != ringLen(depth) {
				t.Fatalf("the send queue has %d slots after %d WQEs outstanding; want %d", n, depth, ringLen(depth))
			}
		})
	}
}
