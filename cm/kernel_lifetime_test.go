package cm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// closingKernel is a fakeKernel whose Close runs its close hooks, as
// provider/ibverbs's Context does.
type closingKernel struct {
	*fakeKernel
	verbs.CloseHooks
}

func (k *closingKernel) Close() error { k.RunCloseHooks(); return nil }

// TestKernelCMDeviceClose: closing a kernel device ends what cm runs on
// it as closing a device ends the agent's work: connections with
// ErrDeviceClosed (their kernel IDs closed), a Dial waiting for the peer
// with ErrDeviceClosed, listeners with an ErrClosed that wraps
// ErrDeviceClosed; later Dials and Listens fail.
func TestKernelCMDeviceClose(t *testing.T) {
	n := newFakeNet()
	k := &closingKernel{fakeKernel: newFakeKernel(n, "10.9.0.1")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ln, err := Listen("rdma", "10.9.0.1:0", &Options{Context: k})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	silent, err := Listen("rdma", "10.9.0.1:0", &Options{Context: k}) // nobody accepts
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	got := make(chan *Conn, 1)
	go func() {
		req, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		c, err := req.Accept(ctx, nil)
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	c, err := Dial(ctx, "rdma", ln.Addr().String(), &Options{Context: k})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	s := <-got
	if s == nil {
		t.FailNow()
	}
	defer s.Close()
	pending := make(chan error, 1)
	go func() {
		_, err := Dial(ctx, "rdma", silent.Addr().String(), &Options{Context: k})
		pending <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		k.mu.Lock()
		dials := k.dials
		k.mu.Unlock()
		if dials == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second Dial did not reach the device")
		}
	}
	accepted := make(chan error, 1)
	go func() {
		_, err := ln.Accept(ctx)
		accepted <- err
	}()

	k.Close()

	for name, conn := range map[string]*Conn{"dialed": c, "accepted": s} {
		select {
		case <-conn.Done():
		default:
			t.Fatalf("the %s connection is still up after the device closed", name)
		}
		if !errors.Is(conn.Err(), ErrDeviceClosed) {
			t.Errorf("the %s connection's Err = %v, want ErrDeviceClosed", name, conn.Err())
		}
		if !conn.kc.(*fakeKConn).closed {
			t.Errorf("the %s connection's kernel ID was not closed", name)
		}
	}
	select {
	case err := <-pending:
		if !errors.Is(err, ErrDeviceClosed) {
			t.Errorf("Dial in progress: %v, want ErrDeviceClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Dial in progress did not end with the device")
	}
	select {
	case err := <-accepted:
		if !errors.Is(err, ErrDeviceClosed) || !errors.Is(err, ErrClosed) {
			t.Errorf("Accept: %v, want ErrClosed wrapping ErrDeviceClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not end with the device")
	}
	if _, err := Dial(ctx, "rdma", ln.Addr().String(), &Options{Context: k}); !errors.Is(err, ErrDeviceClosed) {
		t.Errorf("Dial on the closed device: %v, want ErrDeviceClosed", err)
	}
	if _, err := Listen("rdma", "10.9.0.1:0", &Options{Context: k}); !errors.Is(err, ErrDeviceClosed) {
		t.Errorf("Listen on the closed device: %v, want ErrDeviceClosed", err)
	}
}
