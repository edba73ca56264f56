package perftest

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/perftest"
	"github.com/softrdma/softrdma/internal/tools/devicetest"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// ptTestByName returns the benchmark called name.
func ptTestByName(t *testing.T, name string) ptTest {
	t.Helper()
	for _, pt := range ptTests() {
		if pt.name == name {
			return pt
		}
	}
	t.Fatalf("no test %s", name)
	return ptTest{}
}

// ptSides is the output of one server/client run.
type ptSides struct {
	server, client       string
	serverErr, clientErr string // what went to stderr
}

// ptPairTestDevices opens two softrdma devices on two loopback addresses
// that share a UDP port no other test uses.
func ptPairTestDevices(t *testing.T) (*soft.Device, *soft.Device) {
	t.Helper()
	da, db, _, _, _ := devicetest.Pair(t)
	return da, db
}

// runPTPair runs a benchmark's server and client against each other, as two
// goroutines with two devices; tweak (if not nil) adjusts both sides'
// options after parsing.
func runPTPair(t *testing.T, name string, serverArgs, clientArgs []string, tweak func(*ptOptions)) ptSides {
	t.Helper()
	sides, errCli, errSrv := runPTPairErr(t, name, serverArgs, clientArgs, tweak, tweak)
	if errCli != nil || errSrv != nil {
		t.Fatalf("%s: client error %v, server error %v\n--- server:\n%s%s\n--- client:\n%s%s", name, errCli, errSrv,
			sides.server, sides.serverErr, sides.client, sides.clientErr)
	}
	for _, s := range []string{sides.serverErr, sides.clientErr} {
		if s != "" {
			t.Errorf("%s: unexpected warnings: %s", name, s)
		}
	}
	if testing.Verbose() {
		t.Logf("--- server:\n%s\n--- client:\n%s", sides.server, sides.client)
	}
	return sides
}

// runPTPairErr is runPTPair with separate tweaks for each side, returning
// the errors.
func runPTPairErr(t *testing.T, name string, serverArgs, clientArgs []string, tweakSrv, tweakCli func(*ptOptions)) (ptSides, error, error) {
	t.Helper()
	test := ptTestByName(t, name)
	ptStallTimeout = 15 * time.Second
	devSrv, devCli := ptPairTestDevices(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if ln != nil {
			ln.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	host := "127.0.0.1"
	if slices.Contains(serverArgs, "-R") {
		// rdma_cm: the client dials the server device's address; the
		// exchange has no TCP listener.
		ln.Close()
		ln = nil
		gid, err := devSrv.QueryGID(1, 1)
		if err != nil {
			t.Fatal(err)
		}
		host = gid.Addr().Unmap().String()
	}
	var usage bytes.Buffer
	so, err := parsePTArgs(test, append(serverArgs, "-p", port), &usage)
	if err != nil {
		t.Fatalf("server args %q: %v\n%s", serverArgs, err, usage.String())
	}
	co, err := parsePTArgs(test, append(clientArgs, "-p", port, host), &usage)
	if err != nil {
		t.Fatalf("client args %q: %v\n%s", clientArgs, err, usage.String())
	}
	if tweakSrv != nil {
		tweakSrv(so)
	}
	if tweakCli != nil {
		tweakCli(co)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var srvOut, srvErr, cliOut, cliErr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		env := ptEnv{ctx: ctx, dev: devSrv, out: &srvOut, errOut: &srvErr}
		if ln != nil {
			env.ln = ln
		}
		done <- runPT(env, so)
	}()
	errCli := runPT(ptEnv{ctx: ctx, dev: devCli, out: &cliOut, errOut: &cliErr}, co)
	if errCli != nil {
		cancel() // unblock the server
	}
	errSrv := <-done
	sides := ptSides{server: srvOut.String(), client: cliOut.String(), serverErr: srvErr.String(), clientErr: cliErr.String()}
	return sides, errCli, errSrv
}

// ptBWRow is a parsed row of a bandwidth table.
type ptBWRow struct {
	size, iters        uint64
	peak, avg, msgRate float64
}

// ptRows returns the rows of the table that follows heading in out, each
// as its fields.
func ptRows(t *testing.T, out, heading string) [][]string {
	t.Helper()
	i := strings.Index(out, heading)
	if i < 0 {
		t.Fatalf("no table heading %q in:\n%s", heading, out)
	}
	var rows [][]string
	for _, line := range strings.Split(out[i:], "\n")[1:] {
		if strings.HasPrefix(line, "---") || line == "" {
			break
		}
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

func ptBWRows(t *testing.T, out string, gbits bool) []ptBWRow {
	t.Helper()
	heading := "BW peak[MB/sec]"
	if gbits {
		heading = "BW peak[Gb/sec]"
	}
	var rows []ptBWRow
	for _, f := range ptRows(t, out, heading) {
		if len(f) != 5 {
			t.Fatalf("bandwidth row %q has %d fields", f, len(f))
		}
		var r ptBWRow
		var err [5]error
		r.size, err[0] = strconv.ParseUint(f[0], 10, 64)
		r.iters, err[1] = strconv.ParseUint(f[1], 10, 64)
		r.peak, err[2] = strconv.ParseFloat(f[2], 64)
		r.avg, err[3] = strconv.ParseFloat(f[3], 64)
		r.msgRate, err[4] = strconv.ParseFloat(f[4], 64)
		if e := errors.Join(err[:]...); e != nil {
			t.Fatalf("bandwidth row %q: %v", f, e)
		}
		rows = append(rows, r)
	}
	return rows
}

// checkBW checks that rows are sane: the sizes and iterations expected, a
// positive average bandwidth and message rate that agree with each other,
// and (unless noPeak) a peak at least the average.
func checkBW(t *testing.T, who string, rows []ptBWRow, sizes []uint64, iters uint64, noPeak, gbits bool) {
	t.Helper()
	if len(rows) != len(sizes) {
		t.Fatalf("%s: %d rows, want %d (sizes %v)", who, len(rows), len(sizes), sizes)
	}
	for i, r := range rows {
		if r.size != sizes[i] || (iters != 0 && r.iters != iters) {
			t.Errorf("%s: row %d is size %d × %d, want %d × %d", who, i, r.size, r.iters, sizes[i], iters)
		}
		if !(r.msgRate > 0) {
			t.Errorf("%s: row %d: message rate %v", who, i, r.msgRate)
		}
		// MB/sec is MiB/s, Gb/sec 10^9 bits/s; the message rate is in
		// millions per second. Rows print two decimals (six below 0.1
		// Gb/s).
		want := r.msgRate * 1e6 * float64(r.size) / (1 << 20)
		if gbits {
			want = r.msgRate * 1e6 * float64(r.size) * 8 / 1e9
		}
		if r.avg < 0.98*want-0.006 || r.avg > 1.02*want+0.006 {
			t.Errorf("%s: row %d: average %v MB/s but %v Mpps of %d bytes is %v MB/s", who, i, r.avg, r.msgRate, r.size, want)
		}
		if !noPeak && r.peak < 0.999*r.avg {
			t.Errorf("%s: row %d: peak %v below the average %v", who, i, r.peak, r.avg)
		}
	}
}

// checkLat checks a latency table: the sizes and iterations expected and
// t_min ≤ t_typical ≤ t_max, t_min ≤ t_avg ≤ t_max, all positive.
func checkLat(t *testing.T, who, out string, sizes []uint64, iters uint64) {
	t.Helper()
	rows := ptRows(t, out, "t_min[usec]")
	if len(rows) != len(sizes) {
		t.Fatalf("%s: %d rows, want %d:\n%s", who, len(rows), len(sizes), out)
	}
	for i, f := range rows {
		if len(f) != 9 {
			t.Fatalf("%s: latency row %q has %d fields", who, f, len(f))
		}
		if f[0] != strconv.FormatUint(sizes[i], 10) || f[1] != strconv.FormatUint(iters, 10) {
			t.Errorf("%s: row %d is size %s × %s, want %d × %d", who, i, f[0], f[1], sizes[i], iters)
		}
		v := make([]float64, 7)
		for j := range v {
			if j == 4 && strings.HasSuffix(f[2+j], "nan") {
				// perftest's stdev overflows a C int for deviations
				// beyond 46 ms (a loaded machine) and prints -nan.
				continue
			}
			var err error
			if v[j], err = strconv.ParseFloat(f[2+j], 64); err != nil {
				t.Fatalf("%s: latency row %q: %v", who, f, err)
			}
		}
		tmin, tmax, typ, avg := v[0], v[1], v[2], v[3]
		if !(tmin > 0) || typ < tmin || typ > tmax || avg < tmin || avg > tmax || v[5] > tmax || v[6] > tmax {
			t.Errorf("%s: latency row %q is not sane", who, f)
		}
	}
}

// checkCommon checks the banner and the address lines.
func checkCommon(t *testing.T, who, out, title string, verb perftest.Verb, qps int) {
	t.Helper()
	if !strings.Contains(out, "                    "+title+"\n") {
		t.Errorf("%s: no banner %q in:\n%s", who, title, out)
	}
	for _, side := range []string{" local address: LID 0000 QPN 0x", " remote address: LID 0000 QPN 0x"} {
		if n := strings.Count(out, side); n != qps {
			t.Errorf("%s: %d lines %q, want %d", who, n, side, qps)
		}
	}
	if n := strings.Count(out, " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:"); n != 2*qps {
		t.Errorf("%s: %d GID lines, want %d", who, n, 2*qps)
	}
	if verb == perftest.Read && !strings.Contains(out, " OUT 0x80 RKey 0x") {
		t.Errorf("%s: READ address lines without OUT and RKey", who)
	}
}

func TestPerftestPairs(t *testing.T) {
	const n = 100
	ns := strconv.Itoa(n)
	for _, tc := range []struct {
		name       string
		args       []string // both sides
		title      string
		sizes      []uint64
		iters      uint64 // the table's #iterations
		qps        int
		gbits      bool
		serverRows bool // the server prints a table of its own (or the client's)
		noPeak     bool
		maxAll     uint64
	}{
		{name: "ib_write_bw", args: []string{"-n", ns, "-s", "8192"}, title: "RDMA_Write BW Test", sizes: []uint64{8192}, iters: n, qps: 1, serverRows: true},
		{name: "ib_write_bw", args: []string{"-n", ns, "-s", "1000", "-q", "3", "-t", "16", "-Q", "4", "--report_gbits"}, title: "RDMA_Write BW Test", sizes: []uint64{1000}, iters: 3 * n, qps: 3, gbits: true, serverRows: true},
		{name: "ib_write_bw", args: []string{"-n", ns, "-s", "3000", "-b"}, title: "RDMA_Write Bidirectional BW Test", sizes: []uint64{3000}, iters: n, qps: 1, serverRows: true},
		{name: "ib_read_bw", args: []string{"-n", ns, "-s", "16384", "-q", "2"}, title: "RDMA_Read BW Test", sizes: []uint64{16384}, iters: 2 * n, qps: 2, serverRows: true},
		{name: "ib_read_bw", args: []string{"-n", "20", "-a"}, title: "RDMA_Read BW Test", sizes: ptPow2(2, 1<<16), iters: 20, qps: 1, serverRows: true, maxAll: 1 << 16},
		{name: "ib_send_bw", args: []string{"-n", ns, "-s", "4096"}, title: "Send BW Test", sizes: []uint64{4096}, iters: n, qps: 1, serverRows: true, noPeak: true},
		{name: "ib_send_bw", args: []string{"-n", ns, "-s", "100", "-b", "-q", "2"}, title: "Send Bidirectional BW Test", sizes: []uint64{100}, iters: 2 * n, qps: 2, serverRows: true},
		{name: "ib_send_bw", args: []string{"-n", "10", "-a"}, title: "Send BW Test", sizes: ptPow2(2, 1<<14), iters: 10, qps: 1, serverRows: true, noPeak: true, maxAll: 1 << 14},
		{name: "ib_write_bw", args: []string{"-n", ns, "-s", "2048", "-q", "2", "--mr_per_qp"}, title: "RDMA_Write BW Test", sizes: []uint64{2048}, iters: 2 * n, qps: 2, serverRows: true},
		{name: "ib_send_bw", args: []string{"-n", ns, "-s", "512", "-q", "2", "--mr_per_qp"}, title: "Send BW Test", sizes: []uint64{512}, iters: 2 * n, qps: 2, serverRows: true, noPeak: true},
		{name: "ib_atomic_bw", args: []string{"-n", ns}, title: "Atomic FETCH_AND_ADD BW Test", sizes: []uint64{8}, iters: n, qps: 1, serverRows: true},
		{name: "ib_atomic_bw", args: []string{"-n", ns, "-A", "CMP_AND_SWAP", "-q", "2"}, title: "Atomic CMP_AND_SWAP BW Test", sizes: []uint64{8}, iters: 2 * n, qps: 2, serverRows: true},
		{name: "ib_write_lat", args: []string{"-n", ns}, title: "RDMA_Write Latency Test", sizes: []uint64{2}, iters: n, qps: 1, serverRows: true},
		{name: "ib_write_lat", args: []string{"-n", "20", "-a", "-I", "64"}, title: "RDMA_Write Latency Test", sizes: ptPow2(2, 1<<13), iters: 20, qps: 1, serverRows: true, maxAll: 1 << 13},
		{name: "ib_read_lat", args: []string{"-n", ns, "-s", "5000"}, title: "RDMA_Read Latency Test", sizes: []uint64{5000}, iters: n, qps: 1},
		{name: "ib_send_lat", args: []string{"-n", ns, "-s", "1500", "-I", "0"}, title: "Send Latency Test", sizes: []uint64{1500}, iters: n, qps: 1, serverRows: true},
		{name: "ib_send_lat", args: []string{"-n", "10", "-a", "-I", "128"}, title: "Send Latency Test", sizes: ptPow2(2, 1<<12), iters: 10, qps: 1, serverRows: true, maxAll: 1 << 12},
		{name: "ib_atomic_lat", args: []string{"-n", ns}, title: "Atomic FETCH_AND_ADD Latency Test", sizes: []uint64{8}, iters: n, qps: 1},
		{name: "ib_atomic_lat", args: []string{"-n", ns, "-A", "CMP_AND_SWAP"}, title: "Atomic CMP_AND_SWAP Latency Test", sizes: []uint64{8}, iters: n, qps: 1},
	} {
		t.Run(tc.name+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			var tweak func(*ptOptions)
			if tc.maxAll != 0 {
				tweak = func(o *ptOptions) { o.maxAllSize = tc.maxAll }
			}
			out := runPTPair(t, tc.name, tc.args, tc.args, tweak)
			test := ptTestByName(t, tc.name)
			checkCommon(t, "client", out.client, tc.title, test.verb, tc.qps)
			checkCommon(t, "server", out.server, tc.title, test.verb, tc.qps)
			if !strings.Contains(out.server, "* Waiting for client to connect... *") {
				t.Errorf("server: no waiting banner")
			}
			if test.kind == perftest.BW {
				cli := ptBWRows(t, out.client, tc.gbits)
				// With -a a peak is computed only when cq_mod covers whole
				// sizes; both sides check the average.
				checkBW(t, "client", cli, tc.sizes, tc.iters, false, tc.gbits)
				srv := ptBWRows(t, out.server, tc.gbits)
				if test.verb != perftest.Send && !strings.Contains(tc.title, "Bidirectional") {
					// The server of a one-sided test prints the client's
					// report: the last one.
					if fmt.Sprint(srv) != fmt.Sprint(cli[len(cli)-1:]) {
						t.Errorf("server row %v, client row %v", srv, cli)
					}
					return
				}
				checkBW(t, "server", srv, tc.sizes, tc.iters, tc.noPeak, tc.gbits)
				return
			}
			checkLat(t, "client", out.client, tc.sizes, tc.iters)
			if tc.serverRows {
				checkLat(t, "server", out.server, tc.sizes, tc.iters)
			} else if strings.Contains(out.server, "t_min[usec]") {
				t.Errorf("the server of %s printed a latency table", tc.name)
			}
		})
	}
}

// pollCounter is a CQ that counts its polls.
type pollCounter struct {
	verbs.CQ
	polls *atomic.Int64
}

func (c pollCounter) Poll(wc []verbs.WC) (int, error) {
	c.polls.Add(1)
	return c.CQ.Poll(wc)
}

// Unwrap is the counted CQ, which events name.
func (c pollCounter) Unwrap() verbs.CQ { return c.CQ }

// TestPerftestEvents runs the tests perftest offers -e for with it: both
// ends sleep on a completion channel rather than poll. The latency tests'
// clients count their polls. As perftest, a loop sleeps until its CQ's
// event and then polls: once per completion (ib_send_lat has two a
// message, its receive and its signaled SEND), and once more after an
// event whose completion an earlier poll took (a poll of an empty CQ
// receives, and the completions it makes raise their CQ's event too):
// about 3.3 a message for ib_send_lat, where busy polling made 15-22.
func TestPerftestEvents(t *testing.T) {
	const n = 200
	ns := strconv.Itoa(n)
	for _, tc := range []struct {
		name  string
		args  []string
		title string
		sizes []uint64
		iters uint64
		qps   int
	}{
		{"ib_send_lat", []string{"-n", ns, "-e"}, "Send Latency Test", []uint64{2}, n, 1},
		{"ib_send_lat", []string{"-n", "20", "-a", "-e"}, "Send Latency Test", ptPow2(2, 1<<12), 20, 1},
		{"ib_read_lat", []string{"-n", ns, "-s", "5000", "-e"}, "RDMA_Read Latency Test", []uint64{5000}, n, 1},
		{"ib_atomic_lat", []string{"-n", ns, "-e", "-X", "0"}, "Atomic FETCH_AND_ADD Latency Test", []uint64{8}, n, 1},
		{"ib_send_bw", []string{"-n", ns, "-s", "4096", "-e"}, "Send BW Test", []uint64{4096}, n, 1},
		{"ib_send_bw", []string{"-n", ns, "-s", "100", "-b", "-q", "2", "-e"}, "Send Bidirectional BW Test", []uint64{100}, 2 * n, 2},
		{"ib_read_bw", []string{"-n", ns, "-s", "16384", "-q", "2", "-e"}, "RDMA_Read BW Test", []uint64{16384}, 2 * n, 2},
		{"ib_atomic_bw", []string{"-n", ns, "-e"}, "Atomic FETCH_AND_ADD BW Test", []uint64{8}, n, 1},
	} {
		t.Run(tc.name+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			var polls atomic.Int64
			test := ptTestByName(t, tc.name)
			tweak := func(o *ptOptions) {
				o.maxAllSize = 1 << 12
				if o.server != "" {
					o.onResources = func(r *ptResources) {
						if r.events == nil {
							t.Error("-e made no completion channel")
						}
						if r.recvCQ != r.sendCQ {
							r.recvCQ = pollCounter{r.recvCQ, &polls}
						}
						r.sendCQ = pollCounter{r.sendCQ, &polls}
					}
				}
			}
			out := runPTPair(t, tc.name, tc.args, tc.args, tweak)
			for who, o := range map[string]string{"client": out.client, "server": out.server} {
				checkCommon(t, who, o, tc.title, test.verb, tc.qps)
				if !strings.Contains(o, " Test with events. Using softrdma_") || !strings.Contains(o, "_comp0\n") {
					t.Errorf("%s: no events line in:\n%s", who, o)
				}
			}
			if test.kind == perftest.BW {
				checkBW(t, "client", ptBWRows(t, out.client, false), tc.sizes, tc.iters, false, false)
				return
			}
			checkLat(t, "client", out.client, tc.sizes, tc.iters)
			msgs := int64(tc.iters) * int64(len(tc.sizes))
			if p := polls.Load(); p > 5*msgs+10 {
				t.Errorf("the client polled %d times for %d messages: it did not sleep on events", p, msgs)
			}
		})
	}
}

// ptPow2 returns lo, 2·lo, ... hi.// ptPow2 returns lo, 2·lo, ... hi.
func ptPow2(lo, hi uint64) []uint64 {
	var s []uint64
	for v := lo; v <= hi; v *= 2 {
		s = append(s, v)
	}
	return s
}

// TestPerftestDuration runs a bandwidth and a latency test for a second
// each (-D 1 with no margins).
func TestPerftestDuration(t *testing.T) {
	for _, name := range []string{"ib_write_bw", "ib_send_lat"} {
		t.Run(name, func(t *testing.T) {
			args := []string{"-D", "1", "-f", "0", "-s", "1024"}
			out := runPTPair(t, name, args, args, nil)
			if name == "ib_write_bw" {
				checkBW(t, "client", ptBWRows(t, out.client, false), []uint64{1024}, 0, true, false)
				return
			}
			rows := ptRows(t, out.client, "t_avg[usec]    tps average")
			if len(rows) != 1 || len(rows[0]) != 4 || rows[0][0] != "1024" {
				t.Fatalf("duration rows %q", rows)
			}
			avg, _ := strconv.ParseFloat(rows[0][2], 64)
			tps, _ := strconv.ParseFloat(rows[0][3], 64)
			iters, _ := strconv.ParseFloat(rows[0][1], 64)
			if !(avg > 0) || !(tps > 0) || !(iters > 0) {
				t.Fatalf("duration row %q", rows[0])
			}
		})
	}
}

// TestPerftestJSON checks that --out_json writes a valid JSON file with the
// last row's numbers.
func TestPerftestJSON(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"ib_write_bw", "ib_read_lat"} {
		file := filepath.Join(dir, name+".json")
		cli := []string{"-n", "50", "--out_json", "--out_json_file=" + file}
		out := runPTPair(t, name, []string{"-n", "50"}, cli, nil)
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			TestInfo map[string]any     `json:"test_info"`
			Results  map[string]float64 `json:"results"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
		if v.TestInfo["Device"] != "softrdma_cli" || v.Results["n_iterations"] != 50 {
			t.Errorf("%s: JSON %s", name, b)
		}
		if name == "ib_write_bw" {
			rows := ptBWRows(t, out.client, false)
			if got := fmt.Sprintf("%.2f", v.Results["BW_average"]); got != fmt.Sprintf("%.2f", rows[0].avg) {
				t.Errorf("JSON BW_average %s, table %v", got, rows[0].avg)
			}
		}
	}
}

func TestPerftestArgs(t *testing.T) {
	wbw, rlat, abw, sbw := ptTestByName(t, "ib_write_bw"), ptTestByName(t, "ib_read_lat"), ptTestByName(t, "ib_atomic_bw"), ptTestByName(t, "ib_send_bw")
	for _, tc := range []struct {
		test ptTest
		args []string
		want func(o *ptOptions) bool
		desc string
	}{
		{wbw, nil, func(o *ptOptions) bool {
			return o.iters == 5000 && o.size == 65536 && o.txDepth == 128 && o.cqMod == 1 && o.port == 18515 && o.server == "" && o.gidIndex == -1
		}, "write bw defaults: 64 KiB messages get cq_mod 1"},
		{wbw, []string{"-s", "4K"}, func(o *ptOptions) bool { return o.size == 4096 && o.cqMod == 100 }, "cq_mod 100 for small messages"},
		{wbw, []string{"-n", "50", "-s", "64"}, func(o *ptOptions) bool { return o.txDepth == 50 && o.cqMod == 50 }, "tx depth and cq_mod capped at the iterations"},
		{wbw, []string{"host", "-s4096", "--iters=77", "-aF"}, func(o *ptOptions) bool {
			return o.server == "host" && o.size == ptMaxSize && o.iters == 77 && o.runAll && o.role() == perftest.Client
		}, "permuted arguments, attached values, clustered flags"},
		{wbw, []string{"--report_g", "--qp", "4", "-b"}, func(o *ptOptions) bool { return o.gbits && o.numQPs == 4 && o.duplex }, "long option prefix"},
		{wbw, []string{"-n", "30000"}, func(o *ptOptions) bool { return o.noPeak }, "no peak above 20000 iterations"},
		{rlat, nil, func(o *ptOptions) bool { return o.iters == 1000 && o.size == 2 && o.txDepth == 1 && o.inline == 0 }, "read lat defaults"},
		{abw, nil, func(o *ptOptions) bool {
			return o.iters == 1000 && o.size == 8 && o.atomicOp == perftest.FetchAndAdd
		}, "atomic bw defaults"},
		{sbw, []string{"-n", "9"}, func(o *ptOptions) bool { return o.rxDepth == 10 && o.noPeak }, "send server: rx depth capped and made even, no peak"},
		{wbw, []string{"-D", "4"}, func(o *ptOptions) bool { return o.iters == 0 && o.noPeak && o.margin == 1 }, "duration"},
		{wbw, []string{"--run_infinitely"}, func(o *ptOptions) bool { return o.infinite && o.duration == 5 && o.iters == 0 && o.noPeak }, "run_infinitely reports every 5 s"},
		{wbw, []string{"--run_infinitely", "-D", "2", "-a"}, func(o *ptOptions) bool { return o.duration == 2 && !o.runAll }, "run_infinitely: -D is the interval, -a is dropped"},
		{wbw, []string{"--mr_per_qp", "-q", "2"}, func(o *ptOptions) bool { return o.mrPerQP && o.numQPs == 2 }, "mr_per_qp"},
		{rlat, []string{"-U", "-H"}, func(o *ptOptions) bool { return o.unsorted && o.histogram }, "-U and -H on latency"},
		{rlat, []string{"-e"}, func(o *ptOptions) bool { return o.events && o.vector == -1 }, "-e"},
		{sbw, []string{"-X", "3", "--events"}, func(o *ptOptions) bool { return o.events && o.vector == 3 }, "-X before -e"},
		{sbw, []string{"-e", "-s", "65536"}, func(o *ptOptions) bool { return o.cqMod == 100 }, "events keep the moderation of large messages"},
	} {
		o, err := parsePTArgs(tc.test, tc.args, io.Discard)
		if err != nil {
			t.Errorf("%s: %v", tc.desc, err)
			continue
		}
		if !tc.want(o) {
			t.Errorf("%s: %s %q gave %+v", tc.desc, tc.test.name, tc.args, *o)
		}
	}
	for _, tc := range []struct {
		test ptTest
		args []string
	}{
		{wbw, []string{"-Z"}},
		{wbw, []string{"--nope"}},
		{wbw, []string{"-n", "4"}},
		{wbw, []string{"-s"}},
		{wbw, []string{"-c", "UD"}},
		{rlat, []string{"-q", "2"}},
		{rlat, []string{"-b"}},
		{rlat, []string{"-I", "64"}},
		{abw, []string{"-a"}},
		{abw, []string{"-s", "16"}},
		{wbw, []string{"-A", "CMP_AND_SWAP"}},
		{wbw, []string{"a", "b"}},
		{wbw, []string{"-D", "2", "-f", "1"}},
		{wbw, []string{"-U"}},
		{wbw, []string{"-H"}},
		{rlat, []string{"--run_infinitely"}},
		{sbw, []string{"--run_infinitely", "-b"}},
		{wbw, []string{"--recv_post_list", "4"}},
		{wbw, []string{"-e"}},
		{wbw, []string{"-X", "0"}},
		{rlat, []string{"-X", "0"}},
		{rlat, []string{"-e", "-D", "4"}},
		{sbw, []string{"-e", "--run_infinitely"}},
		{rlat, []string{"-e", "-X", "4000"}},
	} {
		if _, err := parsePTArgs(tc.test, tc.args, io.Discard); err == nil || errors.Is(err, errPTExit) {
			t.Errorf("%s %q: err = %v, want an error", tc.test.name, tc.args, err)
		}
	}
	var help bytes.Buffer
	if _, err := parsePTArgs(wbw, []string{"-h"}, &help); !errors.Is(err, errPTExit) || !strings.Contains(help.String(), "  ib_write_bw <host>     connect to server at <host>") {
		t.Errorf("-h: %v\n%s", err, help.String())
	}
}

func TestPerftestPattern(t *testing.T) {
	const addr = 0x7f00_1234_5003
	b := make([]byte, 300)
	ptFill(b, addr, ptSeed(0x123456))
	if ours, bad := ptMatch(b, addr, ptSeed(0x123456)); !ours || bad != -1 {
		t.Fatalf("ptMatch of the pattern: %v %d", ours, bad)
	}
	if ours, _ := ptMatch(b, addr, ptSeed(0x123457)); ours {
		t.Fatal("another seed's pattern matched")
	}
	if ours, _ := ptMatch(b[1:], addr, ptSeed(0x123456)); ours {
		t.Fatal("a shifted pattern matched")
	}
	b[200] ^= 1
	if ours, bad := ptMatch(b, addr, ptSeed(0x123456)); !ours || bad != 200 {
		t.Fatalf("ptMatch of a corrupted pattern: %v %d", ours, bad)
	}

	// verifySlots: slot-wise comparison against the peer's pattern, silent
	// for a foreign peer, loud for a corrupt byte.
	res := &ptResources{cycle: 4096, cacheLine: 64, buf: make([]byte, 4096)}
	const peer = 0x5555_0000_0000
	seed := ptSeed(7)
	stride, n := res.slots(100)
	if stride != 128 || n != 32 {
		t.Fatalf("slots(100) = %d, %d", stride, n)
	}
	for s := uint64(0); s < 3; s++ {
		ptFill(res.buf[s*stride:s*stride+100], peer+s*stride, seed)
	}
	if err := res.verifySlots("test", 0, 0, peer, seed, 100, 3); err != nil {
		t.Fatal(err)
	}
	if err := res.verifySlots("test", 0, 0, peer, ptSeed(8), 100, 3); err != nil {
		t.Fatalf("foreign data: %v", err)
	}
	res.buf[2*stride+99] ^= 0x80
	if err := res.verifySlots("test", 0, 0, peer, seed, 100, 3); err == nil || !strings.Contains(err.Error(), "slot 2: byte 99") {
		t.Fatalf("corrupt data: %v", err)
	}
}

// TestPerftestDataCheck corrupts one byte of the data a test moves and
// expects the side that checks it to notice.
func TestPerftestDataCheck(t *testing.T) {
	corrupt := func(off func(*ptResources) uint64) func(*ptOptions) {
		return func(o *ptOptions) {
			o.onResources = func(res *ptResources) { res.buf[off(res)] ^= 0x40 }
		}
	}
	for _, tc := range []struct {
		name          string
		args          []string
		srv, cli      func(*ptOptions)
		clientFails   bool // else the server fails
		whatIsChecked string
	}{
		// The READ client checks what it read from the server's region.
		{"ib_read_bw", []string{"-n", "20", "-s", "300"}, corrupt(func(r *ptResources) uint64 { return r.vaddrOff(0) + 2*ptInc(300, r.cacheLine) + 299 }), nil, true, "RDMA READ data"},
		{"ib_read_lat", []string{"-n", "20", "-s", "4000"}, corrupt(func(r *ptResources) uint64 { return r.vaddrOff(0) + 3000 }), nil, true, "RDMA READ data"},
		// The WRITE server checks what the client wrote from its send region.
		{"ib_write_bw", []string{"-n", "20", "-s", "100"}, nil, corrupt(func(r *ptResources) uint64 { return r.sendOff(0) + 17 }), false, "RDMA WRITE data"},
		// SEND latency: each side checks the last message it received.
		{"ib_send_lat", []string{"-n", "20", "-s", "64"}, nil, corrupt(func(r *ptResources) uint64 { return r.sendOff(0) + 40 }), false, "received SEND data"},
	} {
		t.Run(tc.name+" "+tc.whatIsChecked, func(t *testing.T) {
			sides, errCli, errSrv := runPTPairErr(t, tc.name, tc.args, tc.args, tc.srv, tc.cli)
			err := errSrv
			if tc.clientFails {
				err = errCli
			}
			if err == nil || !strings.Contains(err.Error(), "data check failed: "+tc.whatIsChecked) {
				t.Fatalf("client error %v, server error %v\n--- server:\n%s\n--- client:\n%s", errCli, errSrv, sides.server, sides.client)
			}
		})
	}
	// FETCH_AND_ADD: the server's counters must have grown by one per
	// message; a perftest client may add warm-up messages, so a mismatch
	// is a warning.
	t.Run("ib_atomic_bw counters", func(t *testing.T) {
		args := []string{"-n", "30"}
		srv := corrupt(func(r *ptResources) uint64 { return r.vaddrOff(0) + 64 }) // after the fill: a counter is off
		sides, errCli, errSrv := runPTPairErr(t, "ib_atomic_bw", args, args, srv, nil)
		if errCli != nil || errSrv != nil || !strings.Contains(sides.serverErr, "the client reported 30 FETCH_AND_ADDs") {
			t.Fatalf("client error %v, server error %v, server warnings %q", errCli, errSrv, sides.serverErr)
		}
	})
}

// TestPerftestEnvDevice runs the server on the device the CLI would open
// (SOFTRDMA_ADDR, UDP port 4791), as Run does.
func TestPerftestEnvDevice(t *testing.T) {
	net3 := byte(100 + rand.IntN(150))
	srvAddr := netip.AddrFrom4([4]byte{127, 0, net3, 1})
	t.Setenv("SOFTRDMA_ADDR", srvAddr.String())
	cli, err := soft.Open(soft.Config{Name: "softrdma_cli", Addr: netip.AddrFrom4([4]byte{127, 0, net3, 2})})
	if err != nil {
		t.Skipf("UDP port 4791 on loopback: %v", err)
	}
	defer cli.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if ln != nil {
			ln.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	test := ptTestByName(t, "ib_send_bw")
	so, err := parsePTArgs(test, []string{"-n", "50", "-p", port}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	co, err := parsePTArgs(test, []string{"-n", "50", "-p", port, "127.0.0.1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var srvOut, cliOut bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- runPT(ptEnv{ctx: ctx, out: &srvOut, ln: ln}, so) }()
	errCli := runPT(ptEnv{ctx: ctx, dev: cli, out: &cliOut}, co)
	if errCli != nil {
		cancel()
	}
	if errSrv := <-done; errCli != nil || errSrv != nil {
		t.Fatalf("client %v, server %v\n%s\n%s", errCli, errSrv, srvOut.String(), cliOut.String())
	}
	// The device is named after its interface and, not being loopback's
	// first address, its address (soft.DeviceName).
	if !strings.Contains(srvOut.String(), "Device         : "+soft.DeviceName("lo", srvAddr)+"\n") {
		t.Errorf("server output:\n%s", srvOut.String())
	}
	checkBW(t, "server", ptBWRows(t, srvOut.String(), false), []uint64{65536}, 50, true, false)
}

// TestPerftestOutputs: --out_csv writes the printed rows, --plot a PNG,
// and --cpu_util adds perftest's column in duration mode.
func TestPerftestOutputs(t *testing.T) {
	dir := t.TempDir()
	csvFile, png := dir+"/lat.csv", dir+"/lat.png"
	args := []string{"-a", "-n", "20"}
	tweak := func(o *ptOptions) { o.maxAllSize = 64 }
	out := runPTPair(t, "ib_write_lat", args, append(args, "--out_csv", csvFile, "--plot", png), tweak)
	rows := ptRows(t, out.client, "99.9% percentile[usec]")
	f, err := os.Open(csvFile)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(rows)+1 || recs[0][0] != "bytes" || recs[0][8] != "p99_9_usec" {
		t.Fatalf("CSV %q for %d printed rows", recs, len(rows))
	}
	for i, row := range rows {
		for j := range row {
			if recs[i+1][j] != row[j] {
				t.Fatalf("CSV row %d %q differs from the table's %q", i, recs[i+1], row)
			}
		}
	}
	if b, err := os.ReadFile(png); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("--plot did not write a PNG: %v", err)
	}

	dargs := []string{"-D", "1", "-f", "0", "-s", "1024", "--cpu_util"}
	out = runPTPair(t, "ib_write_bw", dargs, dargs, nil)
	rows = ptRows(t, out.client, "CPU_Util[%]")
	if len(rows) != 1 || len(rows[0]) != 6 {
		t.Fatalf("rows with --cpu_util: %q", rows)
	}
	if u, err := strconv.ParseFloat(rows[0][5], 64); err != nil || u <= 0 || u > 100 {
		t.Fatalf("CPU_Util %q", rows[0][5])
	}
}

// TestPerftestRunInfinitely runs ib_write_bw --run_infinitely -D 1 for
// a little over two intervals: the client prints a row per interval until
// its context ends; the server, which waits for the client's end of test
// without a time limit, ends when the connection goes.
func TestPerftestRunInfinitely(t *testing.T) {
	for _, rdmaCM := range []bool{false, true} {
		t.Run(fmt.Sprintf("rdma_cm=%v", rdmaCM), func(t *testing.T) { testPerftestRunInfinitely(t, rdmaCM) })
	}
}

// testPerftestRunInfinitely: with -R the server learns that the client
// went from its DREQ on the exchange's rdma_cm connection.
func testPerftestRunInfinitely(t *testing.T, rdmaCM bool) {
	test := ptTestByName(t, "ib_write_bw")
	devSrv, devCli := ptPairTestDevices(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if ln != nil {
			ln.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	args := []string{"--run_infinitely", "-D", "1", "-s", "4096", "-p", port}
	host := "127.0.0.1"
	env := ptEnv{dev: devSrv, errOut: io.Discard, ln: ln}
	if rdmaCM {
		args = append(args, "-R")
		gid, err := devSrv.QueryGID(1, 1)
		if err != nil {
			t.Fatal(err)
		}
		host, env.ln = gid.Addr().Unmap().String(), nil
	}
	so, err := parsePTArgs(test, args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	co, err := parsePTArgs(test, append(args, host), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	srvCtx, srvCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer srvCancel()
	// The client runs a second and a half longer than the two rows it must
	// print: connecting takes a moment, and a loaded machine (CI runs
	// every package's tests at once) stretches it. With -R the connection
	// takes longer still (a CM exchange per QP, a refused first REQ
	// retried after 100 ms when the server is not listening yet): the
	// client must print at least one row.
	cliTime, wantRows := 3500*time.Millisecond, 2
	if rdmaCM {
		cliTime, wantRows = 3500*time.Millisecond, 1
	}
	cliCtx, cliCancel := context.WithTimeout(context.Background(), cliTime)
	defer cliCancel()
	var srvOut, cliOut bytes.Buffer
	env.ctx, env.out = srvCtx, &srvOut
	done := make(chan error, 1)
	go func() { done <- runPT(env, so) }()
	errCli := runPT(ptEnv{ctx: cliCtx, dev: devCli, out: &cliOut, errOut: io.Discard}, co)
	if !errors.Is(errCli, context.DeadlineExceeded) {
		t.Errorf("client: %v, want the context's deadline", errCli)
	}
	// runPT closed the client's connection as it returned.
	select {
	case err := <-done:
		if err == nil || srvCtx.Err() != nil {
			t.Errorf("server: %v, want an error on the closed connection before its own deadline", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("server did not notice the client going")
	}
	rows := ptRows(t, cliOut.String(), "BW peak[MB/sec]")
	if len(rows) < wantRows || len(rows) > int(cliTime/time.Second) {
		t.Fatalf("client printed %d rows in %v of 1 s intervals, want %d to %d:\n%s", len(rows), cliTime, wantRows, int(cliTime/time.Second), cliOut.String())
	}
	for _, f := range rows {
		if len(f) != 5 || f[0] != "4096" || f[1] == "0" || f[2] != "0.00" {
			t.Errorf("row %q: want size 4096, some iterations, no peak", f)
		}
	}
}

// TestPerftestUnsorted checks -U and -H: the samples, listed before the
// row with the heading printed again.
func TestPerftestUnsorted(t *testing.T) {
	out := runPTPair(t, "ib_send_lat", []string{"-n", "10"}, []string{"-n", "10", "-U", "-H"}, nil)
	c := out.client
	if strings.Count(c, "#, usec\n") != 2 {
		t.Fatalf("want two sample lists:\n%s", c)
	}
	unsorted := c[strings.Index(c, "#, usec\n")+8:]
	for i := 1; i <= 9; i++ {
		line, rest, _ := strings.Cut(unsorted, "\n")
		if !strings.HasPrefix(line, strconv.Itoa(i)+", ") {
			t.Fatalf("sample line %d is %q", i, line)
		}
		unsorted = rest
	}
	if !strings.HasPrefix(unsorted, "#, usec\n") {
		t.Fatalf("the sorted list does not follow the 9 samples:\n%s", unsorted)
	}
	sorted := strings.Split(strings.TrimPrefix(unsorted, "#, usec\n"), "\n")
	if len(sorted) < 8 || !strings.HasPrefix(sorted[7], "---") || !strings.HasPrefix(sorted[6], "7, ") {
		t.Fatalf("want 7 sorted samples (9 without the tail of 2), then the heading:\n%s", c)
	}
	checkLat(t, "client", c[strings.LastIndex(c, "#, usec"):], []uint64{2}, 10)
}

// TestPerftestSecure: --secure on both ends protects every QP (the tests
// run as perftest's, data checks included); an end without it fails at
// once on the other's key exchange instead of waiting for the exchange
// timeout; UD is refused.
func TestPerftestSecure(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"ib_write_bw", []string{"-n", "40", "-s", "5000", "-q", "2", "--secure", "encrypt"}},
		{"ib_read_lat", []string{"-n", "20", "-s", "3000", "--secure", "auth"}},
		{"ib_send_bw", []string{"-n", "30", "-s", "700", "-c", "UC", "--secure", "auth"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sides := runPTPair(t, tc.name, tc.args, tc.args, nil)
			mode := tc.args[len(tc.args)-1]
			for _, out := range []string{sides.server, sides.client} {
				if !strings.Contains(out, " Packet protection: "+mode) {
					t.Errorf("no %q line in:\n%s", "Packet protection: "+mode, out)
				}
			}
		})
	}
	for _, secureSide := range []string{"server", "client"} {
		t.Run("only the "+secureSide, func(t *testing.T) {
			on := func(o *ptOptions) { o.secure = verbs.SecurityAuth }
			srv, cli := on, (func(*ptOptions))(nil)
			if secureSide == "client" {
				srv, cli = nil, on
			}
			t0 := time.Now()
			sides, errCli, errSrv := runPTPairErr(t, "ib_write_lat", []string{"-n", "10"}, []string{"-n", "10"}, srv, cli)
			if errCli == nil || errSrv == nil {
				t.Fatalf("client error %v, server error %v; want both to fail\n--- server:\n%s\n--- client:\n%s", errCli, errSrv, sides.server, sides.client)
			}
			if d := time.Since(t0); d > ptExchangeTimeout/2 {
				t.Errorf("failing took %v: an end waited for the exchange timeout", d)
			}
			t.Logf("client: %v; server: %v", errCli, errSrv)
		})
	}
	if _, err := parsePTArgs(ptTestByName(t, "ib_send_bw"), []string{"-c", "UD", "--secure", "auth"}, io.Discard); err == nil {
		t.Error("--secure with UD was accepted")
	}
	if _, err := parsePTArgs(ptTestByName(t, "ib_send_bw"), []string{"--secure", "yes"}, io.Discard); err == nil {
		t.Error("--secure yes was accepted")
	}
}
