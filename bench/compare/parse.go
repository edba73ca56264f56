//go:build linux

package main

// Parsers for the tools' outputs. Each returns the metrics under the
// harness's names (units in the names), the line it read them from, and an
// error that quotes the output when the expected table is missing.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/bench/internal/harness"
)

// metrics maps a metric name to its value. Names carry their unit:
// lat_*_us (one-way latency unless the series says round trip, µs),
// bw_MiBps (MB/s with MB = 2^20 bytes, as perftest and ucx_perftest),
// msg_rate_M (million messages per second), loss (fraction).
type metrics map[string]float64

func parseErr(what, out string) error {
	return fmt.Errorf("cannot parse %s output; last lines:\n%s", what, indent(tailLines(out, 10)))
}

// parsePerftest reads perftest's result table: for bandwidth tests
//
//	#bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]
//
// and for latency tests
//
//	#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec] t_stdev[usec] 99% percentile[usec] 99.9% percentile[usec]
func parsePerftest(out string, size int) (metrics, string, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") {
			continue
		}
		lat := strings.Contains(l, "t_typical")
		bw := strings.Contains(l, "BW average")
		if !lat && !bw {
			continue
		}
		for _, row := range lines[i+1:] {
			f, ok := numbers(row)
			if !ok {
				if strings.HasPrefix(strings.TrimSpace(row), "---") || strings.TrimSpace(row) == "" {
					break
				}
				continue
			}
			if int(f[0]) != size {
				continue // -a prints every size; keep looking
			}
			if bw && len(f) >= 5 {
				return metrics{"peak_MiBps": f[2], "bw_MiBps": f[3], "msg_rate_M": f[4]}, strings.TrimSpace(row), nil
			}
			if lat && len(f) >= 9 {
				return metrics{
					"lat_min_us": f[2], "lat_max_us": f[3], "lat_p50_us": f[4], "lat_avg_us": f[5],
					"lat_stdev_us": f[6], "lat_p99_us": f[7], "lat_p999_us": f[8],
				}, strings.TrimSpace(row), nil
			}
			// perftest's latency table has fewer columns without percentiles
			if lat && len(f) >= 6 {
				return metrics{"lat_min_us": f[2], "lat_max_us": f[3], "lat_p50_us": f[4], "lat_avg_us": f[5]}, strings.TrimSpace(row), nil
			}
		}
	}
	return nil, "", parseErr("perftest", out)
}

// numbers parses a whitespace-separated row of numbers.
func numbers(row string) ([]float64, bool) {
	fs := strings.Fields(row)
	if len(fs) == 0 {
		return nil, false
	}
	v := make([]float64, len(fs))
	for i, f := range fs {
		x, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, false
		}
		v[i] = x
	}
	return v, true
}

// parseUCX reads ucx_perftest -f -v (CSV, final numbers only):
//
//	iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
//	20000,8.028,8.944,8.944,0.85,0.85,111803,111803
//
// Latency tests (lat=true) yield the percentile and the average one-way
// latency (ucx_perftest halves the ping-pong round trip); bandwidth tests the
// overall bandwidth (MB = 2^20) and message rate.
func parseUCX(out string, lat bool) (metrics, string, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "iterations,") || i+1 >= len(lines) {
			continue
		}
		hdr := strings.Split(l, ",")
		row := strings.TrimSpace(lines[i+1])
		vals := strings.Split(row, ",")
		if len(vals) != len(hdr) {
			continue
		}
		col := map[string]float64{}
		for j, h := range hdr {
			x, err := strconv.ParseFloat(strings.TrimSpace(vals[j]), 64)
			if err != nil {
				return nil, "", parseErr("ucx_perftest", out)
			}
			col[h] = x
		}
		m := metrics{}
		if lat {
			for h, x := range col {
				if p, ok := strings.CutSuffix(h, "_percentile_lat"); ok {
					m[pctName(p)] = x
				}
			}
			m["lat_avg_us"] = col["avg_lat"]
		} else {
			m["bw_MiBps"] = col["overall_bw"]
			m["msg_rate_M"] = col["overall_mr"] / 1e6
		}
		return m, row, nil
	}
	return nil, "", parseErr("ucx_perftest", out)
}

// pctName turns "50.0" into lat_p50_us, "99.9" into lat_p999_us.
func pctName(p string) string {
	if x, err := strconv.ParseFloat(p, 64); err == nil {
		p = strconv.FormatFloat(x, 'f', -1, 64)
	}
	return "lat_p" + strings.ReplaceAll(p, ".", "") + "_us"
}

// parseFiPingpong reads fi_pingpong's result:
//
//	bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
//	8       10k     =10k     156k        0.15s      1.10       7.29       0.14
//
// usec/xfer is one way (a round trip is two transfers); MB/sec counts bytes
// in both directions with MB = 10^6, i.e. it is size / usec/xfer; it is
// converted to MB = 2^20 here.
func parseFiPingpong(out string) (metrics, string, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "bytes") || !strings.Contains(l, "usec/xfer") {
			continue
		}
		for _, row := range lines[i+1:] {
			f := strings.Fields(row)
			if len(f) != 8 {
				continue
			}
			mbs, e1 := strconv.ParseFloat(f[5], 64)
			us, e2 := strconv.ParseFloat(f[6], 64)
			mx, e3 := strconv.ParseFloat(f[7], 64)
			if e1 != nil || e2 != nil || e3 != nil {
				continue
			}
			return metrics{"bw_MiBps": mbs * 1e6 / (1 << 20), "lat_avg_us": us, "msg_rate_M": mx}, strings.TrimSpace(row), nil
		}
	}
	return nil, "", parseErr("fi_pingpong", out)
}

// parseResult reads the Go baseline's "RESULT {json}" line.
func parseResult(out string) (metrics, string, error) {
	for _, l := range strings.Split(out, "\n") {
		if js, ok := strings.CutPrefix(strings.TrimSpace(l), "RESULT "); ok {
			var m metrics
			if err := json.Unmarshal([]byte(js), &m); err != nil {
				return nil, "", fmt.Errorf("bad RESULT line %q: %v", l, err)
			}
			return m, js, nil
		}
	}
	return nil, "", parseErr("Go baseline", out)
}

// benchJSON is the part of `softrdma bench -json` the fallback reads.
type benchJSON struct {
	BW []struct {
		Size              int
		PeakMBps, AvgMBps float64
		MsgRate           float64
	} `json:"bw"`
	Lat []struct {
		Size                                     int
		Min, Max, Typical, Avg, Stdev, P99, P999 float64 // ns
	} `json:"lat"`
}

func parseBenchJSON(data []byte, size int) (metrics, string, error) {
	var b benchJSON
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, "", fmt.Errorf("softrdma bench JSON: %v", err)
	}
	for _, r := range b.BW {
		if r.Size == size {
			return metrics{"peak_MiBps": r.PeakMBps, "bw_MiBps": r.AvgMBps, "msg_rate_M": r.MsgRate},
				fmt.Sprintf("bw size %d avg %.2f MB/s %.4f Mpps", size, r.AvgMBps, r.MsgRate), nil
		}
	}
	for _, r := range b.Lat {
		if r.Size == size {
			return metrics{
					"lat_min_us": r.Min / 1e3, "lat_max_us": r.Max / 1e3, "lat_p50_us": r.Typical / 1e3,
					"lat_avg_us": r.Avg / 1e3, "lat_stdev_us": r.Stdev / 1e3, "lat_p99_us": r.P99 / 1e3, "lat_p999_us": r.P999 / 1e3,
				},
				fmt.Sprintf("lat size %d typical %.2f us", size, r.Typical/1e3), nil
		}
	}
	return nil, "", fmt.Errorf("softrdma bench JSON has no result for size %d", size)
}

// warmupOf is how many untimed iterations a latency run of iters timed
// ones starts with: a tenth, at least 1 and at most 1000, for every stack
// alike (ucx_perftest -w, the Go baselines' -warm, softrdma's first
// samples dropped).
func warmupOf(iters int) int { return max(1, min(iters/10, 1000)) }

// latWarmup returns the iterations to ask a softrdma perftest tool for and
// the warm-up among them: for a latency test (ib_*_lat), iters plus
// warmupOf(iters), whose samples parsePerftestRun drops, as the anchors
// leave their warm-up out; perftest's latency tools have no warm-up of
// their own, and their first iterations run while both processes'
// pollers and caches settle. Bandwidth tests run as asked.
func latWarmup(test string, iters int) (n, warm int) {
	if !strings.HasSuffix(test, "_lat") {
		return iters, 0
	}
	warm = warmupOf(iters)
	return iters + warm, warm
}

// parsePerftestRun reads a softrdma perftest client's output: with warm
// > 0 the per-iteration samples it printed (-U: "#, usec", then "i, v"
// lines) without the first warm, else the summary table (parsePerftest).
func parsePerftestRun(out string, size, warm int) (metrics, string, error) {
	if warm == 0 {
		return parsePerftest(out, size)
	}
	var us []float64
	in := false
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "#, usec" {
			in, us = true, us[:0]
			continue
		}
		if !in {
			continue
		}
		i, v, ok := strings.Cut(l, ", ")
		if !ok {
			in = false
			continue
		}
		if _, err := strconv.Atoi(i); err != nil {
			in = false
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, "", fmt.Errorf("perftest sample %q: %v", l, err)
		}
		us = append(us, x)
	}
	if len(us) <= warm {
		return nil, "", fmt.Errorf("perftest printed %d samples, want more than the %d of warm-up:\n%s", len(us), warm, indent(tailLines(out, 5)))
	}
	timed := us[warm:]
	d := make([]time.Duration, len(timed))
	for i, x := range timed {
		d[i] = time.Duration(x * 1e3)
	}
	m := metrics(harness.LatMetrics(d))
	return m, fmt.Sprintf("%d samples after %d of warm-up: p50 %.2f p99 %.2f p99.9 %.2f µs", len(timed), warm, m["lat_p50_us"], m["lat_p99_us"], m["lat_p999_us"]), nil
}
