//go:build cgo

package handle

import (
	"runtime/cgo"
	"testing"
)

// BenchmarkCgoHandleValue is the lookup this package replaces, for
// comparison with BenchmarkValue.
func BenchmarkCgoHandleValue(b *testing.B) {
	h := cgo.NewHandle(b)
	defer h.Delete()
	for b.Loop() {
		sink = h.Value()
	}
}
