//go:build !(ibverbs && cgo && linux)

package ibverbs

import (
	"errors"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/verbs"
)

// Without the build tag the package says how to get the provider.
func TestStubSaysHowToBuild(t *testing.T) {
	if Enabled {
		t.Fatal("Enabled in a build without the provider")
	}
	_, err := Open(Config{Name: "rxe0"})
	if !errors.Is(err, verbs.ErrNotSupported) || !strings.Contains(err.Error(), "-tags ibverbs") {
		t.Fatalf("Open = %v; want ErrNotSupported saying to build with -tags ibverbs", err)
	}
	if _, err := Devices(); !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("Devices = %v; want ErrNotSupported", err)
	}
}
