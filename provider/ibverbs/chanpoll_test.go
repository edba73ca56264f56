//go:build ibverbs && cgo && linux

package ibverbs

import (
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests need no RDMA device: a pipe stands in for the completion
// channel, each byte written to it an event of the CQ whose handle is the
// byte's value.

// pipeSource reads events off the pipe the poller waits on.
type pipeSource struct {
	mu    sync.Mutex
	acks  map[uintptr]int // events acknowledged per handle
	calls int             // ack calls
	gets  int             // get calls that returned events
	reads int             // get calls
}

func (s *pipeSource) get(fd uintptr, handles []uintptr) (int, bool) {
	var buf [eventBatch]byte
	s.mu.Lock()
	s.reads++
	s.mu.Unlock()
	n, err := syscall.Read(int(fd), buf[:len(handles)])
	if err == syscall.EAGAIN {
		return 0, true
	}
	if err != nil || n == 0 {
		return -1, false
	}
	for i := 0; i < n; i++ {
		handles[i] = uintptr(buf[i])
	}
	s.mu.Lock()
	s.gets++
	s.mu.Unlock()
	// A pipe's read that returned less than asked for emptied it.
	return n, n < len(handles)
}

func (s *pipeSource) ack(h uintptr, n int) {
	s.mu.Lock()
	s.acks[h] += n
	s.calls++
	s.mu.Unlock()
}

func (s *pipeSource) acked(h uintptr) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acks[h]
}

// countSink counts its CQ's events.
type countSink struct {
	mu sync.Mutex
	n  int
	ch chan struct{}
}

func newCountSink() *countSink { return &countSink{ch: make(chan struct{}, 1024)} }

func (s *countSink) cqEvent() {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	s.ch <- struct{}{}
}

// waitFor waits until the sink has seen n events.
func (s *countSink) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		got := s.n
		s.mu.Unlock()
		if got >= n {
			if got > n {
				t.Fatalf("%d events; want %d", got, n)
			}
			return
		}
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("%d events after 10 s; want %d", got, n)
		}
	}
}

func newPipePoller(t *testing.T) (*chanPoller, *pipeSource, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	src := &pipeSource{acks: map[uintptr]int{}}
	p, err := startPoller(src, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); p.stop() })
	return p, src, w
}

func send(t *testing.T, w *os.File, handles ...byte) {
	t.Helper()
	if _, err := w.Write(handles); err != nil {
		t.Fatal(err)
	}
}

// One poller serves every CQ on the channel: each event reaches its own
// CQ's sink and no other.
func TestChanPollerDispatch(t *testing.T) {
	p, _, w := newPipePoller(t)
	a, b := newCountSink(), newCountSink()
	p.attach(1, a)
	p.attach(2, b)
	send(t, w, 1, 2, 2, 1, 2)
	a.waitFor(t, 2)
	b.waitFor(t, 3)
	send(t, w, 2)
	b.waitFor(t, 4)
	a.waitFor(t, 2)
}

// Events are acknowledged per CQ in batches of ackBatch, and detach
// acknowledges the rest: ibv_destroy_cq waits for every event it
// reported to be acknowledged.
func TestChanPollerAcksInBatches(t *testing.T) {
	p, src, w := newPipePoller(t)
	a := newCountSink()
	p.attach(7, a)
	const n = 3*ackBatch + 5
	for i := 0; i < n; i++ {
		send(t, w, 7)
	}
	a.waitFor(t, n)
	if got := src.acked(7); got != 3*ackBatch {
		t.Fatalf("%d of %d events acknowledged before detach; want %d (whole batches)", got, n, 3*ackBatch)
	}
	src.mu.Lock()
	calls := src.calls
	src.mu.Unlock()
	if calls != 3 {
		t.Fatalf("%d ack calls for %d events; want 3", calls, 3*ackBatch)
	}
	p.detach(7)
	if got := src.acked(7); got != n {
		t.Fatalf("%d of %d events acknowledged after detach; want all", got, n)
	}
}

// An event that arrives for a CQ no longer on the channel (detached,
// its ibv_destroy_cq waiting) is acknowledged at once and reaches no
// sink.
func TestChanPollerAcksUnknownCQ(t *testing.T) {
	p, src, w := newPipePoller(t)
	a := newCountSink()
	p.attach(3, a)
	p.detach(3)
	send(t, w, 3, 3)
	deadline := time.Now().Add(10 * time.Second)
	for src.acked(3) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 2 events of a detached CQ acknowledged", src.acked(3))
		}
		time.Sleep(time.Millisecond)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n != 0 {
		t.Fatalf("a detached CQ's sink heard %d events", a.n)
	}
}

// A burst of events is taken off the channel in batches of up to
// eventBatch, not one netpoller wake-up each.
func TestChanPollerBatchesReads(t *testing.T) {
	p, src, w := newPipePoller(t)
	a := newCountSink()
	p.attach(9, a)
	burst := make([]byte, 4*eventBatch)
	for i := range burst {
		burst[i] = 9
	}
	send(t, w, burst...)
	a.waitFor(t, len(burst))
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.gets > len(burst)/2 {
		t.Fatalf("%d gets for a burst of %d events; want batches", src.gets, len(burst))
	}
}

// stop ends the poller's goroutine; many pollers waiting cost
// goroutines parked in the netpoller, not OS threads.
func TestChanPollerStop(t *testing.T) {
	before := runtime.NumGoroutine()
	threads := func() int {
		n, _ := runtime.ThreadCreateProfile(nil)
		return n
	}
	threadsBefore := threads()
	var ps []*chanPoller
	var ws []*os.File
	for i := 0; i < 50; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p, err := startPoller(&pipeSource{acks: map[uintptr]int{}}, r)
		if err != nil {
			t.Fatal(err)
		}
		ps, ws = append(ps, p), append(ws, w)
	}
	time.Sleep(10 * time.Millisecond) // the pollers are parked in the netpoller
	if th := threads() - threadsBefore; th > 10 {
		t.Errorf("50 pollers waiting created %d OS threads; the waits should hold none", th)
	}
	for i, p := range ps {
		p.stop()
		ws[i].Close()
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after stop, %d before", runtime.NumGoroutine(), before)
		}
	}
}

// An event that comes alone costs one read: the read that finds the
// channel empty after it is the get that took it (a pipe's short read),
// not one more after the netpoller's wait (which read the channel a
// second time per event).
func TestChanPollerOneReadPerEvent(t *testing.T) {
	p, src, w := newPipePoller(t)
	s := newCountSink()
	p.attach(7, s)
	const events = 20
	for i := 1; i <= events; i++ {
		send(t, w, 7)
		s.waitFor(t, i)
	}
	src.mu.Lock()
	reads := src.reads
	src.mu.Unlock()
	// One read at the start (empty), one per event; a spurious wake-up
	// of the netpoller may add one now and then.
	if reads > events+3 {
		t.Fatalf("%d reads for %d events one at a time; want about %d", reads, events, events+1)
	}
}
