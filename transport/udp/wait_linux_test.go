package udp

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/transport"
)

// A goroutine blocked in Wait is parked in the network poller, so its P
// serves other goroutines at once; blocked in ppoll it held the P until
// the runtime's monitor took it away. A datagram ends the wait, and so
// does Close.
func TestWaitParksInPoller(t *testing.T) {
	a, b := testAddrs(t, 40)
	tr, err := Listen(Config{Addr: a, Port: 4791})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	peer, err := Listen(Config{Addr: b, Port: 4791})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()

	waited := make(chan error, 1)
	go func() { waited <- tr.Wait() }()
	state := waitState(t)
	if !strings.HasPrefix(state, "IO wait") {
		t.Fatalf("a goroutine blocked in Wait is in state %q, want IO wait (parked in the network poller)", state)
	}
	if _, err := peer.Send([]transport.Datagram{{Buf: packet(8, 1), Peer: tr.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("Wait after a datagram: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return for a datagram")
	}

	// Drain it, then wait again and close.
	if _, err := tr.Recv(make([]transport.Datagram, 4)); err != nil {
		t.Fatal(err)
	}
	go func() { waited <- tr.Wait() }()
	waitState(t)
	tr.Close()
	select {
	case err := <-waited:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Wait after Close: %v, want transport.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a Wait")
	}
}

// waitState returns the scheduler state of the goroutine blocked in
// Transport.Wait ("IO wait", "syscall", ...), once there is one.
func waitState(t *testing.T) string {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if !strings.Contains(g, "udp.(*Transport).Wait(") {
				continue
			}
			head, _, _ := strings.Cut(g, "\n")
			_, state, ok := strings.Cut(head, "[")
			if !ok || strings.HasPrefix(state, "running") || strings.HasPrefix(state, "runnable") {
				continue // not blocked yet
			}
			return strings.TrimSuffix(state, "]:")
		}
	}
	t.Fatal("no goroutine blocked in Transport.Wait")
	return ""
}
