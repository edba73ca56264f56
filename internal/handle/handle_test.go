package handle

import (
	"sync"
	"testing"
)

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s did not panic", what)
		}
	}()
	f()
}

func TestNewValueDelete(t *testing.T) {
	a, b := New("a"), New(42)
	if a == b || a == 0 || b == 0 {
		t.Fatalf("handles %#x and %#x", a, b)
	}
	if a.Value() != "a" || b.Value() != 42 {
		t.Fatalf("values %v, %v", a.Value(), b.Value())
	}
	a.Delete()
	mustPanic(t, "Value of a deleted handle", func() { a.Value() })
	mustPanic(t, "a second Delete", func() { a.Delete() })
	mustPanic(t, "Value of handle 0", func() { Handle(0).Value() })
	mustPanic(t, "Value of a handle never made", func() { Handle(slotMask).Value() })

	// The slot is reused with a new generation: the stale handle stays
	// invalid and does not reach the new value.
	c := New("c")
	if c&slotMask != a&slotMask {
		t.Fatalf("slot of %#x not reused for %#x", a, c)
	}
	mustPanic(t, "Value of a stale handle whose slot was reused", func() { a.Value() })
	if c.Value() != "c" || b.Value() != 42 {
		t.Fatal("values changed")
	}
	b.Delete()
	c.Delete()
}

// TestManyAndConcurrent: handles across many chunks stay valid while
// other goroutines make and delete handles (run with -race).
func TestManyAndConcurrent(t *testing.T) {
	const n = 5000
	hs := make([]Handle, n)
	for i := range hs {
		hs[i] = New(i)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				h := New(g*10000 + i)
				if h.Value() != g*10000+i {
					t.Errorf("value of %#x", h)
				}
				h.Delete()
			}
		}()
	}
	for range 3 {
		for i, h := range hs {
			if h.Value() != i {
				t.Fatalf("handle %d: value %v", i, h.Value())
			}
		}
	}
	wg.Wait()
	for _, h := range hs {
		h.Delete()
	}
}

var sink any

func BenchmarkValue(b *testing.B) {
	h := New(b)
	defer h.Delete()
	for b.Loop() {
		sink = h.Value()
	}
}
