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
		return verbstest.Pair{A: open(), B: open(), GIDIndex: 0, Lacks: map[verbstest.Feature]string{
			// A peer's WRITE, READ and atomic are a memcpy or a CPU atomic
			// on memory it mapped after the owner checked its grant; a
			// refused grant moves the responder QP to ERR but the check
			// lives in the control connection, which raises no event.
			verbstest.ResponderAccessEvents: "a refused grant raises no QP_ACCESS_ERR",
		}}
	})
}
