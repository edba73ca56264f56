package bench

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchShm runs softrdma bench -provider shm: both ends in this
// process on two shared-memory devices.
func TestBenchShm(t *testing.T) {
	f := filepath.Join(t.TempDir(), "bench.json")
	err := Run(context.Background(), []string{"bench", "-provider", "shm", "-ops", "write,read,send", "-sizes", "8,65536", "-n", "200", "-lat-n", "200", "-plot", "", "-json", f}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Provider != "shm" || !strings.HasPrefix(rep.AddrA, "fd73:686d:") || len(rep.BW) != 6 || len(rep.Lat) != 6 {
		t.Fatalf("report: provider %q, devices %s and %s, %d bandwidth and %d latency rows; want shm, two shm GIDs, 6 and 6",
			rep.Provider, rep.AddrA, rep.AddrB, len(rep.BW), len(rep.Lat))
	}
	for _, r := range rep.BW {
		if r.AvgMBps <= 0 {
			t.Errorf("%v %d B: no bandwidth", r.Op, r.Size)
		}
	}
	if err := Run(context.Background(), []string{"bench", "-provider", "shm", "-secure", "auth"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "-secure") {
		t.Errorf("-provider shm -secure auth: %v, want an error naming -secure", err)
	}
}
