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
	return []soft.Counter{{Name: "sent_pkts", Value: 7}, {Name: "retransmits", Value: 2}}
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
