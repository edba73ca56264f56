package harness

import (
	"testing"
	"time"
)

func TestLatMetrics(t *testing.T) {
	var s []time.Duration
	for i := 1000; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	m := LatMetrics(s)
	if m["lat_min_us"] != 1 || m["lat_p50_us"] != 501 || m["lat_p99_us"] != 990 || m["lat_max_us"] != 1000 {
		t.Fatal(m)
	}
}
