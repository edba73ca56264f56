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

// testTransport is what the tests use of either implementation.
type testTransport interface {
	transport.Transport
	Stats() Stats
}

// impl is a transport implementation under test.
type impl struct {
	name   string
	listen func(Config) (testTransport, error)
}

// impls are the implementations the tests in this file run against: the
// portable one on every system (on Linux too, where Listen does not use
// it); udp_linux_test.go adds the Linux one.
var impls = []impl{{"portable", func(cfg Config) (testTransport, error) {
	t, err := listenPortable(cfg)
	if err != nil {
		return nil, err
	}
	return t, nil
}}}

// forImpls runs test once per implementation, as a subtest named after
// it, with k distinct per implementation for testAddrs.
func forImpls(t *testing.T, k byte, test func(t *testing.T, im impl, k byte)) {
	for i, im := range impls {
		t.Run(im.name, func(t *testing.T) { test(t, im, k+byte(20*i)) })
	}
}

// testAddrs returns two loopback addresses unique to this process. Only
// Linux has all of 127.0.0.0/8 on its loopback; elsewhere the tests that
// use them skip (TestLoopbackRoundTrip uses 127.0.0.1).
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

func listenPair(t *testing.T, im impl, a, b netip.Addr) (testTransport, testTransport) {
	ta, err := im.listen(Config{Addr: a, Port: 4791})
	if err != nil {
		t.Skipf("cannot bind %v: %v", a, err)
	}
	tb, err := im.listen(Config{Addr: b, Port: 4791})
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
	forImpls(t, 1, func(t *testing.T, im impl, k byte) {
		a, b := testAddrs(t, k)
		ta, tb := listenPair(t, im, a, b)
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
	})
}

// TestICRCVerdicts: a packet whose ICRC does not match the headers is
// reported unverified on IPv4 (the sender's IP ID is invisible) and bad on
// IPv6; a runt is bad.
func TestICRCVerdicts(t *testing.T) {
	forImpls(t, 2, func(t *testing.T, im impl, k byte) {
		a, b := testAddrs(t, k)
		_, tb := listenPair(t, im, a, b)
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

		t6a, err := im.listen(Config{Addr: netip.MustParseAddr("::1"), Port: 4792 + uint16(os.Getpid()%1000)})
		if err != nil {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		defer t6a.Close()
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
	})
}

func TestCloseUnblocksRecv(t *testing.T) {
	forImpls(t, 3, func(t *testing.T, im impl, k byte) {
		a, b := testAddrs(t, k)
		ta, _ := listenPair(t, im, a, b)
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
	})
}

// TestAddressInUse: a transport bound alone (Config.Exclusive, or where
// the address cannot be shared) keeps a second one off its address, and a
// shared one keeps off a transport that wants the address alone.
func TestAddressInUse(t *testing.T) {
	forImpls(t, 4, func(t *testing.T, im impl, k byte) {
		a, _ := testAddrs(t, k)
		first, err := im.listen(Config{Addr: a, Port: 4791, Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := im.listen(Config{Addr: a, Port: 4791}); err == nil {
			t.Fatal("a second transport on an address bound alone succeeded")
		}
		first.Close()
		shared, err := im.listen(Config{Addr: a, Port: 4791})
		if err != nil {
			t.Fatal(err)
		}
		defer shared.Close()
		if _, err := im.listen(Config{Addr: a, Port: 4791, Exclusive: true}); err == nil {
			t.Fatal("an exclusive transport on an address already bound succeeded")
		}
	})
}

// TestZeroAllocs: Send and Recv allocate nothing per call.
func TestZeroAllocs(t *testing.T) {
	forImpls(t, 5, func(t *testing.T, im impl, k byte) {
		a, b := testAddrs(t, k)
		ta, tb := listenPair(t, im, a, b)
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
	})
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
// many flows use several, except that the Linux transport sends to a
// loopback peer from one socket (TestSenderFor checks its spreading to
// other peers).
func TestSourcePortPerFlow(t *testing.T) {
	forImpls(t, 6, func(t *testing.T, im impl, k byte) {
		a, b := testAddrs(t, k)
		ta, tb := listenPair(t, im, a, b)
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
		if im.name == "linux" {
			if len(distinct) != 1 {
				t.Fatalf("32 flows to a loopback peer used %d source ports, want 1", len(distinct))
			}
			return
		}
		if len(distinct) < 4 {
			t.Fatalf("32 flows used only %d source ports", len(distinct))
		}
	})
}

// listenLoopback opens a transport on 127.0.0.1, the one loopback address
// every system has, on a port that was free a moment ago.
func listenLoopback(t *testing.T, im impl) testTransport {
	lo := netip.MustParseAddr("127.0.0.1")
	var err error
	for range 5 {
		var c *net.UDPConn
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
		if err != nil {
			break
		}
		port := c.LocalAddr().(*net.UDPAddr).AddrPort().Port()
		c.Close()
		var tr testTransport
		if tr, err = im.listen(Config{Addr: lo, Port: port}); err == nil {
			t.Cleanup(func() { tr.Close() })
			return tr
		}
	}
	t.Skipf("cannot bind 127.0.0.1: %v", err)
	return nil
}

// TestLoopbackRoundTrip: over 127.0.0.1, a transport sends a packet with
// the ICRC of the headers it really went out in (a plain socket receives
// it and recomputes the ICRC), and a transport receives a packet intact,
// with its ICRC checked against its real source port: the same bytes
// from another port, or with a byte flipped, do not pass.
func TestLoopbackRoundTrip(t *testing.T) {
	forImpls(t, 0, func(t *testing.T, im impl, _ byte) {
		ta, tb := listenLoopback(t, im), listenLoopback(t, im)
		lo := ta.LocalAddr().Addr()

		// Send: a plain socket sees the ICRC for ID 0, DF, the real ports.
		plain, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		plainAddr := plain.LocalAddr().(*net.UDPAddr).AddrPort()
		sent := packet(300, 7)
		if n, err := ta.Send([]transport.Datagram{{Buf: sent, Peer: plainAddr, Flow: 0x11}}); err != nil || n != 1 {
			t.Fatalf("Send = %d, %v", n, err)
		}
		plain.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 2048)
		n, from, err := plain.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatal(err)
		}
		got := buf[:n]
		ip := wire.IPInfo{Src: from.Addr().Unmap(), Dst: lo, SrcPort: from.Port(), DstPort: plainAddr.Port(), DF: true}
		if string(got) != string(sent) || !wire.CheckICRC(got, &ip) {
			t.Fatalf("the datagram sent (%d bytes) is not the packet with the ICRC of its headers %+v", n, ip)
		}

		// Receive: the transport's packet passes the check.
		if _, err := ta.Send([]transport.Datagram{{Buf: packet(300, 8), Peer: tb.LocalAddr(), Flow: 0x11}}); err != nil {
			t.Fatal(err)
		}
		in := recvBufs(4)
		if k, err := tb.Recv(in); err != nil || k != 1 {
			t.Fatalf("Recv = %d, %v", k, err)
		}
		if p := in[0]; p.ICRC != transport.ICRCOK || p.Peer.Addr() != lo || p.Local != lo ||
			string(p.Buf[:len(p.Buf)-wire.ICRCLen]) != string(packet(300, 8)[:len(p.Buf)-wire.ICRCLen]) {
			t.Fatalf("received %d bytes from %v to %v, ICRC %v", len(p.Buf), p.Peer, p.Local, p.ICRC)
		}

		// The packet the plain socket got, resent from the plain socket's
		// port: the ICRC covers the source port, so it does not match.
		// With its ICRC recomputed for that port it does, until a payload
		// byte flips.
		for _, c := range []struct {
			name string
			edit func(b []byte)
			want transport.ICRCStatus
		}{
			{"other source port", func(b []byte) {}, transport.ICRCUnverified},
			{"recomputed", func(b []byte) {
				wire.PutICRC(b, &wire.IPInfo{Src: lo, Dst: lo, SrcPort: plainAddr.Port(), DstPort: tb.LocalAddr().Port(), DF: true})
			}, transport.ICRCOK},
			{"flipped byte", func(b []byte) { b[wire.BTHLen+5] ^= 1 }, transport.ICRCUnverified},
		} {
			c.edit(got)
			if _, err := plain.WriteToUDPAddrPort(got, tb.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			if k, err := tb.Recv(in); err != nil || k != 1 || in[0].ICRC != c.want || in[0].Peer != plainAddr {
				t.Fatalf("%s: Recv = %d, %v: ICRC %v from %v, want %v from %v", c.name, k, err, in[0].ICRC, in[0].Peer, c.want, plainAddr)
			}
		}
	})
}
