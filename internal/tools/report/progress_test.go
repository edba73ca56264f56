package report

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the bar's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestProgressBar(t *testing.T) {
	var on syncBuffer
	b := NewProgressBarTo(&on, true, time.Millisecond)
	b.Start("ib_write_bw 65536 B", 2, 23, func() float64 { return 0.5 })
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(on.String(), "50%") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	b.Stop()
	out := on.String()
	if !strings.Contains(out, "[===============               ]  50% ib_write_bw 65536 B (3/23)") {
		t.Fatalf("bar output %q", out)
	}
	if !strings.HasSuffix(out, "\r\033[K") {
		t.Fatalf("the bar is not erased at the end: %q", out)
	}

	// Disabled (not a terminal): nothing at all, and a nil bar is inert.
	var off syncBuffer
	b = NewProgressBarTo(&off, false, time.Millisecond)
	b.Start("x", 0, 1, nil)
	time.Sleep(5 * time.Millisecond)
	b.Pause()
	b.Stop()
	var nilBar *ProgressBar
	nilBar.Start("x", 0, 1, nil)
	nilBar.Pause()
	nilBar.Stop()
	if off.String() != "" {
		t.Fatalf("disabled bar wrote %q", off.String())
	}
}
