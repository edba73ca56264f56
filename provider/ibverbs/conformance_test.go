//go:build ibverbs && cgo && linux

package ibverbs

import (
	"testing"

	"github.com/softrdma/softrdma/verbs/verbstest"
)

// The verbs conformance suite against a kernel device: two contexts
// opened on it (SOFTRDMA_IBVERBS_DEVICE, the interop VM's rxe0), whose
// QPs reach each other through the device's loopback.
func TestConformance(t *testing.T) {
	openOrSkip(t) // skip the whole suite without a device
	verbstest.Run(t, func(t testing.TB) verbstest.Pair {
		a, b := openOrSkip(t), openOrSkip(t)
		return verbstest.Pair{A: a, B: b, GIDIndex: roceIndex(t, a),
			Lacks: map[verbstest.Feature]string{}}
	})
}
