package udp

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/reuseport"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/wire"
)

// shareAddrs is the address sharing provider/soft gives its transports.
func shareAddrs(addrs []netip.AddrPort) (Share, error) {
	s, err := reuseport.Prepare(addrs)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// The tests in udp_test.go also run against the Linux transport, which
// shares its addresses as a device's does.
func init() {
	impls = append([]impl{{"linux", func(cfg Config) (testTransport, error) {
		if cfg.Share == nil {
			cfg.Share = shareAddrs
		}
		t, err := Listen(cfg)
		if err != nil {
			return nil, err
		}
		return t, nil
	}}}, impls...)
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

// linuxPair opens two Linux transports on this process's pair k of
// loopback addresses, port 4791, closed when the test ends; it skips the
// test if they cannot bind.
func linuxPair(t *testing.T, k byte) (*Transport, *Transport) {
	t.Helper()
	a, b := testAddrs(t, k)
	ta, err := Listen(Config{Addr: a, Port: 4791})
	if err != nil {
		t.Skipf("cannot bind %v: %v", a, err)
	}
	t.Cleanup(func() { ta.Close() })
	tb, err := Listen(Config{Addr: b, Port: 4791})
	if err != nil {
		t.Skipf("cannot bind %v: %v", b, err)
	}
	t.Cleanup(func() { tb.Close() })
	return ta, tb
}

func TestCloseUnblocksWait(t *testing.T) {
	ta, tb := linuxPair(t, 9)
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
		tr, err := Listen(Config{Addr: a, Port: 4791, Share: shareAddrs})
		if err != nil {
			t.Fatal(err)
		}
		want := 1 + 8 + 1
		if _, shared := tr.Slot(); shared {
			want += 2 // the group's two maps
		}
		if n := count() - before; n != want {
			t.Errorf("open transport holds %d descriptors, want %d (socket, 8 senders, eventfd, maps if shared)", n, want)
		}
		tr.Close()
	}
	if n := count() - before; n != 0 {
		t.Fatalf("%d descriptors left open after Close", n)
	}
}

// TestTrySend: TrySend never waits for a full socket. With every sending
// socket full after two messages and a batch from many flows over several
// sockets, it returns at once, marks what went, and for each flow what
// went is a prefix of the flow's datagrams; Send then sends the rest in
// order, and the receiver gets every flow's datagrams in order.
func TestTrySend(t *testing.T) {
	a, b := testAddrs(t, 9)
	ta, err := Listen(Config{Addr: a, Port: 4791, DisableGSO: true})
	if err != nil {
		t.Skipf("cannot bind %v: %v", a, err)
	}
	defer ta.Close()
	tb, err := Listen(Config{Addr: b, Port: 4791, SocketBuffer: 8 << 20})
	if err != nil {
		t.Skipf("cannot bind %v: %v", b, err)
	}
	defer tb.Close()
	ta.fullAfter = 2 // each socket takes two messages, then is "full"
	const flows, per = 8, 24
	pkts := make([]transport.Datagram, 0, flows*per)
	for i := range per {
		for f := range flows {
			pkts = append(pkts, transport.Datagram{Buf: packet(4000, byte(f*per+i)), Peer: tb.LocalAddr(), Flow: uint32(f)})
		}
	}
	n, err := ta.TrySend(pkts)
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for f := range flows {
		gap := false
		for i, p := range pkts {
			if p.Flow != uint32(f) {
				continue
			}
			if p.Sent {
				sent++
				if gap {
					t.Fatalf("flow %d: datagram %d went after an earlier one of the flow stayed", f, i)
				}
			} else {
				gap = true
			}
		}
	}
	if sent != n {
		t.Fatalf("TrySend said %d, marked %d", n, sent)
	}
	t.Logf("TrySend sent %d of %d datagrams", n, len(pkts))
	var rest []transport.Datagram
	for _, p := range pkts {
		if !p.Sent {
			rest = append(rest, p)
		}
	}
	if len(rest) == 0 || n == 0 {
		t.Fatalf("TrySend sent %d of %d: the test tests nothing", n, len(pkts))
	}
	if _, err := ta.Send(rest); err != nil {
		t.Fatal(err)
	}
	next := make([]int, flows) // the next datagram expected of each flow
	got := 0
	rx := recvBufs(64)
	deadline := time.Now().Add(5 * time.Second)
	for got < len(pkts) && time.Now().Before(deadline) {
		k, err := tb.TryRecv(rx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rx[:k] {
			seed := int(p.Buf[wire.BTHLen]) // packet()'s first payload byte
			f, i := seed/per, seed%per
			if i != next[f] {
				t.Fatalf("flow %d: datagram %d arrived, expected %d", f, i, next[f])
			}
			next[f]++
			got++
		}
		for i := range rx {
			rx[i].Buf = rx[i].Buf[:cap(rx[i].Buf)]
		}
	}
	if got != len(pkts) {
		t.Fatalf("received %d of %d datagrams", got, len(pkts))
	}
}

// TestMultiHomed: a transport on an IPv4 and an IPv6 address sends from
// the address each packet names (Datagram.Local) and receives on both,
// reporting the address each packet arrived on, with good ICRCs (the
// ICRC covers the source address, so a packet sent from the wrong one
// would fail the check); a source that is not the transport's is refused.
func TestMultiHomed(t *testing.T) {
	a4, b4 := testAddrs(t, 9)
	v6 := netip.MustParseAddr("::1")
	// Both bind ::1, so each gets its own port.
	pa := uint16(20000 + os.Getpid()%20000)
	ta, err := Listen(Config{Addr: a4, Addrs: []netip.Addr{v6}, Port: pa})
	if err != nil {
		t.Skip(err)
	}
	defer ta.Close()
	tb, err := Listen(Config{Addr: b4, Addrs: []netip.Addr{v6}, Port: pa + 1})
	if err != nil {
		t.Skip(err)
	}
	defer tb.Close()
	if got := ta.LocalAddrs(); len(got) != 2 || got[0] != a4 || got[1] != v6 {
		t.Fatalf("LocalAddrs = %v, want [%v %v]", got, a4, v6)
	}
	in := recvBufs(8)
	for i, c := range []struct {
		from, via netip.Addr
		to        netip.AddrPort
	}{
		{netip.Addr{}, a4, netip.AddrPortFrom(b4, pa+1)}, // zero Local: the first address
		{v6, v6, netip.AddrPortFrom(v6, pa+1)},
		{a4, a4, netip.AddrPortFrom(b4, pa+1)},
		{v6, v6, netip.AddrPortFrom(v6, pa+1)},
	} {
		out := []transport.Datagram{{Buf: packet(64, byte(i)), Peer: c.to, Local: c.from, Flow: uint32(i)}}
		if _, err := ta.Send(out); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		k, err := tb.Recv(in)
		if err != nil || k != 1 {
			t.Fatalf("case %d: Recv = %d, %v", i, k, err)
		}
		p := in[0]
		if p.Local != c.to.Addr() || p.Peer.Addr() != c.via || p.ICRC != transport.ICRCOK || string(p.Buf) != string(out[0].Buf) {
			t.Fatalf("case %d: got local %v peer %v ICRC %v; want local %v peer %v ICRC ok", i, p.Local, p.Peer, p.ICRC, c.to.Addr(), c.via)
		}
	}
	bad := []transport.Datagram{{Buf: packet(8, 0), Peer: netip.AddrPortFrom(b4, pa+1), Local: netip.MustParseAddr("127.0.0.99")}}
	if _, err := ta.Send(bad); err == nil {
		t.Fatal("Send from an address the transport does not have succeeded")
	}
	// A blocking receive wakes for a packet on the second address.
	done := make(chan error, 1)
	go func() {
		_, err := tb.Recv(in)
		done <- err
	}()
	if _, err := ta.Send([]transport.Datagram{{Buf: packet(8, 9), Peer: netip.AddrPortFrom(v6, pa+1), Local: v6}}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestListenAddrsErrors: bad extra addresses are refused with a reason.
func TestListenAddrsErrors(t *testing.T) {
	a, _ := testAddrs(t, 10)
	for _, addrs := range [][]netip.Addr{
		{netip.MustParseAddr("fe80::1")}, // no zone
		{a},                              // twice
		{netip.IPv6Unspecified()},
	} {
		if tr, err := Listen(Config{Addr: a, Addrs: addrs}); err == nil {
			tr.Close()
			t.Errorf("Listen with Addrs %v succeeded", addrs)
		}
	}
}

// TestMultiHomedTryRecv: non-blocking receives take the addresses in
// turn, so a packet waiting on the second address is received within two
// calls, and Wait reports it.
func TestMultiHomedTryRecv(t *testing.T) {
	a4, b4 := testAddrs(t, 11)
	v6 := netip.MustParseAddr("::1")
	pa := uint16(20000 + (os.Getpid()+7)%20000)
	ta, err := Listen(Config{Addr: a4, Addrs: []netip.Addr{v6}, Port: pa})
	if err != nil {
		t.Skip(err)
	}
	defer ta.Close()
	tb, err := Listen(Config{Addr: b4, Addrs: []netip.Addr{v6}, Port: pa + 1})
	if err != nil {
		t.Skip(err)
	}
	defer tb.Close()
	in := recvBufs(8)
	for i := range 4 {
		if _, err := ta.Send([]transport.Datagram{{Buf: packet(16, byte(i)), Peer: netip.AddrPortFrom(v6, pa+1), Local: v6}}); err != nil {
			t.Fatal(err)
		}
		if err := tb.Wait(); err != nil {
			t.Fatal(err)
		}
		got := 0
		for range 2 {
			k, err := tb.TryRecv(in)
			if err != nil {
				t.Fatal(err)
			}
			got += k
		}
		if got != 1 || in[0].Local != v6 {
			t.Fatalf("round %d: two TryRecv calls got %d packets (local %v), want the one on %v", i, got, in[0].Local, v6)
		}
	}
}

// TestSameSteering: packets share a GSO datagram only when a shared
// destination address would steer them to one process: the same slot in
// their destination QPNs' top bits, and not QP1 (MADs go by contents). To
// a destination known not to be shared, any two QPs' packets may, but
// still not QP1's.
func TestSameSteering(t *testing.T) {
	to := func(qpn uint32) *transport.Datagram {
		b := make([]byte, 12)
		b[5], b[6], b[7] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
		return &transport.Datagram{Buf: b}
	}
	slot := func(s, n uint32) uint32 { return s<<(24-SlotBits) | n }
	for _, c := range []struct {
		a, b             uint32
		shared, unshared bool
	}{
		{slot(0, 0x1234), slot(0, 0x1234), true, true},
		{slot(0, 0x1234), slot(0, 0x3FFFF), true, true}, // two QPs of one device
		{slot(3, 0x11), slot(3, 0x2222), true, true},
		{slot(0, 0x1234), slot(1, 0x1234), false, true}, // two processes, or two random QPNs
		{slot(63, 5), slot(62, 5), false, true},
		{0xA51234, 0x07FFFF, false, true},
		{1, slot(0, 0x1234), false, false}, // a MAD goes by its comm ID or service
		{slot(0, 0x1234), 1, false, false},
		{1, 1, false, false},
	} {
		if got := sameSteering(to(c.a), to(c.b), false); got != c.shared {
			t.Errorf("shared peer, QPNs %#x and %#x: same steering %v, want %v", c.a, c.b, got, c.shared)
		}
		if got := sameSteering(to(c.a), to(c.b), true); got != c.unshared {
			t.Errorf("unshared peer, QPNs %#x and %#x: same steering %v, want %v", c.a, c.b, got, c.unshared)
		}
	}
	for _, anyQP := range []bool{false, true} {
		if sameSteering(&transport.Datagram{Buf: []byte{1, 2}}, to(0x11), anyQP) {
			t.Errorf("anyQP %v: a packet too short for a BTH was coalesced", anyQP)
		}
	}
}

// TestUnsharedPeerCache: the transport asks Config.PeerShared once per
// peer per steeringRefresh, treats an error or a missing hook as shared,
// and sees a peer that starts sharing on its next check.
func TestUnsharedPeerCache(t *testing.T) {
	peer := netip.MustParseAddrPort("127.0.0.9:4791")
	var asked int
	shared, fail := false, false
	tr := &Transport{epoch: time.Now()}
	if tr.unsharedPeer(peer) {
		t.Fatal("without PeerShared a peer was taken as unshared")
	}
	tr.peerShared = func(p netip.AddrPort) (bool, error) {
		asked++
		if p != peer {
			t.Errorf("asked about %v, want %v", p, peer)
		}
		if fail {
			return false, errors.New("cannot tell")
		}
		return shared, nil
	}
	if !tr.unsharedPeer(peer) || !tr.unsharedPeer(peer) || asked != 1 {
		t.Fatalf("unshared peer: asked %d times for two sends, want 1", asked)
	}
	shared = true
	if !tr.unsharedPeer(peer) {
		t.Fatal("the cached answer was dropped before steeringRefresh")
	}
	tr.epoch = tr.epoch.Add(-steeringRefresh) // time passes
	if tr.unsharedPeer(peer) || asked != 2 {
		t.Fatalf("a peer that started sharing was not seen after steeringRefresh (asked %d times)", asked)
	}
	shared, fail = false, true
	tr.epoch = tr.epoch.Add(-steeringRefresh)
	if tr.unsharedPeer(peer) {
		t.Fatal("a peer PeerShared could not judge was taken as unshared")
	}
}

// TestUnsharedPeerCoalesces: packets to 64 QPs with full-width random
// QPNs (an unshared device's) leave in one GSO datagram when PeerShared
// says the peer does not share its address, and in many when the peer
// could be shared; either way they arrive intact.
func TestUnsharedPeerCoalesces(t *testing.T) {
	for _, known := range []bool{true, false} {
		a, b := testAddrs(t, 11)
		cfg := Config{Addr: a, Port: 4791, Exclusive: true}
		if known {
			cfg.PeerShared = func(netip.AddrPort) (bool, error) { return false, nil }
		}
		ta, err := Listen(cfg)
		if err != nil {
			t.Skipf("cannot bind %v: %v", a, err)
		}
		tb, err := Listen(Config{Addr: b, Port: 4791, Exclusive: true})
		if err != nil {
			ta.Close()
			t.Skipf("cannot bind %v: %v", b, err)
		}
		if !ta.gso {
			ta.Close()
			tb.Close()
			t.Skip("no UDP GSO in this kernel")
		}
		out := make([]transport.Datagram, 64)
		for i := range out {
			buf := packet(64, byte(i))
			qpn := uint32(i)*0x9E3779%0xFFFFFF | 2 // spread over every top bit, never QP1
			buf[5], buf[6], buf[7] = byte(qpn>>16), byte(qpn>>8), byte(qpn)
			out[i] = transport.Datagram{Buf: buf, Peer: tb.LocalAddr(), Flow: qpn}
		}
		if n, err := ta.Send(out); n != len(out) || err != nil {
			t.Fatalf("Send: %d, %v", n, err)
		}
		want := make([]string, len(out)) // with the ICRCs Send wrote
		for i := range out {
			want[i] = string(out[i].Buf)
		}
		msgs := ta.stats.sendMsgs.Load()
		in := recvBufs(64)
		for got := 0; got < len(out); {
			k, err := tb.Recv(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range in[:k] {
				if string(p.Buf) != want[got] || p.ICRC != transport.ICRCOK {
					t.Fatalf("known unshared %v: packet %d differs or has ICRC %v", known, got, p.ICRC)
				}
				got++
			}
		}
		switch {
		case known && msgs != 1:
			t.Errorf("peer known unshared: 64 packets to 64 QPs took %d datagrams, want 1", msgs)
		case !known && msgs < 8:
			t.Errorf("peer that may be shared: 64 packets to QPs of many slots took %d datagrams, want one per slot run", msgs)
		}
		t.Logf("peer known unshared %v: %d datagrams for 64 packets to 64 QPs", known, msgs)
		ta.Close()
		tb.Close()
	}
}

// TestSenderFor: to a peer that is not on loopback, a flow keeps its
// sending socket and many flows spread over the sockets; to a loopback
// peer every flow takes the first socket, so that one sendmmsg carries a
// batch for many QPs.
func TestSenderFor(t *testing.T) {
	a, _ := testAddrs(t, 9)
	tr, err := Listen(Config{Addr: a, Port: 4791})
	if err != nil {
		t.Skipf("cannot bind %v: %v", a, err)
	}
	defer tr.Close()
	remote := netip.MustParseAddrPort("192.0.2.7:4791")
	used := map[int]bool{}
	for flow := uint32(1); flow <= 64; flow++ {
		d := transport.Datagram{Peer: remote, Flow: flow}
		s := tr.senderFor(&d)
		if again := tr.senderFor(&d); again != s {
			t.Fatalf("flow %d: socket %d, then %d", flow, s, again)
		}
		used[s] = true
		d.Peer = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 4791)
		if s := tr.senderFor(&d); s != 0 {
			t.Fatalf("flow %d to loopback: socket %d, want 0", flow, s)
		}
		d.Peer = netip.MustParseAddrPort("[::ffff:127.0.0.9]:4791")
		if s := tr.senderFor(&d); s != 0 {
			t.Fatalf("flow %d to a v4-mapped loopback peer: socket %d, want 0", flow, s)
		}
	}
	if len(used) != len(tr.senders) {
		t.Fatalf("64 flows to a remote peer used %d of %d sockets", len(used), len(tr.senders))
	}
}

// TestManyFlowsOneCall: packets of 16 QPs to one loopback peer leave in
// one system call, however many sending sockets the transport has.
func TestManyFlowsOneCall(t *testing.T) {
	ta, tb := linuxPair(t, 10)
	out := make([]transport.Datagram, 16)
	for i := range out {
		out[i] = transport.Datagram{Buf: packet(8, byte(i)), Peer: tb.LocalAddr(), Flow: uint32(0x100 + i)}
	}
	before := ta.Stats()
	if n, err := ta.Send(out); n != len(out) || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	st := ta.Stats()
	if calls, sent := st.SendCalls-before.SendCalls, st.Sent-before.Sent; calls != 1 || sent != 16 {
		t.Fatalf("16 packets of 16 flows took %d calls (%d sent), want 1", calls, sent)
	}
	in := recvBufs(64)
	for got := 0; got < len(out); {
		k, err := tb.Recv(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range in[:k] {
			if p.ICRC != transport.ICRCOK {
				t.Fatalf("packet %d: ICRC %v", got, p.ICRC)
			}
			got++
		}
	}
}

// TestConcurrentSends: goroutines that send on one transport at once (a
// device's receive loop sending ACKs while a program posts) each get a
// send state of their own or wait for one; every datagram arrives whole,
// with a good ICRC, once. Run with -race, it also checks that no two
// sends share their system call arrays.
func TestConcurrentSends(t *testing.T) {
	ta, tb := linuxPair(t, 15)
	const senders, batches, per = 4, 200, 4
	var wg sync.WaitGroup
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pkts := make([]transport.Datagram, per)
			for i := range batches {
				for j := range pkts {
					buf := make([]byte, wire.BTHLen+8+wire.ICRCLen)
					wire.BTH(buf).Encode(&wire.BTHFields{Opcode: wire.UDSendOnly, PKey: 0xFFFF, DestQP: 0x11})
					binary.BigEndian.PutUint32(buf[wire.BTHLen:], uint32(g))
					binary.BigEndian.PutUint32(buf[wire.BTHLen+4:], uint32(i*per+j))
					pkts[j] = transport.Datagram{Buf: buf, Peer: tb.LocalAddr(), Flow: uint32(g)}
				}
				if n, err := ta.Send(pkts); n != per || err != nil {
					t.Errorf("sender %d: Send = %d, %v", g, n, err)
					return
				}
			}
		}()
	}
	seen := make(map[[2]uint32]bool)
	in := recvBufs(64)
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < senders*batches*per && time.Now().Before(deadline) {
		k, err := tb.TryRecv(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range in[:k] {
			if p.ICRC != transport.ICRCOK || len(p.Buf) != wire.BTHLen+8+wire.ICRCLen {
				t.Fatalf("a datagram of %d bytes with ICRC %v", len(p.Buf), p.ICRC)
			}
			id := [2]uint32{binary.BigEndian.Uint32(p.Buf[wire.BTHLen:]), binary.BigEndian.Uint32(p.Buf[wire.BTHLen+4:])}
			if seen[id] || id[0] >= senders || id[1] >= batches*per {
				t.Fatalf("datagram %v twice or unknown", id)
			}
			seen[id] = true
		}
	}
	wg.Wait()
	if len(seen) != senders*batches*per {
		t.Fatalf("%d of %d datagrams arrived", len(seen), senders*batches*per)
	}
}
