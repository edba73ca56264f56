package cm_test

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// checkGoroutines fails the test if goroutines started during it are
// still there when it ends (after a grace period for those on their way
// out).
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// openPair opens two soft devices on loopback addresses of the test's
// own UDP port.
func openPair(t *testing.T, a, b string) (*soft.Device, *soft.Device) {
	t.Helper()
	da, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(a), Port: freePort})
	if err != nil {
		t.Skipf("no loopback soft device: %v", err)
	}
	db, err := soft.Open(soft.Config{Addr: netip.MustParseAddr(b), Port: freePort})
	if err != nil {
		da.Close()
		t.Skipf("no loopback soft device: %v", err)
	}
	return da, db
}

// TestCloseEndsCM: closing the devices is all a program has to do. The
// connections end (Done, ErrDeviceClosed), a blocked Accept returns
// ErrClosed, a Dial waiting for its peer fails, and no goroutine of cm's
// is left, whether or not the deprecated Detach was called first.
func TestCloseEndsCM(t *testing.T) {
	for _, detach := range []bool{false, true} {
		name := "close"
		if detach {
			name = "detach+close"
		}
		t.Run(name, func(t *testing.T) {
			checkGoroutines(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			da, db := openPair(t, "127.0.63.1", "127.0.63.2")
			ln, err := cm.Listen("rdma", "127.0.63.2:7471", nil)
			if err != nil {
				t.Fatal(err)
			}
			accepted := make(chan *cm.Conn, 1)
			go func() {
				req, err := ln.Accept(ctx)
				if err != nil {
					accepted <- nil
					return
				}
				c, _ := req.Accept(ctx, nil)
				accepted <- c
			}()
			cli, err := cm.Dial(ctx, "rdma", "127.0.63.2:7471", nil)
			if err != nil {
				t.Fatal(err)
			}
			srv := <-accepted
			if srv == nil {
				t.Fatal("accept failed")
			}
			// A second listener whose Accept is blocked, and a Dial to a
			// listener that never answers (its requests wait in the
			// backlog) while the devices close.
			idle, err := cm.Listen("rdma", "127.0.63.2:7472", nil)
			if err != nil {
				t.Fatal(err)
			}
			acceptErr := make(chan error, 1)
			go func() {
				_, err := ln.Accept(ctx)
				acceptErr <- err
			}()
			dialErr := make(chan error, 1)
			go func() {
				_, err := cm.Dial(ctx, "rdma", "127.0.63.2:7472", nil)
				dialErr <- err
			}()
			time.Sleep(50 * time.Millisecond) // the REQ is on its way

			if detach {
				cm.Detach(da)
				cm.Detach(db)
			}
			if err := da.Close(); err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			for _, c := range []*cm.Conn{cli, srv} {
				select {
				case <-c.Done():
				case <-ctx.Done():
					t.Fatal("a connection did not end when its device closed")
				}
				// The server may see the client's DREQ (sent when the
				// client's device closed) before its own device closes.
				if err := c.Err(); !errors.Is(err, cm.ErrDeviceClosed) && (c == cli || !errors.Is(err, cm.ErrDisconnected)) {
					t.Errorf("Err() = %v, want ErrDeviceClosed", err)
				}
				if err := c.Close(); err != nil {
					t.Errorf("Close after the device closed: %v", err)
				}
			}
			if err := <-acceptErr; !errors.Is(err, cm.ErrClosed) {
				t.Errorf("blocked Accept returned %v, want ErrClosed", err)
			}
			if err := <-dialErr; !errors.Is(err, cm.ErrDeviceClosed) {
				t.Errorf("Dial in progress returned %v, want ErrDeviceClosed", err)
			}
			if _, err := idle.Accept(ctx); !errors.Is(err, cm.ErrClosed) {
				t.Errorf("Accept on a closed device's listener: %v, want ErrClosed", err)
			}
			ln.Close()
			idle.Close()
		})
	}
}

// TestClosedDevice: Listen and Dial on a device that is closed say so.
func TestClosedDevice(t *testing.T) {
	checkGoroutines(t)
	da, db := openPair(t, "127.0.63.3", "127.0.63.4")
	db.Close()
	da.Close()
	if _, err := cm.Listen("rdma", "127.0.63.3:7471", &cm.Options{Context: da}); err == nil {
		t.Error("Listen on a closed device succeeded")
	} else if !errors.Is(err, verbs.ErrInvalidState) || !errors.Is(err, cm.ErrDeviceClosed) {
		t.Errorf("Listen on a closed device: %v", err)
	}
}
