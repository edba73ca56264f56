package shm

import (
	"testing"

	"github.com/softrdma/softrdma/verbs/verbstest"
)

// The verbs conformance suite against two shm devices in this process.
func TestConformance(t *testing.T) {
	verbstest.Run(t, func(t testing.TB) verbstest.Pair {
		open := func() *Device {
			d, err := Open(Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := d.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			return d
		}
		return verbstest.Pair{A: open(), B: open(), GIDIndex: 0,
			Lacks: map[verbstest.Feature]string{verbstest.MemoryWindows: "shm has no memory windows: peers map whole regions"}}
	})
}
