//go:build linux

package main

import (
	"strings"
	"testing"
)

// TestFloorSizes pins the sizes the kernel floor stands for: softrdma's
// 8-byte WRITE ONLY with inline data, and its full-MTU WRITE ONLY packets
// on loopback, 15 to a GSO datagram.
func TestFloorSizes(t *testing.T) {
	if got := floorPacket(8); got != 40 {
		t.Errorf("8-byte WRITE ONLY datagram: %d bytes, want 12 BTH + 16 RETH + 8 + 4 ICRC = 40", got)
	}
	if floorSeg != 4128 || floorSegs != 15 {
		t.Errorf("segment %d B × %d, want 4128 B × 15", floorSeg, floorSegs)
	}
	for _, c := range []struct {
		size, n   int
		segs, udp int64
	}{
		{1 << 20, 2, 512, 2<<20 + 512*32},
		{4096, 3, 3, 3 * 4128},
		{5000, 1, 2, 5000 + 2*32}, // a full segment and a short one
		{8, 1, 1, 40},
	} {
		segs, udp := floorPlan(c.size, c.n)
		if segs != c.segs || udp != c.udp {
			t.Errorf("floorPlan(%d, %d) = %d segments, %d bytes; want %d, %d", c.size, c.n, segs, udp, c.segs, c.udp)
		}
	}
	for _, c := range []struct {
		rest int64
		want int
	}{{1 << 30, 15 * 4128}, {15 * 4128, 15 * 4128}, {15*4128 + 1, 15 * 4128}, {4128 + 40, 4128 + 40}, {40, 40}} {
		if got := floorDatagram(c.rest); got != c.want {
			t.Errorf("floorDatagram(%d) = %d, want %d", c.rest, got, c.want)
		}
	}
}

func TestParseGoOptsFloor(t *testing.T) {
	for _, c := range []struct {
		args string
		bad  string // part of the error, "" for none
	}{
		{"-proto udp-busy -mode pp -size 8", ""},
		{"-proto udp-gso -mode stream -size 1048576 -n 64", ""},
		{"-proto udp-busy -mode stream", "-mode pp"},
		{"-proto udp-gso -mode pp", "-mode stream"},
		{"-proto udp-busy -mode pp -size 64990", "datagram of 65022"},
		{"-proto udp -mode bulk", "unknown -mode"},
		{"-proto sctp", "unknown -proto"},
	} {
		o, err := parseGoOpts(strings.Fields(c.args))
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: %v", c.args, err)
		case c.bad == "" && (!o.floor() || o.stream()):
			t.Errorf("%s: floor %v, stream %v", c.args, o.floor(), o.stream())
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s: error %v, want one saying %q", c.args, err, c.bad)
		}
	}
	for _, p := range []string{"tcp", "rdmanet-shm"} {
		if o, err := parseGoOpts([]string{"-proto", p}); err != nil || !o.stream() || o.floor() {
			t.Errorf("%s: stream %v, floor %v, %v", p, o.stream(), o.floor(), err)
		}
	}
}

// TestFloorReport checks the floor's table, its ratios and its
// reported-only targets, and that a run without the floor has none.
func TestFloorReport(t *testing.T) {
	r := &report{Sizes: []int{8, refSize}}
	add := func(series, tool, kind string, size int, m metrics) {
		r.Samples = append(r.Samples, sample{Series: series, Tool: tool, Kind: kind, Size: size, Metrics: m})
	}
	add(seriesWrite, "ib_write_lat", "lat", 8, metrics{"lat_p50_us": 6, "lat_p99_us": 30})
	add(seriesWrite, "ib_write_bw", "bw", refSize, metrics{"bw_MiBps": 2000})
	add(seriesUCXTag, "tag_lat", "lat", 8, metrics{"lat_p50_us": 5, "lat_p99_us": 8})
	add(seriesUCXTag, "tag_bw", "bw", refSize, metrics{"bw_MiBps": 5000})
	r.summarize()
	for _, tg := range r.Targets {
		if strings.Contains(tg.Name, "kernel floor") {
			t.Errorf("target %q without a floor measured", tg.Name)
		}
	}
	var b strings.Builder
	r.print(&b)
	if strings.Contains(b.String(), "kernel floor") {
		t.Errorf("floor table without a floor:\n%s", b.String())
	}

	for range 2 { // two rounds: the tools column names each tool once
		add(seriesFloorPP, floorPPTool, "lat", 8, metrics{"lat_p50_us": 3, "lat_p99_us": 12})
		add(seriesFloorBW, floorBWTool, "bw", refSize, metrics{"bw_MiBps": 4000})
	}
	r.summarize()
	if got := r.tools[seriesFloorPP+"|lat"] + "; " + r.tools[seriesFloorBW+"|bw"]; got != floorPPTool+"; "+floorBWTool {
		t.Errorf("tools %q, want each once", got)
	}
	want := map[string]float64{ // softrdma / floor
		"RDMA WRITE 8 B latency p50 beside the kernel floor (reported)": 2,
		"RDMA WRITE 8 B latency p99 beside the kernel floor (reported)": 2.5,
		"RDMA WRITE 1 MiB bandwidth beside the kernel floor (reported)": 0.5,
	}
	for _, tg := range r.Targets {
		q, ok := want[tg.Name]
		if !ok {
			continue
		}
		delete(want, tg.Name)
		if !tg.Reported || tg.Met != nil || !near(tg.Softrdma/tg.Anchor, q) {
			t.Errorf("%s: %+v, want reported with no verdict, softrdma/floor %v", tg.Name, tg, q)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing targets %v in %+v", want, r.Targets)
	}
	b.Reset()
	r.print(&b)
	out := strings.Join(strings.Fields(b.String()), " ") // columns are padded
	for _, s := range []string{
		"kernel floor: Linux UDP",
		"(udp-busy ping-pong (40 B datagrams); udp-gso stream (15×4128 B segments)), what",
		"8 B latency p50 (µs, lower is better) 3.00 6.00 2.00x 5.00 1.67x",
		"8 B latency p99 (µs, lower is better) 12.0 30.0 2.50x 8.00 0.67x",
		"1 MiB bandwidth (MB/s, higher is better) 4000 2000 0.50x 5000 1.25x",
		"[INFO] RDMA WRITE 8 B latency p99 beside the kernel floor (reported): softrdma 30.0 µs; kernel floor (udp-busy ping-pong (40 B datagrams)) 12.0 µs (softrdma/that 2.50x)",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in\n%s", s, out)
		}
	}
}

// TestFloorLoopback runs both anchors end to end over loopback, in this
// process: the ping-pong's datagrams are the 8-byte WRITE's size, and the
// stream delivers exactly its plan's bytes.
func TestFloorLoopback(t *testing.T) {
	if err := floorProbe(); err != nil {
		t.Skip(err)
	}
	for _, c := range []struct {
		proto, mode string
		size, n     int
	}{
		{"udp-busy", "pp", 8, 200},
		{"udp-gso", "stream", 1 << 20, 8},
		{"udp-gso", "stream", 5000, 3}, // ends in a short segment
	} {
		t.Run(c.proto+"/"+sizeStr(c.size), func(t *testing.T) {
			o := goOpts{proto: c.proto, mode: c.mode, addr: "127.0.0.1:0", size: c.size, n: c.n, warm: 10}
			addr := make(chan string, 1)
			srvErr := make(chan error, 1)
			go func() { srvErr <- floorServer(o, func(a string) { addr <- a }) }()
			select {
			case o.addr = <-addr:
			case err := <-srvErr:
				t.Fatal(err)
			}
			m, err := floorClient(o)
			if err != nil {
				t.Fatal(err)
			}
			if err := <-srvErr; err != nil {
				t.Fatal("server:", err)
			}
			if c.mode == "pp" {
				if m["datagram_bytes"] != 40 || !(m["lat_p50_us"] > 0) || m["lat_p99_us"] < m["lat_p50_us"] {
					t.Errorf("metrics %v", m)
				}
				return
			}
			_, udp := floorPlan(c.size, c.n)
			if m["udp_bytes"] != float64(udp) || !(m["bw_MiBps"] > 0) || m["bw_MiBps"] >= m["udp_MiBps"] {
				t.Errorf("metrics %v, want %d UDP bytes and payload bandwidth below the UDP one", m, udp)
			}
		})
	}
}
