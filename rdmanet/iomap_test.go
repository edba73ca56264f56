package rdmanet

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// riostream's pattern: each side maps a buffer, the other IOWrites into
// it and the receiver watches the last byte.
func TestIOMapWrite(t *testing.T) {
	devices(t)
	checkGoroutines(t)
	cfg := &Config{IOMapSize: 1}
	c, s := pair(t, cfg)
	defer c.Close()
	defer s.Close()
	const size = 10000
	ms, err := s.IOMap(size, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The stream after the iomap: once the client read it, the iomap
	// is known (RC keeps the order).
	s.Write([]byte("sync"))
	io.ReadFull(c, make([]byte, 4))
	want := bytes.Repeat([]byte("0123456789"), size/10)
	want[size-1] = 0xAA
	if n, err := c.IOWrite(want, 0); err != nil || n != size {
		t.Fatalf("IOWrite: %d, %v", n, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for ms.Bytes()[size-1] != 0xAA {
		if time.Now().After(deadline) {
			t.Fatal("the direct write never landed")
		}
		ms.Progress()
		time.Sleep(time.Microsecond)
	}
	if !bytes.Equal(ms.Bytes(), want) {
		t.Fatal("mapped buffer differs from what was written")
	}
	if _, err := c.IOWrite([]byte("x"), size); err == nil {
		t.Error("IOWrite past the peer's mapping succeeded")
	}
	if _, err := c.IOMap(100, 0); err != nil {
		t.Fatalf("client IOMap: %v", err)
	}
	if _, err := c.IOMap(100, 0); err == nil {
		t.Error("a second IOMap with IOMapSize 1 succeeded")
	}
	ms.Unmap()
}

// IOMapBuffer maps the caller's memory (riomap of a C program's buffer):
// the peer's IOWrite lands in that very slice, and after Unmap the entry
// is free for the next mapping, as riostream maps once per test.
func TestIOMapBufferWrite(t *testing.T) {
	devices(t)
	checkGoroutines(t)
	c, s := pair(t, &Config{IOMapSize: 1})
	defer c.Close()
	defer s.Close()
	if _, err := s.IOMapBuffer(nil, 0); err == nil {
		t.Error("IOMapBuffer of no memory succeeded")
	}
	for round, size := range []int{64, 4096} {
		buf := make([]byte, size)
		m, err := s.IOMapBuffer(buf, 0)
		if err != nil {
			t.Fatalf("round %d: IOMapBuffer: %v", round, err)
		}
		s.Write([]byte("sync"))
		io.ReadFull(c, make([]byte, 4))
		want := bytes.Repeat([]byte{byte(round + 1)}, size)
		if n, err := c.IOWrite(want, 0); err != nil || n != size {
			t.Fatalf("round %d: IOWrite: %d, %v", round, n, err)
		}
		// The stream after the IOWrite: once the server read it, the
		// direct write has landed (RC keeps the order), and reading buf
		// is ordered after the device's write to it. (Polling buf, as
		// riostream polls C memory, is a data race on a Go slice.)
		c.Write([]byte("done"))
		if _, err := io.ReadFull(s, make([]byte, 4)); err != nil {
			t.Fatalf("round %d: reading the stream after the IOWrite: %v", round, err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatalf("round %d: the caller's buffer differs from what was written", round)
		}
		if err := m.Unmap(); err != nil {
			t.Fatalf("round %d: Unmap: %v", round, err)
		}
	}
}
