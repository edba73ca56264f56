package roce

// Attacks on a live endpoint (after ReDMArk): forged responses,
// blind injection, replays that are not replays, invalidation of other
// people's memory, oversized requests. Over real UDP where the attack
// comes from another socket; through HandleBatch where it must come from
// the peer's own address and port (which an attacker on the path has).

import (
	"bytes"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// attacker is a plain UDP socket on the victim's peer's address, with a
// port of its own (as any process on that host can open).
type attacker struct {
	t    *testing.T
	conn *net.UDPConn
	to   netip.AddrPort
}

func newAttacker(t *testing.T, from netip.Addr, to netip.AddrPort) *attacker {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)))
	if err != nil {
		t.Skipf("cannot bind %v: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return &attacker{t: t, conn: c, to: to}
}

// send sends pkt with a correct ICRC for its headers.
func (a *attacker) send(pkt []byte) {
	src := a.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	wire.PutICRC(pkt, &wire.IPInfo{Src: src.Addr().Unmap(), Dst: a.to.Addr(), SrcPort: src.Port(), DstPort: a.to.Port(), DF: true})
	if _, err := a.conn.WriteToUDPAddrPort(pkt, a.to); err != nil {
		a.t.Fatal(err)
	}
}

func nak(qpn uint32, psn wire.PSN, syndrome uint8) []byte {
	return buildPacket(wire.RCAck, wire.BTHFields{DestQP: qpn, PSN: psn}, nil, func(b []byte, info *wire.OpInfo) {
		wire.AETH(b[info.AETHOff:]).Encode(&wire.AETHFields{Syndrome: syndrome})
	})
}

// attackPair connects a to b over UDP, both accepting unverified ICRCs
// (the setting that talks to rxe: the most an attacker can hope for).
func attackPair(t *testing.T) (a, b *node) {
	ta, tb := udpPair(t)
	return pairWith(t, Config{Transport: ta, AcceptUnverifiedICRC: true}, Config{Transport: tb, AcceptUnverifiedICRC: true}, realOpts())
}

// TestAttackForgedNAKs: NAKs forged from the peer's host but another port,
// with random PSNs (fatal, RNR and sequence NAKs), do not touch a live QP:
// before, one to five of them moved it to ERR or stalled it.
func TestAttackForgedNAKs(t *testing.T) {
	a, b := attackPair(t)
	x := newAttacker(t, b.dev.local, netip.AddrPortFrom(a.dev.local, a.dev.port))
	// Traffic in flight while the attack runs.
	a.write(1, 0, 4096)
	rng := rand.New(rand.NewPCG(9, 9))
	for range 200 {
		psn := wire.PSN(rng.Uint32() & 0xFFFFFF)
		x.send(nak(a.qp.QPNum(), psn, wire.NAKSyndrome(wire.NAKRemoteAccessError)))
		x.send(nak(a.qp.QPNum(), psn, wire.RNRNAKSyndrome(31)))
		x.send(nak(a.qp.QPNum(), psn, wire.NAKSyndrome(wire.NAKPSNSeqError)))
	}
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
	// Dropped as not from the peer's port, once the peer's first
	// response pinned it, or before that as outside the PSNs in flight.
	dropped := func() uint64 { return a.dev.Counters.DropWrongSource.Load() + a.dev.Counters.DropOutOfWindow.Load() }
	deadline := time.Now().Add(5 * time.Second)
	for dropped() < 600 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := dropped(); n < 600 {
		t.Fatalf("%d of 600 forged NAKs dropped", n)
	}
	a.write(2, 0, 64)
	expectWC(t, a.waitWC(a.scq), 2, verbs.WCSuccess, verbs.WCRDMAWrite)
	if a.qp.State() != verbs.QPStateRTS || a.dev.Counters.RcvdRNRErr.Load()+a.dev.Counters.RcvdSeqErr.Load()+a.dev.Counters.NAKsRcvd.Load() != 0 {
		t.Fatalf("QP %v, NAKs acted on: rnr %d seq %d fatal %d", a.qp.State(), a.dev.Counters.RcvdRNRErr.Load(), a.dev.Counters.RcvdSeqErr.Load(), a.dev.Counters.NAKsRcvd.Load())
	}
}

// TestAttackNAKOutsideWindow: even from the peer's own address and port
// (an on-path attacker, or a confused peer), a NAK is acted on only with
// a request outstanding and a PSN among those in flight.
func TestAttackNAKOutsideWindow(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	qpn := f.rc.QPNum()
	send := func(pkt []byte) { f.handle([]transport.Datagram{{Buf: pkt, Peer: f.peer, ICRC: transport.ICRCOK}}) }
	// Nothing outstanding: any NAK is noise.
	send(nak(qpn, 500, wire.NAKSyndrome(wire.NAKRemoteAccessError)))
	if f.rc.State() != verbs.QPStateRTS {
		t.Fatal("a NAK with nothing outstanding failed the QP")
	}
	// One WRITE outstanding at PSN 500: NAKs for other PSNs are dropped.
	must(t, f.rc.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{f.mr.SGE(0, 8)}, RemoteAddr: 1, RKey: 1}))
	for _, psn := range []wire.PSN{499, 501, 0, 0x800000, 0xFFFFFF} {
		send(nak(qpn, psn, wire.NAKSyndrome(wire.NAKRemoteAccessError)))
		send(nak(qpn, psn, wire.RNRNAKSyndrome(31)))
	}
	if f.rc.State() != verbs.QPStateRTS || f.dev.Counters.DropOutOfWindow.Load() != 10 {
		t.Fatalf("QP %v after NAKs outside the window; %d dropped out of window, want 10", f.rc.State(), f.dev.Counters.DropOutOfWindow.Load())
	}
	// The real one is acted on.
	send(nak(qpn, 500, wire.NAKSyndrome(wire.NAKRemoteAccessError)))
	if n, _ := f.cq.Poll(f.wcs[:1]); n != 1 || f.wcs[0].Status != verbs.WCRemAccessErr {
		t.Fatalf("the NAK inside the window was not acted on: %d %+v", n, f.wcs[0])
	}
}

// TestAttackBlindInjection: once a connection has carried traffic, a
// sweep of PSNs for a SEND into it from another socket on the peer's host
// lands nothing, though the attacker knows the QPN and the sweep covers
// the expected PSN; before, a SEND got in after millions of guesses and
// the legitimate message at its PSN was then lost as a "duplicate".
// (Before the first packet, the QPN and the initial PSN are random: 2^48
// guesses.)
func TestAttackBlindInjection(t *testing.T) {
	a, b := attackPair(t)
	x := newAttacker(t, a.dev.local, netip.AddrPortFrom(b.dev.local, b.dev.port))
	exchange := func(id uint64, msg string) {
		t.Helper()
		b.postRecv(id, 0, 64)
		copy(a.buf, msg)
		a.post(&verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{a.mr.SGE(0, len(msg))}})
		expectWC(t, a.waitWC(a.scq), id, verbs.WCSuccess, verbs.WCSend)
		wc := b.waitWC(b.rcq)
		b.settle()
		if wc.Status != verbs.WCSuccess || wc.WRID != id || string(b.buf[:len(msg)]) != msg {
			t.Fatalf("receive %d %v %q; want %d %q: an injected SEND got in", wc.WRID, wc.Status, b.buf[:len(msg)], id, msg)
		}
	}
	exchange(1, "first")
	b.postRecv(99, 0, 64) // a receive WQE the injection could take
	b.qp.(*QP).mu.Lock()
	next := b.qp.(*QP).resp.psn
	b.qp.(*QP).mu.Unlock()
	for i := range 1 << 14 {
		x.send(buildPacket(wire.RCSendOnly, wire.BTHFields{DestQP: b.qp.QPNum(), PSN: next.Add(uint32(i) - 1<<13)}, []byte("evil!"), nil))
		if i%2048 == 0 {
			time.Sleep(time.Millisecond) // let the receiver keep up
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.dev.Counters.DropWrongSource.Load() < 1<<14 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := b.dev.Counters.DropWrongSource.Load(); n < 1<<14 {
		t.Fatalf("%d of %d injected SENDs dropped as not from the peer", n, 1<<14)
	}
	exchange(99, "second")
}

// TestAttackForgedReplay: a duplicate READ (an old PSN) must repeat the
// READ it claims to repeat: another address, length or rkey is dropped,
// not answered (before, it read other bytes of the region, or failed the
// QP); the same READ, or its tail as a resumed READ asks, is answered.
func TestAttackForgedReplay(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	c := f.dev.tr.(*capture)
	qpn := f.rc.QPNum()
	read := func(psn wire.PSN, va uint64, rkey uint32, n uint32) []byte {
		return buildPacket(wire.RCReadRequest, wire.BTHFields{DestQP: qpn, PSN: psn, AckReq: true}, nil, func(b []byte, info *wire.OpInfo) {
			wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: va, RKey: rkey, DMALen: n})
		})
	}
	sent := func() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.sent) }
	send := func(pkt []byte) { f.handle([]transport.Datagram{{Buf: pkt, Peer: f.peer, ICRC: transport.ICRCOK}}) }
	base := f.mr.Addr()
	send(read(100, base, f.mr.RKey(), 512)) // the real READ: 2 responses at MTU 256
	if sent() != 2 {
		t.Fatalf("%d responses to a 512-byte READ, want 2", sent())
	}
	for _, forged := range [][]byte{
		read(100, base+1024, f.mr.RKey(), 512), // other bytes of the region
		read(100, base, f.mr.RKey(), 1024),     // more bytes
		read(100, base, f.mr.RKey()^1, 512),    // another key
		read(101, base, f.mr.RKey(), 256),      // the tail, at the wrong address
	} {
		send(forged)
	}
	if sent() != 2 || f.dev.Counters.DropBadReplay.Load() != 4 || f.rc.State() != verbs.QPStateRTS {
		t.Fatalf("forged replays: %d more packets sent, %d dropped, QP %v; want 0, 4, RTS", sent()-2, f.dev.Counters.DropBadReplay.Load(), f.rc.State())
	}
	send(read(100, base, f.mr.RKey(), 512))     // the requester's retry
	send(read(101, base+256, f.mr.RKey(), 256)) // a resumed READ's tail
	if sent() != 5 {
		t.Fatalf("%d responses to genuine replays, want 3", sent()-2)
	}
}

// TestAttackEarlyDuplicate: before the peer's first request (and so
// before its source port is pinned) a "duplicate" request, which anyone on
// the peer's address can send, draws no ACK: nothing can be repeated yet.
// Once a request came in, a genuine duplicate is acknowledged again.
func TestAttackEarlyDuplicate(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	c := f.dev.tr.(*capture)
	qpn := f.rc.QPNum()
	write := func(psn wire.PSN) []byte {
		return buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: qpn, PSN: psn, AckReq: true}, make([]byte, 16), func(b []byte, info *wire.OpInfo) {
			wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: f.mr.Addr(), RKey: f.mr.RKey(), DMALen: 16})
		})
	}
	sent := func() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.sent) }
	send := func(pkt []byte) { f.handle([]transport.Datagram{{Buf: pkt, Peer: f.peer, ICRC: transport.ICRCOK}}) }
	for _, psn := range []wire.PSN{99, 50, 0xFFFF00} { // behind the expected 100
		send(write(psn))
	}
	if sent() != 0 || f.dev.Counters.DropEarlyDuplicate.Load() != 3 {
		t.Fatalf("early duplicates: %d packets sent, drop_early_duplicate %d; want 0 and 3", sent(), f.dev.Counters.DropEarlyDuplicate.Load())
	}
	send(write(100)) // the peer's first request: ACKed
	send(write(100)) // its retry, a genuine duplicate: ACKed again
	if sent() != 2 || f.dev.Counters.DuplicateRequest.Load() != 1 {
		t.Fatalf("after the first request: %d ACKs, duplicate_request %d; want 2 and 1", sent(), f.dev.Counters.DuplicateRequest.Load())
	}
}

// TestAttackOversized: a READ longer than a message may be is refused
// before anything is read, and a UD payload longer than the path MTU is
// dropped.
func TestAttackOversized(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	c := f.dev.tr.(*capture)
	read := buildPacket(wire.RCReadRequest, wire.BTHFields{DestQP: f.rc.QPNum(), PSN: 100, AckReq: true}, nil, func(b []byte, info *wire.OpInfo) {
		wire.RETH(b[info.RETHOff:]).Encode(&wire.RETHFields{VA: f.mr.Addr(), RKey: f.mr.RKey(), DMALen: 0xFFFFFFFF})
	})
	f.handle([]transport.Datagram{{Buf: read, Peer: f.peer, ICRC: transport.ICRCOK}})
	c.mu.Lock()
	last := c.sent[len(c.sent)-1]
	c.mu.Unlock()
	if wire.BTH(last).Opcode() != wire.RCAck || wire.AETH(last[wire.BTHLen:]).Syndrome() != wire.NAKSyndrome(wire.NAKInvalidRequest) {
		t.Fatalf("a 4 GiB READ got %v, want NAK invalid request", wire.BTH(last).Opcode())
	}
	ud := buildPacket(wire.UDSendOnly, wire.BTHFields{DestQP: f.ud.QPNum(), PSN: 1}, make([]byte, 2048), func(b []byte, info *wire.OpInfo) {
		wire.DETH(b[info.DETHOff:]).Encode(&wire.DETHFields{QKey: 0x1234, SrcQP: 7})
	})
	f.handle([]transport.Datagram{{Buf: ud, Peer: f.peer, ICRC: transport.ICRCOK}})
	if f.dev.Counters.DropTooLong.Load() != 2 {
		t.Fatalf("drop_too_long %d, want 2", f.dev.Counters.DropTooLong.Load())
	}
}

// TestUnguessableIdentifiers: QPNs are random in the 24-bit space, not
// sequential; MR addresses do not reveal the process's pointers; keys are
// random 32-bit values.
func TestUnguessableIdentifiers(t *testing.T) {
	f := newFuzzTarget(t)
	defer f.destroy()
	q1, q2 := f.rc.QPNum(), f.uc.QPNum()
	if q1 < 0x11 || q2 < 0x11 || q2 == q1+1 || (q1 < 0x1000 && q2 < 0x1000) {
		t.Fatalf("QPNs %#x, %#x look sequential", q1, q2)
	}
	real := uint64(uintptr(unsafe.Pointer(&f.mem[guard])))
	if a := f.mr.Addr(); a == real || a < 1<<32 || a&0xFFF != real&0xFFF {
		t.Fatalf("MR address %#x for memory at %#x: want a random address above 2^32 with the same page offset", a, real)
	}
	mr2, _ := f.pd.RegMR(f.mem[:64], verbs.AccessLocalWrite)
	defer mr2.Dereg()
	if mr2.RKey() == f.mr.RKey()+1 || bytes.Equal([]byte{byte(mr2.LKey())}, []byte{byte(mr2.RKey())}) && mr2.LKey()>>8 == mr2.RKey()>>8 {
		t.Fatalf("keys %#x %#x look derived from each other", mr2.LKey(), mr2.RKey())
	}
}

// TestFloodLeavesTrafficRunning: a flood of forged packets from another
// socket (unknown QPNs, the victim's QPN from a wrong port, garbage) costs
// the victim only their drops: a stream of WRITEs in the meantime
// completes, the flood is counted, the QP stays up. The throughput with
// and without the flood is logged, not asserted: the attacker here is a
// goroutine of this process, so the slowdown is mostly the CPU it takes
// from both ends, not what its packets cost the victim.
func TestFloodLeavesTrafficRunning(t *testing.T) {
	a, b := attackPair(t)
	stream := func(n int) time.Duration {
		start := time.Now()
		for i := range n {
			a.write(uint64(i), 0, 4096)
			expectWC(t, a.waitWC(a.scq), uint64(i), verbs.WCSuccess, verbs.WCRDMAWrite)
		}
		return time.Since(start)
	}
	const n = 100
	quiet := stream(n)
	x := newAttacker(t, a.dev.local, netip.AddrPortFrom(b.dev.local, b.dev.port))
	stop := make(chan struct{})
	var sent int
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(5, 5))
		for {
			select {
			case <-stop:
				return
			default:
			}
			var pkt []byte
			switch sent % 3 {
			case 0: // an unknown QP
				pkt = buildPacket(wire.RCSendOnly, wire.BTHFields{DestQP: rng.Uint32() & 0xFFFFFF, PSN: wire.PSN(rng.Uint32())}, []byte("flood"), nil)
			case 1: // the victim's QP, from a port that is not its peer's
				pkt = buildPacket(wire.RCWriteOnly, wire.BTHFields{DestQP: b.qp.QPNum(), PSN: wire.PSN(rng.Uint32())}, make([]byte, 64), func(p []byte, info *wire.OpInfo) {
					wire.RETH(p[info.RETHOff:]).Encode(&wire.RETHFields{VA: b.mr.Addr(), RKey: b.mr.RKey(), DMALen: 64})
				})
			default: // garbage
				pkt = make([]byte, 64)
				for i := range pkt {
					pkt[i] = byte(rng.Uint32())
				}
			}
			x.send(pkt)
			sent++
		}
	}()
	flooded := stream(n)
	close(stop)
	<-done
	if b.qp.State() != verbs.QPStateRTS {
		t.Fatalf("victim QP %v after the flood", b.qp.State())
	}
	c := &b.dev.Counters
	deadline := time.Now().Add(5 * time.Second)
	dropped := func() uint64 {
		return c.DropUnknownQP.Load() + c.DropWrongSource.Load() + c.DropMalformed.Load() + c.DropICRC.Load() + c.DropWrongTransport.Load() + c.DropPKey.Load()
	}
	for dropped() < uint64(sent)*9/10 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	mb := float64(n*4096) / 1e6
	t.Logf("%d forged packets, %d counted as dropped (the rest lost in the socket buffer); 4 KiB WRITEs: %.1f MB/s quiet, %.1f MB/s during the flood (CPU shared with the attacker)",
		sent, dropped(), mb/quiet.Seconds(), mb/flooded.Seconds())
	if dropped() == 0 {
		t.Fatal("no packet of the flood was counted")
	}
}
