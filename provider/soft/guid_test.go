package soft

import (
	"net"
	"net/netip"
	"testing"
)

func TestNodeGUIDFromMAC(t *testing.T) {
	ifi := &net.Interface{Name: "eth0", HardwareAddr: net.HardwareAddr{0x52, 0x54, 0x00, 0x77, 0x00, 0x02}}
	// rxe0 on the interop VM's eth0 shows node_guid 5054:00ff:fe77:0002.
	if g, want := NodeGUID(ifi, netip.MustParseAddr("10.77.0.2")), uint64(0x505400fffe770002); g != want {
		t.Fatalf("NodeGUID = %016x, want %016x", g, want)
	}
}

func TestNodeGUIDWithoutMACStableAndDistinct(t *testing.T) {
	lo := &net.Interface{Name: "lo"}
	a, b := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	if NodeGUID(lo, a) != NodeGUID(lo, a) {
		t.Fatal("NodeGUID is not stable")
	}
	if NodeGUID(lo, a) == NodeGUID(lo, b) {
		t.Fatal("two loopback devices share a GUID")
	}
	if g := NodeGUID(lo, a); g>>56 != 0 {
		t.Fatalf("GUID %016x: want the U/L bit of 02:... flipped to 0", g)
	}
}

func TestDeviceNameUnique(t *testing.T) {
	if n := DeviceName("lo", netip.MustParseAddr("127.0.0.2")); n != "softrdma_lo_127_0_0_2" {
		t.Fatalf("DeviceName = %q", n)
	}
}
