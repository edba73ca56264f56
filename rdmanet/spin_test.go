package rdmanet

import (
	"testing"
	"time"

	"github.com/softrdma/softrdma/verbs"
)

type hinted struct {
	verbs.Context
	hint time.Duration
}

func (h hinted) SpinHint() time.Duration { return h.hint }

func TestSpinTimeFor(t *testing.T) {
	for _, c := range []struct {
		name string
		ctx  verbs.Context
		cfg  time.Duration // Config.SpinTime
		want time.Duration
	}{
		{"no hint", nil, 0, defaultSpinTime},
		{"device hint", hinted{hint: 25 * time.Microsecond}, 0, 25 * time.Microsecond},
		{"zero hint", hinted{}, 0, defaultSpinTime},
		{"config wins", hinted{hint: 25 * time.Microsecond}, 7 * time.Microsecond, 7 * time.Microsecond},
		{"negative: one look", hinted{hint: 25 * time.Microsecond}, -1, 0},
	} {
		if got := spinTimeFor(c.ctx, c.cfg); got != c.want {
			t.Errorf("%s: spinTimeFor(Config.SpinTime %v) = %v, want %v", c.name, c.cfg, got, c.want)
		}
	}
}

// A connection over the shared-memory provider takes the device's hint;
// Config.SpinTime overrides it.
func TestSpinTimeOnShm(t *testing.T) {
	a, b := shmDevices(t)
	c, s := connectPair(t, a, b, Config{})
	defer c.Close()
	defer s.Close()
	if want := a.SpinHint(); c.spinTime != want || want <= 0 || want >= defaultSpinTime {
		t.Errorf("spin time over shm = %v; the device suggests %v (the default is %v)", c.spinTime, want, defaultSpinTime)
	}
	c2, s2 := connectPair(t, a, b, Config{SpinTime: 3 * time.Microsecond})
	defer c2.Close()
	defer s2.Close()
	if c2.spinTime != 3*time.Microsecond {
		t.Errorf("spin time with Config.SpinTime 3µs = %v", c2.spinTime)
	}
}
