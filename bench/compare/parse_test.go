//go:build linux

package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Outputs captured from the tools on Debian 12 (perftest-compatible
// softrdma, ucx_perftest 1.13.1, fi_pingpong 1.17.0).
const (
	perftestBW = `---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 1048576    500              1102.57            1024.62		   0.001025
---------------------------------------------------------------------------------------
`
	perftestLat = ` #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 8       20000          23.71          1895.42      38.20    	       42.44       	31.38  		115.44  		564.26 
---------------------------------------------------------------------------------------
`
	ucxLat = `iterations,99.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
20000,11.185,11.798,11.798,0.65,0.65,84760,84760
`
	ucxBW = `[1700000000.1] [vm:1:0] some warning
iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr
2000,8.137,301.406,301.406,3317.79,3317.79,3318,3318
`
	fiOut = `bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
1m      200     =200     400m        0.30s   1390.37     754.17       0.00
`
)

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

func TestParsePerftest(t *testing.T) {
	m, _, err := parsePerftest(perftestBW, 1048576)
	if err != nil || !near(m["bw_MiBps"], 1024.62) || !near(m["msg_rate_M"], 0.001025) || !near(m["peak_MiBps"], 1102.57) {
		t.Fatalf("bw: %v %v", m, err)
	}
	m, _, err = parsePerftest(perftestLat, 8)
	if err != nil || !near(m["lat_p50_us"], 38.20) || !near(m["lat_p99_us"], 115.44) || !near(m["lat_p999_us"], 564.26) {
		t.Fatalf("lat: %v %v", m, err)
	}
	if _, _, err := parsePerftest(perftestBW, 8); err == nil {
		t.Fatal("wrong size accepted")
	}
	if _, _, err := parsePerftest("Couldn't connect to 127.0.0.2:18515\n", 8); err == nil || !strings.Contains(err.Error(), "Couldn't connect") {
		t.Fatalf("error does not quote the output: %v", err)
	}
}

func TestParseUCX(t *testing.T) {
	m, _, err := parseUCX(ucxLat, true)
	if err != nil || !near(m["lat_p99_us"], 11.185) || !near(m["lat_avg_us"], 11.798) {
		t.Fatalf("lat: %v %v", m, err)
	}
	m, _, err = parseUCX(ucxBW, false)
	if err != nil || !near(m["bw_MiBps"], 3317.79) || !near(m["msg_rate_M"], 0.003318) {
		t.Fatalf("bw: %v %v", m, err)
	}
	if _, _, err := parseUCX("ERROR\n", true); err == nil {
		t.Fatal("garbage accepted")
	}
	if got := pctName("99.9"); got != "lat_p999_us" {
		t.Fatal(got)
	}
	if got := pctName("50.0"); got != "lat_p50_us" {
		t.Fatal(got)
	}
}

func TestParseFiPingpong(t *testing.T) {
	m, _, err := parseFiPingpong(fiOut)
	if err != nil || !near(m["lat_avg_us"], 754.17) || !near(m["bw_MiBps"], 1390.37e6/(1<<20)) {
		t.Fatalf("%v %v", m, err)
	}
}

func TestSummarize(t *testing.T) {
	r := &report{Sizes: []int{8, refSize}}
	for round, v := range []float64{3, 1, 2} {
		r.Samples = append(r.Samples,
			sample{Series: seriesWrite, Tool: "ib_write_lat", Kind: "lat", Size: 8, Round: round, Metrics: metrics{"lat_p50_us": 10 * v, "lat_p99_us": 14}},
			sample{Series: seriesUCXTag, Tool: "tag_lat", Kind: "lat", Size: 8, Round: round, Metrics: metrics{"lat_p50_us": v, "lat_p99_us": 10}},
			sample{Series: seriesSend, Tool: "ib_send_lat", Kind: "lat", Size: 8, Round: round, Metrics: metrics{"lat_p50_us": 23}},
			sample{Series: seriesWrite, Tool: "ib_write_bw", Kind: "bw", Size: 8, Round: round, Metrics: metrics{"msg_rate_M": v}},
			sample{Series: seriesUCXTag, Tool: "tag_bw", Kind: "bw", Size: refSize, Round: round, Error: "boom"})
	}
	r.summarize()
	if v, _ := r.get(seriesWrite, "lat", 8, "lat_p50_us"); v != 20 {
		t.Fatalf("median %v", v)
	}
	met := map[string]string{}
	for _, tg := range r.Targets {
		met[tg.Name] = "no anchor"
		if tg.Met != nil {
			met[tg.Name] = fmt.Sprint(*tg.Met)
		}
	}
	for name, want := range map[string]string{
		"8 B RDMA WRITE one-way latency (median) ≤ UCX tcp tag_lat":            "false", // 20 µs against 2
		"8 B RDMA WRITE one-way latency p99 ≤ 1.5× UCX tcp tag_lat p99":        "true",  // 14 against 1.5 × 10
		"RDMA WRITE bandwidth at 1 MiB ≥ UCX tcp tag_bw at 1 MiB":              "no anchor",
		"8 B RDMA WRITE message rate ≥ 5 M msgs/s":                             "false", // 2
		"SEND 8 B latency (median) ≤ 1.1× WRITE's":                             "false", // 23 against 22
		"SEND 8 B message rate ≥ 0.9× WRITE's":                                 "no anchor",
		"RDMA WRITE bandwidth at 1 MiB ≥ 0.8× a Go UDP stream of 1 MiB writes": "no anchor",
	} {
		if met[name] != want {
			t.Errorf("target %q: %s; want %s (all: %+v)", name, met[name], want, r.Targets)
		}
	}
	var b strings.Builder
	r.print(&b)
	if !strings.Contains(b.String(), "10.00x") {
		t.Fatalf("no ratio in\n%s", b.String())
	}
}

func TestAddCPU(t *testing.T) {
	m := metrics{"bw_MiBps": 1000, "msg_rate_M": 2}
	addCPU(m, time.Second, 2)
	// 1000 MiB/s for 2 s is 2.097 GB; 2 M msgs/s for 2 s is 4 M.
	if !near(m["cpu_s"], 1) || !near(m["cpu_s_per_GB"], 1/2.097152) || !near(m["cpu_s_per_Mmsg"], 0.25) {
		t.Fatal(m)
	}
	m = metrics{"lat_p50_us": 3}
	addCPU(m, 0, 2) // nothing measured: nothing recorded
	if len(m) != 1 {
		t.Fatal(m)
	}
}

// TestShmTargets checks the shm targets: the factors, a reported-only
// rate, and that the shared-memory series get their own table and stay
// out of the loopback tables' ratios.
func TestShmTargets(t *testing.T) {
	r := &report{Sizes: []int{8, refSize}}
	add := func(series, kind string, size int, m metrics) {
		r.Samples = append(r.Samples, sample{Series: series, Tool: "t", Kind: kind, Size: size, Metrics: m})
	}
	add(seriesWrite, "lat", 8, metrics{"lat_p50_us": 20})
	add(seriesShmWrite, "lat", 8, metrics{"lat_p50_us": 0.07})             // ≤ 1.2 × 0.06: met
	add(seriesPosixPut, "lat", 8, metrics{"lat_p50_us": 0.06})             //
	add(seriesShmWrite, "bw", shmBWSize, metrics{"bw_MiBps": 85})          // < 0.9 × 100: missed
	add(seriesPosixPut, "bw", shmBWSize, metrics{"bw_MiBps": 100})         //
	add(seriesShmSend, "lat", 8, metrics{"lat_p50_us": 0.2})               // > 0.16: missed
	add(seriesPosixTag, "lat", 8, metrics{"lat_p50_us": 0.16})             //
	add(seriesShmWrite, "bw", 8, metrics{"msg_rate_M": 5, "bw_MiBps": 40}) // reported
	r.summarize()
	byName := map[string]target{}
	for _, tg := range r.Targets {
		byName[tg.Name] = tg
	}
	want := []struct {
		prefix string
		met    bool
	}{{"shm: 8 B RDMA WRITE one-way", true}, {"shm: 64 KiB", false}, {"shm: 8 B SEND/RECV", false}}
	for _, w := range want {
		found := false
		for name, tg := range byName {
			if strings.HasPrefix(name, w.prefix) {
				found = true
				if tg.Met == nil || *tg.Met != w.met {
					t.Errorf("%s: met %v, want %v", name, tg.Met, w.met)
				}
			}
		}
		if !found {
			t.Errorf("no target %q", w.prefix)
		}
	}
	rate := byName["shm: 8 B WRITE message rate (reported)"]
	if !rate.Reported || rate.Met != nil || rate.Softrdma != 5 {
		t.Errorf("WRITE message rate target %+v, want reported 5 with no verdict", rate)
	}
	var b strings.Builder
	r.print(&b)
	out := b.String()
	shmAt := strings.Index(out, "shared memory, two processes")
	if shmAt < 0 {
		t.Fatalf("no shared-memory table in\n%s", out)
	}
	if i := strings.Index(out, seriesShmWrite); i < shmAt {
		t.Errorf("shm series in the loopback tables:\n%s", out)
	}
	for _, s := range []string{"[MET ] shm: 8 B RDMA WRITE", "[MISS] shm: 64 KiB", "target ≥ 0.9x", "[INFO] shm: 8 B WRITE message rate"} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in\n%s", s, out)
		}
	}
}

func TestPinned(t *testing.T) {
	name, args := pinned(true, 1, "ucx_perftest", []string{"-p", "9"})
	if name != "taskset" || strings.Join(args, " ") != "-c 1 ucx_perftest -p 9" {
		t.Errorf("pinned: %s %q", name, args)
	}
	if name, args := pinned(false, 1, "ucx_perftest", []string{"-p", "9"}); name != "ucx_perftest" || len(args) != 2 {
		t.Errorf("unpinned: %s %q", name, args)
	}
}

func TestParseEnv(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{in: "", want: nil},
		{in: "GOMAXPROCS=1", want: []string{"GOMAXPROCS=1"}},
		{in: " GOMAXPROCS=1 , SOFTRDMA_SPIN_POLLS=500,", want: []string{"GOMAXPROCS=1", "SOFTRDMA_SPIN_POLLS=500"}},
		{in: "A=", want: []string{"A="}},
		{in: "GOMAXPROCS", bad: true},
		{in: "=1", bad: true},
		{in: "A B=1", bad: true},
	} {
		got, err := parseEnv(c.in)
		if (err != nil) != c.bad || !slices.Equal(got, c.want) {
			t.Errorf("parseEnv(%q) = %q, %v; want %q, error %v", c.in, got, err, c.want, c.bad)
		}
	}
}

// TestParsePerftestRunWarmup: a latency run's samples lose their warm-up
// before the percentiles, and the summary table's figures (which count
// the warm-up) are not what is returned.
func TestParsePerftestRunWarmup(t *testing.T) {
	var b strings.Builder
	b.WriteString(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]\n#, usec\n")
	for i := 1; i <= 110; i++ {
		v := 5.0 + float64(i%10)/10 // 5.0 .. 5.9
		if i <= 10 {
			v = 90 // the warm-up: slow
		}
		fmt.Fprintf(&b, "%d, %g\n", i, v)
	}
	b.WriteString("---------------------------------------------------------------------------------------\n")
	b.WriteString(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]\n")
	b.WriteString(" 8       110          5.00           90.00        5.50     	       13.4        	2.95   		90.00   		90.00  \n")
	m, raw, err := parsePerftestRun(b.String(), 8, 10)
	if err != nil {
		t.Fatal(err)
	}
	if m["lat_max_us"] != 5.9 || m["lat_p99_us"] > 5.9 || m["lat_min_us"] != 5.0 || m["lat_p50_us"] < 5.0 || m["lat_p50_us"] > 5.9 {
		t.Fatalf("metrics %v: the warm-up's 90 µs samples were counted", m)
	}
	if !strings.Contains(raw, "100 samples after 10 of warm-up") {
		t.Fatalf("raw %q", raw)
	}
	if _, _, err := parsePerftestRun(b.String(), 8, 200); err == nil {
		t.Fatal("fewer samples than the warm-up: no error")
	}
	// Without warm-up the summary row is read.
	if m, _, err := parsePerftestRun(b.String(), 8, 0); err != nil || m["lat_p50_us"] != 5.5 {
		t.Fatalf("summary: %v %v", m, err)
	}
	if n, w := latWarmup("ib_write_lat", 10000); n != 11000 || w != 1000 {
		t.Fatalf("latWarmup: %d %d", n, w)
	}
	if n, w := latWarmup("ib_write_bw", 10000); n != 10000 || w != 0 {
		t.Fatalf("latWarmup bw: %d %d", n, w)
	}
}
