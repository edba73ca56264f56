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
