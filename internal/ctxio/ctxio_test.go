package ctxio

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// A Read blocked on a peer that never writes ends when the context does,
// and the error says it was the context.
func TestCancelBlockedRead(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	err := Do(ctx, a, func() error {
		_, err := a.Read(make([]byte, 1))
		return err
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("err = %v, want context.Canceled wrapping the deadline error", err)
	}
}

// f's own result comes back untouched when the context stays live, and a
// context already done does not run f at all.
func TestLiveAndDone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	want := errors.New("f failed")
	if err := Do(context.Background(), a, func() error { return want }); err != want {
		t.Fatalf("background: err = %v, want %v", err, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := Do(ctx, a, func() error { return nil }); err != nil {
		t.Fatalf("live: err = %v", err)
	}
	cancel()
	ran := false
	if err := Do(ctx, a, func() error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("done: err = %v, ran = %v", err, ran)
	}
}
