package rdmanet

import (
	"bytes"
	"errors"
	"io"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TryRead, TryWrite and Ready never wait; SetNotify's function runs when
// data arrives, so an event loop can sleep until then.
func TestNonblocking(t *testing.T) {
	devices(t) // their goroutines live on
	checkGoroutines(t)
	c, s := pair(t, &Config{RecvBuffer: 8 << 10, SendBuffer: 8 << 10})
	defer c.Close()
	defer s.Close()

	buf := make([]byte, 64<<10)
	if n, err := s.TryRead(buf); n != 0 || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("TryRead with nothing sent: %d, %v; want 0 and EAGAIN", n, err)
	}
	if r := s.Ready(false); r.Read || r.EOF || r.Err || !r.Write {
		t.Fatalf("Ready on an idle connection: %+v; want only Write", r)
	}

	var notified atomic.Int32
	s.SetNotify(func() { notified.Add(1) })
	s.Ready(true)
	msg := []byte("hello, rsocket")
	if n, err := c.TryWrite(msg); n != len(msg) || err != nil {
		t.Fatalf("TryWrite: %d, %v", n, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for notified.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if notified.Load() == 0 {
		t.Fatal("SetNotify's function did not run when data arrived")
	}
	if r := s.Ready(false); !r.Read {
		t.Fatalf("Ready after a write: %+v; want Read", r)
	}
	n, err := s.TryRead(buf)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("TryRead: %q, %v; want %q", buf[:n], err, msg)
	}
	s.SetNotify(nil)

	// A TryWrite larger than the peer's ring takes what fits, then
	// EAGAIN until the peer reads.
	total := 0
	for {
		n, err := c.TryWrite(buf)
		total += n
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatalf("TryWrite: %v", err)
		}
		if total > 1<<20 {
			t.Fatal("TryWrite never stopped for the peer's credits")
		}
	}
	if total == 0 || total >= len(buf) {
		t.Fatalf("TryWrite wrote %d bytes before EAGAIN; want part of %d", total, len(buf))
	}
	if r := c.Ready(false); r.Write {
		t.Fatalf("Ready with no credits: %+v; want no Write", r)
	}
	got := 0
	for got < total {
		n, err := s.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	// The credits come back with the peer's next RS_OP_SGL.
	deadline = time.Now().Add(10 * time.Second)
	for !c.Ready(false).Write && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n, err := c.TryWrite(msg); n != len(msg) || err != nil {
		t.Fatalf("TryWrite after the peer read: %d, %v", n, err)
	}
	if _, err := io.ReadFull(s, buf[:len(msg)]); err != nil {
		t.Fatal(err)
	}

	// EOF: Ready says so, TryRead returns it.
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for !s.Ready(false).EOF && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if r := s.Ready(false); !r.EOF || !r.Read {
		t.Fatalf("Ready after the peer's CloseWrite: %+v; want Read and EOF", r)
	}
	if n, err := s.TryRead(buf); n != 0 || err != io.EOF {
		t.Fatalf("TryRead after the peer's CloseWrite: %d, %v; want io.EOF", n, err)
	}
	if n, err := c.TryWrite(msg); n != 0 || !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("TryWrite after CloseWrite: %d, %v; want EPIPE", n, err)
	}
}

// A loop that retries TryRead allocates nothing.
func TestNonblockingZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	devices(t)
	c, s := pair(t, nil)
	defer c.Close()
	defer s.Close()
	buf := make([]byte, 64)
	if n := testing.AllocsPerRun(1000, func() { s.TryRead(buf) }); n != 0 {
		t.Errorf("a TryRead that finds nothing allocates %v times", n)
	}
	roundTrip := func() {
		for {
			if _, err := c.TryWrite(buf); err == nil {
				break
			}
		}
		for {
			if _, err := s.TryRead(buf); err == nil {
				break
			}
		}
	}
	for i := 0; i < 1000; i++ {
		roundTrip()
	}
	if n := testing.AllocsPerRun(1000, roundTrip); n != 0 {
		t.Errorf("a 64-byte TryWrite and TryRead allocate %v times", n)
	}
}
