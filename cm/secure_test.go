package cm_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// TestDialSecure: a dialer asking for protected packets and a softrdma
// listener agree on it through the private data (which the application
// still gets, without the key exchange); a WRITE then travels protected;
// a listener that requires protection rejects a dialer that offers none.
func TestDialSecure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range []string{"127.0.65.1", "127.0.65.2"} {
		dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(a), Port: freePort})
		if err != nil {
			t.Skipf("cannot open a device on %s: %v", a, err)
		}
		defer dev.Close()
	}
	ln, err := cm.Listen("rdma", "127.0.65.2:7500", &cm.Options{Security: verbs.SecurityAuth})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type accepted struct {
		conn *cm.Conn
		mr   verbs.MR
		req  *cm.ConnRequest
	}
	acc := make(chan accepted, 2)
	go func() {
		for {
			req, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			if req.Security == 0 {
				acc <- accepted{req: req}
				req.Accept(ctx, nil) // the listener requires protection: rejected
				continue
			}
			pd, _ := ln.Context().AllocPD()
			mr, _ := pd.AllocMR(64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			conn, err := req.Accept(ctx, &cm.Options{PD: pd, Security: verbs.SecurityAuth, PrivateData: []byte("server says hi")})
			if err != nil {
				t.Error(err)
				return
			}
			acc <- accepted{conn: conn, mr: mr, req: req}
		}
	}()

	conn, err := cm.Dial(ctx, "rdma", "127.0.65.2:7500", &cm.Options{Security: verbs.SecurityEncrypt, PrivateData: []byte("client")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := <-acc
	if conn.Security != verbs.SecurityEncrypt || got.conn.Security != verbs.SecurityEncrypt {
		t.Fatalf("agreed %v / %v; want encrypt on both sides (the stronger of the two)", conn.Security, got.conn.Security)
	}
	if string(got.req.PrivateData[:6]) != "client" || !bytes.HasPrefix(conn.PeerPrivateData, []byte("server says hi")) {
		t.Fatalf("private data: server got %q, client got %q", got.req.PrivateData[:6], conn.PeerPrivateData[:14])
	}
	mr, _ := conn.PD.AllocMR(64, verbs.AccessLocalWrite)
	copy(mr.Bytes(), "protected")
	must(t, conn.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, 9)}, RemoteAddr: got.mr.Addr(), RKey: got.mr.RKey()}))
	wc := make([]verbs.WC, 1)
	for n := 0; n == 0; n, _ = conn.SendCQ.Poll(wc) {
		must(t, conn.SendCQ.Wait(ctx))
	}
	if wc[0].Status != verbs.WCSuccess {
		t.Fatalf("protected WRITE: %v", wc[0].Status)
	}
	deadline := time.Now().Add(5 * time.Second)
	for string(got.mr.Bytes()[:9]) != "protected" {
		if time.Now().After(deadline) {
			t.Fatal("the protected WRITE did not land")
		}
		time.Sleep(time.Millisecond)
	}

	// No protection offered to a listener that requires it: rejected.
	_, err = cm.Dial(ctx, "rdma", "127.0.65.2:7500", nil)
	var rej *cm.RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("an unprotected dial to a listener that requires protection: %v; want a REJ", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestDialSecurePSK: over real devices, a dialer and a listener that
// share a pre-shared key connect and move a protected WRITE; a dialer
// with another key is refused at connect time.
func TestDialSecurePSK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, a := range []string{"127.0.65.3", "127.0.65.4"} {
		dev, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(a), Port: freePort})
		if err != nil {
			t.Skipf("cannot open a device on %s: %v", a, err)
		}
		defer dev.Close()
	}
	psk := bytes.Repeat([]byte("0123456789abcdef"), 2)
	ln, err := cm.Listen("rdma", "127.0.65.4:7501", &cm.Options{Security: verbs.SecurityEncrypt, SecurityPSK: psk})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type accepted struct {
		conn *cm.Conn
		mr   verbs.MR
		err  error
	}
	acc := make(chan accepted, 2)
	go func() {
		for {
			req, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			pd, _ := ln.Context().AllocPD()
			mr, _ := pd.AllocMR(64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			conn, err := req.Accept(ctx, &cm.Options{PD: pd, Security: verbs.SecurityEncrypt, SecurityPSK: psk})
			acc <- accepted{conn, mr, err}
		}
	}()
	conn, err := cm.Dial(ctx, "rdma", "127.0.65.4:7501", &cm.Options{Security: verbs.SecurityAuth, SecurityPSK: psk})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := <-acc
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.conn.Close()
	mr, _ := conn.PD.AllocMR(64, verbs.AccessLocalWrite)
	copy(mr.Bytes(), "bound")
	must(t, conn.QP.PostSend(&verbs.SendWR{Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{mr.SGE(0, 5)}, RemoteAddr: got.mr.Addr(), RKey: got.mr.RKey()}))
	wc := make([]verbs.WC, 1)
	for n := 0; n == 0; n, _ = conn.SendCQ.Poll(wc) {
		must(t, conn.SendCQ.Wait(ctx))
	}
	if wc[0].Status != verbs.WCSuccess || conn.Security != verbs.SecurityEncrypt {
		t.Fatalf("WRITE over a PSK-bound connection: %v, mode %v", wc[0].Status, conn.Security)
	}

	other := bytes.Repeat([]byte("fedcba9876543210"), 2)
	_, err = cm.Dial(ctx, "rdma", "127.0.65.4:7501", &cm.Options{Security: verbs.SecurityAuth, SecurityPSK: other})
	var rej *cm.RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("a dialer with another PSK: %v; want a REJ", err)
	}
	if got := <-acc; !errors.Is(got.err, cm.ErrSecurityMismatch) {
		t.Fatalf("the listener's Accept of another PSK: %v; want ErrSecurityMismatch", got.err)
	}
}
