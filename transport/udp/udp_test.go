package udp

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/wire"
)

// testAddrs returns two loopback addresses unique to this process.
func testAddrs(t *testing.T, k byte) (netip.Addr, netip.Addr) {
	base := byte(os.Getpid()%200 + 20)
	return netip.AddrFrom4([4]byte{127, base, 200 + k, 1}), netip.AddrFrom4([4]byte{127, base, 200 + k, 2})
}

func packet(n int, seed byte) []byte {
	b := make([]byte, wire.PacketLen(wire.RCSendOnly, n))
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: wire.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PadCount: wire.PadFor(n)})
	for i := 0; i < n; i++ {
		b[wire.BTHLen+i] = seed + byte(i)
	}
	return b
}

func listenPair(t *testing.T, a, b netip.Addr) (*Transport, *Transport) {
	ta, err := Listen(Config{Addr: a, Port: 4791})
	if err != nil {
		t.Skipf("cannot bind %v: %v", a, err)
	}
	tb, err := Listen(Config{Addr: b, Port: 4791})
	if err != nil {
		ta.Close()
		t.Skipf("cannot bind %v: %v", b, err)
	}
	t.Cleanup(func() { ta.Close(); tb.Close() })
	return ta, tb
}

func recvBufs(n int) []transport.Datagram {
	pkts := make([]transport.Datagram, n)
	for i := range pkts {
		pkts[i].Buf = make([]byte, 9000)
	}
	return pkts
}

func TestSendRecvBatch(t *testing.T) {
	a, b := testAddrs(t, 1)
	ta, tb := listenPair(t, a, b)
	if ta.LinkMTU() != 65536 {
		t.Errorf("loopback link MTU %d, want 65536", ta.LinkMTU())
	}
	// Five flows: packets of a flow must arrive in order, flows may
	// interleave (Send groups packets by sending socket).
	const n, flows = 40, 5
	out := make([]transport.Datagram, n)
	for i := range out {
		out[i] = transport.Datagram{Buf: packet(100+i, byte(i)), Peer: tb.LocalAddr(), Flow: uint32(i % flows)}
	}
	last := [flows]int{-1, -1, -1, -1, -1}
	seen := map[int]bool{}
	if sent, err := ta.Send(out); err != nil || sent != n {
		t.Fatalf("Send = %d, %v", sent, err)
	}
	in := recvBufs(64)
	got := 0
	for got < n {
		k, err := tb.Recv(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range in[:k] {
			i := -1 // the payload's first byte is the packet's index
			if len(p.Buf) > wire.BTHLen {
				i = int(p.Buf[wire.BTHLen])
			}
			if i < 0 || i >= n || seen[i] || string(p.Buf) != string(out[i].Buf) {
				t.Fatalf("received packet %d (%d bytes) is not one sent, or came twice", got, len(p.Buf))
			}
			seen[i] = true
			if f := i % flows; i < last[f] {
				t.Fatalf("flow %d: packet %d arrived after packet %d", f, i, last[f])
			} else {
				last[f] = i
			}
			if p.ICRC != transport.ICRCOK || p.Peer.Addr() != a || p.Local != b {
				t.Fatalf("packet %d: icrc %v peer %v local %v", got, p.ICRC, p.Peer, p.Local)
			}
			got++
		}
	}
	if s := tb.Stats(); s.Received != n || s.RecvCalls == 0 || s.RecvCalls > n {
		t.Fatalf("stats %+v", s)
	}
}

// TestICRCVerdicts: a packet whose ICRC does not match the headers is
// reported unverified on IPv4 (the sender's IP ID is invisible) and bad on
// IPv6; a runt is bad.
func TestICRCVerdicts(t *testing.T) {
	a, b := testAddrs(t, 2)
	_, tb := listenPair(t, a, b)
	c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 0)), net.UDPAddrFromAddrPort(tb.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(packet(16, 1)) // ICRC left zero
	in := recvBufs(4)
	if k, err := tb.Recv(in); err != nil || k != 1 || in[0].ICRC != transport.ICRCUnverified {
		t.Fatalf("Recv = %d, %v, %v; want one unverified packet", k, err, in[0].ICRC)
	}
	c.Write(packet(64, 1)[:10]) // shorter than a BTH and an ICRC
	if k, _ := tb.Recv(in[:1]); k != 1 || in[0].ICRC != transport.ICRCBad || len(in[0].Buf) != 10 {
		t.Fatalf("runt packet: %v, %d bytes", in[0].ICRC, len(in[0].Buf))
	}

	v6a, v6b := netip.MustParseAddr("::1"), netip.MustParseAddr("::1")
	t6a, err := Listen(Config{Addr: v6a, Port: 4792 + uint16(os.Getpid()%1000)})
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer t6a.Close()
	_ = v6b
	good := []transport.Datagram{{Buf: packet(33, 2), Peer: t6a.LocalAddr()}}
	if _, err := t6a.Send(good); err != nil {
		t.Fatal(err)
	}
	in = recvBufs(4)
	if k, _ := t6a.Recv(in); k != 1 || in[0].ICRC != transport.ICRCOK {
		t.Fatalf("IPv6 packet: %v", in[0].ICRC)
	}
	c6, err := net.DialUDP("udp6", nil, net.UDPAddrFromAddrPort(t6a.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c6.Close()
	c6.Write(packet(16, 1))
	if k, _ := t6a.Recv(in); k != 1 || in[0].ICRC != transport.ICRCBad {
		t.Fatalf("corrupt IPv6 packet: %v", in[0].ICRC)
	}
}

func TestCloseUnblocksRecv(t *testing.T) {
	a, b := testAddrs(t, 3)
	ta, _ := listenPair(t, a, b)
	done := make(chan error, 1)
	go func() {
		_, err := ta.Recv(recvBufs(4))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	ta.Close()
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Recv after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Recv")
	}
	if _, err := ta.Send([]transport.Datagram{{Buf: packet(1, 1), Peer: ta.LocalAddr()}}); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Send after Close: %v", err)
	}
}

func TestAddressInUse(t *testing.T) {
	a, b := testAddrs(t, 4)
	listenPair(t, a, b)
	if _, err := Listen(Config{Addr: a, Port: 4791}); err == nil {
		t.Fatal("a second transport on the same address succeeded")
	}
}

// TestZeroAllocs: Send and Recv allocate nothing per call.
func TestZeroAllocs(t *testing.T) {
	a, b := testAddrs(t, 5)
	ta, tb := listenPair(t, a, b)
	out := make([]transport.Datagram, 32)
	for i := range out {
		out[i] = transport.Datagram{Buf: packet(1024, byte(i)), Peer: tb.LocalAddr()}
	}
	in := recvBufs(64)
	round := func() {
		if _, err := ta.Send(out); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < len(out); {
			k, err := tb.Recv(in)
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
	}
	round()
	if n := testing.AllocsPerRun(50, round); n != 0 {
		t.Fatalf("%.1f allocations per batch, want 0", n)
	}
}

func BenchmarkSendRecv1024(b *testing.B) {
	a, c := netip.MustParseAddr("127.0.99.1"), netip.MustParseAddr("127.0.99.2")
	ta, err := Listen(Config{Addr: a})
	if err != nil {
		b.Skip(err)
	}
	defer ta.Close()
	tc, err := Listen(Config{Addr: c})
	if err != nil {
		b.Skip(err)
	}
	defer tc.Close()
	out := make([]transport.Datagram, 32)
	for i := range out {
		out[i] = transport.Datagram{Buf: packet(1024, byte(i)), Peer: tc.LocalAddr()}
	}
	in := recvBufs(64)
	b.ReportAllocs()
	b.SetBytes(int64(len(out) * 1024))
	for b.Loop() {
		ta.Send(out)
		for got := 0; got < len(out); {
			k, _ := tc.Recv(in)
			got += k
		}
	}
	b.ReportMetric(float64(b.N*len(out))/b.Elapsed().Seconds(), "pkts/s")
}

// TestSourcePortPerFlow: one flow always leaves from one source port, and
// many flows use several.
func TestSourcePortPerFlow(t *testing.T) {
	a, b := testAddrs(t, 6)
	ta, tb := listenPair(t, a, b)
	in := recvBufs(64)
	ports := map[uint32]uint16{}
	distinct := map[uint16]bool{}
	for round := 0; round < 2; round++ {
		for flow := uint32(0x11); flow < 0x11+32; flow++ {
			if _, err := ta.Send([]transport.Datagram{{Buf: packet(8, 1), Peer: tb.LocalAddr(), Flow: flow}}); err != nil {
				t.Fatal(err)
			}
			k, err := tb.Recv(in[:1])
			if err != nil || k != 1 || in[0].ICRC != transport.ICRCOK {
				t.Fatalf("flow %d: %d %v %v", flow, k, err, in[0].ICRC)
			}
			p := in[0].Peer.Port()
			if old, ok := ports[flow]; ok && old != p {
				t.Fatalf("flow %d moved from port %d to %d", flow, old, p)
			}
			ports[flow] = p
			distinct[p] = true
		}
	}
	if len(distinct) < 4 {
		t.Fatalf("32 flows used only %d source ports", len(distinct))
	}
}

// TestGSO: a run of equal-sized packets with a shorter last one leaves as
// one GSO message and arrives as the same packets, in order, each with a
// good ICRC; with GSO disabled the result is identical.
func TestGSO(t *testing.T) {
	for _, disable := range []bool{false, true} {
		a, b := testAddrs(t, 7)
		if disable {
			a, b = testAddrs(t, 8)
		}
		ta, err := Listen(Config{Addr: a, DisableGSO: disable})
		if err != nil {
			t.Skip(err)
		}
		tb, err := Listen(Config{Addr: b, DisableGSO: disable})
		if err != nil {
			ta.Close()
			t.Skip(err)
		}
		out := make([]transport.Datagram, 40)
		for i := range out {
			n := 1024
			if i == len(out)-1 {
				n = 100
			}
			out[i] = transport.Datagram{Buf: packet(n, byte(i)), Peer: tb.LocalAddr(), Flow: 7}
		}
		if _, err := ta.Send(out); err != nil {
			t.Fatal(err)
		}
		in := recvBufs(16)
		for got := 0; got < len(out); {
			k, err := tb.Recv(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range in[:k] {
				if string(p.Buf) != string(out[got].Buf) || p.ICRC != transport.ICRCOK {
					t.Fatalf("gso=%v: packet %d differs or has ICRC %v", !disable, got, p.ICRC)
				}
				got++
			}
		}
		calls := ta.Stats().SendCalls
		if !disable && ta.gso && calls > 2 {
			t.Errorf("GSO on: %d send calls for 40 packets, want them in one GSO message", calls)
		}
		t.Logf("gso=%v (kernel support %v): %d send calls, %d receive calls", !disable, ta.gso, calls, tb.Stats().RecvCalls)
		ta.Close()
		tb.Close()
	}
}

func TestCloseUnblocksWait(t *testing.T) {
	a, b := testAddrs(t, 9)
	ta, tb := listenPair(t, a, b)
	// A datagram wakes Wait and stays queued for the receive that follows.
	done := make(chan error, 1)
	go func() { done <- ta.Wait() }()
	time.Sleep(10 * time.Millisecond)
	if _, err := tb.Send([]transport.Datagram{{Buf: packet(8, 1), Peer: ta.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait with a datagram waiting: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a datagram did not end Wait")
	}
	if k, err := ta.TryRecv(recvBufs(4)); k != 1 || err != nil {
		t.Fatalf("TryRecv after Wait: %d packets, %v", k, err)
	}
	go func() { done <- ta.Wait() }()
	time.Sleep(10 * time.Millisecond)
	ta.Close()
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Wait after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Wait")
	}
}

// The transport opens its sockets and eventfd itself; Close must release
// every one of them.
func TestCloseReleasesDescriptors(t *testing.T) {
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip(err)
		}
		return len(ents)
	}
	a, _ := testAddrs(t, 10)
	before := count()
	for range 5 {
		tr, err := Listen(Config{Addr: a, Port: 4791})
		if err != nil {
			t.Fatal(err)
		}
		if n := count() - before; n != 1+8+1 {
			t.Errorf("open transport holds %d descriptors, want 10 (socket, 8 senders, eventfd)", n)
		}
		tr.Close()
	}
	if n := count() - before; n != 0 {
		t.Fatalf("%d descriptors left open after Close", n)
	}
}
