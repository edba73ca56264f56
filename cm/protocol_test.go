package cm

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// pair is two fake devices on a fake network, with their agents stopped
// at the end of the test (synctest wants every goroutine gone).
type pair struct {
	net    *fakeNet
	cli    *fakeDev
	srv    *fakeDev
	server string
}

func newPair(t *testing.T) *pair {
	n := newFakeNet()
	p := &pair{net: n, cli: n.newDev("cli", "10.0.0.1"), srv: n.newDev("srv", "10.0.0.2"), server: "10.0.0.2:7174"}
	t.Cleanup(func() { Detach(p.cli); Detach(p.srv) })
	return p
}

func (p *pair) listen(t *testing.T, qpType verbs.QPType) *Listener {
	l, err := Listen("rdma", p.server, &Options{Context: p.srv, QPType: qpType})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func (p *pair) dial(ctx context.Context, private string) (*Conn, error) {
	return Dial(ctx, "rdma", p.server, &Options{Context: p.cli, PrivateData: []byte(private)})
}

// serve accepts one request with private data "pong" (or rejects it
// with "go away" when reject is set) and returns the result.
func serve(t *testing.T, l *Listener, reject bool) chan *Conn {
	out := make(chan *Conn, 1)
	go func() {
		req, err := l.Accept(context.Background())
		if err != nil {
			out <- nil
			return
		}
		if reject {
			req.Reject([]byte("go away"))
			out <- nil
			return
		}
		c, err := req.Accept(context.Background(), &Options{PrivateData: []byte("pong")})
		if err != nil {
			t.Logf("accept: %v", err)
		}
		out <- c
	}()
	return out
}

func checkConnected(t *testing.T, cli, srv *Conn) {
	t.Helper()
	cs, ca := cli.QP.(*fakeRCQP).get()
	ss, sa := srv.QP.(*fakeRCQP).get()
	if cs != verbs.QPStateRTS || ss != verbs.QPStateRTS {
		t.Fatalf("QP states %v / %v, want RTS", cs, ss)
	}
	if ca.DestQPNum != srv.QP.QPNum() || sa.DestQPNum != cli.QP.QPNum() {
		t.Errorf("dest QPNs %#x/%#x, QPNs %#x/%#x", ca.DestQPNum, sa.DestQPNum, cli.QP.QPNum(), srv.QP.QPNum())
	}
	if ca.RQPSN != sa.SQPSN || sa.RQPSN != ca.SQPSN {
		t.Errorf("PSNs: client sends %#x expects %#x; server sends %#x expects %#x", ca.SQPSN, ca.RQPSN, sa.SQPSN, sa.RQPSN)
	}
	if ca.AHAttr.GRH.DGID != verbs.GIDFromAddr(srv.local.Addr()) || ca.AHAttr.GRH.SGIDIndex != 1 {
		t.Errorf("client AV %+v", ca.AHAttr)
	}
	if !bytes.HasPrefix(cli.PeerPrivateData, []byte("pong")) || !bytes.HasPrefix(srv.PeerPrivateData, []byte("ping")) {
		t.Errorf("private data %q / %q", cli.PeerPrivateData[:8], srv.PeerPrivateData[:8])
	}
	if cli.InitiatorDepth != 16 || srv.ResponderResources != 16 {
		t.Errorf("depths %d/%d", cli.InitiatorDepth, srv.ResponderResources)
	}
}

func TestConnectDisconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		l := p.listen(t, verbs.QPTypeRC)
		srvC := serve(t, l, false)
		cli, err := p.dial(context.Background(), "ping")
		if err != nil {
			t.Fatal(err)
		}
		srv := <-srvC
		if srv == nil {
			t.Fatal("accept failed")
		}
		checkConnected(t, cli, srv)
		if srv.RemoteAddr().Addr() != cli.LocalAddr().Addr() || srv.RemoteAddr().Port() != cli.LocalAddr().Port() {
			t.Errorf("server sees %v, client is %v", srv.RemoteAddr(), cli.LocalAddr())
		}
		// The client disconnects: the server sees it, the client gets
		// its DREP and leaves TIMEWAIT.
		cli.Close()
		select {
		case <-srv.Done():
		case <-time.After(time.Second):
			t.Fatal("server did not see the disconnect")
		}
		if !errors.Is(srv.Err(), ErrDisconnected) {
			t.Errorf("server Err %v", srv.Err())
		}
		synctest.Wait()
		if p.net.sent(wire.CMDReqAttr) != 1 || p.net.sent(wire.CMDRepAttr) != 1 {
			t.Errorf("DREQ ×%d DREP ×%d", p.net.sent(wire.CMDReqAttr), p.net.sent(wire.CMDRepAttr))
		}
		time.Sleep(3 * time.Second) // past TIMEWAIT (2^(19-8) ms)
		synctest.Wait()
		for _, d := range []*fakeDev{p.cli, p.srv} {
			a, _ := agentFor(d, 1)
			a.mu.Lock()
			if n := len(a.ids); n != 0 {
				t.Errorf("%s: %d comm IDs left after TIMEWAIT", d.name, n)
			}
			a.mu.Unlock()
		}
		srv.Close()
		if p.net.sent(wire.CMDReqAttr) != 1 {
			t.Errorf("closing a disconnected conn sent a DREQ")
		}
	})
}

func TestReject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		l := p.listen(t, verbs.QPTypeRC)
		serve(t, l, true)
		_, err := p.dial(context.Background(), "ping")
		var rej *RejectError
		if !errors.As(err, &rej) || rej.Reason != wire.RejConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
			t.Fatalf("dial: %v", err)
		}
	})
}

func TestNoListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		agentFor(p.srv, 1) // the server runs cm, but listens on nothing
		_, err := p.dial(context.Background(), "ping")
		var rej *RejectError
		if !errors.As(err, &rej) || rej.Reason != wire.RejInvalidServiceID {
			t.Fatalf("dial: %v", err)
		}
		if rej.Reason != 8 {
			t.Fatal("invalid service ID is REJ reason 8")
		}
	})
}

// TestTimeoutRetries: a peer that never answers gets the REQ 1 + 15 times,
// 2 × 1.05 s + 4.2 s apart (cm.c's timeout for rdma_cm's REQ on RoCE).
func TestTimeoutRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.net.filter = func(src verbs.GID, a wire.CMAttr, n int) int { return 0 }
		start := time.Now()
		_, err := p.dial(context.Background(), "ping")
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("dial: %v", err)
		}
		if n := p.net.sent(wire.CMReqAttr); n != 16 {
			t.Errorf("REQ sent %d times, want 16", n)
		}
		want := 16 * (2*1024 + 4096) * time.Millisecond
		if d := time.Since(start); d != want {
			t.Errorf("gave up after %v, want %v", d, want)
		}
	})
}

func TestContextCancelSendsRejTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		l := p.listen(t, verbs.QPTypeRC)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		// Nobody accepts: the dial's deadline ends it.
		_, err := p.dial(ctx, "ping")
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("dial: %v", err)
		}
		synctest.Wait()
		if p.net.sent(wire.CMRejAttr) != 1 {
			t.Errorf("REJ sent %d times", p.net.sent(wire.CMRejAttr))
		}
		req, err := l.Accept(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := req.Accept(context.Background(), nil); err == nil {
			t.Error("accepting a withdrawn request succeeded")
		}
	})
}

// TestLostREPAndRTU: the first REP and the first RTU are lost; the REQ and
// REP retransmissions, the duplicate-REQ and duplicate-REP handling
// recover, as in cm.c.
func TestLostREPAndRTU(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.net.filter = func(src verbs.GID, a wire.CMAttr, n int) int {
			if (a == wire.CMRepAttr || a == wire.CMRTUAttr) && n == 1 {
				return 0
			}
			return 1
		}
		l := p.listen(t, verbs.QPTypeRC)
		srvC := serve(t, l, false)
		cli, err := p.dial(context.Background(), "ping")
		if err != nil {
			t.Fatal(err)
		}
		srv := <-srvC
		if srv == nil {
			t.Fatal("accept failed")
		}
		checkConnected(t, cli, srv)
		if p.net.sent(wire.CMRepAttr) < 2 || p.net.sent(wire.CMRTUAttr) != 2 {
			t.Errorf("REP ×%d RTU ×%d", p.net.sent(wire.CMRepAttr), p.net.sent(wire.CMRTUAttr))
		}
		cli.Close()
		srv.Close()
	})
}

// TestDuplicateREQGetsMRA: a REQ repeated while the application has not
// accepted yet gets an MRA (rdma_cm's delayed MRA), and the client then
// waits the MRA's service time instead of giving up.
func TestDuplicateREQGetsMRA(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.net.filter = func(src verbs.GID, a wire.CMAttr, n int) int {
			if a == wire.CMReqAttr && n == 1 {
				return 2 // duplicated in the network
			}
			return 1
		}
		l := p.listen(t, verbs.QPTypeRC)
		done := make(chan *Conn, 1)
		go func() {
			c, _ := p.dial(context.Background(), "ping")
			done <- c
		}()
		req, err := l.Accept(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if p.net.sent(wire.CMMRAAttr) != 1 {
			t.Fatalf("MRA sent %d times", p.net.sent(wire.CMMRAAttr))
		}
		// The application is slow: 100 s, far beyond 16 REQ tries
		// without the MRA (98 s).
		time.Sleep(100 * time.Second)
		srv, err := req.Accept(context.Background(), &Options{PrivateData: []byte("pong")})
		if err != nil {
			t.Fatal(err)
		}
		cli := <-done
		if cli == nil {
			t.Fatal("dial failed")
		}
		checkConnected(t, cli, srv)
		if n := p.net.sent(wire.CMReqAttr); n > 3 {
			t.Errorf("REQ sent %d times despite the MRA", n)
		}
		cli.Close()
		srv.Close()
	})
}

// TestPeerDeath: the server's QP fails (retries exhausted); its Conn ends
// with ErrQPError. The client's DREQ then goes unanswered 16 times.
func TestPeerDeath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		l := p.listen(t, verbs.QPTypeRC)
		srvC := serve(t, l, false)
		cli, err := p.dial(context.Background(), "ping")
		if err != nil {
			t.Fatal(err)
		}
		srv := <-srvC
		p.srv.HandleMADs(1, nil) // the server host is gone: no more CM
		srv.QP.(*fakeRCQP).setState(verbs.QPStateErr)
		select {
		case <-srv.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("QP error not seen")
		}
		if !errors.Is(srv.Err(), ErrQPError) {
			t.Errorf("Err %v", srv.Err())
		}
		cli.Close()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if n := p.net.sent(wire.CMDReqAttr); n != 16 {
			t.Errorf("DREQ sent %d times, want 16", n)
		}
		srv.Close()
	})
}

func TestSIDR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		l := p.listen(t, verbs.QPTypeUD)
		srvC := make(chan *Conn, 1)
		go func() {
			req, err := l.Accept(context.Background())
			if err != nil || req.QPType != verbs.QPTypeUD {
				srvC <- nil
				return
			}
			c, _ := req.Accept(context.Background(), nil)
			srvC <- c
		}()
		cli, err := Dial(context.Background(), "rdma", p.server, &Options{Context: p.cli, QPType: verbs.QPTypeUD})
		if err != nil {
			t.Fatal(err)
		}
		srv := <-srvC
		if srv == nil {
			t.Fatal("accept failed")
		}
		if cli.RemoteQPN != srv.QP.QPNum() || cli.RemoteQKey != RDMAUDPQKey || cli.AH == nil {
			t.Errorf("resolved QPN %#x Q_Key %#x, server QP %#x", cli.RemoteQPN, cli.RemoteQKey, srv.QP.QPNum())
		}
		// Nobody on another port: SIDR status 1.
		_, err = Dial(context.Background(), "rdma", "10.0.0.2:1", &Options{Context: p.cli, QPType: verbs.QPTypeUD})
		var se *SIDRError
		if !errors.As(err, &se) || se.Status != wire.SIDRUnsupportedService {
			t.Errorf("dial to no listener: %v", err)
		}
		cli.Close()
		srv.Close()
	})
}

// TestSIDRReadyQP: a UD QP already in RTS (librdmacm's rdma_create_qp
// readies UD QPs before rdma_connect and rdma_accept) is used as it is by
// Dial and ConnRequest.Accept, not stepped through its states again.
func TestSIDRReadyQP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		l := p.listen(t, verbs.QPTypeUD)
		ready := func(dev verbs.Context) (verbs.PD, verbs.QP) {
			pd, _ := dev.AllocPD()
			cq, _ := dev.CreateCQ(8, nil)
			qp, err := pd.CreateQP(&verbs.QPInitAttr{QPType: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq})
			if err != nil {
				t.Fatal(err)
			}
			prm := DefaultParams()
			prm.QKey = RDMAUDPQKey
			if err := Connect(qp, Endpoint{QPN: qp.QPNum()}, Endpoint{}, &prm); err != nil {
				t.Fatal(err)
			}
			return pd, qp
		}
		spd, sqp := ready(p.srv)
		cpd, cqp := ready(p.cli)
		srvC := make(chan *Conn, 1)
		go func() {
			req, err := l.Accept(context.Background())
			if err != nil {
				srvC <- nil
				return
			}
			c, err := req.Accept(context.Background(), &Options{Context: p.srv, PD: spd, QP: sqp})
			if err != nil {
				t.Errorf("Accept with a UD QP in RTS: %v", err)
			}
			srvC <- c
		}()
		cli, err := Dial(context.Background(), "rdma", p.server, &Options{Context: p.cli, QPType: verbs.QPTypeUD, PD: cpd, QP: cqp})
		if err != nil {
			t.Fatalf("Dial with a UD QP in RTS: %v", err)
		}
		srv := <-srvC
		if srv == nil {
			t.Fatal("accept failed")
		}
		if cli.RemoteQPN != sqp.QPNum() || cli.QP != cqp || srv.QP != sqp {
			t.Errorf("resolved QPN %#x, server QP %#x; QPs used %v %v", cli.RemoteQPN, sqp.QPNum(), cli.QP == cqp, srv.QP == sqp)
		}
		cli.Close()
		srv.Close()
	})
}
