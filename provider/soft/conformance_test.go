package soft

import (
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/transport"
	"github.com/softrdma/softrdma/verbs/verbstest"
)

// The verbs conformance suite against soft devices, over a simulated
// network and over UDP on loopback.

func TestConformanceNetsim(t *testing.T) {
	verbstest.Run(t, func(t testing.TB) verbstest.Pair {
		n := netsim.New(netsim.Config{Seed: 1})
		t.Cleanup(n.Close)
		ep := func(a string) transport.Transport {
			e, err := n.Endpoint(netip.MustParseAddr(a))
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		return conformancePair(t, ep("10.0.0.1"), ep("10.0.0.2"))
	})
}

func TestConformanceUDP(t *testing.T) {
	verbstest.Run(t, func(t testing.TB) verbstest.Pair {
		ta, tb := udpPair(t.(*testing.T))
		return conformancePair(t, ta, tb)
	})
}

func conformancePair(t testing.TB, ta, tb transport.Transport) verbstest.Pair {
	open := func(tr transport.Transport) *Device {
		d, err := Open(Config{Transport: tr})
		if err != nil {
			tr.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := d.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return d
	}
	return verbstest.Pair{A: open(ta), B: open(tb), GIDIndex: 1}
}
