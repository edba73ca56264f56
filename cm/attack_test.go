package cm

// Attacks on the connection manager from another UDP socket speaking CM
// MADs over RoCEv2 (internal/cmattack) against two soft devices on
// loopback: forged REJs and DREQs, a REQ asking for no timeouts, a
// replayed PSK REQ, a flood of REQs and DREQs that name nothing here.
// The attacker knows the victims' comm IDs (the test reads them): the
// strongest off-path attacker, one who guessed or saw them.

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/cmattack"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// attackNet is a server and a client device on loopback addresses that
// share a UDP port, and a third address for the attacker. They close
// when the test ends.
type attackNet struct {
	srv, cli      *soft.Device
	srvIP, cliIP  netip.Addr
	evilIP        netip.Addr
	port          uint16
	srvAddr, evil string
}

func newAttackNet(t *testing.T) *attackNet {
	t.Helper()
	n := &attackNet{srvIP: netip.MustParseAddr("127.0.83.1"), cliIP: netip.MustParseAddr("127.0.83.2"), evilIP: netip.MustParseAddr("127.0.83.3")}
	var err error
	for range 20 {
		c, lerr := net.ListenUDP("udp", &net.UDPAddr{IP: n.srvIP.AsSlice()})
		if lerr != nil {
			t.Skipf("no loopback address: %v", lerr)
		}
		n.port = uint16(c.LocalAddr().(*net.UDPAddr).Port)
		c.Close()
		if n.srv, err = soft.Open(soft.Config{Addr: n.srvIP, Port: n.port}); err != nil {
			continue
		}
		if n.cli, err = soft.Open(soft.Config{Addr: n.cliIP, Port: n.port}); err != nil {
			n.srv.Close()
			continue
		}
		break
	}
	if err != nil {
		t.Skipf("no loopback soft devices: %v", err)
	}
	t.Cleanup(func() {
		for _, d := range []*soft.Device{n.cli, n.srv} {
			Detach(d)
			d.Close()
		}
	})
	n.evil = netip.AddrPortFrom(n.evilIP, n.port).String()
	return n
}

// attacker opens the hostile peer on the attacker's address, where the
// victims' answers to it arrive.
func (n *attackNet) attacker(t *testing.T) *cmattack.Peer {
	p, err := cmattack.Listen(n.evilIP, n.port)
	if err != nil {
		t.Skipf("attacker socket: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// connect returns an established (client, server) pair on a fresh port.
func (n *attackNet) connect(t *testing.T, o *Options) (cli, srv *Conn) {
	t.Helper()
	lo := Options{Context: n.srv}
	if o != nil {
		lo = *o
		lo.Context = n.srv
	}
	l, err := Listen("rdma", netip.AddrPortFrom(n.srvIP, 0).String(), &lo)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan *Conn, 1)
	go func() {
		req, err := l.Accept(context.Background())
		if err != nil {
			acc <- nil
			return
		}
		c, _ := req.Accept(context.Background(), nil)
		acc <- c
	}()
	do := lo
	do.Context = n.cli
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err = Dial(ctx, "rdma", l.Addr().String(), &do)
	if err != nil {
		t.Fatal(err)
	}
	if srv = <-acc; srv == nil {
		t.Fatal("Accept failed")
	}
	t.Cleanup(func() { cli.Close(); srv.Close() })
	return cli, srv
}

// commIDs returns a connection's local and remote comm IDs.
func commIDs(c *Conn) (local, remote uint32) {
	c.id.a.mu.Lock()
	defer c.id.a.mu.Unlock()
	return c.id.localID, c.id.remoteID
}

func alive(c *Conn) bool {
	select {
	case <-c.Done():
		return false
	default:
		return true
	}
}

// TestAttackForgedREJ: REJs and DREQs that name an established
// connection's comm IDs (and QPN) but come from another address, or from
// the peer's address with the wrong peer comm ID, or a REJ after the RTU
// at the passive side: none ends the connection. Before, one REJ naming
// the local comm ID, from anywhere, tore either side down.
func TestAttackForgedREJ(t *testing.T) {
	n := newAttackNet(t)
	evil := n.attacker(t)
	// From the client's own address (another port): it passes the source
	// check and must fail on the comm IDs or the state.
	spoof, err := cmattack.Open(n.cliIP, 0, n.port)
	if err != nil {
		t.Skip(err)
	}
	defer spoof.Close()
	cli, srv := n.connect(t, nil)
	before := Stats(n.srv).Unmatched + Stats(n.cli).Unmatched
	srvLocal, srvRemote := commIDs(srv)
	cliLocal, cliRemote := commIDs(cli)
	rej := func(p *cmattack.Peer, to netip.Addr, local, remote uint32, kind wire.CMMsgKind) {
		t.Helper()
		noErr(t, p.Send(to, wire.CMRejAttr, 1, func(b []byte) {
			r := wire.CMRej{LocalCommID: local, RemoteCommID: remote, MessageRejected: kind, Reason: wire.RejStaleConn}
			r.Encode(b)
		}))
	}
	for _, kind := range []wire.CMMsgKind{wire.CMMsgREQ, wire.CMMsgREP, wire.CMMsgOther} {
		rej(evil, n.srvIP, srvRemote, srvLocal, kind)    // everything right but the source
		rej(evil, n.cliIP, cliRemote, cliLocal, kind)    // the same at the client
		rej(spoof, n.srvIP, srvRemote^1, srvLocal, kind) // the client's address, a wrong comm ID
		rej(spoof, n.srvIP, srvRemote, srvLocal, kind)   // the client's address and IDs, after the RTU
		noErr(t, evil.Send(n.srvIP, wire.CMDReqAttr, 2, func(b []byte) {
			d := wire.CMDReq{LocalCommID: srvRemote, RemoteCommID: srvLocal, RemoteQPN: srv.QP.QPNum()}
			d.Encode(b)
		}))
		noErr(t, spoof.Send(n.cliIP, wire.CMDRepAttr, 3, func(b []byte) {
			d := wire.CMDRep{LocalCommID: cliRemote ^ 1, RemoteCommID: cliLocal}
			d.Encode(b)
		}))
	}
	time.Sleep(300 * time.Millisecond)
	if !alive(srv) || !alive(cli) {
		t.Fatalf("forged REJ/DREQ ended the connection: server %v, client %v", srv.Err(), cli.Err())
	}
	if got := Stats(n.srv).Unmatched + Stats(n.cli).Unmatched - before; got < 12 {
		t.Errorf("Unmatched grew by %d, want at least 12 (every forged message counted)", got)
	}
	// The real peer's disconnect still works.
	cli.Close()
	select {
	case <-srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the client's real DREQ did not end the server's connection")
	}
}

// attackReq is a REQ as rdma_cm sends it, for service port from the
// attacker's address to dst, with the given comm ID and private data.
func attackReq(n *attackNet, port uint16, commID uint32, private []byte) wire.CMReq {
	r := wire.CMReq{LocalCommID: commID, ServiceID: ServiceID(PortSpaceTCP, port), LocalCAGUID: 0xbad,
		LocalQPN: 0x1234, ResponderResources: 1, InitiatorDepth: 1, Transport: wire.CMTransportRC,
		StartingPSN: 0x100, RemoteCMTimeout: 20, LocalCMTimeout: 20, RetryCount: 7, RNRRetryCount: 7, MaxCMRetries: 15,
		PKey: 0xffff, PathMTU: uint8(verbs.MTU1024),
		Primary: wire.CMPath{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: verbs.GIDFromAddr(n.evilIP), RemoteGID: verbs.GIDFromAddr(n.srvIP), HopLimit: 64, LocalACKTimeout: 19}}
	cmaPrivate(r.PrivateData[:], netip.AddrPortFrom(n.evilIP, 40000), netip.AddrPortFrom(n.srvIP, port), private)
	return r
}

// TestAttackUnclampedTimers: a REQ asking for local ACK timeout 0 (no
// timeout at all), CM response timeouts of 31 (2.3 hours per REP) and an
// MRA asking for a service timeout of 31: the passive QP gets an ACK
// timeout within bounds, the REP's retransmission interval and TIMEWAIT
// are bounded, and the dialer waits at most rdma_cm's MRA setting. Before,
// the QP kept timeout 0 and the connection, its QP and memory were held
// forever by a client that went silent.
func TestAttackUnclampedTimers(t *testing.T) {
	n := newAttackNet(t)
	evil := n.attacker(t)
	l, err := Listen("rdma", netip.AddrPortFrom(n.srvIP, 0).String(), &Options{Context: n.srv})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan *Conn, 1)
	go func() {
		req, err := l.Accept(context.Background())
		if err != nil {
			acc <- nil
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, _ := req.Accept(ctx, nil)
		acc <- c
	}()
	req := attackReq(n, l.Addr().Port(), 0x5eed, nil)
	req.Primary.LocalACKTimeout, req.LocalCMTimeout, req.RemoteCMTimeout = 0, 31, 31
	noErr(t, evil.Send(n.srvIP, wire.CMReqAttr, 7, req.Encode))
	m, err := evil.Expect(wire.CMRepAttr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep, _ := wire.ParseCMRep(m.Data)
	noErr(t, evil.Send(n.srvIP, wire.CMRTUAttr, m.TID, func(b []byte) {
		(&wire.CMRTU{LocalCommID: 0x5eed, RemoteCommID: rep.LocalCommID}).Encode(b)
	}))
	c := <-acc
	if c == nil {
		t.Fatal("Accept failed")
	}
	defer c.Close()
	attr, _, err := c.QP.Query()
	if err != nil {
		t.Fatal(err)
	}
	if attr.Timeout < minACKTimeout || attr.Timeout > maxACKTimeout {
		t.Errorf("the server's QP has ACK timeout %d, want %d..%d (the REQ asked for 0: none)", attr.Timeout, minACKTimeout, maxACKTimeout)
	}
	a := c.id.a
	a.mu.Lock()
	tw, retry := convertToDuration(c.id.ackTimeout), c.id.timeout
	a.mu.Unlock()
	if tw > convertToDuration(maxACKTimeout) || retry > convertToDuration(maxCMTimeout) {
		t.Errorf("TIMEWAIT %v, REP/DREQ retry interval %v: want at most %v and %v", tw, retry, convertToDuration(maxACKTimeout), convertToDuration(maxCMTimeout))
	}
	if Stats(n.srv).Clamped == 0 {
		t.Error("the clamped REQ was not counted")
	}

	// The attacker as a listener: the client dials it, it answers the REQ
	// with an MRA asking for 2^31 × 4 µs.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Dial(ctx, "rdma", n.evil, &Options{Context: n.cli})
		done <- err
	}()
	m, err = evil.Expect(wire.CMReqAttr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	dreq, _ := wire.ParseCMReq(m.Data)
	noErr(t, evil.Send(n.cliIP, wire.CMMRAAttr, m.TID, func(b []byte) {
		(&wire.CMMRA{LocalCommID: 0x77, RemoteCommID: dreq.LocalCommID, MessageMRAed: wire.CMMsgREQ, ServiceTimeout: 31}).Encode(b)
	}))
	time.Sleep(200 * time.Millisecond)
	ca := attackAgent(t, n.cli)
	ca.mu.Lock()
	id := ca.ids[dreq.LocalCommID]
	var wait time.Duration
	if id != nil {
		wait = id.timeout
	}
	ca.mu.Unlock()
	if id == nil {
		t.Fatal("the dialer's cmID is gone")
	}
	if max := convertToDuration(maxMRAServiceTimeout) + convertToDuration(maxACKTimeout); wait > max {
		t.Errorf("after the MRA the dialer waits %v per try, want at most %v", wait, max)
	}
	cancel()
	<-done
}

func attackAgent(t *testing.T, ctx verbs.Context) *agent {
	agents.mu.Lock()
	defer agents.mu.Unlock()
	a := agents.m[ctx]
	if a == nil {
		t.Fatal("no agent")
	}
	return a
}

// TestAttackReplayedPSKRequest: an attacker without the PSK that captured
// a dialer's REQ (here: the dialer dialed the attacker) replays it to the
// real listener three times and answers each REP with an RTU: Accept
// never succeeds, each failed proof is counted, and a real dialer with the
// PSK still connects. Before, Accept returned a connection with
// Security=auth each time.
func TestAttackReplayedPSKRequest(t *testing.T) {
	n := newAttackNet(t)
	evil := n.attacker(t)
	psk := randomPSK(t)
	l, err := Listen("rdma", netip.AddrPortFrom(n.srvIP, 0).String(), &Options{Context: n.srv, Security: verbs.SecurityAuth, SecurityPSK: psk})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().Port()

	// Capture: a dialer with the PSK sends its REQ to the attacker.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	go Dial(ctx, "rdma", netip.AddrPortFrom(n.evilIP, port).String(), &Options{Context: n.cli, Security: verbs.SecurityAuth, SecurityPSK: psk})
	m, err := evil.Expect(wire.CMReqAttr, 5*time.Second)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	captured := m.Raw
	reqMsg, _ := wire.ParseCMReq(m.Data)

	before := Stats(n.srv).ProofFailed
	for i := range 3 {
		acc := make(chan error, 1)
		go func() {
			req, err := l.Accept(context.Background())
			if err != nil {
				acc <- err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			c, err := req.Accept(ctx, nil)
			if err == nil {
				err = errors.New("accepted with security " + c.Security.String())
				c.Close()
			}
			acc <- err
		}()
		noErr(t, evil.SendMAD(n.srvIP, captured))
		m, err := evil.Expect(wire.CMRepAttr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rep, _ := wire.ParseCMRep(m.Data)
		noErr(t, evil.Send(n.srvIP, wire.CMRTUAttr, m.TID, func(b []byte) {
			(&wire.CMRTU{LocalCommID: reqMsg.LocalCommID, RemoteCommID: rep.LocalCommID}).Encode(b)
		}))
		if err := <-acc; err == nil || err.Error()[:8] == "accepted" {
			t.Fatalf("replay %d: Accept returned %v, want a failure", i, err)
		}
	}
	if got := Stats(n.srv).ProofFailed - before; got < 3 {
		t.Errorf("ProofFailed grew by %d, want 3", got)
	}
	// A dialer with the PSK still gets in, its RTU proving the key.
	cli, srv := n.connect(t, &Options{Security: verbs.SecurityAuth, SecurityPSK: psk})
	if cli.Security != verbs.SecurityAuth || srv.Security != verbs.SecurityAuth {
		t.Fatalf("security %v / %v", cli.Security, srv.Security)
	}
}

// TestAttackReflection: 1000 REQs for a port nobody listens on and 1000
// DREQs for unknown comm IDs, from the attacker's address as fast as it
// sends: the server answers at most its token bucket's worth and counts
// the rest. Before, each drew its REJ or DREP (one for one, to whatever
// address the packets named).
func TestAttackReflection(t *testing.T) {
	n := newAttackNet(t)
	evil := n.attacker(t)
	l, err := Listen("rdma", netip.AddrPortFrom(n.srvIP, 0).String(), &Options{Context: n.srv})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	closed := l.Addr().Port() + 1
	before := Stats(n.srv).RateLimited
	const flood = 1000
	counted := make(chan int)
	go func() { // read while the flood goes out: the socket buffer holds few answers
		answers := 0
		for {
			m, err := evil.Recv(500 * time.Millisecond)
			if err != nil {
				counted <- answers
				return
			}
			if m.Attr == wire.CMRejAttr || m.Attr == wire.CMDRepAttr {
				answers++
			}
		}
	}()
	start := time.Now()
	for i := range flood {
		r := attackReq(n, closed, uint32(0x10000+i), nil)
		noErr(t, evil.Send(n.srvIP, wire.CMReqAttr, uint64(i), r.Encode))
		noErr(t, evil.Send(n.srvIP, wire.CMDReqAttr, uint64(i), func(b []byte) {
			(&wire.CMDReq{LocalCommID: uint32(i), RemoteCommID: uint32(0x7000000 + i)}).Encode(b)
		}))
		if i%50 == 49 {
			time.Sleep(time.Millisecond) // let the agent keep up: a lost MAD is not a limited one
		}
	}
	answers := <-counted
	elapsed := time.Since(start)
	limit := answerBurst + int(elapsed.Seconds()*answerRate) + 1
	t.Logf("%d REQs and %d DREQs in %v drew %d answers (limit %d)", flood, flood, elapsed, answers, limit)
	if answers > limit {
		t.Errorf("%d answers to %d spoofable messages, want at most %d", answers, 2*flood, limit)
	}
	if Stats(n.srv).RateLimited == before {
		t.Error("no answer was counted as rate-limited")
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
