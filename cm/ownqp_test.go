package cm_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// attrSource is what gives a QP's attributes: a Response or a ConnRequest.
type attrSource interface {
	QPAttr(verbs.QPState) (*verbs.QPAttr, verbs.QPAttrMask, error)
}

// moveOwn moves qp from RESET to RTS with the attributes src gives, as a
// C program does with rdma_init_qp_attr and ibv_modify_qp, and returns
// the RTR and RTS attributes it used.
func moveOwn(t *testing.T, qp verbs.QP, src attrSource) (rtr, rts verbs.QPAttr) {
	t.Helper()
	for _, st := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		attr, mask, err := src.QPAttr(st)
		if err != nil {
			t.Fatalf("QPAttr(%v): %v", st, err)
		}
		if err := qp.Modify(attr, mask); err != nil {
			t.Fatalf("Modify to %v with %v: %v", st, mask, err)
		}
		switch st {
		case verbs.QPStateRTR:
			rtr = *attr
		case verbs.QPStateRTS:
			rts = *attr
		}
	}
	return rtr, rts
}

// TestOwnQP connects two RC QPs that the program moves itself, over two
// softrdma devices on loopback: the CM agrees QPNs, PSNs and path, the
// QPs carry a SEND each way, and the active side's Close reaches the
// passive side as a disconnect.
func TestOwnQP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli, srv, ln := ownPair(t, "127.0.63.1", "127.0.63.2:7472")
	type result struct {
		c        *cm.Conn
		rtr, rts verbs.QPAttr
		err      error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() { done <- r }()
		req, err := ln.Accept(ctx)
		if r.err = err; err != nil {
			return
		}
		if !bytes.HasPrefix(req.PrivateData, []byte("ping")) {
			r.err = errors.New("the REQ's private data was lost")
			return
		}
		r.rtr, r.rts = moveOwn(t, srv.qp, req)
		post(t, srv.qp, srv.mr, true)
		r.c, r.err = req.AcceptOwnQP(ctx, srv.qp.QPNum(), &cm.Options{PrivateData: []byte("pong")})
	}()

	resp, err := cm.DialOwnQP(ctx, "rdma", "127.0.63.2:7472", cli.qp.QPNum(),
		&cm.Options{Context: cli.dev, PrivateData: []byte("ping"), TrafficClass: 0x28, ACKTimeout: 16})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(resp.PeerPrivateData, []byte("pong")) || resp.InitiatorDepth == 0 || resp.ResponderResources == 0 {
		t.Fatalf("response: private data %q, depths %d/%d", resp.PeerPrivateData[:4], resp.ResponderResources, resp.InitiatorDepth)
	}
	if cli.qp.State() != verbs.QPStateReset {
		t.Fatalf("cm moved the caller's QP to %v", cli.qp.State())
	}
	crtr, crts := moveOwn(t, cli.qp, resp)
	post(t, cli.qp, cli.mr, true)
	conn, err := resp.Establish()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Establish(); err == nil {
		t.Error("a second Establish succeeded")
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}

	// What each side's QP was given matches the other's.
	if crtr.DestQPNum != srv.qp.QPNum() || r.rtr.DestQPNum != cli.qp.QPNum() {
		t.Errorf("dest QPNs %#x/%#x, QPNs %#x/%#x", crtr.DestQPNum, r.rtr.DestQPNum, cli.qp.QPNum(), srv.qp.QPNum())
	}
	if crtr.RQPSN != r.rts.SQPSN || r.rtr.RQPSN != crts.SQPSN {
		t.Errorf("PSNs: client sends %#x expects %#x; server sends %#x expects %#x", crts.SQPSN, crtr.RQPSN, r.rts.SQPSN, r.rtr.RQPSN)
	}
	if crtr.AHAttr.GRH.TrafficClass != 0x28 || r.rtr.AHAttr.GRH.TrafficClass != 0x28 {
		t.Errorf("traffic class %#x/%#x, want 0x28 on both sides (the REQ carries it)", crtr.AHAttr.GRH.TrafficClass, r.rtr.AHAttr.GRH.TrafficClass)
	}
	if crts.Timeout != 16 || crts.RetryCnt != 7 || r.rts.RetryCnt != 7 {
		t.Errorf("client timeout %d retries %d, server retries %d", crts.Timeout, crts.RetryCnt, r.rts.RetryCnt)
	}
	if !crtr.AHAttr.IsGlobal || crtr.AHAttr.GRH.DGID != srv.gid || r.rtr.AHAttr.GRH.DGID != cli.gid {
		t.Errorf("paths: client to %v, server to %v", crtr.AHAttr.GRH.DGID, r.rtr.AHAttr.GRH.DGID)
	}

	// The QPs carry data both ways.
	copy(cli.mr.Bytes(), "from client")
	copy(srv.mr.Bytes(), "from server")
	post(t, cli.qp, cli.mr, false)
	post(t, srv.qp, srv.mr, false)
	wantRecv(t, ctx, cli, "from server")
	wantRecv(t, ctx, srv, "from client")

	if conn.QP != nil || r.c.QP != nil {
		t.Error("an own-QP connection holds a QP")
	}
	conn.Close()
	select {
	case <-r.c.Done():
	case <-ctx.Done():
		t.Fatal("the passive side never saw the DREQ")
	}
	if cli.qp.State() == verbs.QPStateErr || cli.qp.State() == verbs.QPStateReset {
		t.Errorf("Close moved the caller's QP to %v", cli.qp.State())
	}
	r.c.Close()
}

// ownPair opens a client device at cli and a server device with a
// listener at srv ("IP:port"), all closed when the test ends.
func ownPair(t *testing.T, cli, srv string) (c, s *side, ln *cm.Listener) {
	t.Helper()
	ap := netip.MustParseAddrPort(srv)
	var err error
	if c, err = open(netip.MustParseAddr(cli), freePort); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.dev.Close() })
	if s, err = open(ap.Addr(), freePort); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.dev.Close() })
	if ln, err = cm.Listen("rdma", srv, &cm.Options{Context: s.dev}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return c, s, ln
}

// post posts a receive (recv) or a SEND of the MR's first 11 bytes.
func post(t *testing.T, qp verbs.QP, mr verbs.MR, recv bool) {
	t.Helper()
	var err error
	if recv {
		err = qp.PostRecv(&verbs.RecvWR{WRID: 1, SGList: []verbs.SGE{mr.SGE(32, 32)}})
	} else {
		err = qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, 11)}})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// wantRecv waits for the receive completion and checks its data.
func wantRecv(t *testing.T, ctx context.Context, s *side, want string) {
	t.Helper()
	wc := make([]verbs.WC, 1)
	for {
		n, _ := s.cq.Poll(wc)
		if n == 1 {
			if wc[0].Status != verbs.WCSuccess {
				t.Fatalf("completion %v", wc[0].Status)
			}
			if wc[0].Opcode == verbs.WCRecv {
				break
			}
			continue
		}
		if s.cq.Wait(ctx) != nil {
			t.Fatalf("no receive completion (want %q)", want)
		}
	}
	if got := string(s.mr.Bytes()[32 : 32+len(want)]); got != want {
		t.Errorf("received %q, want %q", got, want)
	}
}

// TestOwnQPReject: a Response the caller refuses reaches the passive side
// as a REJ with the private data, and misused options are refused before
// anything is sent.
func TestOwnQPReject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli, _, ln := ownPair(t, "127.0.63.3", "127.0.63.4:7473")

	for _, tt := range []struct {
		name string
		qpn  uint32
		o    cm.Options
	}{
		{"qpn 0", 0, cm.Options{}},
		{"qpn too wide", 1 << 24, cm.Options{}},
		{"with a QP", 5, cm.Options{QP: cli.qp}},
		{"UD", 5, cm.Options{QPType: verbs.QPTypeUD}},
		{"security", 5, cm.Options{Security: verbs.SecurityAuth}},
		{"ack timeout", 5, cm.Options{ACKTimeout: 32}},
	} {
		o := tt.o
		o.Context = cli.dev
		if _, err := cm.DialOwnQP(ctx, "rdma", "127.0.63.4:7473", tt.qpn, &o); err == nil {
			t.Errorf("%s: DialOwnQP succeeded", tt.name)
		}
	}

	done := make(chan error, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			done <- err
			return
		}
		_, err = req.Accept(ctx, &cm.Options{PD: nil})
		done <- err
	}()
	resp, err := cm.DialOwnQP(ctx, "rdma", "127.0.63.4:7473", cli.qp.QPNum(), &cm.Options{Context: cli.dev})
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Reject([]byte("no QP")); err != nil {
		t.Fatal(err)
	}
	if _, err := resp.Establish(); err == nil {
		t.Error("Establish after Reject succeeded")
	}
	var rej *cm.RejectError
	if err := <-done; !errors.As(err, &rej) || rej.Reason != wire.RejConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("no QP")) {
		t.Fatalf("Accept: %v, want the REJ with its private data", err)
	}
}
