package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/internal/bench"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// scaleReport is the JSON form of a -scale run.
type scaleReport struct {
	Time    time.Time           `json:"time"`
	AddrA   string              `json:"addr_a"`
	AddrB   string              `json:"addr_b"`
	MTU     int                 `json:"mtu"`
	Results []bench.ScaleResult `json:"results"`
}

// parseQPCounts parses -scale's comma-separated QP counts.
func parseQPCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 16384 {
			return nil, fmt.Errorf("-scale: %q is not a QP count from 1 to 16384", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// scaleOpts are runScale's settings (bench's -scale-* flags): the
// bandwidth run's WRITE size and count, the rate run's count, the WRITEs
// in flight over all QPs (0: bench.Scale's default), the IB MTU, and
// whether to print the devices' counters after each QP count.
type scaleOpts struct {
	size, msgs, rateMsgs, outstanding int
	mtu                               verbs.MTU
	counters                          bool
}

// runScale measures each QP count in turn on the two devices and prints a
// table: setup time, memory per QP, aggregate WRITE bandwidth at o.size
// and 8-byte WRITE rate over all QPs; with o.counters, each QP count's
// line is followed by what the devices counted during it.
func runScale(w io.Writer, a, b verbs.Context, counts []int, o scaleOpts) ([]bench.ScaleResult, error) {
	size := o.size
	fmt.Fprintln(w, dashes)
	fmt.Fprintf(w, "                    RC QP scale: %d-byte and 8-byte RDMA WRITEs round-robin over N QP pairs\n", size)
	fmt.Fprintln(w, "                    (one PD, MR and CQ per side; send queue 128, receive queue 16 per QP)")
	fmt.Fprintln(w, dashes)
	fmt.Fprintf(w, " %-6s %-11s %-13s %-12s %-17s %-16s %-9s\n", "#QPs", "setup[ms]", "heap/QP[KiB]", "RSS/QP[KiB]",
		fmt.Sprintf("BW %s[MB/s]", sizeName(size)), "8B rate[Mmsg/s]", "CPU[s/GB]")
	var out []bench.ScaleResult
	for _, n := range counts {
		before := counterSnapshot(a, b)
		r, err := bench.Scale(a, b, bench.ScaleConfig{QPs: n, Size: size, Msgs: o.msgs, RateMsgs: o.rateMsgs, Outstanding: o.outstanding, MTU: o.mtu})
		if err != nil {
			return out, fmt.Errorf("%d QPs: %w\n%s", n, err, counterReport(a, b))
		}
		fmt.Fprintf(w, " %-6d %-11.1f %-13.1f %-12.1f %-17.1f %-16.3f %-9.3f\n", n, float64(r.Setup.Microseconds())/1e3,
			float64(r.HeapPerQP)/1024, float64(r.RSSPerQP)/1024, r.BW.MBps, r.Rate.MsgRate, r.BW.CPUPerGB)
		if o.counters {
			fmt.Fprint(w, counterDelta(before, a, b))
		}
		out = append(out, r)
	}
	fmt.Fprintln(w, dashes)
	return out, nil
}

// sizeName writes a size as perftest users read it: 64KiB, 1MiB, 300B.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// counterSnapshot returns the counters of the devices (nil for a device
// that is not soft), for counterDelta.
func counterSnapshot(devs ...verbs.Context) [][]soft.Counter {
	out := make([][]soft.Counter, len(devs))
	for i, d := range devs {
		if sd, ok := d.(*soft.Device); ok {
			out[i] = sd.Counters()
		}
	}
	return out
}

// counterDelta lists, per soft device, the counters that changed since
// before (a counterSnapshot of the same devices) and by how much.
func counterDelta(before [][]soft.Counter, devs ...verbs.Context) string {
	var b strings.Builder
	for i, d := range devs {
		sd, ok := d.(*soft.Device)
		if !ok || i >= len(before) {
			continue
		}
		fmt.Fprintf(&b, "   device %c:", 'a'+i)
		for j, c := range sd.Counters() {
			if j < len(before[i]) && before[i][j].Name == c.Name {
				c.Value -= before[i][j].Value
			}
			if c.Value != 0 {
				fmt.Fprintf(&b, " %s=%d", c.Name, c.Value)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// counterReport lists the non-zero counters of the two devices (soft
// devices only), so that a failed run says what the transport saw.
func counterReport(devs ...verbs.Context) string {
	var b strings.Builder
	for i, d := range devs {
		sd, ok := d.(*soft.Device)
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "device %c (%s):", 'a'+i, sd.Name())
		for _, c := range sd.Counters() {
			if c.Value != 0 {
				fmt.Fprintf(&b, " %s=%d", c.Name, c.Value)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}
