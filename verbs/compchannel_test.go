package verbs

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A channel made with NewCompChannelFunc hands every event to its
// function, none to GetEvent; one made with NewCompChannel queues them up
// to its depth and drops the rest.
func TestCompChannel(t *testing.T) {
	var got []CQ
	f := NewCompChannelFunc(func(cq CQ) { got = append(got, cq) })
	f.Notify(nil)
	f.Notify(nil)
	if len(got) != 2 {
		t.Fatalf("the function got %d events, want 2", len(got))
	}
	if f.C() != nil {
		t.Fatal("C() of a function channel is not nil")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := f.GetEvent(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetEvent on a function channel: %v, want the context's error", err)
	}

	q := NewCompChannel(2)
	for range 3 {
		q.Notify(nil)
	}
	for i := range 2 {
		if _, err := q.GetEvent(context.Background()); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	select {
	case <-q.C():
		t.Fatal("a third event beyond the depth was queued")
	default:
	}
}

func TestCompChannelFuncNil(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewCompChannelFunc(nil) did not panic")
		}
	}()
	NewCompChannelFunc(nil)
}
