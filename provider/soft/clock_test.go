package soft

import (
	"sort"
	"sync"
	"testing"
	"time"
)

// virtualClock is a Clock whose time moves only when a test moves it.
// Advance runs the timers that fall due on the caller's goroutine, in the
// order of their deadlines; Jump moves the time without running them, as
// when busy CPUs keep the runtime from running a due timer's goroutine.
type virtualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*virtualTimer // armed, in no order
}

func newVirtualClock() *virtualClock {
	return &virtualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtualClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &virtualTimer{c: c, f: f}
	t.Reset(d)
	return t
}

// Jump moves the time on by d and runs no timer.
func (c *virtualClock) Jump(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Advance moves the time on by d, running every timer due by then (and
// those their functions arm that fall due by then too) at its deadline.
func (c *virtualClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		sort.Slice(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			c.now = end
			c.mu.Unlock()
			return
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		t.armed = false
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
	}
}

// Armed returns how many timers are armed.
func (c *virtualClock) Armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type virtualTimer struct {
	c     *virtualClock
	f     func()
	at    time.Time
	armed bool // in c.timers; under c.mu
}

func (t *virtualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.stopLocked()
}

// stopLocked takes t off its clock. Precondition: t.c.mu held.
func (t *virtualTimer) stopLocked() bool {
	if !t.armed {
		return false
	}
	for i, u := range t.c.timers {
		if u == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			break
		}
	}
	t.armed = false
	return true
}

func (t *virtualTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.stopLocked()
	t.at = t.c.now.Add(d)
	t.armed = true
	t.c.timers = append(t.c.timers, t)
	return was
}

// TestVirtualClock: the test clock runs timers in deadline order at their
// deadlines, only when Advance passes them, and Stop and Reset work as
// time.Timer's.
func TestVirtualClock(t *testing.T) {
	c := newVirtualClock()
	start := c.Now()
	var got []time.Duration
	record := func() { got = append(got, c.Now().Sub(start)) }
	a := c.AfterFunc(3*time.Millisecond, record)
	c.AfterFunc(time.Millisecond, func() {
		record()
		c.AfterFunc(time.Millisecond, record) // due at 2 ms, inside the same Advance
	})
	stopped := c.AfterFunc(2*time.Millisecond, record)
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop of an armed timer must report true once")
	}
	c.Jump(0)
	c.Advance(5 * time.Millisecond)
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("timers ran at %v, want %v", got, want)
	}
	if a.Reset(time.Millisecond) {
		t.Fatal("Reset of a fired timer reported it active")
	}
	c.Jump(10 * time.Millisecond)
	if len(got) != 3 || c.Armed() != 1 {
		t.Fatalf("Jump ran a timer (%v) or lost one (%d armed)", got, c.Armed())
	}
	c.Advance(0)
	if len(got) != 4 || got[3] != 15*time.Millisecond {
		t.Fatalf("a timer overdue after Jump ran at %v, want at once (15ms)", got)
	}
}
