package roce

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/softrdma/softrdma/transport/udp"
)

var udpPairs atomic.Uint32

// udpPair opens two UDP transports on distinct loopback addresses, unique
// to this test process, sharing one port.
func udpPair(t *testing.T) (*udp.Transport, *udp.Transport) {
	k := udpPairs.Add(1)
	base := uint32(os.Getpid()%200) + 20
	a := netip.AddrFrom4([4]byte{127, byte(base), byte(k), 1})
	b := netip.AddrFrom4([4]byte{127, byte(base), byte(k), 2})
	ta, err := udp.Listen(udp.Config{Addr: a, Port: 4791})
	if err != nil {
		t.Skipf("loopback UDP unavailable: %v", err)
	}
	tb, err := udp.Listen(udp.Config{Addr: b, Port: 4791})
	if err != nil {
		ta.Close()
		t.Skipf("loopback UDP unavailable: %v", err)
	}
	return ta, tb
}

func TestSuiteUDP(t *testing.T) {
	for _, c := range slices.Concat(basicSuite, mwSuite) {
		t.Run(c.name, func(t *testing.T) {
			ta, tb := udpPair(t)
			// Real time on a shared machine: a 4 ms ACK timeout (the
			// default options') runs out of retries when the test
			// processes are descheduled for 30 ms, which -race on two
			// busy cores does. Nothing is lost here.
			o := realOpts()
			if c.opts != nil {
				c.opts(&o)
			}
			a, b := pair(t, ta, tb, o)
			c.run(t, a, b)
			a.close()
			b.close()
		})
	}
}

// TestReliabilityUDP runs the reliability suite over real sockets, with
// loss, duplication and reordering injected on the sending side.
func TestReliabilityUDP(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		for _, c := range reliabilitySuite {
			t.Run(fmt.Sprintf("%s/%s", c.name, seedName(seed)), func(t *testing.T) {
				ta, tb := udpPair(t)
				la, lb := newLossy(ta, seed, 0.05, 0.02), newLossy(tb, seed+100, 0.05, 0.02)
				o := defaultOpts()
				// 67 ms: with 16 ms, -race on two cores shared with the
				// rest of go test ./... ran out of retries now and then.
				o.timeout = 14
				a, b := pair(t, la, lb, o)
				t.Cleanup(func() {
					// What each side saw, for a failure's report too.
					t.Logf("dropped %d+%d packets; a: %v; b: %v", la.dropped.Load(), lb.dropped.Load(), nonZero(a.dev), nonZero(b.dev))
					if t.Failed() {
						dumpTrace(t, "a", la)
						dumpTrace(t, "b", lb)
					}
				})
				c.run(t, a, b)
				a.close()
				b.close()
			})
		}
	}
}
