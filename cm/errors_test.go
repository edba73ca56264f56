package cm

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// TestRefusalsMatchECONNREFUSED: a consumer REJ and a REJ for a port
// nobody listens on are refusals to Go code written for net.
func TestRefusalsMatchECONNREFUSED(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		agentFor(p.srv, 1)
		_, err := p.dial(context.Background(), "ping")
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("no listener: %v does not match ECONNREFUSED", err)
		}
		serve(t, p.listen(t, verbs.QPTypeRC), true)
		_, err = p.dial(context.Background(), "ping")
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("consumer reject: %v does not match ECONNREFUSED", err)
		}
	})
}

// checkTimeout fails unless err reads as a timeout does from net.
func checkTimeout(t *testing.T, err error) {
	t.Helper()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%v: not a net.Error that timed out", err)
	}
	if _, ok := err.(net.Error); !ok {
		t.Fatalf("%T: the error itself is no net.Error (net.OpError looks at it directly)", err)
	}
	for _, target := range []error{ErrTimeout, os.ErrDeadlineExceeded, context.DeadlineExceeded} {
		if !errors.Is(err, target) {
			t.Fatalf("%v does not match %v", err, target)
		}
	}
}

// TestTimeoutsAreNetTimeouts: a dial whose REQ is never answered, and one
// whose context's deadline comes first, fail with a timeout as net's do.
func TestTimeoutsAreNetTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.net.filter = func(src verbs.GID, a wire.CMAttr, n int) int { return 0 }
		_, err := p.dial(context.Background(), "ping")
		checkTimeout(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = p.dial(ctx, "ping")
		checkTimeout(t, err)
	})
}

// unreachDev is a fake device that reports ICMP errors, as provider/soft
// does on Linux.
type unreachDev struct {
	*fakeDev
	h func(verbs.GID, error)
}

func (d *unreachDev) HandleUnreachable(port uint8, h func(verbs.GID, error)) error {
	d.h = h
	return nil
}

// TestUnreachableRefusesAtOnce: a REQ answered by an ICMP port
// unreachable fails the dial at once with ECONNREFUSED, not after the
// REQ's retries.
func TestUnreachableRefusesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		p.net.filter = func(src verbs.GID, a wire.CMAttr, n int) int { return 0 }
		cli := &unreachDev{fakeDev: p.cli}
		t.Cleanup(func() { Detach(cli) })
		errc := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := Dial(context.Background(), "rdma", p.server, &Options{Context: cli})
			errc <- err
		}()
		synctest.Wait() // the REQ is out
		if cli.h == nil {
			t.Fatal("cm did not install an unreachable handler")
		}
		cli.h(verbs.GIDFromAddr(p.srv.addr), syscall.ECONNREFUSED)
		err := <-errc
		var ue *UnreachableError
		if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &ue) || ue.Addr != p.srv.addr {
			t.Fatalf("dial: %v", err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("refused after %v, want at once", d)
		}
		if n := p.net.sent(wire.CMReqAttr); n != 1 {
			t.Fatalf("REQ sent %d times, want 1", n)
		}
	})
}

// TestHostnames: addresses may name hosts, as net's do.
func TestHostnames(t *testing.T) {
	for _, c := range []struct{ network, addr, want string }{
		{"rdma", "localhost:9999", "127.0.0.1:9999"},
		{"rdma4", "localhost:9999", "127.0.0.1:9999"},
		{"rdma", "127.0.0.2:1", "127.0.0.2:1"},
		{"rdma", "[::1]:5", "[::1]:5"},
	} {
		ap, err := splitAddr(c.network, c.addr)
		if err != nil || ap.String() != c.want {
			t.Errorf("%s %s: %v, %v; want %s", c.network, c.addr, ap, err, c.want)
		}
	}
	if _, err := splitAddr("rdma", "no-such-host.invalid:1"); err == nil {
		t.Error("a name that does not resolve was taken")
	}
}
