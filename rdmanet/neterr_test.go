package rdmanet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cm"
	"github.com/softrdma/softrdma/provider/soft"
)

// TestDialErrorsAsNet: a dial to an address where no device answers is
// refused at once (ECONNREFUSED, from the ICMP port unreachable), a host
// name is resolved, and a dial nobody answers times out as net's do.
func TestDialErrorsAsNet(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.71.7")})
	if err != nil {
		t.Skip(err)
	}
	port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	a, err := soft.Open(soft.Config{Addr: netip.MustParseAddr("127.0.71.7"), Port: port})
	if err != nil {
		t.Skip(err)
	}
	defer func() { cm.Detach(a); a.Close() }()
	d := Dialer{Config: &Config{Context: a}}
	for _, addr := range []string{"127.0.71.9:7000", "localhost:7000"} {
		start := time.Now()
		_, err := d.Dial("rdma", addr)
		var oe *net.OpError
		if !errors.As(err, &oe) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want a *net.OpError matching ECONNREFUSED", addr, err)
		}
		if el := time.Since(start); el > 20*time.Second {
			t.Fatalf("dial %s refused after %v: the REQ's retries, not the ICMP error", addr, el)
		}
	}
	// A UDP socket on the device port that reads nothing: no ICMP error,
	// no answer.
	sink, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("127.0.71.8"), Port: int(port)})
	if err != nil {
		t.Skip(err)
	}
	defer sink.Close()
	d.Timeout = 200 * time.Millisecond
	_, err = d.Dial("rdma", "127.0.71.8:7000")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("dial nobody answers: %v, want a net.Error that timed out", err)
	}
	if oe, ok := err.(*net.OpError); !ok || !oe.Timeout() {
		t.Fatalf("dial nobody answers: %T %v, want a *net.OpError whose Timeout is true", err, err)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial nobody answers: %v does not match os.ErrDeadlineExceeded and context.DeadlineExceeded", err)
	}
}
