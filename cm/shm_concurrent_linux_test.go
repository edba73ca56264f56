package cm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/shm"
)

// TestShmConcurrentDials: several Dials at once from a fresh device (so
// that they race to connect the two devices) all connect, to the host's
// address and port or to the listener's GID.
func TestShmConcurrentDials(t *testing.T) {
	srv, cli := openShm(t), openShm(t)
	ln, err := cm.Listen("rdma", "127.0.0.1:0", &cm.Options{Context: srv})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hang)
	defer cancel()
	const n = 4
	var wg, served sync.WaitGroup
	defer served.Wait() // before the devices close
	served.Add(n)
	for range n {
		go func() {
			defer served.Done()
			req, err := ln.Accept(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			c, err := req.Accept(ctx, nil)
			if err != nil {
				t.Error(err)
				return
			}
			<-c.Done() // the dialer disconnects
			c.Close()
		}()
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			to := fmt.Sprintf("127.0.0.1:%d", ln.Addr().Port()) // the host: found by the port
			if i%2 == 1 {
				to = ln.Addr().String() // the listener's device by its GID
			}
			c, err := cm.Dial(ctx, "rdma", to, &cm.Options{Context: cli})
			if err != nil {
				t.Errorf("Dial %d: %v", i, err)
				return
			}
			c.Close()
		}()
	}
	wg.Wait()
}

// BenchmarkShmDial measures connection setup through cm over shm, both
// devices in this process: Dial (service lookup, REQ, REP, RTU, both QPs
// to RTS) until Dial returns, then Close (DREQ) and the server's Accept
// side torn down.
func BenchmarkShmDial(b *testing.B) {
	srv, cli := openShmB(b), openShmB(b)
	ln, err := cm.Listen("rdma", "127.0.0.1:0", &cm.Options{Context: srv})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx := context.Background()
	served := make(chan error)
	go func() {
		for {
			req, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			c, err := req.Accept(ctx, nil)
			if err == nil {
				<-c.Done()
				c.Close()
			}
			served <- err
		}
	}()
	to := fmt.Sprintf("127.0.0.1:%d", ln.Addr().Port())
	b.ReportAllocs()
	for b.Loop() {
		c, err := cm.Dial(ctx, "rdma", to, &cm.Options{Context: cli})
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		if err := <-served; err != nil {
			b.Fatal(err)
		}
	}
}

func openShmB(b *testing.B) *shm.Device {
	dev, err := shm.Open(shm.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		dev.Close()
	})
	return dev
}
