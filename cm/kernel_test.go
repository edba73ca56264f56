package cm

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// fakeKernel is a device whose kernel runs the CM (verbs.KernelCM), in
// memory: Dial finds the listener by port and waits for Accept or
// Reject. It embeds a fakeDev, which is also a verbs.GSI, so a test sees
// whether cm used its own agent (MADs on the fake net) instead.
type fakeKernel struct {
	*fakeDev
	mu    sync.Mutex
	ls    map[uint16]*fakeKListener
	dials int
}

func newFakeKernel(n *fakeNet, addr string) *fakeKernel {
	return &fakeKernel{fakeDev: n.newDev("rxe_fake", addr), ls: map[uint16]*fakeKListener{}}
}

type fakeKListener struct {
	k      *fakeKernel
	addr   netip.AddrPort
	reqs   chan *fakeKReq
	closed chan struct{}
	once   sync.Once
}

type fakeKReq struct {
	info   verbs.CMRequestInfo
	answer chan any // *fakeKConn for the dialer, or an error
}

type fakeKConn struct {
	info   verbs.CMConnInfo
	done   chan struct{}
	peer   *fakeKConn
	once   sync.Once
	closed bool
}

func (c *fakeKConn) Info() verbs.CMConnInfo { return c.info }
func (c *fakeKConn) Done() <-chan struct{}  { return c.done }
func (c *fakeKConn) end()                   { c.once.Do(func() { close(c.done) }) }
func (c *fakeKConn) Close() error {
	c.closed = true
	c.end()
	c.peer.end() // the peer sees the DREQ
	return nil
}

func (k *fakeKernel) CMListen(addr netip.AddrPort, qpType verbs.QPType, backlog int) (verbs.CMListener, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if addr.Port() == 0 {
		addr = netip.AddrPortFrom(addr.Addr(), uint16(20000+len(k.ls)))
	}
	l := &fakeKListener{k: k, addr: addr, reqs: make(chan *fakeKReq, backlog), closed: make(chan struct{})}
	k.ls[addr.Port()] = l
	return l, nil
}

func (l *fakeKListener) Addr() netip.AddrPort { return l.addr }
func (l *fakeKListener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		l.k.mu.Lock()
		delete(l.k.ls, l.addr.Port())
		l.k.mu.Unlock()
	})
	return nil
}
func (l *fakeKListener) Accept(ctx context.Context) (verbs.CMRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.closed:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *fakeKReq) Info() verbs.CMRequestInfo { return r.info }
func (r *fakeKReq) Reject(private []byte) error {
	r.answer <- &verbs.CMRejectError{Reason: uint16(wire.RejConsumerDefined), UD: r.info.QPType == verbs.QPTypeUD, PrivateData: private}
	return nil
}
func (r *fakeKReq) Accept(ctx context.Context, p *verbs.CMParams) (verbs.CMConn, error) {
	s := &fakeKConn{done: make(chan struct{}), info: verbs.CMConnInfo{Local: r.info.Local, Remote: r.info.Remote,
		PrivateData: r.info.PrivateData, ResponderResources: 3, InitiatorDepth: 3}}
	c := &fakeKConn{done: make(chan struct{}), peer: s, info: verbs.CMConnInfo{Local: r.info.Remote, Remote: r.info.Local,
		PrivateData: p.PrivateData, ResponderResources: 3, InitiatorDepth: 3}}
	s.peer = c
	if r.info.QPType == verbs.QPTypeUD {
		ah, _ := p.PD.CreateAH(&verbs.AHAttr{IsGlobal: true})
		c.info.AH, c.info.RemoteQPN, c.info.RemoteQKey = ah, p.QP.QPNum(), RDMAUDPQKey
	}
	r.answer <- c
	return s, nil
}

func (k *fakeKernel) CMDial(ctx context.Context, p *verbs.CMParams) (verbs.CMConn, error) {
	k.mu.Lock()
	k.dials++
	l := k.ls[p.Dst.Port()]
	k.mu.Unlock()
	if l == nil {
		return nil, &verbs.CMRejectError{Reason: uint16(wire.RejInvalidServiceID), UD: p.QPType == verbs.QPTypeUD}
	}
	r := &fakeKReq{answer: make(chan any, 1), info: verbs.CMRequestInfo{Local: p.Dst,
		Remote: netip.AddrPortFrom(p.Src.Addr(), 40000), QPType: p.QPType, PrivateData: p.PrivateData,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth}}
	l.reqs <- r
	select {
	case a := <-r.answer:
		if err, ok := a.(error); ok {
			return nil, err
		}
		return a.(*fakeKConn), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestKernelCMPath: on a verbs.KernelCM device, Listen, Dial, Accept,
// Reject and Close go through the device's CM, not cm's agent.
func TestKernelCMPath(t *testing.T) {
	n := newFakeNet()
	k := newFakeKernel(n, "10.9.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := Listen("rdma", "10.9.0.1:0", &Options{Context: k})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ln.Addr().Addr() != netip.MustParseAddr("10.9.0.1") || ln.Addr().Port() == 0 {
		t.Fatalf("listener address %v", ln.Addr())
	}
	got := make(chan *Conn, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		if !bytes.Equal(req.PrivateData, []byte("hi")) || req.Context() != verbs.Context(k) {
			t.Errorf("request private data %q, context %v", req.PrivateData, req.Context())
		}
		c, err := req.Accept(ctx, &Options{PrivateData: []byte("welcome")})
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	c, err := Dial(ctx, "rdma", ln.Addr().String(), &Options{Context: k, PrivateData: []byte("hi")})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	s := <-got
	if s == nil {
		t.FailNow()
	}
	if !bytes.Equal(c.PeerPrivateData, []byte("welcome")) || c.RemoteAddr() != ln.Addr() || c.InitiatorDepth != 3 {
		t.Errorf("dialer's conn: private data %q, remote %v, depth %d", c.PeerPrivateData, c.RemoteAddr(), c.InitiatorDepth)
	}
	if c.QP == nil || c.PD == nil || c.SendCQ == nil {
		t.Error("cm did not create the connection's verbs objects")
	}
	if m := n.sent(wire.CMReqAttr) + n.sent(wire.CMRepAttr); m != 0 || k.dials != 1 {
		t.Errorf("%d CM MADs sent by cm's agent and %d kernel dials; want 0 and 1", m, k.dials)
	}
	c.Close()
	if !c.kc.(*fakeKConn).closed {
		t.Error("Close did not close the kernel's ID")
	}
	select {
	case <-s.Done():
		if !errors.Is(s.Err(), ErrDisconnected) {
			t.Errorf("the accepted side's Err %v", s.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the accepted side did not see the disconnect")
	}
	s.Close()

	// Reject, and a port nobody listens on: cm's errors.
	go func() {
		if req, err := ln.Accept(ctx); err == nil {
			req.Reject([]byte("no"))
		}
	}()
	_, err = Dial(ctx, "rdma", ln.Addr().String(), &Options{Context: k})
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != wire.RejConsumerDefined || string(rej.PrivateData) != "no" {
		t.Errorf("Dial to a rejecting listener: %v", err)
	}
	_, err = Dial(ctx, "rdma", "10.9.0.1:1", &Options{Context: k})
	if !errors.As(err, &rej) || rej.Reason != wire.RejInvalidServiceID {
		t.Errorf("Dial to a closed port: %v", err)
	}
}

func TestKernelCMUD(t *testing.T) {
	n := newFakeNet()
	k := newFakeKernel(n, "10.9.0.2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := Listen("rdma", "10.9.0.2:0", &Options{Context: k, QPType: verbs.QPTypeUD})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if req, err := ln.Accept(ctx); err == nil {
			req.Accept(ctx, nil)
		}
	}()
	c, err := Dial(ctx, "rdma", ln.Addr().String(), &Options{Context: k, QPType: verbs.QPTypeUD})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.AH == nil || c.RemoteQKey != RDMAUDPQKey || c.RemoteQPN == 0 {
		t.Errorf("UD conn: AH %v, Q_Key %#x, QPN %#x", c.AH, c.RemoteQKey, c.RemoteQPN)
	}
	ln.Close()
	_, err = Dial(ctx, "rdma", ln.Addr().String(), &Options{Context: k, QPType: verbs.QPTypeUD})
	var se *SIDRError
	if !errors.As(err, &se) {
		t.Errorf("UD Dial to a closed port: %v; want a SIDRError", err)
	}
}

// Packet protection cannot work where the device builds the packets:
// Listen and Dial say so instead of connecting unprotected.
func TestKernelCMSecurityRefused(t *testing.T) {
	k := newFakeKernel(newFakeNet(), "10.9.0.3")
	_, err := Listen("rdma", "10.9.0.3:0", &Options{Context: k, Security: verbs.SecurityAuth})
	if !errors.Is(err, ErrKernelSecurity) || !errors.Is(err, verbs.ErrNotSupported) {
		t.Errorf("Listen: %v", err)
	}
	_, err = Dial(context.Background(), "rdma", "10.9.0.3:1", &Options{Context: k, Security: verbs.SecurityEncrypt})
	if !errors.Is(err, ErrKernelSecurity) {
		t.Errorf("Dial: %v", err)
	}
	if k.dials != 0 {
		t.Error("Dial with Security reached the kernel's CM")
	}
}
