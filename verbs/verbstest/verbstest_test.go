package verbstest_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/internal/netsim"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/verbs/verbstest"
)

// TestSuite runs the suite as a provider does: two soft devices on a
// simulated network. A declared lack skips the cases that need it.
func TestSuite(t *testing.T) {
	verbstest.Run(t, func(t testing.TB) verbstest.Pair {
		n := netsim.New(netsim.Config{Seed: 1})
		t.Cleanup(n.Close)
		open := func(a string) verbs.Context {
			e, err := n.Endpoint(netip.MustParseAddr(a))
			if err != nil {
				t.Fatal(err)
			}
			d, err := soft.Open(soft.Config{Transport: e})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			return d
		}
		p := verbstest.Pair{A: open("10.0.0.1"), B: open("10.0.0.2"), GIDIndex: 1,
			Lacks: map[verbstest.Feature]string{verbstest.Atomics: "declared missing to exercise skipping"}}
		if tt, ok := t.(*testing.T); ok && strings.Contains(tt.Name(), "ATOMIC") {
			t.Cleanup(func() {
				if !tt.Skipped() {
					t.Errorf("an atomic case ran although the pair lacks atomics")
				}
			})
		}
		return p
	})
}
