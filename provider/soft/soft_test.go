package soft

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// TestOpenedDevicesListed: an opened device is listed by verbs.Devices
// until it is closed.
func TestOpenedDevicesListed(t *testing.T) {
	addr := netip.MustParseAddr(fmt.Sprintf("127.%d.77.1", os.Getpid()%200+20))
	d, err := Open(Config{Name: "softrdma_test0", Addr: addr})
	if err != nil {
		t.Skipf("cannot bind %v: %v", addr, err)
	}
	listed := func() bool {
		devs, err := verbs.Devices()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range devs {
			if x.Name() == "softrdma_test0" {
				return true
			}
		}
		return false
	}
	if !listed() {
		t.Fatal("an open device is not listed")
	}
	if a, ok := DeviceAddr(d); !ok || a != addr {
		t.Fatalf("DeviceAddr = %v, %v", a, ok)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if listed() {
		t.Fatal("a closed device is still listed")
	}
}
