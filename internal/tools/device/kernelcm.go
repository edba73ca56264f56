package device

import (
	"net/netip"

	"github.com/softrdma/softrdma/provider/ibverbs"
	"github.com/softrdma/softrdma/verbs"
)

// openKernelAddr opens the kernel RDMA device whose port 1 has addr in
// its GID table, in a build with provider/ibverbs (build tag ibverbs);
// ok is false when no kernel device has it. The librdmacm-style tools
// (rping, ucmatose, udaddy, rstream, perftest -R) then connect through
// the kernel's CM (librdmacm), as rdma-core's do on that address.
func (o *Opener) openKernelAddr(addr netip.Addr) (ctx verbs.Context, ok bool, err error) {
	if !ibverbs.Enabled || !addr.IsValid() || addr.IsUnspecified() {
		return nil, false, nil
	}
	devs, err := ibverbs.Devices()
	if err != nil {
		return nil, false, nil
	}
	want := verbs.GIDFromAddr(addr)
	for _, d := range devs {
		c, err := d.Open()
		if err != nil {
			continue
		}
		if hasGID(c, want) {
			return c, true, nil
		}
		c.Close()
	}
	return nil, false, nil
}

// hasGID reports whether port 1 of c has the GID g.
func hasGID(c verbs.Context, g verbs.GID) bool {
	pa, err := c.QueryPort(1)
	if err != nil {
		return false
	}
	for i := 0; i < pa.GIDTblLen; i++ {
		if got, err := c.QueryGID(1, i); err == nil && got == g {
			return true
		}
	}
	return false
}
