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

// TestCloseFreesAll: Close with a QP, MRs, CQs and a PD still in use
// releases them and the address, so `defer dev.Close()` is correct: the
// same address opens again at once.
func TestCloseFreesAll(t *testing.T) {
	addr := netip.MustParseAddr(fmt.Sprintf("127.%d.78.1", os.Getpid()%200+20))
	for range 2 {
		d, err := Open(Config{Addr: addr})
		if err != nil {
			t.Fatalf("open %v: %v", addr, err)
		}
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(8, nil)
		mr, _ := pd.AllocMR(4096, verbs.AccessLocalWrite)
		pd.RegMR(make([]byte, 64), verbs.AccessLocalWrite)
		qp, err := pd.CreateQP(&verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("Close with objects in use: %v", err)
		}
		if err := qp.PostRecv(&verbs.RecvWR{}); err == nil || mr.Dereg() == nil {
			t.Fatal("objects still usable after Close")
		}
	}
}
