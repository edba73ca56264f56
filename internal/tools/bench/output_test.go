package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/bench"
)

// syncBuffer is a bytes.Buffer safe for the bar's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestProgressBar(t *testing.T) {
	var on syncBuffer
	b := newProgressBarTo(&on, true, time.Millisecond)
	b.start("ib_write_bw 65536 B", 2, 23, func() float64 { return 0.5 })
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(on.String(), "50%") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	b.stop()
	out := on.String()
	if !strings.Contains(out, "[===============               ]  50% ib_write_bw 65536 B (3/23)") {
		t.Fatalf("bar output %q", out)
	}
	if !strings.HasSuffix(out, "\r\033[K") {
		t.Fatalf("the bar is not erased at the end: %q", out)
	}

	// Disabled (not a terminal): nothing at all, and a nil bar is inert.
	var off syncBuffer
	b = newProgressBarTo(&off, false, time.Millisecond)
	b.start("x", 0, 1, nil)
	time.Sleep(5 * time.Millisecond)
	b.pause()
	b.stop()
	var nilBar *progressBar
	nilBar.start("x", 0, 1, nil)
	nilBar.pause()
	nilBar.stop()
	if off.String() != "" {
		t.Fatalf("disabled bar wrote %q", off.String())
	}
}

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
