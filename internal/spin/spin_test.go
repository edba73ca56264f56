package spin

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Idle is called on every empty poll of the hot loops: it must not
// allocate.
func TestIdleAllocs(t *testing.T) {
	n := 0
	if a := testing.AllocsPerRun(1000, func() { n++; Idle(n) }); a != 0 {
		t.Fatalf("Idle allocates %.1f times per call", a)
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
	if Crowded() && runtime.NumGoroutine() <= 2 {
		t.Fatal("nothing waits for a P, and Crowded says yes")
	}
}
