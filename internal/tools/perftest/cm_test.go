package perftest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/internal/perftest"
)

// TestPerftestRDMACM runs each benchmark with -R on two devices: the
// exchange and the test QPs connect through rdma_cm (REQ/REP/RTU on QP1),
// the exchange's messages are SENDs, and the results are as over TCP.
func TestPerftestRDMACM(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		title  string
		size   uint64
		iters  uint64
		qps    int
		duplex bool
	}{
		{"ib_send_bw", []string{"-n", "100", "-s", "4096"}, "Send BW Test", 4096, 100, 1, false},
		{"ib_send_bw", []string{"-n", "100", "-s", "100", "-b", "-q", "2"}, "Send Bidirectional BW Test", 100, 200, 2, true},
		{"ib_write_bw", []string{"-n", "100", "-s", "8192", "-q", "2"}, "RDMA_Write BW Test", 8192, 200, 2, false},
		{"ib_read_bw", []string{"-n", "100", "-s", "16384"}, "RDMA_Read BW Test", 16384, 100, 1, false},
		{"ib_atomic_bw", []string{"-n", "100"}, "Atomic FETCH_AND_ADD BW Test", 8, 100, 1, false},
		{"ib_send_lat", []string{"-n", "100", "-s", "1500"}, "Send Latency Test", 1500, 100, 1, false},
		// UD: SIDR, and the client's QPN in a first SEND_WITH_IMM when the
		// server sends too.
		{"ib_send_bw", []string{"-c", "UD", "-n", "100", "-s", "1024"}, "Send BW Test", 1024, 100, 1, false},
		{"ib_send_bw", []string{"-c", "UD", "-n", "100", "-s", "512", "-b", "-q", "2"}, "Send Bidirectional BW Test", 512, 200, 2, true},
		{"ib_send_lat", []string{"-c", "UD", "-n", "100", "-s", "1024"}, "Send Latency Test", 1024, 100, 1, false},
		{"ib_write_lat", []string{"-n", "100"}, "RDMA_Write Latency Test", 2, 100, 1, false},
		{"ib_read_lat", []string{"-n", "100", "-s", "5000"}, "RDMA_Read Latency Test", 5000, 100, 1, false},
		{"ib_atomic_lat", []string{"-n", "100", "-A", "CMP_AND_SWAP"}, "Atomic CMP_AND_SWAP Latency Test", 8, 100, 1, false},
	} {
		t.Run(tc.name+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			args := append([]string{"-R"}, tc.args...)
			out := runPTPair(t, tc.name, args, args, nil)
			test := ptTestByName(t, tc.name)
			for _, side := range []struct{ who, out string }{{"client", out.client}, {"server", out.server}} {
				checkCommon(t, side.who, side.out, tc.title, test.verb, tc.qps)
				for _, line := range []string{" rdma_cm QPs\t : ON\n", " Data ex. method : rdma_cm\n"} {
					if !strings.Contains(side.out, line) {
						t.Errorf("%s: no %q in:\n%s", side.who, line, side.out)
					}
				}
			}
			if !strings.Contains(out.server, " Waiting for client rdma_cm QP to connect\n") {
				t.Errorf("server: no rdma_cm waiting line")
			}
			if test.kind == perftest.Lat {
				checkLat(t, "client", out.client, []uint64{tc.size}, tc.iters)
				if test.verb == perftest.Write || test.verb == perftest.Send {
					checkLat(t, "server", out.server, []uint64{tc.size}, tc.iters)
				}
				return
			}
			cli := ptBWRows(t, out.client, false)
			checkBW(t, "client", cli, []uint64{tc.size}, tc.iters, false, false)
			srv := ptBWRows(t, out.server, false)
			if test.verb != perftest.Send && !tc.duplex {
				if fmt.Sprint(srv) != fmt.Sprint(cli) {
					t.Errorf("server row %v, client row %v", srv, cli)
				}
				return
			}
			checkBW(t, "server", srv, []uint64{tc.size}, tc.iters, !tc.duplex, false)
		})
	}
}

// TestPerftestRDMACMRefusals checks -R's refusal of UC, as perftest's.
func TestPerftestRDMACMRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-R", "-c", "UC"}, "UC is not supported in librdmacm"},
	} {
		var usage strings.Builder
		_, err := parsePTArgs(ptTestByName(t, "ib_send_bw"), tc.args, &usage)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
}
