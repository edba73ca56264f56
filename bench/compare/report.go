//go:build linux

package main

// Medians, ratios, targets, the printed tables and the JSON file.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

type roundInfo struct {
	Round     int     `json:"round"`
	Order     string  `json:"order"`
	Seconds   float64 `json:"seconds"`
	LoadStart string  `json:"loadavg_start"`
	LoadEnd   string  `json:"loadavg_end"`
}

// median is the median of one metric of one series at one size over rounds.
type median struct {
	Series string    `json:"series"`
	Tool   string    `json:"tool"`
	Kind   string    `json:"kind"`
	Size   int       `json:"size"`
	Metric string    `json:"metric"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	N      int       `json:"n"`
	Values []float64 `json:"values"` // per successful round, in round order
}

type target struct {
	Name     string  `json:"name"`
	Softrdma float64 `json:"softrdma"`
	Anchor   float64 `json:"anchor"`
	AnchorOf string  `json:"anchor_of"`
	// Factor scales the anchor: met is softrdma ≤ Factor × anchor (or ≥
	// for "higher"); 0 means 1.
	Factor float64 `json:"factor,omitempty"`
	Unit   string  `json:"unit"`
	Better string  `json:"better"` // "lower" or "higher"
	Met    *bool   `json:"met"`    // null when a side is missing, or when only reported
	// Reported marks a figure the target asks to be reported, not
	// compared: the anchor is shown beside it.
	Reported bool `json:"reported,omitempty"`
}

// mkTarget compares softrdma's figure sr with factor × anchor; okS and okA
// say whether each side was measured.
func mkTarget(name, unit, better, anchorOf string, factor, sr, anchor float64, okS, okA bool) target {
	t := target{Name: name, Unit: unit, Better: better, AnchorOf: anchorOf, Softrdma: sr, Anchor: anchor}
	if factor != 1 {
		t.Factor = factor
	}
	if okS && okA {
		met := sr <= factor*anchor
		if better == "higher" {
			met = sr >= factor*anchor
		}
		t.Met = &met
	}
	return t
}

type report struct {
	Time         string            `json:"time"`
	Host         string            `json:"host"`
	GoVersion    string            `json:"go_version"`
	CPUs         int               `json:"cpus"`
	Args         []string          `json:"args"`
	Rounds       int               `json:"rounds"`
	Sizes        []int             `json:"sizes"`
	LatN         int               `json:"lat_iterations"`
	Seconds      float64           `json:"seconds"`
	SoftrdmaMode string            `json:"softrdma_mode"`
	Versions     map[string]string `json:"versions"`
	Skipped      map[string]string `json:"skipped"`
	Notes        []string          `json:"notes"`
	Units        map[string]string `json:"units"`
	RoundInfo    []roundInfo       `json:"round_info"`
	Samples      []sample          `json:"samples"`
	Medians      []median          `json:"medians"`
	Targets      []target          `json:"targets"`

	series []string // in job order
	tools  map[string]string
}

var units = map[string]string{
	"lat_*_us":   "latency in µs; one-way (half the round trip) except softrdma READ (round trip); libfabric gives only the average",
	"bw_MiBps":   "MB/s with MB = 2^20 bytes (perftest's and ucx_perftest's unit; fi_pingpong's 10^6-byte MB/s converted); libfabric: ping-pong, one message in flight (size / one-way latency)",
	"peak_MiBps": "perftest's peak bandwidth",
	"msg_rate_M": "million messages per second",
	"loss":       "fraction of the Go UDP stream's bytes that did not arrive",
	"udp_MiBps":  "Go UDP GSO (kernel floor): UDP payload bytes per second, RoCE headers included (bw_MiBps counts 4096 of every 4128)",
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// summarize computes the medians and the targets.
// Series are ordered as they first ran, which is the order of the jobs.
func (r *report) summarize() {
	r.Units = units
	r.tools = map[string]string{}
	r.series = nil
	r.Medians, r.Targets = nil, nil
	for _, j := range r.Samples {
		if !slices.Contains(r.series, j.Series) {
			r.series = append(r.series, j.Series)
		}
		key := j.Series + "|" + j.Kind
		if t := r.tools[key]; t == "" {
			r.tools[key] = j.Tool
		} else if !slices.Contains(strings.Split(t, ", "), j.Tool) {
			r.tools[key] = t + ", " + j.Tool
		}
	}
	rank := func(s string) int {
		for i, p := range []string{"softrdma", "UCX", "libfabric", "Go"} {
			if strings.HasPrefix(s, p+" ") {
				return i
			}
		}
		return 9
	}
	sort.SliceStable(r.series, func(a, b int) bool { return rank(r.series[a]) < rank(r.series[b]) })
	type k struct {
		series, kind string
		size         int
		metric       string
	}
	vals := map[k][]float64{}
	var order []k
	for _, s := range r.Samples {
		if s.Error != "" {
			continue
		}
		for m, v := range s.Metrics {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			key := k{s.Series, s.Kind, s.Size, m}
			if _, ok := vals[key]; !ok {
				order = append(order, key)
			}
			vals[key] = append(vals[key], v)
		}
	}
	for _, key := range order {
		v := vals[key]
		r.Medians = append(r.Medians, median{Series: key.series, Tool: r.tools[key.series+"|"+key.kind], Kind: key.kind, Size: key.size,
			Metric: key.metric, Median: medianOf(v), Min: slices.Min(v), Max: slices.Max(v), N: len(v), Values: v})
	}
	sort.SliceStable(r.Medians, func(a, b int) bool {
		x, y := r.Medians[a], r.Medians[b]
		if x.Series != y.Series {
			return slices.Index(r.series, x.Series) < slices.Index(r.series, y.Series)
		}
		if x.Kind != y.Kind {
			return x.Kind == "lat"
		}
		if x.Size != y.Size {
			return x.Size < y.Size
		}
		return x.Metric < y.Metric
	})

	mk := func(name, unit, better, anchorOf string, sr, anchor float64, okS, okA bool) target {
		return mkTarget(name, unit, better, anchorOf, 1, sr, anchor, okS, okA)
	}
	// scaled is an anchor's median times f (f ≠ 1 names the factor).
	scaled := func(series, kind string, size int, metric string, f float64) (float64, bool) {
		v, ok := r.get(series, kind, size, metric)
		return v * f, ok
	}
	srLat, ok1 := r.get(seriesWrite, "lat", latSize, "lat_p50_us")
	ucxLat, ok2 := r.get(seriesUCXTag, "lat", latSize, "lat_p50_us")
	r.Targets = append(r.Targets, mk("8 B RDMA WRITE one-way latency (median) ≤ UCX tcp tag_lat", "µs", "lower", "UCX tcp tag_lat 8 B median", srLat, ucxLat, ok1, ok2))
	srP99, ok1 := r.get(seriesWrite, "lat", latSize, "lat_p99_us")
	ucxP99, ok2 := scaled(seriesUCXTag, "lat", latSize, "lat_p99_us", 1.5)
	r.Targets = append(r.Targets, mk("8 B RDMA WRITE one-way latency p99 ≤ 1.5× UCX tcp tag_lat p99", "µs", "lower", "1.5 × UCX tcp tag_lat 8 B p99", srP99, ucxP99, ok1, ok2))
	srBW, ok1 := r.get(seriesWrite, "bw", refSize, "bw_MiBps")
	ucxBW, ok2 := r.get(seriesUCXTag, "bw", refSize, "bw_MiBps")
	r.Targets = append(r.Targets, mk("RDMA WRITE bandwidth at 1 MiB ≥ UCX tcp tag_bw at 1 MiB", "MB/s", "higher", "UCX tcp tag_bw 1 MiB", srBW, ucxBW, ok1, ok2))
	udpBW, ok2 := scaled(seriesGoUDP, "bw", refSize, "bw_MiBps", 0.8)
	r.Targets = append(r.Targets, mk("RDMA WRITE bandwidth at 1 MiB ≥ 0.8× a Go UDP stream of 1 MiB writes", "MB/s", "higher", "0.8 × Go UDP stream 1 MiB", srBW, udpBW, ok1, ok2))
	srMR, okMR := r.get(seriesWrite, "bw", latSize, "msg_rate_M")
	r.Targets = append(r.Targets, mk(fmt.Sprintf("8 B RDMA WRITE message rate ≥ %g M msgs/s", rateTargetM), "M msgs/s", "higher", "target", srMR, rateTargetM, okMR, true))
	// SEND and READ within 10 % of WRITE on each figure: bandwidth at
	// 1 MiB, 8-byte message rate, and (SEND; READ's latency is a round
	// trip, WRITE's one way) median latency.
	for _, op := range []struct{ series, name string }{{seriesSend, "SEND"}, {seriesRead, "READ"}} {
		v, ok := r.get(op.series, "bw", refSize, "bw_MiBps")
		w, okW := srBW*0.9, ok1
		r.Targets = append(r.Targets, mk(op.name+" bandwidth at 1 MiB ≥ 0.9× WRITE's", "MB/s", "higher", "0.9 × softrdma WRITE 1 MiB", v, w, ok, okW))
		v, ok = r.get(op.series, "bw", latSize, "msg_rate_M")
		r.Targets = append(r.Targets, mk(op.name+" 8 B message rate ≥ 0.9× WRITE's", "M msgs/s", "higher", "0.9 × softrdma WRITE 8 B rate", v, srMR*0.9, ok, okMR))
	}
	sendLat, ok := r.get(seriesSend, "lat", latSize, "lat_p50_us")
	srLat0, okL := r.get(seriesWrite, "lat", latSize, "lat_p50_us")
	r.Targets = append(r.Targets, mk("SEND 8 B latency (median) ≤ 1.1× WRITE's", "µs", "lower", "1.1 × softrdma WRITE 8 B median", sendLat, srLat0*1.1, ok, okL))
	r.Targets = append(r.Targets, r.shmTargets()...)
	r.Targets = append(r.Targets, r.floorTargets()...)
	// Sockets over RDMA, when the rdmanet stack ran.
	tcpLat, okT := r.get(seriesGoTCP, "lat", rnPPSize, "lat_p50_us")
	tcpBW, okB := r.get(seriesGoTCP, "bw", rnStreamSize, "bw_MiBps")
	for _, s := range []string{seriesRnet, seriesRnetShm} {
		if !slices.Contains(r.series, s) {
			continue
		}
		lat, ok := r.get(s, "lat", rnPPSize, "lat_p50_us")
		r.Targets = append(r.Targets, mk(s+" 64 B request/response (median) ≤ Go TCP", "µs", "lower", "Go TCP 64 B ping-pong median", lat, tcpLat, ok, okT))
		bw, ok := r.get(s, "bw", rnStreamSize, "bw_MiBps")
		r.Targets = append(r.Targets, mk(s+" 64 KiB stream ≥ Go TCP", "MB/s", "higher", "Go TCP 64 KiB stream", bw, tcpBW, ok, okB))
	}
	// Go's protocols over the sockets, in the blocking mode a server
	// runs: gRPC unary calls and net/http 1 MiB echoes, each call's
	// whole time.
	for _, p := range protoRows {
		for _, q := range []struct{ metric, name string }{{"lat_p50_us", "median"}, {"lat_p99_us", "p99"}} {
			tcp, okT := r.get(seriesGoTCP, p.kind, p.size, q.metric)
			for _, s := range []string{seriesRnet, seriesRnetShm} {
				if !slices.Contains(r.series, s) {
					continue
				}
				v, ok := r.get(s, p.kind, p.size, q.metric)
				r.Targets = append(r.Targets, mk(fmt.Sprintf("%s %s (%s) ≤ Go TCP", s, p.name, q.name), "µs", "lower", fmt.Sprintf("Go TCP %s %s", p.name, q.name), v, tcp, ok, okT))
			}
		}
	}
}

// protoRows are the rows of Go's protocols over the sockets (kind, slot
// size, name).
var protoRows = []struct {
	kind string
	size int
	name string
}{{"grpc", grpcSize, "gRPC unary call"}, {"http", httpSize, "net/http 1 MiB echo"}}

// hasKind reports whether any median is of kind.
func (r *report) hasKind(kind string) bool {
	for _, m := range r.Medians {
		if m.Kind == kind {
			return true
		}
	}
	return false
}

// get returns a median.
func (r *report) get(series, kind string, size int, metric string) (float64, bool) {
	m, ok := r.find(series, kind, size, metric)
	return m.Median, ok
}

func (r *report) find(series, kind string, size int, metric string) (median, bool) {
	for _, m := range r.Medians {
		if m.Series == series && m.Kind == kind && m.Size == size && m.Metric == metric {
			return m, true
		}
	}
	return median{}, false
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\n== softrdma vs anchors: medians of %d rounds (stack order alternating A/B, B/A), loopback, %d CPUs, %.0f s\n", r.Rounds, r.CPUs, r.Seconds)
	if r.SoftrdmaMode != "" {
		fmt.Fprintf(w, "softrdma: %s\n", r.SoftrdmaMode)
	}
	for _, s := range sortedKeys(r.Versions) {
		fmt.Fprintf(w, "%s: %s\n", s, r.Versions[s])
	}
	for _, s := range sortedKeys(r.Skipped) {
		fmt.Fprintf(w, "skipped %s: %s\n", s, r.Skipped[s])
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}

	ratio := ratioStr
	spread := func(m median, ok bool) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%s..%s (n=%d)", num(m.Min, true), num(m.Max, true), m.N)
	}

	// Latency.
	latTitle := "8-byte latency, µs, one-way (READ: round trip); lower is better; ratio = softrdma WRITE p50 / this"
	rows := [][]string{{"series", "tool", "p50", "avg", "p99", "p99.9", "over rounds", "ratio"}}
	srLat, okS := r.get(seriesWrite, "lat", latSize, "lat_p50_us")
	for _, s := range r.series {
		if isShmSeries(s) {
			continue
		}
		if _, ok := r.find(s, "lat", latSize, "lat_avg_us"); !ok {
			if _, ok := r.find(s, "lat", latSize, "lat_p50_us"); !ok {
				continue
			}
		}
		p50, ok50 := r.find(s, "lat", latSize, "lat_p50_us")
		avg, okA := r.get(s, "lat", latSize, "lat_avg_us")
		p99, ok99 := r.get(s, "lat", latSize, "lat_p99_us")
		p999, ok999 := r.get(s, "lat", latSize, "lat_p999_us")
		rt := ratio(srLat, p50.Median, okS, ok50)
		if !ok50 {
			rt = ratio(srLat, avg, okS, okA) + " (vs avg)"
		}
		if s == seriesWrite {
			rt = "1"
		}
		if strings.HasSuffix(s, "READ") {
			rt = "(round trip)"
		}
		sp := spread(p50, ok50)
		if !ok50 {
			m, ok := r.find(s, "lat", latSize, "lat_avg_us")
			sp = "avg " + spread(m, ok)
		}
		rows = append(rows, []string{s, r.tools[s+"|lat"], num(p50.Median, ok50), num(avg, okA), num(p99, ok99), num(p999, ok999), sp, rt})
	}
	section(w, latTitle, 2, rows)

	// Bandwidth at 1 MiB and message rate at 8 B.
	for _, t := range []struct {
		title, metric string
		size          int
		cpu, cpuHead  string
	}{
		{"1 MiB bandwidth, MB/s (2^20); higher is better; ratio = softrdma WRITE / this; CPU: both processes' CPU seconds per GB moved", "bw_MiBps", refSize, "cpu_s_per_GB", "CPU s/GB"},
		{"8-byte message rate, M msgs/s; higher is better; ratio = softrdma WRITE / this (libfabric: ping-pong, one in flight); CPU: per million messages", "msg_rate_M", latSize, "cpu_s_per_Mmsg", "CPU s/M msgs"},
	} {
		rows := [][]string{{"series", "tool", "median", "over rounds", "ratio", t.cpuHead}}
		sr, okS := r.get(seriesWrite, "bw", t.size, t.metric)
		for _, s := range r.series {
			if isShmSeries(s) {
				continue
			}
			m, ok := r.find(s, "bw", t.size, t.metric)
			if !ok {
				continue
			}
			rt := ratio(sr, m.Median, okS, ok)
			if s == seriesWrite {
				rt = "1"
			}
			extra := ""
			if l, ok := r.get(s, "bw", t.size, "loss"); ok && l > 0.001 {
				extra = fmt.Sprintf(" %.0f%% lost", 100*l)
			}
			c, okC := r.get(s, "bw", t.size, t.cpu)
			rows = append(rows, []string{s, r.tools[s+"|bw"], num(m.Median, true) + extra, spread(m, true), rt, num(c, okC)})
		}
		section(w, t.title, 2, rows)
	}

	r.printProtection(w)
	r.printFloor(w)

	// The sweep.
	rows = [][]string{{"series"}}
	for _, s := range r.Sizes {
		rows[0] = append(rows[0], sizeStr(s))
	}
	for _, s := range r.series {
		if isShmSeries(s) {
			continue
		}
		row, any := []string{s}, false
		for _, size := range r.Sizes {
			v, ok := r.get(s, "bw", size, "bw_MiBps")
			any = any || ok
			row = append(row, num(v, ok))
		}
		if any {
			rows = append(rows, row)
		}
	}
	section(w, "bandwidth sweep, MB/s (2^20), medians", 1, rows)

	r.printShm(w)

	// Sockets: rdmanet against Go's TCP.
	if _, ok := r.find(seriesGoTCP, "lat", rnPPSize, "lat_p50_us"); ok {
		fmt.Fprintf(w, "\nsockets: 64-byte request/response (one-way µs: half the round trip; lower is better) and 64 KiB stream (MB/s, 2^20; higher is better); ratio = this / Go TCP\n")
		rows := [][]string{{"series", "pp p50", "pp p99", "over rounds", "ratio", "stream", "over rounds", "ratio"}}
		tl, okTL := r.get(seriesGoTCP, "lat", rnPPSize, "lat_p50_us")
		tb, okTB := r.get(seriesGoTCP, "bw", rnStreamSize, "bw_MiBps")
		for _, s := range []string{seriesRnet, seriesRnetShm, seriesGoTCP} {
			l, okL := r.find(s, "lat", rnPPSize, "lat_p50_us")
			p99, ok99 := r.get(s, "lat", rnPPSize, "lat_p99_us")
			b, okB := r.find(s, "bw", rnStreamSize, "bw_MiBps")
			if !okL && !okB {
				continue
			}
			rows = append(rows, []string{s, num(l.Median, okL), num(p99, ok99), spread(l, okL), ratio(l.Median, tl, okL, okTL),
				num(b.Median, okB), spread(b, okB), ratio(b.Median, tb, okB, okTB)})
		}
		table(w, 1, rows)
	}
	if _, ok := r.find(seriesGoTCP, "grpc", grpcSize, "lat_p50_us"); ok || r.hasKind("http") {
		fmt.Fprintf(w, "\nGo's protocols over the sockets: a call's whole time, µs (lower is better); ratio = this / Go TCP\n")
		rows := [][]string{{"series", "call", "p50", "over rounds", "ratio", "p99", "ratio"}}
		for _, p := range protoRows {
			tl, okTL := r.get(seriesGoTCP, p.kind, p.size, "lat_p50_us")
			t99, okT99 := r.get(seriesGoTCP, p.kind, p.size, "lat_p99_us")
			for _, s := range []string{seriesRnet, seriesRnetShm, seriesGoTCP} {
				l, okL := r.find(s, p.kind, p.size, "lat_p50_us")
				p99, ok99 := r.get(s, p.kind, p.size, "lat_p99_us")
				if !okL {
					continue
				}
				rows = append(rows, []string{s, p.name, num(l.Median, okL), spread(l, okL), ratio(l.Median, tl, okL, okTL), num(p99, ok99), ratio(p99, t99, ok99, okT99)})
			}
		}
		table(w, 1, rows)
	}

	fmt.Fprintf(w, "\ntargets\n")
	for _, t := range r.Targets {
		status := "n/a "
		switch {
		case t.Reported:
			status = "INFO"
		case t.Met != nil:
			status = "MISS"
			if *t.Met {
				status = "MET "
			}
		}
		detail := "a side is missing"
		switch {
		case t.Met != nil:
			q := t.Softrdma / t.Anchor
			goal := ""
			if t.Factor != 0 {
				goal = fmt.Sprintf(" (target %s %.2gx)", map[string]string{"lower": "≤", "higher": "≥"}[t.Better], t.Factor)
			}
			detail = fmt.Sprintf("softrdma %s %s vs %s %s (%s); softrdma/anchor %.2fx%s, %s is better", num(t.Softrdma, true), t.Unit, num(t.Anchor, true), t.Unit, t.AnchorOf, q, goal, t.Better)
		case t.Reported && t.Anchor != 0:
			detail = fmt.Sprintf("softrdma %s %s; %s %s %s (softrdma/that %.2fx)", num(t.Softrdma, true), t.Unit, t.AnchorOf, num(t.Anchor, true), t.Unit, t.Softrdma/t.Anchor)
		case t.Reported:
			detail = fmt.Sprintf("softrdma %s %s", num(t.Softrdma, true), t.Unit)
		}
		fmt.Fprintf(w, "  [%s] %s: %s\n", status, t.Name, detail)
	}
}

// printProtection is the cost of softrdma's protected modes (the series
// "softrdma WRITE <mode>", run with --secure <mode> in the same slots as
// the plain WRITE runs): medians, and protected / plain.
func (r *report) printProtection(w io.Writer) {
	rows := [][]string{{"mode", "8 B WRITE p50 µs", "× plain", "1 MiB WRITE MB/s", "× plain"}}
	lat0, okL0 := r.get(seriesWrite, "lat", latSize, "lat_p50_us")
	bw0, okB0 := r.get(seriesWrite, "bw", refSize, "bw_MiBps")
	rows = append(rows, []string{"plain", num(lat0, okL0), "1", num(bw0, okB0), "1"})
	x := ratioStr
	for _, mode := range []string{"auth", "encrypt"} {
		series := seriesWrite + " " + mode
		lat, okL := r.get(series, "lat", latSize, "lat_p50_us")
		bw, okB := r.get(series, "bw", refSize, "bw_MiBps")
		if !okL && !okB {
			continue
		}
		rows = append(rows, []string{mode, num(lat, okL), x(lat, lat0, okL, okL0), num(bw, okB), x(bw, bw0, okB, okB0)})
	}
	if len(rows) == 2 {
		return
	}
	fmt.Fprintf(w, "\ncost of softrdma's packet protection (--secure, both ends softrdma), medians; × plain = protected / plain\n")
	table(w, 1, rows)
}

func sortedKeys(m map[string]string) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// section prints a title and its table, unless the table has no rows
// below its header (a run of other stacks only).
func section(w io.Writer, title string, left int, rows [][]string) {
	if len(rows) < 2 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	table(w, left, rows)
}

// table prints rows with the first left columns left-aligned and the rest
// right-aligned.
func table(w io.Writer, left int, rows [][]string) {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		b.WriteString(" ")
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			b.WriteString(" ")
			if i < left {
				b.WriteString(c + pad)
			} else {
				b.WriteString(pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// num formats a value with about three significant digits.
func num(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 0.1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// ratioStr is a / b as "1.23x", or "-" when a side is missing.
func ratioStr(a, b float64, okA, okB bool) string {
	if !okA || !okB || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// floorFigures are the figures the kernel floor (floor.go) stands beside:
// its series, softrdma's and UCX's at the same size and metric.
var floorFigures = []struct {
	name, unit, better string
	kind               string
	size               int
	metric             string
	floor, ucx         string // the floor's series and UCX's
}{
	{"8 B latency p50", "µs", "lower", "lat", latSize, "lat_p50_us", seriesFloorPP, seriesUCXTag},
	{"8 B latency p99", "µs", "lower", "lat", latSize, "lat_p99_us", seriesFloorPP, seriesUCXTag},
	{"1 MiB bandwidth", "MB/s", "higher", "bw", refSize, "bw_MiBps", seriesFloorBW, seriesUCXTag},
}

// floorTargets are reported-only lines: softrdma WRITE beside the kernel
// floor, for each figure whose floor was measured.
func (r *report) floorTargets() []target {
	var out []target
	for _, f := range floorFigures {
		fl, okF := r.get(f.floor, f.kind, f.size, f.metric)
		if !okF {
			continue
		}
		sr, okS := r.get(seriesWrite, f.kind, f.size, f.metric)
		t := mkTarget("RDMA WRITE "+f.name+" beside the kernel floor (reported)", f.unit, f.better,
			"kernel floor ("+r.tools[f.floor+"|"+f.kind]+")", 1, sr, fl, okS, okF)
		t.Met, t.Reported = nil, okS
		out = append(out, t)
	}
	return out
}

// printFloor prints softrdma WRITE and UCX over TCP beside the kernel
// floor: how much of the gap to UCX is the kernel's UDP path against its
// TCP path, and how much softrdma adds.
func (r *report) printFloor(w io.Writer) {
	rows := [][]string{{"figure", "floor", "softrdma WRITE", "softrdma/floor", "UCX tcp tag", "UCX/floor"}}
	for _, f := range floorFigures {
		fl, okF := r.get(f.floor, f.kind, f.size, f.metric)
		if !okF {
			continue
		}
		sr, okS := r.get(seriesWrite, f.kind, f.size, f.metric)
		ucx, okU := r.get(f.ucx, f.kind, f.size, f.metric)
		rows = append(rows, []string{f.name + " (" + f.unit + ", " + f.better + " is better)", num(fl, okF),
			num(sr, okS), ratioStr(sr, fl, okS, okF), num(ucx, okU), ratioStr(ucx, fl, okU, okF)})
	}
	var tools []string
	for _, t := range []string{r.tools[seriesFloorPP+"|lat"], r.tools[seriesFloorBW+"|bw"]} {
		if t != "" {
			tools = append(tools, t)
		}
	}
	section(w, fmt.Sprintf("kernel floor: Linux UDP with nothing on top, busy-polled raw system calls (%s), what RoCEv2 over UDP cannot beat on this host; medians",
		strings.Join(tools, "; ")), 1, rows)
}
