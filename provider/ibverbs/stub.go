//go:build !(ibverbs && cgo && linux)

package ibverbs

import "github.com/softrdma/softrdma/verbs"

// Enabled reports whether the package was built with the provider
// (build tag ibverbs, cgo, Linux). In this build it was not.
const Enabled = false

const howToBuild = "softrdma was built without the kernel RDMA provider: install libibverbs-dev and build with `go build -tags ibverbs` (cgo enabled, Linux)"

// Context is an open kernel device. In a build without the provider it
// cannot be created.
type Context struct{ verbs.Context }

// Open fails: this build has no kernel RDMA provider.
func Open(cfg Config) (*Context, error) {
	return nil, verbs.Errorf("ibverbs.Open", verbs.ErrNotSupported, "%s", howToBuild)
}

// Devices fails: this build has no kernel RDMA provider.
func Devices() ([]verbs.Device, error) {
	return nil, verbs.Errorf("ibverbs.Devices", verbs.ErrNotSupported, "%s", howToBuild)
}
