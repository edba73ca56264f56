package roce

import (
	"testing"
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
)

// TestProcessAddrs: with Config.ProcessAddrs an MR's address is its
// memory's address in this process (what C programs put in SGEs and send
// to peers); without it, a random address that reveals nothing.
func TestProcessAddrs(t *testing.T) {
	for _, process := range []bool{false, true} {
		d := newDevice(t, Config{Transport: newCapture("10.9.0.1"), ProcessAddrs: process})
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		mem := uint64(uintptr(unsafe.Pointer(&buf[0])))
		if got := mr.Addr() == mem; got != process {
			t.Errorf("ProcessAddrs=%v: MR.Addr %#x, memory at %#x", process, mr.Addr(), mem)
		}
		mr.Dereg()
		pd.Dealloc()
		d.Close()
	}
}
