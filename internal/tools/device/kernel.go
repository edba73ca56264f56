package device

import (
	"fmt"

	"github.com/softrdma/softrdma/provider/ibverbs"
	"github.com/softrdma/softrdma/verbs"
)

// openKernel opens the kernel RDMA device name (rxe0, mlx5_0, ...)
// through provider/ibverbs, if this build has the provider (build tag
// ibverbs) and the kernel lists a device of that name; ok is false
// otherwise, and the caller looks further. A kernel device's packets
// and counters are the kernel's, so --pcap and --metrics are refused
// rather than ignored.
func (o *Opener) openKernel(name string) (ctx verbs.Context, ok bool, err error) {
	if !ibverbs.Enabled || name == "" {
		return nil, false, nil
	}
	devs, err := ibverbs.Devices()
	if err != nil {
		return nil, false, nil
	}
	for _, d := range devs {
		if d.Name() != name {
			continue
		}
		switch {
		case o.Pcap != "":
			return nil, true, fmt.Errorf("--pcap: %s is a kernel device; capture its traffic with tcpdump on its network interface (or rdma's ibdump)", name)
		case o.Metrics != "":
			return nil, true, fmt.Errorf("--metrics: %s is a kernel device; its counters are in /sys/class/infiniband/%s/ports/1/hw_counters", name, name)
		}
		c, err := ibverbs.Open(ibverbs.Config{Name: name})
		ctx, err = ctxOf(c, err)
		return ctx, true, err
	}
	return nil, false, nil
}

// IsKernel reports whether ctx is a kernel RDMA device (provider/ibverbs).
func IsKernel(ctx verbs.Context) bool {
	_, ok := ctx.(*ibverbs.Context)
	return ok
}

// kernelHint is added to "device not found" when this build cannot open
// kernel devices.
func kernelHint() string {
	if ibverbs.Enabled {
		return ""
	}
	return " (kernel RDMA devices such as rxe0 need a build with -tags ibverbs)"
}
