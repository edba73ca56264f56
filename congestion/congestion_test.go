package congestion

import "testing"

// The names are what the tools' --cc flag and the metrics print.
func TestAlgorithmString(t *testing.T) {
	for a, want := range map[Algorithm]string{DCQCN: "dcqcn", Off: "off", Delay: "delay", 9: "congestion.Algorithm(?)"} {
		if got := a.String(); got != want {
			t.Errorf("Algorithm(%d).String() = %q, want %q", a, got, want)
		}
	}
	if (Config{}).Algorithm != DCQCN {
		t.Error("the zero Config is not DCQCN")
	}
}
