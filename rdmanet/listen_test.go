package rdmanet

import (
	"errors"
	"net"
	"testing"
	"time"
)

func TestListenerClose(t *testing.T) {
	devices(t)
	checkGoroutines(t)
	l, err := Listen("rdma", addrB+":0")
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr().Network() != "rdma" {
		t.Errorf("Addr().Network() = %q", l.Addr().Network())
	}
	errc := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	l.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Close did not wake Accept")
	}
	// Nobody listens there now: the peer's CM rejects the REQ.
	if _, err := Dial("rdma", l.Addr().String()); err == nil {
		t.Error("Dial to a closed listener succeeded")
	}
	if _, err := Listen("udp", addrB+":0"); err == nil {
		t.Error("Listen on network udp succeeded")
	}
}
