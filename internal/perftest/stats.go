package perftest

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Timestamps are in ticks of the caller's clock: CPU cycles for perftest
// itself, nanoseconds for a Go program timing with time.Since (then
// TicksPerUsec is NanosecondTicksPerUsec). The integer steps of perftest's
// arithmetic (integer median, integer per-message peak time) happen in ticks,
// so results match perftest's exactly only for the same ticks.

// NanosecondTicksPerUsec is the tick rate of timestamps in nanoseconds.
const NanosecondTicksPerUsec = 1000

// BWParams describes a bandwidth measurement for ComputeBW.
type BWParams struct {
	Size     uint64 // message size in bytes
	Iters    uint64 // iterations per QP (-n)
	NumQPs   int    // 0 means 1
	PostList int    // WRs per post (--post_list); 0 means 1
	// CQMod is the completion moderation (-Q): one signaled completion
	// every CQMod sends. perftest defaults to 100, capped at the TX depth,
	// and forced to 1 for messages over 8 KiB; 0 means 1.
	CQMod int
	// NoPeak (-N) skips the peak computation; then only tposted[0] (start)
	// and tcompleted[0] (end) are used, and BWPeak is 0.
	NoPeak bool
	// TicksPerUsec is the timestamps' rate (CPU MHz for cycles).
	TicksPerUsec float64
	// Gbits reports in Gb/s (--report_gbits) instead of MiB/s.
	Gbits bool
	// ItersPerPort counts completions per port for --report-per-port.
	ItersPerPort [2]uint64
}

// ComputeBW computes a bandwidth report from per-message timestamps the way
// perftest 4.5's print_report_bw does. With n = Iters·NumQPs messages,
// tposted[i] is when message i was posted and tcompleted[j] when the
// completion covering message j was polled; only the entries perftest
// fills are read: j = k·CQMod−1 and j = n−1 (perftest's other entries are
// zero).
//
//   - average = Size·n / (tcompleted[n−1] − tposted[0]).
//   - peak = Size / (shortest per-message time), where a per-message time is
//     (tcompleted[j] − tposted[i]) / (j−i+1) in integer ticks, over every
//     post i (stepping by PostList) and every completion j ≥ i. This costs
//     O(n²/(CQMod·PostList)), as in perftest.
//   - message rate = n / elapsed, in millions per second.
//
// MB/sec means MiB/s (2^20); Gb/sec means 10^9 bits/s. Report.Iters is n.
func ComputeBW(tposted, tcompleted []uint64, p BWParams) (BWReport, error) {
	if p.NumQPs == 0 {
		p.NumQPs = 1
	}
	if p.PostList == 0 {
		p.PostList = 1
	}
	if p.CQMod == 0 {
		p.CQMod = 1
	}
	switch {
	case p.NumQPs < 0 || p.PostList < 0 || p.CQMod < 0:
		return BWReport{}, fmt.Errorf("perftest: invalid BW parameters %+v", p)
	case !(p.TicksPerUsec > 0):
		return BWReport{}, errors.New("perftest: TicksPerUsec must be positive")
	case p.Iters == 0:
		return BWReport{}, errors.New("perftest: no iterations")
	}
	n := p.Iters * uint64(p.NumQPs)
	need := n
	if p.NoPeak {
		need = 1
	}
	if uint64(len(tposted)) < need || uint64(len(tcompleted)) < need {
		return BWReport{}, fmt.Errorf("perftest: %d posted and %d completed timestamps for %d messages", len(tposted), len(tcompleted), need)
	}

	// perftest starts from tcompleted[0] − tposted[0]. Its tcompleted array
	// is zeroed and entry 0 only written when message 0's completion is
	// signaled, so with moderation that start value is 0 − (a cycle count),
	// which wraps to nearly 2^64: in effect no bound. MaxUint64 gives the
	// same results and does not depend on where the caller's clock starts.
	optDelta := uint64(math.MaxUint64)
	if p.NoPeak || p.CQMod == 1 || n == 1 {
		optDelta = tcompleted[0] - tposted[0]
	}
	if !p.NoPeak {
		cqMod, postList := uint64(p.CQMod), uint64(p.PostList)
		for i := uint64(0); i < n; i += postList {
			for j := roundUp(i+1, cqMod) - 1; j < n; j += cqMod {
				if t := (tcompleted[j] - tposted[i]) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
			// The last completion is signaled even off the moderation grid.
			if n%cqMod != 0 {
				j := n - 1
				if t := (tcompleted[j] - tposted[i]) / (j - i + 1); t < optDelta {
					optDelta = t
				}
			}
		}
	}

	ticksPerSec := p.TicksPerUsec * 1e6 // cycles_to_units
	format := float64(1 << 20)          // MBS: 0x100000
	formatInt := uint64(1 << 20)
	if p.Gbits {
		format, formatInt = 125000000, 125000000
	}
	last := n - 1
	if p.NoPeak {
		last = 0
	}
	sum := float64(tcompleted[last] - tposted[0])
	r := BWReport{
		Size:         p.Size,
		Iters:        n,
		BWAvg:        float64(p.Size) * float64(n) * ticksPerSec / (sum * format),
		MsgRate:      float64(n) * ticksPerSec / (sum * 1000000),
		BWAvgPort1:   float64(p.Size) * float64(p.ItersPerPort[0]) * ticksPerSec / (sum * format),
		MsgRatePort1: float64(p.ItersPerPort[0]) * ticksPerSec / (sum * 1000000),
		BWAvgPort2:   float64(p.Size) * float64(p.ItersPerPort[1]) * ticksPerSec / (sum * format),
		MsgRatePort2: float64(p.ItersPerPort[1]) * ticksPerSec / (sum * 1000000),
	}
	var peakUp uint64
	if !p.NoPeak {
		peakUp = p.Size * uint64(ticksPerSec)
	}
	r.BWPeak = float64(peakUp) / float64(optDelta*formatInt)
	return r, nil
}

// roundUp is perftest's ROUND_UP.
func roundUp(v, align uint64) uint64 {
	if v%align == 0 {
		return v
	}
	return align * (v/align + 1)
}

// SumBW returns what perftest prints for a duplex test: the peak, average
// and message rates of both sides added, size and iterations of local.
func SumBW(local, remote BWReport) BWReport {
	local.BWPeak += remote.BWPeak
	local.BWAvg += remote.BWAvg
	local.MsgRate += remote.MsgRate
	local.BWAvgPort1 += remote.BWAvgPort1
	local.MsgRatePort1 += remote.MsgRatePort1
	local.BWAvgPort2 += remote.BWAvgPort2
	local.MsgRatePort2 += remote.MsgRatePort2
	return local
}

// LatParams describes a latency measurement for ComputeLat.
type LatParams struct {
	Size uint64 // message size in bytes
	// TicksPerUsec is the timestamps' rate: CPU MHz for cycles,
	// NanosecondTicksPerUsec for nanoseconds, 1 to report in ticks
	// (perftest's -C reports in cycles this way).
	TicksPerUsec float64
	// RTTFactor divides every sample: Verb.RTTFactor(), 2 for write and
	// send (ping-pong: half a round trip), 1 for read and atomics.
	RTTFactor int
}

// LatStats is a latency result as perftest prints it, in microseconds (or
// ticks when TicksPerUsec is 1).
type LatStats struct {
	Size  uint64
	Iters uint64 // the number of timestamps, as perftest prints it

	TMin, TMax, TTypical, TAvg, TStdev float64
	P99, P999                          float64 // "99% percentile", "99.9% percentile"
}

// latMeasureTail is LAT_MEASURE_TAIL: the largest samples dropped.
const latMeasureTail = 2

// ComputeLat computes latency statistics from the post timestamps of a
// latency test, the way perftest 4.5's print_report_lat does. A sample is
// the gap between consecutive posts (each post waits for the previous
// exchange), so n timestamps give n−1 samples, divided by
// TicksPerUsec·RTTFactor. Then, exactly as perftest:
//
//   - the samples are sorted and the 2 largest dropped, leaving m = n−3;
//   - t_min is the smallest sample and t_max is sample[m], the second
//     largest of all (only the largest is really excluded);
//   - t_typical is the median of the m kept samples, averaging the two
//     middle ones in integer ticks when m is even;
//   - t_avg is the mean of the m kept samples;
//   - t_stdev is sqrt(Σ d²/m) where each d = t_avg − sample is first
//     truncated to a C int (so sub-microsecond deviations count as 0) and
//     d² is truncated to an int too (overflowing like x86 beyond 2^31);
//   - the 99% and 99.9% percentiles are sample[⌈0.99·m⌉] and
//     sample[⌈0.999·m⌉], which are t_max for m < 100 and m < 1000.
//
// It needs at least 4 timestamps; perftest requires 5 iterations.
func ComputeLat(tposted []uint64, p LatParams) (LatStats, error) {
	if len(tposted) < 2+latMeasureTail {
		return LatStats{}, fmt.Errorf("perftest: %d timestamps, need at least %d", len(tposted), 2+latMeasureTail)
	}
	if !(p.TicksPerUsec > 0) || p.RTTFactor <= 0 {
		return LatStats{}, fmt.Errorf("perftest: invalid latency parameters %+v", p)
	}
	delta := make([]uint64, len(tposted)-1)
	for i := range delta {
		delta[i] = tposted[i+1] - tposted[i]
	}
	slices.Sort(delta)
	m := len(delta) - latMeasureTail
	var median uint64
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		median = delta[m/2]
	}
	q := p.TicksPerUsec * float64(p.RTTFactor) // cycles_rtt_quotient
	sum := 0.0
	for _, d := range delta[:m] {
		sum += float64(d) / q
	}
	avg := sum / float64(m)
	stdevSum := 0.0
	for _, d := range delta[:m] {
		v := cInt(avg - float64(d)/q)
		stdevSum += float64(cInt(math.Pow(float64(v), 2)))
	}
	i99 := int(math.Ceil(float64(m) * 0.99))
	i999 := int(math.Ceil(float64(m) * 0.999))
	return LatStats{
		Size:     p.Size,
		Iters:    uint64(len(tposted)),
		TMin:     float64(delta[0]) / q,
		TMax:     float64(delta[m]) / q,
		TTypical: float64(median) / q,
		TAvg:     avg,
		TStdev:   math.Sqrt(stdevSum / float64(m)),
		P99:      float64(delta[i99]) / q,
		P999:     float64(delta[i999]) / q,
	}, nil
}

// cInt converts like a C (int) cast on x86-64: truncation toward zero, and
// INT_MIN for NaN and out-of-range values.
func cInt(x float64) int32 {
	if math.IsNaN(x) || x >= 1<<31 || x <= -(1<<31)-1 {
		return math.MinInt32
	}
	return int32(x)
}

// LatDurationStats is the result of a latency test run for a duration (-D).
type LatDurationStats struct {
	Size  uint64
	Iters uint64  // exchanges completed in the measured interval
	TAvg  float64 // average latency, microseconds
	TPS   float64 // exchanges (transactions) per second
	// CPUUtil is the CPU utilisation over the measured interval
	// (--cpu_util), in percent.
	CPUUtil float64
}

// ComputeLatDuration computes a duration-mode latency result the way
// print_report_lat_duration does: elapsed is the measured interval in ticks
// and iters the exchanges completed in it.
func ComputeLatDuration(iters, elapsed uint64, p LatParams) (LatDurationStats, error) {
	if !(p.TicksPerUsec > 0) || p.RTTFactor <= 0 {
		return LatDurationStats{}, fmt.Errorf("perftest: invalid latency parameters %+v", p)
	}
	t := float64(elapsed)
	return LatDurationStats{
		Size:  p.Size,
		Iters: iters,
		TAvg:  t / p.TicksPerUsec / float64(p.RTTFactor) / float64(iters),
		TPS:   float64(iters) / (t / (p.TicksPerUsec * 1000000)),
	}, nil
}

// LatSamples returns every latency sample of a latency run in
// microseconds, as print_report_lat lists them: in measurement order
// (-U, --report-unsorted), or sorted without the LAT_MEASURE_TAIL
// largest (-H, --report-histogram).
func LatSamples(tposted []uint64, p LatParams, sorted bool) ([]float64, error) {
	if len(tposted) < 2+latMeasureTail {
		return nil, fmt.Errorf("perftest: %d timestamps, need at least %d", len(tposted), 2+latMeasureTail)
	}
	if !(p.TicksPerUsec > 0) || p.RTTFactor <= 0 {
		return nil, fmt.Errorf("perftest: invalid latency parameters %+v", p)
	}
	delta := make([]uint64, len(tposted)-1)
	for i := range delta {
		delta[i] = tposted[i+1] - tposted[i]
	}
	if sorted {
		slices.Sort(delta)
		delta = delta[:len(delta)-latMeasureTail]
	}
	q := p.TicksPerUsec * float64(p.RTTFactor)
	us := make([]float64, len(delta))
	for i, d := range delta {
		us[i] = float64(d) / q
	}
	return us, nil
}
