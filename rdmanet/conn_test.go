package rdmanet

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func TestEcho(t *testing.T) {
	devices(t)
	checkGoroutines(t)
	c, s := pair(t, nil)
	go func() {
		io.Copy(s, s)
		s.CloseWrite()
	}()
	want := make([]byte, 1<<20+123)
	rand.Read(want)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echo: got %d bytes, want %d (equal prefix %v)", len(got), len(want), bytes.Equal(got[:min(len(got), 100)], want[:min(len(got), 100)]))
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

func TestDeadline(t *testing.T) {
	devices(t)
	checkGoroutines(t)
	c, s := pair(t, nil)
	defer s.Close()
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	_, err := c.Read(make([]byte, 10))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past the deadline: %v, want a timeout wrapping os.ErrDeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("deadline of 50ms took %v", d)
	}
	c.SetReadDeadline(time.Time{})
	s.Write([]byte("hi"))
	b := make([]byte, 10)
	n, err := c.Read(b)
	if err != nil || string(b[:n]) != "hi" {
		t.Fatalf("after clearing the deadline: %q, %v", b[:n], err)
	}
	// A write deadline while the peer reads nothing: the ring fills.
	s.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	_, err = s.Write(make([]byte, 8<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write into a full ring: %v, want a deadline error", err)
	}
}

func TestCloseWakesRead(t *testing.T) {
	devices(t)
	checkGoroutines(t)
	c, s := pair(t, nil)
	defer s.Close()
	errc := make(chan error, 2)
	go func() {
		_, err := c.Read(make([]byte, 10))
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	go c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Close did not wake the blocked Read")
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("Read took %v to return after Close", d)
	}
	// The peer sees EOF (RS_CTRL_DISCONNECT).
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(make([]byte, 10)); err != io.EOF {
		t.Errorf("peer's Read after Close: %v, want EOF", err)
	}
	if _, err := s.Write([]byte("x")); err == nil {
		t.Error("peer's Write after Close succeeded")
	}
}

// Config.BusyPoll: Reads that never sleep still see data, deadlines and
// Close.
func TestBusyPoll(t *testing.T) {
	devices(t)
	checkGoroutines(t)
	c, s := pair(t, &Config{BusyPoll: true})
	defer s.Close()
	go io.Copy(s, s)
	msg := []byte("busy")
	for range 100 {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, len(msg))
		if _, err := io.ReadFull(c, b); err != nil || !bytes.Equal(b, msg) {
			t.Fatalf("echo: %q, %v", b, err)
		}
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("busy Read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	c.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	go c.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("busy Read after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the busy Read")
	}
}
