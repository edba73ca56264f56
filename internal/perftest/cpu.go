package perftest

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// CPUStat is what perftest's get_cpu_stats reads of the first line of
// /proc/stat ("cpu user nice system idle ..."), in clock ticks summed over
// all CPUs: the user time and the idle time.
type CPUStat struct {
	User, Idle int64
}

// ReadCPUStat parses the aggregate "cpu" line at the start of /proc/stat.
func ReadCPUStat(r io.Reader) (CPUStat, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && line == "" {
		return CPUStat{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return CPUStat{}, fmt.Errorf("/proc/stat: first line %q is not the aggregate cpu line", strings.TrimSpace(line))
	}
	user, err1 := strconv.ParseInt(f[1], 10, 64)
	idle, err2 := strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil {
		return CPUStat{}, fmt.Errorf("/proc/stat: %q: user or idle is not a number", strings.TrimSpace(line))
	}
	return CPUStat{User: user, Idle: idle}, nil
}

// CPUUtil is perftest's calc_cpu_util between two readings: the user
// share of user plus idle time, in percent. Like perftest it ignores
// system, interrupt and steal time, so for a software provider, whose
// packets cost kernel time, it understates the load (softrdma bench
// reports CPU seconds per GB, which counts everything).
func CPUUtil(start, end CPUStat) float64 {
	u, i := end.User-start.User, end.Idle-start.Idle
	if u+i == 0 {
		return 0
	}
	return float64(u) / float64(u+i) * 100
}
