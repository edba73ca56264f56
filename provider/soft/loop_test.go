package soft

import (
	"context"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/transport/udp"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// The driver's tests: busy pollers receiving for the device, the receive
// loop stepping aside for them, and ACKs waiting for their next post.
// The devices run on a virtual clock (virtualClock): no timer of the
// driver or the engine fires unless a test moves the time, so what a test
// says happens "after the timer" or "before any retransmission" happens
// so however loaded the host is.

var udpPairs atomic.Uint32

// udpPair opens two UDP transports on loopback addresses unique to this
// test process.
func udpPair(t *testing.T) (*udp.Transport, *udp.Transport) {
	t.Helper()
	k := udpPairs.Add(1)
	base := byte(os.Getpid()%200) + 20
	a := netip.AddrFrom4([4]byte{127, base, byte(200 + k), 1})
	b := netip.AddrFrom4([4]byte{127, base, byte(200 + k), 2})
	ta, err := udp.Listen(udp.Config{Addr: a})
	if err != nil {
		t.Skipf("loopback UDP unavailable: %v", err)
	}
	tb, err := udp.Listen(udp.Config{Addr: b})
	if err != nil {
		ta.Close()
		t.Skipf("loopback UDP unavailable: %v", err)
	}
	return ta, tb
}

// sendLog records the opcodes of every Send call of a UDP transport.
type sendLog struct {
	*udp.Transport
	mu    sync.Mutex
	calls [][]wire.Opcode
	// checkSlots, when set, makes every receive check that each slot it
	// is handed points at a whole, unused receive buffer (resetBufs);
	// badSlots counts those that did not.
	checkSlots atomic.Bool
	badSlots   atomic.Int64
	// acksOut counts the ACKs whose Send or TrySend call has returned:
	// on loopback they are in the peer's socket by then.
	acksOut atomic.Int64
}

func (s *sendLog) Recv(pkts []transport.Datagram) (int, error) {
	s.checkRecvSlots(pkts)
	return s.Transport.Recv(pkts)
}

// TryRecv checks the slots as Recv does. (The transport polls on Linux;
// the portable transport, elsewhere, has no TryRecv and receives nothing
// here.)
func (s *sendLog) TryRecv(pkts []transport.Datagram) (int, error) {
	s.checkRecvSlots(pkts)
	if p, ok := any(s.Transport).(transport.Poller); ok {
		return p.TryRecv(pkts)
	}
	return 0, nil
}

func (s *sendLog) checkRecvSlots(pkts []transport.Datagram) {
	if !s.checkSlots.Load() {
		return
	}
	for _, p := range pkts {
		if len(p.Buf) < roce.MaxPacketSize || p.Peer.IsValid() || p.Payload != nil {
			s.badSlots.Add(1)
		}
	}
}

func (s *sendLog) Send(pkts []transport.Datagram) (int, error) {
	ops := make([]wire.Opcode, len(pkts))
	for i, p := range pkts {
		ops[i] = wire.BTH(p.Buf).Opcode()
	}
	s.mu.Lock()
	s.calls = append(s.calls, ops)
	s.mu.Unlock()
	n, err := s.Transport.Send(pkts)
	for _, p := range pkts[:n] {
		if wire.BTH(p.Buf).Opcode() == wire.RCAck {
			s.acksOut.Add(1)
		}
	}
	return n, err
}

// TrySend records what went, as Send does.
func (s *sendLog) TrySend(pkts []transport.Datagram) (int, error) {
	n, err := s.Transport.TrySend(pkts)
	ops := make([]wire.Opcode, 0, n)
	for _, p := range pkts {
		if p.Sent {
			ops = append(ops, wire.BTH(p.Buf).Opcode())
			if wire.BTH(p.Buf).Opcode() == wire.RCAck {
				s.acksOut.Add(1)
			}
		}
	}
	if len(ops) > 0 {
		s.mu.Lock()
		s.calls = append(s.calls, ops)
		s.mu.Unlock()
	}
	return n, err
}

// callsWith returns the Send calls that carried op.
func (s *sendLog) callsWith(op wire.Opcode) [][]wire.Opcode {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]wire.Opcode
	for _, c := range s.calls {
		for _, o := range c {
			if o == op {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// node is one side: a device with a PD, CQs, an RC QP and a buffer.
type node struct {
	t        *testing.T
	dev      *Device
	pd       verbs.PD
	scq, rcq verbs.CQ
	qp       verbs.QP
	mr       verbs.MR
	buf      []byte
	wcs      [1]verbs.WC
	peer     *node
	clk      *virtualClock // Config.Clock
}

func openNode(t *testing.T, cfg Config) *node {
	t.Helper()
	d, err := Open(cfg)
	must(t, err)
	n := &node{t: t, dev: d, buf: make([]byte, 1<<16)}
	n.clk, _ = cfg.Clock.(*virtualClock)
	t.Cleanup(n.close)
	n.pd, err = d.AllocPD()
	must(t, err)
	n.scq, err = d.CreateCQ(256, nil)
	must(t, err)
	n.rcq, err = d.CreateCQ(256, nil)
	must(t, err)
	n.mr, err = n.pd.RegMR(n.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	must(t, err)
	n.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: n.scq, RecvCQ: n.rcq, QPType: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	return n
}

func (n *node) close() {
	if n.qp != nil {
		n.qp.Destroy()
	}
	n.mr.Dereg()
	n.scq.Destroy()
	n.rcq.Destroy()
	n.pd.Dealloc()
	if err := n.dev.Close(); err != nil {
		n.t.Errorf("close: %v", err)
	}
}

// pair opens and connects two nodes on one virtual clock; b's transport
// is logged.
func pair(t *testing.T, ca, cb Config) (a, b *node, bl *sendLog) {
	t.Helper()
	return pairWith(t, ca, cb, nil)
}

// pairWith is pair with the connection parameters changed by tune.
func pairWith(t *testing.T, ca, cb Config, tune func(*cm.Params)) (a, b *node, bl *sendLog) {
	t.Helper()
	ta, tb := udpPair(t)
	bl = &sendLog{Transport: tb}
	ca.Transport, cb.Transport = ta, bl
	clk := newVirtualClock()
	ca.Clock, cb.Clock = clk, clk
	a, b = openNode(t, ca), openNode(t, cb)
	a.peer, b.peer = b, a
	p := cm.DefaultParams()
	p.SGIDIndex = 1
	p.Timeout = 20 // 4.3 s of virtual time: far beyond what any test moves it
	p.MinRNRTimer = 1
	if tune != nil {
		tune(&p)
	}
	ends := func(n *node, psn uint32) cm.Endpoint {
		g, err := n.dev.QueryGID(1, 1)
		must(t, err)
		return cm.Endpoint{QPN: n.qp.QPNum(), PSN: psn, GID: g}
	}
	ea, eb := ends(a, 0x100), ends(b, 0xFFFFF0)
	must(t, cm.Connect(a.qp, ea, eb, &p))
	must(t, cm.Connect(b.qp, eb, ea, &p))
	return a, b, bl
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (n *node) write(id uint64, off, length int) {
	must(n.t, n.qp.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{n.mr.SGE(off, length)}, RemoteAddr: n.peer.mr.Addr() + uint64(off), RKey: n.peer.mr.RKey()}))
}

func (n *node) send(id uint64) {
	must(n.t, n.qp.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{n.mr.SGE(0, 64)}}))
}

func (n *node) postRecv(id uint64) {
	must(n.t, n.qp.PostRecv(&verbs.RecvWR{WRID: id, SGList: []verbs.SGE{n.mr.SGE(0, 64)}}))
}

// waitWC waits for the next completion on cq (CQ.Wait, so the receive
// loop comes back if it stepped aside).
func (n *node) waitWC(cq verbs.CQ) verbs.WC {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if k, err := cq.Poll(n.wcs[:]); err != nil {
			n.t.Fatal(err)
		} else if k == 1 {
			return n.wcs[0]
		}
		if err := cq.Wait(ctx); err != nil {
			n.t.Fatalf("waiting for a completion: %v", err)
		}
	}
}

// busyPoll polls cq, running also on every empty poll, until it returns
// a completion.
func (n *node) busyPoll(cq verbs.CQ, also func(), what string) verbs.WC {
	n.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		k, err := cq.Poll(n.wcs[:])
		if err != nil {
			n.t.Fatal(err)
		}
		if k == 1 {
			return n.wcs[0]
		}
		if also != nil {
			also()
		}
		if time.Now().After(deadline) {
			n.t.Fatal(what)
		}
	}
}

// pollAdvancing polls cq, moving the virtual clock on by step after each
// empty poll (and giving the device's goroutines a moment of real time),
// until it returns a completion.
func (n *node) pollAdvancing(cq verbs.CQ, step time.Duration, what string) verbs.WC {
	n.t.Helper()
	return n.pollAdvancingEach(cq, step, nil, what)
}

// pollAdvancingEach is pollAdvancing that calls each (if not nil) after
// every empty poll.
func (n *node) pollAdvancingEach(cq verbs.CQ, step time.Duration, each func(), what string) verbs.WC {
	n.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		k, err := cq.Poll(n.wcs[:])
		if err != nil {
			n.t.Fatal(err)
		}
		if k == 1 {
			return n.wcs[0]
		}
		if each != nil {
			each()
		}
		n.clk.Advance(step)
		time.Sleep(100 * time.Microsecond)
		if time.Now().After(deadline) {
			n.t.Fatal(what)
		}
	}
}

// realWait waits, in real time, until cond holds: for what the device's
// goroutines do on their own.
func realWait(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// busyPollUntilAside polls n's receive CQ, as a busy application does,
// until n's receive loop has stepped aside.
//
// The loop looks at the pollers between its own polls: if it had already
// gone to wait in the kernel for a packet (a loaded host can delay this
// goroutine past the loop's spin), it would never look. So every 50 ms
// the helper wakes it with a stray datagram, which the device drops.
// asideWithChannelCQ is a pair whose b's loop stepped aside for a busy
// poller, and a CQ of b's with a completion channel, to arm.
func asideWithChannelCQ(t *testing.T) (a, b *node, cq verbs.CQ) {
	t.Helper()
	a, b, _ = pair(t, Config{}, Config{})
	busyPollUntilAside(t, b)
	cq, err := b.dev.CreateCQ(16, verbs.NewCompChannel(4))
	must(t, err)
	t.Cleanup(func() { cq.Destroy() })
	return a, b, cq
}

func busyPollUntilAside(t *testing.T, n *node) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	nudge := time.Now().Add(50 * time.Millisecond)
	for !n.dev.aside.Load() {
		if _, err := n.rcq.Poll(n.wcs[:]); err != nil {
			t.Fatal(err)
		}
		if now := time.Now(); now.After(nudge) {
			wakeLoop(t, n.dev)
			nudge = now.Add(50 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatal("the receive loop did not step aside for a busy poller in 10 s")
		}
	}
}

// wakeLoop sends d's socket a one-byte datagram: a receive loop waiting
// in the kernel wakes up and drops it.
func wakeLoop(t *testing.T, d *Device) {
	t.Helper()
	la, ok := d.tr.(interface{ LocalAddr() netip.AddrPort })
	if !ok {
		t.Fatalf("transport %T has no address", d.tr)
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(la.LocalAddr()))
	must(t, err)
	defer c.Close()
	c.Write([]byte{0})
}

// progressUntil busy-polls n's device, as ib_write_lat polls its buffer,
// until n.buf[off] == want.
func progressUntil(t *testing.T, n *node, off int, want byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.byteAt(off) != want {
		n.dev.Progress()
		if time.Now().After(deadline) {
			t.Fatalf("byte %d never became %d", off, want)
		}
	}
}

// byteAt reads n.buf[off] ordered after the engine's writes.
func (n *node) byteAt(off int) byte {
	roce.Settle(n.mr)
	return n.buf[off]
}

func expectWC(t *testing.T, wc verbs.WC, id uint64, st verbs.WCStatus, op verbs.WCOpcode) {
	t.Helper()
	if wc.WRID != id || wc.Status != st || (st == verbs.WCSuccess && wc.Opcode != op) {
		t.Fatalf("completion %+v; want wr_id %d status %v opcode %v", wc, id, st, op)
	}
}

// expectLoneAck fails the test unless a retransmitted nothing (the ACK
// came in time) and b's ACK left in a system call of its own.
func expectLoneAck(t *testing.T, a *node, bl *sendLog) {
	t.Helper()
	if n := counter(a.dev, "retransmits"); n != 0 {
		t.Fatalf("a retransmitted %d packets: the ACK was late", n)
	}
	if acks := bl.callsWith(wire.RCAck); len(acks) != 1 || len(acks[0]) != 1 {
		t.Fatalf("ACK calls %v, want one call with the ACK alone", acks)
	}
}

func counter(d *Device, name string) uint64 {
	v, _ := d.Counter(name)
	return v
}

// TestServeStepsAside: while the application busy-polls a CQ, the
// device's receive loop sleeps and the poller receives for it; when the
// poller stops, the loop receives again, both when it finds out by itself
// (its periodic check) and at once when the poller blocks in CQ.Wait.
func TestServeStepsAside(t *testing.T) {
	t.Run("poller receives", func(t *testing.T) {
		// The virtual time stands still: the loop comes back only if kicked.
		a, b, _ := pair(t, Config{}, Config{})
		busyPollUntilAside(t, b)
		b.postRecv(7)
		a.send(1)
		// The loop sleeps until its check: only the polling loop can receive.
		expectWC(t, b.busyPoll(b.rcq, nil, "the busy poller did not receive the SEND"), 7, verbs.WCSuccess, verbs.WCRecv)
		if !b.dev.aside.Load() {
			t.Fatal("the loop came back without a kick while the poller polled")
		}
		// b's ACK waits for b's next poll (the sleeping loop would send
		// it only at its next check, which never comes).
		expectWC(t, a.busyPoll(a.scq, b.dev.Progress, "b's ACK never left although b kept polling"), 1, verbs.WCSuccess, verbs.WCSend)

		// Blocking in CQ.Wait kicks the loop back at once: a SEND that
		// only the loop can now receive completes the wait.
		b.postRecv(8)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done <- b.rcq.Wait(ctx)
		}()
		realWait(t, func() bool { return !b.dev.aside.Load() }, "CQ.Wait did not bring the loop back")
		a.send(2)
		if err := <-done; err != nil {
			t.Fatalf("CQ.Wait after the poller stopped: %v", err)
		}
		expectWC(t, b.waitWC(b.rcq), 8, verbs.WCSuccess, verbs.WCRecv)
	})

	t.Run("ReqNotify brings it back", func(t *testing.T) {
		// A program that stops polling, arms a CQ and waits for the event
		// on its channel polls no more: arming must bring the loop back
		// (virtual time stands still, so its check never would).
		a, b, cq := asideWithChannelCQ(t)
		must(t, cq.ReqNotify(false))
		realWait(t, func() bool { return !b.dev.aside.Load() }, "ReqNotify did not bring the loop back")
		b.postRecv(9)
		a.send(3)
		expectWC(t, b.waitWC(b.rcq), 9, verbs.WCSuccess, verbs.WCRecv)
	})

	t.Run("a spinning waiter's arms wait", func(t *testing.T) {
		// A C thread that waits for its events spinning on
		// ProgressWaiting receives for itself: its arms must not bring
		// the loop back (a wake-up per message), until armGrace passes
		// without another arm.
		a, b, cq := asideWithChannelCQ(t)
		b.dev.ProgressWaiting()
		for range 3 {
			must(t, cq.ReqNotify(false))
			b.clk.Advance(armGrace / 2)
			b.dev.ProgressWaiting()
		}
		// A kick would bring the loop back within milliseconds.
		for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); time.Sleep(time.Millisecond) {
			if !b.dev.aside.Load() {
				t.Fatal("a spinning waiter's arm brought the loop back")
			}
		}
		// It stops spinning (and now waits on the descriptor): the last
		// arm's kick comes armGrace after it.
		must(t, cq.ReqNotify(false))
		b.clk.Advance(armGrace)
		realWait(t, func() bool { return !b.dev.aside.Load() }, "the arm's kick never came")
		if b.dev.spinWaits.Load() {
			t.Fatal("the late kick left the device marked as waited on by spinning")
		}
		b.postRecv(11)
		a.send(5)
		expectWC(t, b.waitWC(b.rcq), 11, verbs.WCSuccess, verbs.WCRecv)
		// The next arm kicks at once again.
		busyPollUntilAside(t, b)
		must(t, cq.ReqNotify(false))
		realWait(t, func() bool { return !b.dev.aside.Load() }, "an arm after the spinning stopped did not bring the loop back")
	})

	t.Run("BeginWait brings it back", func(t *testing.T) {
		// A C thread that spun receiving in ibv_get_cq_event (inline
		// polls) and now blocks on the channel's descriptor polls no
		// more: BeginWait must bring the loop back, and the loop must
		// receive while the thread sleeps (virtual time stands still, so
		// its check never would).
		a, b, _ := pair(t, Config{}, Config{})
		busyPollUntilAside(t, b)
		for range 4 * stepAsidePolls {
			b.dev.Progress()
		}
		b.dev.BeginWait()
		if !b.dev.eng.Waiting() {
			t.Fatal("BeginWait: the engine does not count the waiter")
		}
		realWait(t, func() bool { return !b.dev.aside.Load() }, "BeginWait did not bring the loop back")
		b.postRecv(10)
		r0 := b.dev.PacketsReceived()
		a.send(4)
		realWait(t, func() bool { return b.dev.PacketsReceived() > r0 }, "the loop did not receive while a thread waited outside Go")
		b.dev.EndWait()
		if b.dev.eng.Waiting() {
			t.Fatal("EndWait: the engine still counts the waiter")
		}
	})

	t.Run("comes back by itself", func(t *testing.T) {
		a, b, _ := pair(t, Config{}, Config{})
		busyPollUntilAside(t, b)
		// The poller stops without waiting; a's WRITE needs b's ACK, which
		// only b's loop can now send: at a check that finds the poller
		// gone, or at the first, which may still see polls made after the
		// loop stepped aside, and then receives what waits (asideLook).
		a.write(3, 0, 4096)
		expectWC(t, a.pollAdvancing(a.scq, stepAsideCheck, "b's loop never came back by itself"), 3, verbs.WCSuccess, verbs.WCRDMAWrite)
		// The next check at the latest finds no polls and ends the step.
		deadline := time.Now().Add(10 * time.Second)
		for b.dev.aside.Load() {
			a.clk.Advance(stepAsideCheck)
			time.Sleep(100 * time.Microsecond)
			if time.Now().After(deadline) {
				t.Fatal("the loop stayed aside after the poller stopped")
			}
		}
	})

	// A program that polls only now and then (a C program spinning on
	// memory between CQ polls) waits for a packet that arrives in between
	// until a check receives it: with a short StepAsideCheck, a short
	// wait. Either the check finds the poller gone and the loop comes
	// back, or (pollersPollOn) the pollers' count still moves, the loop
	// stays aside, and the check receives what waits because nothing was
	// received since the check before (the counted polls were made before
	// the packet came, as such a program's are). The virtual clock moves
	// in steps far below the default check, and at most a few of them.
	for _, pollersPollOn := range []bool{false, true} {
		name := "comes back within Config.StepAsideCheck"
		if pollersPollOn {
			name = "receives what waits while the pollers poll on"
		}
		t.Run(name, func(t *testing.T) {
			const check = 200 * time.Microsecond
			a, b, _ := pair(t, Config{}, Config{StepAsideCheck: check})
			busyPollUntilAside(t, b)
			var poll func()
			if pollersPollOn {
				poll = func() { b.dev.inlinePolls.Add(1) }
			}
			start := a.clk.Now()
			a.write(4, 0, 4096)
			expectWC(t, a.pollAdvancingEach(a.scq, check/4, poll, "b never received the WRITE"), 4, verbs.WCSuccess, verbs.WCRDMAWrite)
			if waited := a.clk.Now().Sub(start); waited > 3*check {
				t.Fatalf("the WRITE completed after %v of virtual time; a check should receive it within two of %v", waited, check)
			}
			if !pollersPollOn {
				return
			}
			if !b.dev.aside.Load() {
				t.Fatal("the loop came back although the pollers kept polling")
			}
			if got := time.Duration(b.dev.asideEvery.Load()); got != check {
				t.Fatalf("after a check found a packet waiting the interval is %v, want Config.StepAsideCheck %v", got, check)
			}
		})
	}

	t.Run("looks less often while the pollers receive everything", func(t *testing.T) {
		const check = 200 * time.Microsecond
		a, b, _ := pair(t, Config{}, Config{StepAsideCheck: check})
		busyPollUntilAside(t, b)
		b.postRecv(10)
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; time.Duration(b.dev.asideEvery.Load()) < stepAsideCheck; i++ {
			if i == 10 {
				a.send(3) // received by b's poll below, not by a check
			}
			if _, err := b.rcq.Poll(b.wcs[:]); err != nil {
				t.Fatal(err)
			}
			a.clk.Advance(time.Millisecond)
			time.Sleep(100 * time.Microsecond)
			if time.Now().After(deadline) {
				t.Fatalf("the interval stayed at %v while the pollers received everything", time.Duration(b.dev.asideEvery.Load()))
			}
		}
		if !b.dev.aside.Load() {
			t.Fatal("the loop came back although the pollers kept polling")
		}
	})

	t.Run("not while a CQ.Wait waits", func(t *testing.T) {
		// CQ.Wait kicks the loop once, when it begins. A loop that
		// decided to step aside just after (on polls made before the
		// waiter came) slept through the completion the waiter waited
		// for: two checks, 20 ms, for each time an rdmanet stream's
		// Write stopped spinning.
		a, b, _ := pair(t, Config{}, Config{})
		b.postRecv(9)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done <- b.rcq.Wait(ctx)
		}()
		realWait(t, b.dev.eng.Waiting, "CQ.Wait never blocked")
		// The waiter blocks, its kicks made; the loop steps aside now.
		aside := make(chan struct{})
		go func() {
			b.dev.stepAside(b.dev.inlinePolls.Load())
			close(aside)
		}()
		select {
		case <-aside:
		case <-time.After(10 * time.Second):
			t.Fatal("the receive loop stepped aside while a goroutine waited in CQ.Wait")
		}
		a.send(4) // the loop receives it: nobody else polls
		if err := <-done; err != nil {
			t.Fatalf("CQ.Wait: %v", err)
		}
		if b.dev.eng.Waiting() {
			t.Fatal("the device still counts a waiter after CQ.Wait returned")
		}
		expectWC(t, b.waitWC(b.rcq), 9, verbs.WCSuccess, verbs.WCRecv)
	})

	t.Run("NoInlinePoll", func(t *testing.T) {
		ta, _ := udpPair(t)
		d, err := Open(Config{Transport: ta, NoInlinePoll: true})
		must(t, err)
		defer d.Close()
		cq, err := d.CreateCQ(16, nil)
		must(t, err)
		defer cq.Destroy()
		var wc [1]verbs.WC
		for range 10000 {
			cq.Poll(wc[:])
		}
		if d.inlinePolls.Load() != 0 || d.aside.Load() {
			t.Fatalf("NoInlinePoll: %d inline polls, aside %v", d.inlinePolls.Load(), d.aside.Load())
		}
	})
}

// TestReceiveSlotsReset: every receive is handed every slot pointing at
// a whole buffer of the device's, however many packets the receive
// before filled (resetBufs resets only those). Busy pollers receive
// through the same pollRx.
func TestReceiveSlotsReset(t *testing.T) {
	a, _, bl := pair(t, Config{}, Config{})
	bl.checkSlots.Store(true)
	for i := 1; i <= 34; i++ {
		n := 1 << (i % 17) // 1 B to 64 KiB: 1 to 16 packets a receive
		a.write(uint64(i), 0, n)
		expectWC(t, a.waitWC(a.scq), uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	if n := bl.badSlots.Load(); n != 0 {
		t.Fatalf("%d receive slots were handed to the transport still holding a packet of the receive before", n)
	}
}

// deferredAckPair connects a to b, where b's receive loop has stepped
// aside for a busy poller (until the virtual time moves): what b
// receives, b's polling receives inline. a acknowledges at once (its
// ACKs never wait for a timer that only a move of the clock would fire).
func deferredAckPair(t *testing.T, cb Config) (a, b *node, bl *sendLog) {
	t.Helper()
	a, b, bl = pair(t, Config{NoDeferredAck: true}, cb)
	busyPollUntilAside(t, b)
	return a, b, bl
}

// pingPong makes rounds 1-byte WRITE ping-pongs from a to b, b polling
// memory as ib_write_lat does, and returns b's Send calls that carried an
// ACK.
func pingPong(t *testing.T, a, b *node, bl *sendLog, rounds int) [][]wire.Opcode {
	t.Helper()
	for i := 1; i <= rounds; i++ {
		a.buf[0] = byte(i)
		a.write(uint64(i), 0, 1)
		progressUntil(t, b, 0, byte(i))
		b.buf[1] = byte(i)
		b.write(uint64(i), 1, 1)
		expectWC(t, a.waitWC(a.scq), uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
		expectWC(t, b.busyPoll(b.scq, nil, "no completion of b's WRITE"), uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
	}
	if n := counter(a.dev, "retransmits"); n != 0 {
		t.Fatalf("a retransmitted %d packets", n)
	}
	return bl.callsWith(wire.RCAck)
}

// TestDeferredAck: the ACK of a packet a busy poller received waits for
// that goroutine and leaves with its next request in one Send call; if
// the goroutine never posts, a timer, its next poll or destroying the QP
// sends it, before the requester's retransmission timer would fire.
func TestDeferredAck(t *testing.T) {
	t.Run("rides with the answer", func(t *testing.T) {
		a, b, bl := deferredAckPair(t, Config{}) // only the post can send it
		acks := pingPong(t, a, b, bl, 20)
		if len(acks) != 20 {
			t.Fatalf("b sent ACKs in %d Send calls, want 20: %v", len(acks), acks)
		}
		for _, c := range acks {
			if len(c) != 2 || c[0] != wire.RCWriteOnly || c[1] != wire.RCAck {
				t.Fatalf("an ACK left in %v, want [WRITE_ONLY ACK] in one call", c)
			}
		}
	})

	t.Run("not for a thread that waits for an event", func(t *testing.T) {
		// ProgressWaiting receives as Progress does, but its caller
		// reads an event next, not posts: the ACK leaves at once. (b's
		// loop is aside and the clock stands still: nothing else would
		// send it.)
		a, b, bl := deferredAckPair(t, Config{})
		for i := 1; i <= 5; i++ {
			a.buf[0] = byte(i)
			a.write(uint64(i), 0, 1)
			deadline := time.Now().Add(10 * time.Second)
			for b.byteAt(0) != byte(i) {
				b.dev.ProgressWaiting()
				if time.Now().After(deadline) {
					t.Fatalf("WRITE %d never arrived", i)
				}
			}
			expectWC(t, a.waitWC(a.scq), uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
		}
		for _, c := range bl.callsWith(wire.RCAck) {
			if len(c) != 1 {
				t.Fatalf("an ACK left in %v, want each alone", c)
			}
		}
	})

	t.Run("timer when the poller goes away", func(t *testing.T) {
		// b's loop does not step aside: it waits in the kernel between
		// packets (SpinPolls -1), so once b stops polling, only the
		// timer sends the ACK of a packet b received inline (or the loop
		// received it itself and acknowledged it at once).
		// A SEND, not a WRITE polled in memory: the loop may write the
		// memory while b reads it.
		a, b, bl := pair(t, Config{}, Config{SpinPolls: -1})
		b.postRecv(7)
		a.send(1)
		expectWC(t, b.busyPoll(b.rcq, nil, "b did not receive the SEND"), 7, verbs.WCSuccess, verbs.WCRecv)
		// b stops polling and never posts; ackDelay passes.
		b.clk.Advance(ackDelay)
		expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCSend)
		expectLoneAck(t, a, bl)
	})

	t.Run("no timer while the loop is aside", func(t *testing.T) {
		// Stepped aside, the loop itself is the ACK's backstop: when the
		// poller blocks in CQ.Wait (kickServe) or its check finds that
		// the poller stopped, it comes back and sends the ACK. Arming
		// the timer on every batch woke an idle thread twice a
		// millisecond in a latency run.
		a, b, bl := deferredAckPair(t, Config{}) // neither the loop's check nor the timer
		a.buf[0] = 1
		a.write(1, 0, 64)
		progressUntil(t, b, 0, 1) // received inline: its ACK waits for b
		if b.dev.ackTimer.Stop() {
			t.Fatal("a busy poller's ACK armed the timer while the loop was aside")
		}
		// b stops polling and never posts; the loop comes back as when a
		// poller blocks in CQ.Wait, and sends the ACK.
		b.dev.kickServe()
		expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
		expectLoneAck(t, a, bl)
	})

	t.Run("timer retries while another goroutine receives", func(t *testing.T) {
		// The timer fires while someone else holds the receive lock,
		// which may have begun its poll before the ACK waited: it must
		// look again, not give up.
		a, b, _ := deferredAckPair(t, Config{})
		a.buf[0] = 1
		a.write(1, 0, 1)
		progressUntil(t, b, 0, 1) // b received inline: its ACK waits for it
		b.dev.rxMu.Lock()
		// The loop sleeps until its check; armed as the active loop's
		// poll arms it, only the timer can send the ACK.
		b.dev.ackTimer.Reset(ackDelay)
		b.clk.Advance(ackDelay) // the timer finds the lock held
		b.dev.rxMu.Unlock()
		b.clk.Advance(ackDelay) // it looked again: the lock is free now
		expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
		if n := counter(a.dev, "timeouts") + counter(a.dev, "retransmits"); n != 0 {
			t.Fatalf("the ACK waited for the requester's timeout (%d timeouts and retransmits)", n)
		}
	})

	t.Run("destroy sends it", func(t *testing.T) {
		a, b, _ := deferredAckPair(t, Config{})
		a.buf[0] = 1
		a.write(1, 0, 64)
		progressUntil(t, b, 0, 1)
		must(t, b.qp.Destroy())
		b.qp = nil
		expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	})

	t.Run("moving to ERR sends it", func(t *testing.T) {
		// cm's Close moves the QP to ERR and then sends the DREQ: the ACK
		// of the peer's last message must leave first, or the DREQ
		// reaches the peer while its request still waits for the ACK,
		// and its request completes flushed although it arrived.
		a, b, bl := deferredAckPair(t, Config{})
		a.buf[0] = 1
		a.write(1, 0, 64)
		progressUntil(t, b, 0, 1)
		must(t, b.qp.Modify(&verbs.QPAttr{QPState: verbs.QPStateErr}, verbs.QPAttrState))
		expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
		expectLoneAck(t, a, bl)
	})

	t.Run("next poll sends it", func(t *testing.T) {
		a, b, _ := deferredAckPair(t, Config{})
		a.buf[0] = 1
		a.write(1, 0, 64)
		progressUntil(t, b, 0, 1)
		wc := a.busyPoll(a.scq, b.dev.Progress, "the ACK never left although b kept polling")
		expectWC(t, wc, 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	})

	t.Run("NoDeferredAck", func(t *testing.T) {
		// The same ping-pong: every ACK leaves at the end of its receive
		// batch, on its own, before the answer is posted.
		a, b, bl := deferredAckPair(t, Config{NoDeferredAck: true})
		acks := pingPong(t, a, b, bl, 20)
		if len(acks) != 20 {
			t.Fatalf("b sent ACKs in %d Send calls, want 20: %v", len(acks), acks)
		}
		for _, c := range acks {
			if len(c) != 1 {
				t.Fatalf("NoDeferredAck: an ACK left in %v, want it alone", c)
			}
		}
	})
}

// TestBusyPollerRunsDueDeadlines: a busy poller runs the engine's due
// deadlines itself. The driver's timer is a Go runtime timer, which runs
// only when a CPU enters the scheduler; a busy poller yields its CPU only
// to runnable goroutines, and a due timer is not one, so with every CPU
// polling a 0.64 ms RNR wait lasted until the runtime preempted a poller,
// 10-20 ms (small SENDs in softrdma bench fell from ~2.8 to ~0.13 M
// messages/s after one RNR NAK). The test moves the virtual time past the
// end of an RNR wait without running the timer, as busy CPUs keep the
// runtime from running it, and polls deadlineLook times: that must resend.
func TestBusyPollerRunsDueDeadlines(t *testing.T) {
	a, b, _ := pairWith(t, Config{}, Config{}, func(p *cm.Params) { p.MinRNRTimer = 16 })
	// b has no receive posted: it answers the SEND with an RNR NAK (its
	// min_rnr_timer is 16, 2.56 ms), and a's requester waits.
	a.send(1)
	realWait(t, func() bool { return counter(a.dev, "rcvd_rnr_err") != 0 }, "no RNR NAK in 10 s")
	until := a.dev.eng.NextDeadline()
	if until.IsZero() {
		t.Fatal("an RNR wait but no deadline")
	}
	a.clk.Jump(until.Sub(a.clk.Now()) + 50*time.Microsecond) // the timer is due and does not run
	before := counter(a.dev, "retransmits")
	for range deadlineLook { // a busy poller looks at the clock every deadlineLook polls
		if _, err := a.scq.Poll(a.wcs[:]); err != nil {
			t.Fatal(err)
		}
	}
	if counter(a.dev, "retransmits") == before {
		t.Fatal("the RNR wait was over, and a busy poll left the requester waiting for the timer")
	}
	// The SEND goes through once b has a receive (after another RNR wait
	// if the resend came first).
	b.postRecv(7)
	expectWC(t, a.pollAdvancing(a.scq, time.Millisecond, "the SEND never completed"), 1, verbs.WCSuccess, verbs.WCSend)
	expectWC(t, b.waitWC(b.rcq), 7, verbs.WCSuccess, verbs.WCRecv)
}

// TestTimerLeavesDeadlinesToPollers: while the receive loop has stepped
// aside, the busy pollers run the engine's due deadlines and the driver's
// timer leaves them alone (its goroutine would wait for the lock of the
// QP a poller sends on, and then take the poller's P); once the loop is
// back, the timer runs them again.
func TestTimerLeavesDeadlinesToPollers(t *testing.T) {
	a, b, _ := pairWith(t, Config{}, Config{}, func(p *cm.Params) { p.MinRNRTimer = 16 })
	busyPollUntilAside(t, a)
	// b has no receive posted: it answers the SEND with an RNR NAK (2.56
	// ms), which a's busy poll receives; a's requester then waits.
	a.send(1)
	deadline := time.Now().Add(10 * time.Second)
	for counter(a.dev, "rcvd_rnr_err") == 0 {
		a.dev.Progress()
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK in 10 s")
		}
	}
	until := a.dev.eng.NextDeadline()
	if until.IsZero() {
		t.Fatal("an RNR wait but no deadline")
	}
	// a stops polling; the wait ends and the timer fires, before the
	// loop's first check (stepAsideCheck after it stepped aside, and the
	// virtual time has not moved since).
	a.clk.Advance(until.Sub(a.clk.Now()) + stepAsideCheck/2)
	if n := counter(a.dev, "retransmits"); n != 0 || !a.dev.aside.Load() {
		t.Fatalf("the timer resent (%d retransmissions) while the loop was aside (%v) for busy pollers", n, a.dev.aside.Load())
	}
	if next := a.dev.eng.NextDeadline(); !next.Equal(until) {
		t.Fatalf("the timer took the deadline (now %v, was %v)", next, until)
	}
	// The poller blocks (the loop comes back): the timer, looking again
	// a check later, runs the wait's end, and the SEND goes through once
	// b has a receive.
	a.dev.kickServe()
	realWait(t, func() bool { return !a.dev.aside.Load() }, "kickServe did not bring the loop back")
	a.clk.Advance(stepAsideCheck)
	if n := counter(a.dev, "retransmits"); n == 0 {
		t.Fatal("the timer did not resend once the loop was back")
	}
	b.postRecv(7)
	expectWC(t, a.pollAdvancing(a.scq, time.Millisecond, "the SEND never completed"), 1, verbs.WCSuccess, verbs.WCSend)
	expectWC(t, b.waitWC(b.rcq), 7, verbs.WCSuccess, verbs.WCRecv)
}

// fullUDP is a UDP transport whose buffer can be made full: Send then
// waits (as sendmmsg does on a full socket) and TrySend takes nothing.
type fullUDP struct {
	*udp.Transport
	full atomic.Bool
}

func (f *fullUDP) Send(pkts []transport.Datagram) (int, error) {
	for f.full.Load() {
		time.Sleep(100 * time.Microsecond)
	}
	return f.Transport.Send(pkts)
}

func (f *fullUDP) TrySend(pkts []transport.Datagram) (int, error) {
	if f.full.Load() {
		for i := range pkts {
			pkts[i].Sent = false
		}
		return 0, nil
	}
	return f.Transport.TrySend(pkts)
}

// TestPollNeverBlocks: CQ.Poll never blocks, even when the transport
// cannot take the ACK the poll's inline receive makes (a full socket
// buffer: CQ.Poll used to wait in sendmmsg holding the receive lock every
// QP needs); the ACK leaves once there is room, before the requester's
// retransmission timer.
func TestPollNeverBlocks(t *testing.T) {
	ta, tb := udpPair(t)
	fb := &fullUDP{Transport: tb}
	clk := newVirtualClock()
	a, b := openNode(t, Config{Transport: ta, Clock: clk}), openNode(t, Config{Transport: fb, Clock: clk})
	a.peer, b.peer = b, a
	p := cm.DefaultParams()
	p.SGIDIndex, p.Timeout = 1, 16
	ga, _ := a.dev.QueryGID(1, 1)
	gb, _ := b.dev.QueryGID(1, 1)
	ea, eb := cm.Endpoint{QPN: a.qp.QPNum(), PSN: 1, GID: ga}, cm.Endpoint{QPN: b.qp.QPNum(), PSN: 2, GID: gb}
	must(t, cm.Connect(a.qp, ea, eb, &p))
	must(t, cm.Connect(b.qp, eb, ea, &p))
	busyPollUntilAside(t, b) // b's busy poller receives for it

	fb.full.Store(true)
	a.buf[0] = 1
	a.write(1, 0, 64)
	// b polls until the WRITE has landed: every poll must return though
	// the ACK it owes cannot leave.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b.byteAt(0) != 1 {
			b.rcq.Poll(b.wcs[:])
		}
		for range 1000 {
			b.rcq.Poll(b.wcs[:])
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("CQ.Poll blocked on a full transport")
	}
	fb.full.Store(false)
	clk.Advance(ackDelay) // the timer sends what the polls could not
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	if n := counter(a.dev, "retransmits"); n != 0 {
		t.Fatalf("a retransmitted %d packets: the ACK waited too long", n)
	}
}
