//go:build ibverbs && cgo && linux

package ibverbs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/rdmanet"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// The connection manager over librdmacm: package cm's Listen, Dial and
// Accept on a kernel device, both ends on the same device (rxe loops a
// connection between two of its QPs back as a NIC does).

// cmAddr returns the IPv4 address of the device's RoCE v2 GID.
func cmAddr(t *testing.T, c *Context) netip.Addr {
	t.Helper()
	g, err := c.QueryGID(1, roceIndex(t, c))
	if err != nil {
		t.Fatal(err)
	}
	return g.Addr().Unmap()
}

func cmCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sendRecv posts a receive on to, a SEND of msg from from, and returns
// what arrived.
func sendRecv(t *testing.T, from, to *cm.Conn, msg []byte, ud bool) []byte {
	t.Helper()
	acc := verbs.AccessLocalWrite
	smr, err := from.PD.RegMR(append([]byte(nil), msg...), acc)
	if err != nil {
		t.Fatal(err)
	}
	defer smr.Dereg()
	rbuf := make([]byte, 40+len(msg)) // room for UD's GRH
	rmr, err := to.PD.RegMR(rbuf, acc)
	if err != nil {
		t.Fatal(err)
	}
	defer rmr.Dereg()
	if err := to.QP.PostRecv(&verbs.RecvWR{WRID: 2, SGList: []verbs.SGE{rmr.SGE(0, len(rbuf))}}); err != nil {
		t.Fatal(err)
	}
	wr := &verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SendFlags: verbs.SendSignaled, SGList: []verbs.SGE{smr.SGE(0, len(msg))}}
	if ud {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = from.AH, from.RemoteQPN, from.RemoteQKey
	}
	if err := from.QP.PostSend(wr); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, from.SendCQ); wc.Status != verbs.WCSuccess {
		t.Fatalf("send completion: %v", wc.Status)
	}
	wc := wait(t, to.RecvCQ)
	if wc.Status != verbs.WCSuccess {
		t.Fatalf("receive completion: %v", wc.Status)
	}
	if ud {
		return rbuf[40:wc.ByteLen]
	}
	return rbuf[:wc.ByteLen]
}

func TestRDMACMConnectRC(t *testing.T) {
	c := openOrSkip(t)
	addr := cmAddr(t, c)
	ln, err := cm.Listen("rdma", netip.AddrPortFrom(addr, 0).String(), &cm.Options{Context: c})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ln.Addr().Port() == 0 || ln.Addr().Addr() != addr {
		t.Fatalf("listener address %v; want %v and a port", ln.Addr(), addr)
	}
	ctx := cmCtx(t)
	type accepted struct {
		c   *cm.Conn
		req *cm.ConnRequest
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		conn, err := req.Accept(ctx, &cm.Options{PrivateData: []byte("from the listener")})
		ch <- accepted{conn, req, err}
	}()
	client, err := cm.Dial(ctx, "rdma", ln.Addr().String(), &cm.Options{Context: c, PrivateData: []byte("from the dialer")})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer client.Close()
	a := <-ch
	if a.err != nil {
		t.Fatalf("Accept: %v", a.err)
	}
	server := a.c
	defer server.Close()
	if !bytes.HasPrefix(a.req.PrivateData, []byte("from the dialer")) {
		t.Errorf("request private data %q", a.req.PrivateData)
	}
	if !bytes.HasPrefix(client.PeerPrivateData, []byte("from the listener")) {
		t.Errorf("REP private data %q", client.PeerPrivateData)
	}
	if a.req.Remote.Addr() != addr || client.RemoteAddr() != ln.Addr() {
		t.Errorf("addresses: request from %v, client connected to %v (listener %v)", a.req.Remote, client.RemoteAddr(), ln.Addr())
	}
	if client.QP.State() != verbs.QPStateRTS || server.QP.State() != verbs.QPStateRTS {
		t.Fatalf("QP states %v, %v; want RTS", client.QP.State(), server.QP.State())
	}
	if got := sendRecv(t, client, server, []byte("hello over rdma_cm"), false); string(got) != "hello over rdma_cm" {
		t.Errorf("server received %q", got)
	}
	if got := sendRecv(t, server, client, []byte("and back"), false); string(got) != "and back" {
		t.Errorf("client received %q", got)
	}
	// One-sided: the client writes into and reads from the server's
	// memory with the negotiated depths.
	buf := make([]byte, 64)
	mr, err := server.PD.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	src, err := client.PD.RegMR([]byte("written"), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Dereg()
	if err := client.Write(ctx, src.SGE(0, 7), cm.RemoteBufferOf(mr)); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.HasPrefix(buf, []byte("written")) {
		t.Errorf("the server's memory holds %q", buf[:8])
	}
	client.Close()
	select {
	case <-server.Done():
		if !errors.Is(server.Err(), cm.ErrDisconnected) {
			t.Errorf("server's Err %v; want ErrDisconnected", server.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not see the client's disconnect")
	}
}

func TestRDMACMReject(t *testing.T) {
	c := openOrSkip(t)
	addr := cmAddr(t, c)
	ln, err := cm.Listen("rdma", netip.AddrPortFrom(addr, 0).String(), &cm.Options{Context: c})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := cmCtx(t)
	go func() {
		if req, err := ln.Accept(ctx); err == nil {
			req.Reject([]byte("go away"))
		}
	}()
	_, err = cm.Dial(ctx, "rdma", ln.Addr().String(), &cm.Options{Context: c})
	var rej *cm.RejectError
	if !errors.As(err, &rej) || rej.Reason != wire.RejConsumerDefined || !bytes.HasPrefix(rej.PrivateData, []byte("go away")) {
		t.Fatalf("Dial to a rejecting listener: %v; want a consumer-defined REJ with its private data", err)
	}
	// Nobody on the port: the kernel's CM answers invalid service ID.
	ln.Close()
	_, err = cm.Dial(ctx, "rdma", ln.Addr().String(), &cm.Options{Context: c})
	if !errors.As(err, &rej) || rej.Reason != wire.RejInvalidServiceID {
		t.Fatalf("Dial to a closed port: %v; want REJ invalid service ID", err)
	}
}

func TestRDMACMUD(t *testing.T) {
	c := openOrSkip(t)
	addr := cmAddr(t, c)
	ln, err := cm.Listen("rdma", netip.AddrPortFrom(addr, 0).String(), &cm.Options{Context: c, QPType: verbs.QPTypeUD})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := cmCtx(t)
	ch := make(chan *cm.Conn, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil || req.QPType != verbs.QPTypeUD {
			t.Errorf("Accept: %v, QP type %v", err, req.QPType)
			ch <- nil
			return
		}
		conn, err := req.Accept(ctx, nil)
		if err != nil {
			t.Errorf("Accept: %v", err)
		}
		ch <- conn
	}()
	client, err := cm.Dial(ctx, "rdma", ln.Addr().String(), &cm.Options{Context: c, QPType: verbs.QPTypeUD})
	if err != nil {
		t.Fatalf("Dial UD: %v", err)
	}
	defer client.Close()
	server := <-ch
	if server == nil {
		t.FailNow()
	}
	defer server.Close()
	if client.RemoteQPN != server.QP.QPNum() || client.RemoteQKey != cm.RDMAUDPQKey || client.AH == nil {
		t.Fatalf("SIDR answer: QPN %#x Q_Key %#x AH %v; want QPN %#x and rdma_cm's Q_Key", client.RemoteQPN, client.RemoteQKey, client.AH, server.QP.QPNum())
	}
	if got := sendRecv(t, client, server, []byte("a datagram"), true); string(got) != "a datagram" {
		t.Errorf("server received %q", got)
	}
	// A UD dial to a port nobody listens on fails with the SIDR status.
	ln.Close()
	_, err = cm.Dial(ctx, "rdma", ln.Addr().String(), &cm.Options{Context: c, QPType: verbs.QPTypeUD})
	var se *cm.SIDRError
	if !errors.As(err, &se) && !errors.Is(err, cm.ErrTimeout) {
		t.Fatalf("UD Dial to a closed port: %v; want a SIDRError", err)
	}
}

func TestRDMACMSecurityRefused(t *testing.T) {
	c := openOrSkip(t)
	addr := cmAddr(t, c)
	_, err := cm.Listen("rdma", netip.AddrPortFrom(addr, 0).String(), &cm.Options{Context: c, Security: verbs.SecurityAuth})
	if !errors.Is(err, cm.ErrKernelSecurity) || !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("Listen with Security on a kernel device: %v; want ErrKernelSecurity", err)
	}
	_, err = cm.Dial(cmCtx(t), "rdma", netip.AddrPortFrom(addr, 1).String(), &cm.Options{Context: c, Security: verbs.SecurityEncrypt})
	if !errors.Is(err, cm.ErrKernelSecurity) {
		t.Fatalf("Dial with Security on a kernel device: %v; want ErrKernelSecurity", err)
	}
}

// rdmanet's sockets run unchanged on the kernel device.
func TestRDMACMRdmanetEcho(t *testing.T) {
	c := openOrSkip(t)
	addr := cmAddr(t, c)
	ln, err := rdmanet.ListenConfig("rdma", netip.AddrPortFrom(addr, 0).String(), &rdmanet.Config{Context: c})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		io.Copy(s, s)
	}()
	d := rdmanet.Dialer{Config: &rdmanet.Config{Context: c}}
	conn, err := d.DialContext(cmCtx(t), "rdma", ln.Addr().String())
	if err != nil {
		t.Fatalf("rdmanet Dial: %v", err)
	}
	defer conn.Close()
	msg := bytes.Repeat([]byte("echo over the kernel's rdma_cm "), 4096)
	go conn.Write(msg)
	got := make([]byte, len(msg))
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(conn, got); err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("the echo differs")
	}
}

// TestRDMACMDeviceClose: closing a kernel device ends the cm
// connections and listeners on it with cm.ErrDeviceClosed, as closing a
// softrdma device ends its agent's; the peer on another context sees
// the disconnect, and no goroutine is left behind.
func TestRDMACMDeviceClose(t *testing.T) {
	srv := openOrSkip(t)
	before := runtime.NumGoroutine()
	cli := openOrSkip(t) // the same device, opened again: the one closed
	addr := cmAddr(t, srv)
	ln, err := cm.Listen("rdma", netip.AddrPortFrom(addr, 0).String(), &cm.Options{Context: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := cmCtx(t)
	ch := make(chan *cm.Conn, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
			ch <- nil
			return
		}
		conn, err := req.Accept(ctx, nil)
		if err != nil {
			t.Error(err)
		}
		ch <- conn
	}()
	client, err := cm.Dial(ctx, "rdma", ln.Addr().String(), &cm.Options{Context: cli})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer client.Close()
	server := <-ch
	if server == nil {
		t.FailNow()
	}
	defer server.Close()
	cliLn, err := cm.Listen("rdma", netip.AddrPortFrom(addr, 0).String(), &cm.Options{Context: cli})
	if err != nil {
		t.Fatal(err)
	}
	defer cliLn.Close()
	accepted := make(chan error, 1)
	go func() {
		_, err := cliLn.Accept(ctx)
		accepted <- err
	}()

	if err := cli.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-client.Done():
		if !errors.Is(client.Err(), cm.ErrDeviceClosed) {
			t.Errorf("the connection on the closed device: Err %v; want cm.ErrDeviceClosed", client.Err())
		}
	default:
		t.Fatal("the connection on the closed device is still up")
	}
	select {
	case err := <-accepted:
		if !errors.Is(err, cm.ErrDeviceClosed) {
			t.Errorf("Accept on the closed device's listener: %v; want cm.ErrDeviceClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept on the closed device's listener did not return")
	}
	select {
	case <-server.Done():
		if !errors.Is(server.Err(), cm.ErrDisconnected) {
			t.Errorf("the peer's Err %v; want ErrDisconnected", server.Err())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the peer did not see the disconnect")
	}
	server.Close()
	ln.Close()
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the close, %d before the second device was opened", runtime.NumGoroutine(), before)
		}
	}
}
