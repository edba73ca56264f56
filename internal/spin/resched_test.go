package spin

import (
	"testing"
	"time"
)

// fakeResched gives Resched a clock the test moves and counts its yields.
func fakeResched(t *testing.T) (clock *time.Duration, yields *int) {
	clock, yields = new(time.Duration), new(int)
	oldSince, oldGosched := since, gosched
	since = func() time.Duration { return *clock }
	gosched = func() { *yields++ }
	t.Cleanup(func() { since, gosched = oldSince, oldGosched })
	return clock, yields
}

// A loop that keeps stepping yields once per ReschedEvery of its clock,
// never more often, however many steps it takes.
func TestReschedEvery(t *testing.T) {
	clock, yields := fakeResched(t)
	*clock = time.Second // Resched's clock starts wherever it is
	var r Resched
	step := func(n int) {
		for range n {
			r.Step()
		}
	}
	step(100 * reschedLook)
	if *yields != 0 {
		t.Fatalf("%d yields with the clock standing still", *yields)
	}
	*clock += ReschedEvery - time.Microsecond
	step(100 * reschedLook)
	if *yields != 0 {
		t.Fatalf("%d yields after less than ReschedEvery", *yields)
	}
	*clock += time.Microsecond
	step(reschedLook)
	if *yields != 1 {
		t.Fatalf("%d yields after ReschedEvery; want 1", *yields)
	}
	step(100 * reschedLook)
	if *yields != 1 {
		t.Fatalf("%d yields, more than one in the same ReschedEvery", *yields)
	}
	// 20 periods of stepping, a few hundred steps each: one yield each.
	for range 20 {
		*clock += ReschedEvery
		step(3 * reschedLook)
	}
	if *yields != 21 {
		t.Fatalf("%d yields over 21 periods; want 21", *yields)
	}
}

// Resched looks at the clock once every reschedLook steps, not on every
// step: a busy loop's pass must stay cheap.
func TestReschedLooksSeldom(t *testing.T) {
	looks := 0
	oldSince := since
	since = func() time.Duration { looks++; return time.Duration(looks) * time.Second }
	t.Cleanup(func() { since = oldSince })
	oldGosched := gosched
	gosched = func() {}
	t.Cleanup(func() { gosched = oldGosched })
	var r Resched
	for range 10 * reschedLook {
		r.Step()
	}
	// 10 looks, plus one more after each of the 9 yields.
	if looks != 19 {
		t.Fatalf("%d clock reads in %d steps; want 19", looks, 10*reschedLook)
	}
}

// Step is called on every pass of the hot loops: it must not allocate.
func TestReschedAllocs(t *testing.T) {
	var r Resched
	if a := testing.AllocsPerRun(100, func() {
		for range reschedLook {
			r.Step()
		}
	}); a != 0 {
		t.Fatalf("Step allocates %.1f times per %d calls", a, reschedLook)
	}
}
