package bench

import (
	"net/netip"
	"os"
	"sync/atomic"
	"testing"

	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

var scaleAddrs atomic.Uint32

// devicePair opens two softrdma devices on loopback addresses of their own.
func devicePair(t *testing.T) (*soft.Device, *soft.Device) {
	t.Helper()
	k := byte(scaleAddrs.Add(1))
	base := byte(os.Getpid()%200 + 20)
	a, err := soft.Open(soft.Config{Addr: netip.AddrFrom4([4]byte{127, base, 230 + k, 1})})
	if err != nil {
		t.Skipf("loopback UDP unavailable: %v", err)
	}
	b, err := soft.Open(soft.Config{Addr: netip.AddrFrom4([4]byte{127, base, 230 + k, 2})})
	if err != nil {
		a.Close()
		t.Skipf("loopback UDP unavailable: %v", err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestScale runs the scale measurement at 1 and 64 QPs: every QP's stamp
// lands in its own slot of the target, every run moves what it says, and
// the memory figures are positive.
func TestScale(t *testing.T) {
	for _, n := range []int{1, 64} {
		a, b := devicePair(t)
		// Timeout 18 (1.07 s): under -race on a loaded host the 64 QPs'
		// synchronized go-back-N retransmissions (perftest's 67 ms) can
		// use up the retries; this test is about scale, not overload.
		r, err := Scale(a, b, ScaleConfig{QPs: n, Size: 4096, Msgs: 2000, RateMsgs: 2000, MTU: verbs.MTU1024, Timeout: 18})
		if err != nil {
			t.Fatalf("%d QPs: %v", n, err)
		}
		if r.Verified != n {
			t.Errorf("%d QPs: %d verified", n, r.Verified)
		}
		if r.BW.Msgs < 2000 || r.BW.MBps <= 0 || r.Rate.Msgs < 2000 || r.Rate.MsgRate <= 0 || r.Setup <= 0 {
			t.Errorf("%d QPs: implausible result %+v", n, r)
		}
		if r.HeapPerQP <= 0 {
			t.Errorf("%d QPs: heap per QP %d bytes", n, r.HeapPerQP)
		}
		t.Logf("%d QPs: setup %v, heap/QP %d B, RSS/QP %d B, %.0f MB/s, %.3f Mmsg/s", n, r.Setup, r.HeapPerQP, r.RSSPerQP, r.BW.MBps, r.Rate.MsgRate)
	}
}

// Misuse is an error, not a hang or a panic.
func TestScaleBadConfig(t *testing.T) {
	a, b := devicePair(t)
	for _, c := range []ScaleConfig{{QPs: 0, Size: 4096}, {QPs: 1, Size: 4}, {QPs: 1, Size: scaleData + 1}} {
		if _, err := Scale(a, b, c); err == nil {
			t.Errorf("Scale(%+v) succeeded", c)
		}
	}
}
