//go:build linux

package main

import (
	"context"
	"runtime"
	"testing"
)

func TestCacheLineMetrics(t *testing.T) {
	m := cacheLineMetrics([]float64{400, 100, 300, 200, 1000})
	for k, want := range map[string]float64{"lat_p50_us": 0.3, "lat_min_us": 0.1, "lat_p99_us": 1, "lat_avg_us": 0.4} {
		if got := m[k]; got < want-1e-9 || got > want+1e-9 {
			t.Errorf("%s = %g, want %g", k, got, want)
		}
	}
}

// TestCacheLineProbe runs the probe briefly: it must finish, keep the
// warm-up out and give ordered, positive figures.
func TestCacheLineProbe(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU")
	}
	m, info, err := cacheLineProbe(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if !(m["lat_min_us"] > 0 && m["lat_min_us"] <= m["lat_p50_us"] && m["lat_p50_us"] <= m["lat_p99_us"]) {
		t.Errorf("figures out of order: %v", m)
	}
	t.Log(info.Raw)
}
