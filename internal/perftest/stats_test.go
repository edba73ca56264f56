package perftest

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// stamps turns gaps into cumulative timestamps starting at start.
func stamps(start uint64, gaps ...uint64) []uint64 {
	out := []uint64{start}
	for _, g := range gaps {
		out = append(out, out[len(out)-1]+g)
	}
	return out
}

func TestComputeLat(t *testing.T) {
	shuffled := make([]uint64, 202)
	for i := range shuffled {
		shuffled[i] = uint64(i+1) * 1000
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })

	tests := []struct {
		name  string
		ts    []uint64
		p     LatParams
		want  LatStats
		check func(LatStats) bool // instead of want, when set
	}{
		{
			// sorted gaps 1 1.5 2 3 | 10 50 (µs): m = 4, the median averages
			// the middle two, t_max is the second largest gap, and only the
			// -1.125 deviation survives the int truncation: sqrt(1/4).
			name: "even",
			ts:   stamps(5_000_000, 1000, 2000, 1500, 3000, 10000, 50000),
			p:    LatParams{Size: 2, TicksPerUsec: NanosecondTicksPerUsec, RTTFactor: 1},
			want: LatStats{Size: 2, Iters: 7, TMin: 1, TMax: 10, TTypical: 1.75, TAvg: 1.875, TStdev: 0.5, P99: 10, P999: 10},
		},
		{
			// Half round trips: gaps 2 2 3 4 50 | 100 150 (µs after /2), m = 5.
			// Deviations 10.2 10.2 9.2 8.2 -37.8 truncate to 10 10 9 8 -37.
			name: "odd rtt2",
			ts:   stamps(0, 4000, 4000, 6000, 8000, 100000, 200000, 300000),
			p:    LatParams{Size: 64, TicksPerUsec: 1000, RTTFactor: 2},
			want: LatStats{Size: 64, Iters: 8, TMin: 2, TMax: 100, TTypical: 3, TAvg: 12.2,
				TStdev: math.Sqrt((100 + 100 + 81 + 64 + 1369) / 5.0), P99: 100, P999: 100},
		},
		{
			// The median of an even count is averaged in integer ticks:
			// (3+4)/2 = 3, not 3.5.
			name: "integer median",
			ts:   stamps(1, 1, 2, 3, 4, 5, 6, 100, 100),
			p:    LatParams{TicksPerUsec: 1, RTTFactor: 1},
			want: LatStats{Iters: 9, TMin: 1, TMax: 100, TTypical: 3, TAvg: 3.5,
				TStdev: math.Sqrt((4 + 1 + 0 + 0 + 1 + 4) / 6.0), P99: 100, P999: 100},
		},
		{
			// 202 gaps of 1..202 µs: m = 200, the 99% percentile is index
			// ⌈198⌉ = 198 (199 µs), the 99.9% one index ⌈199.8⌉ = 200.
			name: "percentiles",
			ts:   stamps(123, shuffled...),
			p:    LatParams{Size: 8, TicksPerUsec: 1000, RTTFactor: 1},
			want: LatStats{Size: 8, Iters: 203, TMin: 1, TMax: 201, TTypical: 100.5, TAvg: 100.5,
				TStdev: math.Sqrt(2 * 328350 / 200.0), P99: 199, P999: 201},
		},
		{
			// Squared deviations beyond 2^31 overflow the C int to INT_MIN,
			// the sum goes negative and perftest prints a NaN.
			name:  "stdev overflow",
			ts:    stamps(0, 0, 0, 200000, 1e9, 1e9),
			p:     LatParams{TicksPerUsec: 1, RTTFactor: 1},
			check: func(s LatStats) bool { return math.IsNaN(s.TStdev) && s.TMax == 1e9 },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ComputeLat(tt.ts, tt.p)
			if err != nil {
				t.Fatal(err)
			}
			if tt.check != nil {
				if !tt.check(got) {
					t.Errorf("got %+v", got)
				}
				return
			}
			if !closeLat(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func closeLat(a, b LatStats) bool {
	eq := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	return a.Size == b.Size && a.Iters == b.Iters && eq(a.TMin, b.TMin) && eq(a.TMax, b.TMax) &&
		eq(a.TTypical, b.TTypical) && eq(a.TAvg, b.TAvg) && eq(a.TStdev, b.TStdev) &&
		eq(a.P99, b.P99) && eq(a.P999, b.P999)
}

func TestComputeLatErrors(t *testing.T) {
	if _, err := ComputeLat([]uint64{1, 2, 3}, LatParams{TicksPerUsec: 1, RTTFactor: 1}); err == nil {
		t.Error("3 timestamps accepted")
	}
	if _, err := ComputeLat([]uint64{1, 2, 3, 4}, LatParams{TicksPerUsec: 0, RTTFactor: 1}); err == nil {
		t.Error("zero tick rate accepted")
	}
	if _, err := ComputeLat([]uint64{1, 2, 3, 4}, LatParams{TicksPerUsec: 1}); err == nil {
		t.Error("zero RTT factor accepted")
	}
}

func TestComputeBW(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name                 string
		posted, completed    []uint64
		p                    BWParams
		peak, avg, rate      float64
		iters                uint64
		rowMB, rowGb, rowExt bool
	}{
		{
			// Every completion signaled: the best per-message time is
			// (1400−0)/4 = 350 ns.
			name:      "cq_mod 1",
			posted:    []uint64{0, 100, 200, 300},
			completed: []uint64{1000, 1100, 1150, 1400},
			p:         BWParams{Size: mib, Iters: 4, CQMod: 1, TicksPerUsec: 1000},
			peak:      1e9 / 350.0, avg: 4e9 / 1400, rate: 4e9 / 1400 / 1e6, iters: 4,
		},
		{
			// Only completions 1 and 3 are signaled; entries 0 and 2 are
			// ignored (perftest never fills them), so the best is 2000/4.
			name:      "cq_mod 2",
			posted:    []uint64{0, 100, 200, 300},
			completed: []uint64{7, 1100, 1, 2000},
			p:         BWParams{Size: mib, Iters: 4, CQMod: 2, TicksPerUsec: 1000},
			peak:      1e9 / 500.0, avg: 4e9 / 2000, rate: 4e9 / 2000 / 1e6, iters: 4,
		},
		{
			// Five messages with moderation 2: the last one is signaled off
			// the grid and counts: (2100−0)/5 = 420.
			name:      "cq_mod tail",
			posted:    []uint64{0, 100, 200, 300, 400},
			completed: []uint64{0, 1100, 0, 2000, 2100},
			p:         BWParams{Size: mib, Iters: 5, CQMod: 2, TicksPerUsec: 1000},
			peak:      1e9 / 420.0, avg: 5e9 / 2100, rate: 5e9 / 2100 / 1e6, iters: 5,
		},
		{
			// Integer division per message: (1000−0)/3 = 333 ticks.
			name:      "integer ticks",
			posted:    []uint64{0, 10, 20},
			completed: []uint64{900, 950, 1000},
			p:         BWParams{Size: 4096, Iters: 3, NumQPs: 1, TicksPerUsec: 1000},
			peak:      4096 * 1e9 / (333.0 * mib), avg: 4096 * 3e9 / (1000.0 * mib), rate: 3e9 / 1000 / 1e6, iters: 3,
		},
		{
			name:      "Gb/s",
			posted:    []uint64{0, 100, 200, 300},
			completed: []uint64{1000, 1100, 1150, 1400},
			p:         BWParams{Size: mib, Iters: 4, TicksPerUsec: 1000, Gbits: true},
			peak:      mib * 1e9 / (350 * 125e6), avg: mib * 4e9 / (1400 * 125e6), rate: 4e9 / 1400 / 1e6, iters: 4,
		},
		{
			// -N: only the start and end stamps, no peak.
			name:      "no peak",
			posted:    []uint64{5000},
			completed: []uint64{1_005_000},
			p:         BWParams{Size: 65536, Iters: 1000, NumQPs: 2, NoPeak: true, TicksPerUsec: 1000},
			peak:      0, avg: 65536 * 2000 * 1e9 / (1e6 * mib), rate: 2000 * 1e9 / (1e6 * 1e6), iters: 2000,
		},
		{
			// Cycles at 2.4 GHz: peak_up is size × (uint64)(ticks per second);
			// the best per-message time is 26400/2.
			name:      "cycles",
			posted:    []uint64{1e12, 1e12 + 2400},
			completed: []uint64{1e12 + 24000, 1e12 + 26400},
			p:         BWParams{Size: 8, Iters: 2, TicksPerUsec: 2400},
			peak:      8 * 2.4e9 / (13200.0 * mib), avg: 16 * 2.4e9 / (26400.0 * mib), rate: 2 * 2.4e9 / 26400 / 1e6, iters: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ComputeBW(tt.posted, tt.completed, tt.p)
			if err != nil {
				t.Fatal(err)
			}
			eq := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
			if !eq(r.BWPeak, tt.peak) || !eq(r.BWAvg, tt.avg) || !eq(r.MsgRate, tt.rate) || r.Iters != tt.iters || r.Size != tt.p.Size {
				t.Errorf("got %+v\nwant peak %v avg %v rate %v iters %d", r, tt.peak, tt.avg, tt.rate, tt.iters)
			}
		})
	}
}

func TestComputeBWErrors(t *testing.T) {
	for _, p := range []BWParams{
		{Iters: 4, TicksPerUsec: 0},
		{Iters: 0, TicksPerUsec: 1},
		{Iters: 4, TicksPerUsec: 1, CQMod: -1},
		{Iters: 5, TicksPerUsec: 1}, // only 4 timestamps
	} {
		if _, err := ComputeBW(make([]uint64, 4), make([]uint64, 4), p); err == nil {
			t.Errorf("ComputeBW accepted %+v", p)
		}
	}
}

func TestSumBW(t *testing.T) {
	a := BWReport{Size: 8, Iters: 10, BWPeak: 1, BWAvg: 2, MsgRate: 3}
	b := BWReport{Size: 99, Iters: 99, BWPeak: 10, BWAvg: 20, MsgRate: 30}
	if got := SumBW(a, b); got != (BWReport{Size: 8, Iters: 10, BWPeak: 11, BWAvg: 22, MsgRate: 33}) {
		t.Errorf("SumBW = %+v", got)
	}
}

func TestComputeLatDuration(t *testing.T) {
	s, err := ComputeLatDuration(1000, 2e9, LatParams{Size: 2, TicksPerUsec: 1000, RTTFactor: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s != (LatDurationStats{Size: 2, Iters: 1000, TAvg: 1000, TPS: 500}) {
		t.Errorf("got %+v", s)
	}
	var b strings.Builder
	if err := WriteLatDurationRow(&b, s, false); err != nil {
		t.Fatal(err)
	}
	// REPORT_FMT_LAT_DUR " %-7lu       %lu            %-7.2f        %-7.2f"
	if want := " 2      " + "       " + "1000" + "            " + "1000.00" + "        " + "500.00 " + "\n"; b.String() != want {
		t.Errorf("row %q, want %q", b.String(), want)
	}
}

func BenchmarkComputeLat(b *testing.B) {
	ts := make([]uint64, 1000)
	for i := range ts {
		ts[i] = uint64(i) * 2500
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ComputeLat(ts, LatParams{TicksPerUsec: 1000, RTTFactor: 2}); err != nil {
			b.Fatal(err)
		}
	}
}
