package bench

import (
	"bytes"
	"encoding/csv"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/bench"
)

// -csv writes one row per test with the numbers the tables print, and
// plotBench (shared plotting code) a PNG.
func TestBenchCSVAndPlot(t *testing.T) {
	rep := benchReport{
		BW:  []bench.BWResult{{Config: bench.Config{Op: bench.Write, Size: 4096, Iters: 1000}, AvgMBps: 1458.76, PeakMBps: 2000, MsgRate: 0.373443, CPUTime: 5 * time.Millisecond}},
		Lat: []bench.LatResult{{Config: bench.Config{Op: bench.Read, Size: 64, Iters: 200}, Typical: 16050 * time.Nanosecond, P99: 71920 * time.Nanosecond}},
	}
	dir := t.TempDir()
	if err := writeBenchCSV(dir+"/b.csv", rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dir + "/b.csv")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(recs) != 3 {
		t.Fatalf("CSV %q: %v", b, err)
	}
	if got := strings.Join(recs[1][:8], ","); got != "bw,rdma_write,4096,1000,2000.00,1458.76,0.373443,1.221" {
		t.Fatalf("bandwidth row %q", got)
	}
	if got := recs[2]; got[0] != "lat" || got[1] != "rdma_read" || got[9] != "16.05" || got[12] != "71.92" {
		t.Fatalf("latency row %q", got)
	}
	if err := plotBench(dir+"/b.png", rep); err != nil {
		t.Fatal(err)
	}
	if p, err := os.ReadFile(dir + "/b.png"); err != nil || !bytes.HasPrefix(p, []byte("\x89PNG")) {
		t.Fatalf("plot: %v", err)
	}
}
