package cm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/shm"
)

// TestCloseEndsCMShm: closing shared-memory devices with cm's
// connections and listener open ends them, as over RoCEv2.
func TestCloseEndsCMShm(t *testing.T) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srvDev, err := shm.Open(shm.Config{})
	if err != nil {
		t.Skipf("no shm device: %v", err)
	}
	cliDev, err := shm.Open(shm.Config{})
	if err != nil {
		srvDev.Close()
		t.Skipf("no shm device: %v", err)
	}
	ln, err := cm.Listen("rdma", "127.0.0.1:0", &cm.Options{Context: srvDev})
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
	cli, err := cm.Dial(ctx, "rdma", ln.Addr().String(), &cm.Options{Context: cliDev})
	if err != nil {
		t.Fatal(err)
	}
	srv := <-accepted
	if srv == nil {
		t.Fatal("accept failed")
	}
	if err := cliDev.Close(); err != nil {
		t.Fatalf("closing the client's device with a connection open: %v", err)
	}
	if err := srvDev.Close(); err != nil {
		t.Fatalf("closing the server's device with a connection and a listener open: %v", err)
	}
	<-cli.Done()
	<-srv.Done()
	if !errors.Is(cli.Err(), cm.ErrDeviceClosed) {
		t.Errorf("client Err() = %v, want ErrDeviceClosed", cli.Err())
	}
	if _, err := ln.Accept(ctx); !errors.Is(err, cm.ErrClosed) {
		t.Errorf("Accept after the device closed: %v", err)
	}
}
