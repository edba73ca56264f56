package spin

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Idle is called on every empty poll of the hot loops: it must not
// allocate.
func TestIdleAllocs(t *testing.T) {
	// One run is goschedEvery calls, so that every run looks at the run
	// queue (AllocsPerRun rounds down an average below one).
	n := 0
	run := func() {
		for range goschedEvery {
			n++
			Idle(n)
		}
	}
	if a := testing.AllocsPerRun(200, run); a != 0 {
		t.Fatalf("Idle allocates %.1f times per %d calls", a, goschedEvery)
	}
	if a := testing.AllocsPerRun(200, func() { Crowded() }); a != 0 {
		t.Fatalf("Crowded allocates %.1f times per call", a)
	}
}

// Crowded sees goroutines that wait for a P: with one P and a second
// goroutine made runnable, it must report true until the goroutine ran,
// and false once nothing waits.
func TestCrowded(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var ran atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); ran.Store(true) }()
	if !ran.Load() && !Crowded() {
		t.Fatal("a runnable goroutine waits for the only P, and Crowded says no")
	}
	wg.Wait()
	// The runtime's own goroutines (GC workers, the race detector's) may
	// be runnable for a moment; with nothing of ours waiting, Crowded must
	// come back to no.
	for i := 0; Crowded(); i++ {
		if i == 1000 {
			t.Fatalf("nothing of ours waits for a P (%d goroutines), and Crowded keeps saying yes", runtime.NumGoroutine())
		}
		time.Sleep(100 * time.Microsecond)
	}
}
