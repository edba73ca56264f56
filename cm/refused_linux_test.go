package cm_test

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

// TestDialNoDeviceRefused: a dial to a loopback address where nothing
// listens on the RoCEv2 port fails at once with ECONNREFUSED (the ICMP
// port unreachable for the REQ), instead of after the REQ's retries
// (about 100 s).
func TestDialNoDeviceRefused(t *testing.T) {
	base := byte(os.Getpid()%200 + 20)
	local := netip.AddrFrom4([4]byte{127, base, 77, 1})
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: local.AsSlice()})
	if err != nil {
		t.Skipf("no loopback address %v: %v", local, err)
	}
	port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	dev, err := soft.Open(soft.Config{Addr: local, Port: port})
	if err != nil {
		t.Skip(err)
	}
	defer func() { cm.Detach(dev); dev.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dst := netip.AddrFrom4([4]byte{127, base, 77, 9})
	_, err = cm.Dial(ctx, "rdma", netip.AddrPortFrom(dst, 7471).String(), &cm.Options{Context: dev})
	var ue *cm.UnreachableError
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &ue) || ue.Addr != dst {
		t.Fatalf("dial to an address without a device: %v, want *cm.UnreachableError matching ECONNREFUSED", err)
	}
}
