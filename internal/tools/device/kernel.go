package device

import (
	"fmt"
	"os"
	"runtime"

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
		if err == nil {
			twoPs()
		}
		return ctx, true, err
	}
	return nil, false, nil
}

// twoPs gives a tool on a one-CPU machine a second P (GOMAXPROCS 2)
// unless the user chose GOMAXPROCS. With one P, every cgo call that
// lasts longer than sysmon's 20 µs tick loses it: rxe's doorbell is a
// system call in which the kernel builds and sends the packets, so each
// PostSend does. sysmon takes the P from the calling thread and, as no
// other P is idle, wakes a second thread to spin on it, which competes
// with the first for the one CPU; the caller then has to win the P back.
// With an idle second P, sysmon leaves the P with the thread in C. On
// the interop fixture's one-vCPU guests this cut ib_write_lat's typical
// latency by 15-30 % and raised ib_send_bw -c UD by 40 % (three pairs
// of runs); a machine with more CPUs already has GOMAXPROCS above 1.
func twoPs() {
	if runtime.GOMAXPROCS(0) == 1 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(2)
	}
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
