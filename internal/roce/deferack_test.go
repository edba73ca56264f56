package roce

import (
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/transport/udp"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// sendLog is a UDP transport that records the opcodes of every Send call,
// counts the packets that came with a separate payload, and counts those
// that broke the gathering rule: a payload of gatherMin bytes or more is
// gathered, a shorter one copied.
type sendLog struct {
	*udp.Transport
	mu         sync.Mutex
	calls      [][]wire.Opcode
	gathered   int
	misgathers int
}

func (s *sendLog) Send(pkts []transport.Datagram) (int, error) {
	ops := make([]wire.Opcode, len(pkts))
	g, bad := 0, 0
	for i, p := range pkts {
		ops[i] = wire.BTH(p.Buf).Opcode()
		n := len(p.Payload)
		if n > 0 {
			g++
		} else {
			var wp wire.Packet
			if wire.Parse(p.Buf, &wp) == nil {
				n = len(wp.Payload)
			}
		}
		if (n >= gatherMin) != (len(p.Payload) > 0) {
			bad++
		}
	}
	s.mu.Lock()
	s.calls = append(s.calls, ops)
	s.gathered += g
	s.misgathers += bad
	s.mu.Unlock()
	return s.Transport.Send(pkts)
}

// counts returns the gathered packets and those against the rule.
func (s *sendLog) counts() (gathered, misgathers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gathered, s.misgathers
}

// realOpts are defaultOpts for tests over real sockets that count packets:
// a Local ACK Timeout of 16 (268 ms), so that a loaded machine does not
// make the requester retransmit.
func realOpts() qpOpts {
	o := defaultOpts()
	o.timeout = 16
	return o
}

// callsWith returns the Send calls that carried an ACK.
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

// deferredAckPair connects a to b, where b's Serve has stepped aside for
// a busy poller (stepAsideCheck is an hour, so it stays aside): what b
// receives, b's polling loop receives inline.
func deferredAckPair(t *testing.T, delay time.Duration) (a, b *node, bl *sendLog) {
	return deferredAckPairWith(t, delay, Config{})
}

// deferredAckPairWith is deferredAckPair with b's device configured as
// cb (its Transport is set here).
func deferredAckPairWith(t *testing.T, delay time.Duration, cb Config) (a, b *node, bl *sendLog) {
	t.Helper()
	oldCheck, oldDelay := stepAsideCheck, ackDelay
	t.Cleanup(func() { stepAsideCheck, ackDelay = oldCheck, oldDelay })
	stepAsideCheck, ackDelay = time.Hour, delay
	ta, tb := udpPair(t)
	bl = &sendLog{Transport: tb}
	cb.Transport = bl
	a, b = pairWith(t, Config{Transport: ta}, cb, realOpts())
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
	if n := a.dev.Counters.Retransmits.Load(); n != 0 {
		t.Fatalf("a retransmitted %d packets", n)
	}
	return bl.callsWith(wire.RCAck)
}

// progressUntil busy-polls n's device, as ib_write_lat polls its buffer,
// until n.buf[off] == want.
func progressUntil(t *testing.T, n *node, off int, want byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.buf[off] != want {
		n.dev.Progress()
		if time.Now().After(deadline) {
			t.Fatalf("byte %d never became %d", off, want)
		}
	}
}

func (n *node) write(id uint64, off, length int) {
	n.post(&verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{n.mr.SGE(off, length)}, RemoteAddr: n.peer.mr.Addr() + uint64(off), RKey: n.peer.mr.RKey()})
}

// TestDeferredAck: the ACK of a packet a busy poller received waits for
// that goroutine and leaves with its next request in one Send call; if
// the goroutine never posts, a timer or destroying the QP sends it, before
// the requester's retransmission timer would fire.
func TestDeferredAck(t *testing.T) {
	t.Run("rides with the answer", func(t *testing.T) {
		a, b, bl := deferredAckPair(t, time.Hour) // only the post can send it
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

	t.Run("timer when the poller goes away", func(t *testing.T) {
		a, b, bl := deferredAckPair(t, 100*time.Microsecond)
		a.buf[0] = 1
		a.write(1, 0, 64)
		progressUntil(t, b, 0, 1)
		// b stops polling and never posts; Serve sleeps for an hour.
		expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
		if n := a.dev.Counters.Retransmits.Load(); n != 0 {
			t.Fatalf("a retransmitted %d packets: the ACK was late", n)
		}
		if acks := bl.callsWith(wire.RCAck); len(acks) != 1 || len(acks[0]) != 1 {
			t.Fatalf("ACK calls %v, want one call with the ACK alone", acks)
		}
	})

	t.Run("destroy sends it", func(t *testing.T) {
		a, b, _ := deferredAckPair(t, time.Hour)
		a.buf[0] = 1
		a.write(1, 0, 64)
		progressUntil(t, b, 0, 1)
		if err := b.qp.Destroy(); err != nil {
			t.Fatal(err)
		}
		b.qp = nil
		expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	})

	t.Run("next poll sends it", func(t *testing.T) {
		a, b, _ := deferredAckPair(t, time.Hour)
		a.buf[0] = 1
		a.write(1, 0, 64)
		progressUntil(t, b, 0, 1)
		wc := a.busyPoll(a.scq, b.dev.Progress, "the ACK never left although b kept polling")
		expectWC(t, wc, 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	})

	t.Run("NoDeferredAck", func(t *testing.T) {
		// The same ping-pong: every ACK leaves at the end of its receive
		// batch, on its own, before the answer is posted.
		a, b, bl := deferredAckPairWith(t, time.Hour, Config{NoDeferredAck: true})
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
