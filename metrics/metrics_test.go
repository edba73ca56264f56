package metrics

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/softrdma/softrdma/provider/soft"
)

type fakeDev struct{}

func (fakeDev) Name() string { return "softrdma_test" }
func (fakeDev) Counters() []soft.Counter {
	return []soft.Counter{{Name: "sent_pkts", Value: 7}, {Name: "retransmits", Value: 2}, {Name: "cc_limited_qps", Value: 1}}
}

func (fakeDev) QPRates() []soft.QPRate {
	return []soft.QPRate{{QPN: 0x1234, Limited: true, Rate: 2_500_000_000}, {QPN: 0x11, Rate: 100_000_000_000}}
}

// TestCollectorCC: the congestion level is a gauge, and each QP's rate
// is reported.
func TestCollectorCC(t *testing.T) {
	c := NewCollector(fakeDev{})
	want := `
# HELP softrdma_cc_limited_qps softrdma device counter cc_limited_qps.
# TYPE softrdma_cc_limited_qps gauge
softrdma_cc_limited_qps{device="softrdma_test"} 1
# HELP softrdma_qp_rate_bits_per_second A QP's congestion control rate (DCQCN's current rate; the line rate while not limited).
# TYPE softrdma_qp_rate_bits_per_second gauge
softrdma_qp_rate_bits_per_second{device="softrdma_test",qpn="0x000011"} 1e+11
softrdma_qp_rate_bits_per_second{device="softrdma_test",qpn="0x001234"} 2.5e+09
# HELP softrdma_qp_rate_limited 1 while CNPs keep a QP's rate below the line rate.
# TYPE softrdma_qp_rate_limited gauge
softrdma_qp_rate_limited{device="softrdma_test",qpn="0x000011"} 0
softrdma_qp_rate_limited{device="softrdma_test",qpn="0x001234"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "softrdma_cc_limited_qps", "softrdma_qp_rate_bits_per_second", "softrdma_qp_rate_limited"); err != nil {
		t.Fatal(err)
	}
}

func TestCollector(t *testing.T) {
	c := NewCollector(fakeDev{})
	want := `
# HELP softrdma_sent_pkts_total softrdma device counter sent_pkts.
# TYPE softrdma_sent_pkts_total counter
softrdma_sent_pkts_total{device="softrdma_test"} 7
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "softrdma_sent_pkts_total"); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, stop, err := Serve(ctx, "127.0.0.1:0", fakeDev{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `softrdma_retransmits_total{device="softrdma_test"} 2`) {
		t.Fatalf("scrape lacks the counter:\n%s", b)
	}
}
