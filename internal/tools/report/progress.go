package report

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"
)

// ProgressBar draws one status line on a terminal while a long benchmark
// runs: what is being measured, how many of the runs are done, and the
// current run's progress. It writes nothing unless enabled, so reports
// piped to files and CI logs stay byte-for-byte what they were; the line is
// erased before anything else is printed (Pause) and at the end (Stop).
type ProgressBar struct {
	w       io.Writer
	enabled bool
	every   time.Duration

	mu    sync.Mutex
	label string
	run   int // runs started
	runs  int // runs in all
	// frac returns the current run's progress in [0, 1], or a negative
	// value if it is unknown.
	frac  func() float64
	shown bool

	stopc chan struct{}
	done  chan struct{}
}

// NewProgressBar returns a bar drawing on w if w is a terminal and off
// (SOFTRDMA_NO_PROGRESS) is false.
func NewProgressBar(w io.Writer, off bool) *ProgressBar {
	return NewProgressBarTo(w, !off && isTerminal(w), 200*time.Millisecond)
}

// isTerminal reports whether w is a terminal (golang.org/x/term).
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// NewProgressBarTo is NewProgressBar with the writer, the decision and the
// redraw interval given (tests).
func NewProgressBarTo(w io.Writer, enabled bool, every time.Duration) *ProgressBar {
	b := &ProgressBar{w: w, enabled: enabled, every: every, stopc: make(chan struct{}), done: make(chan struct{})}
	if !enabled {
		close(b.done)
		return b
	}
	go b.loop()
	return b
}

// Start announces run number run+1 of runs, labelled label; frac (may be
// nil) tells its progress.
func (b *ProgressBar) Start(label string, run, runs int, frac func() float64) {
	if b == nil || !b.enabled {
		return
	}
	b.mu.Lock()
	b.label, b.run, b.runs, b.frac = label, run, runs, frac
	b.mu.Unlock()
}

// The methods do nothing on a nil or disabled bar.

// Pause erases the line so that the caller can print; the next redraw
// brings it back.
func (b *ProgressBar) Pause() {
	if b == nil || !b.enabled {
		return
	}
	b.mu.Lock()
	b.eraseLocked()
	b.mu.Unlock()
}

// Stop erases the line and ends the redraws.
func (b *ProgressBar) Stop() {
	if b == nil || !b.enabled {
		return
	}
	select {
	case <-b.stopc:
	default:
		close(b.stopc)
	}
	<-b.done
	b.mu.Lock()
	b.eraseLocked()
	b.mu.Unlock()
}

func (b *ProgressBar) loop() {
	defer close(b.done)
	t := time.NewTicker(b.every)
	defer t.Stop()
	for {
		select {
		case <-b.stopc:
			return
		case <-t.C:
			b.mu.Lock()
			b.drawLocked()
			b.mu.Unlock()
		}
	}
}

func (b *ProgressBar) eraseLocked() {
	if b.shown {
		io.WriteString(b.w, "\r\033[K")
		b.shown = false
	}
}

// render returns the status line.
func (b *ProgressBar) render() string {
	const width = 30
	f := -1.0
	if b.frac != nil {
		f = b.frac()
	}
	var bar string
	if f >= 0 {
		f = min(f, 1)
		n := int(f * width)
		bar = "[" + strings.Repeat("=", n) + strings.Repeat(" ", width-n) + fmt.Sprintf("] %3.0f%%", f*100)
	} else {
		bar = "[" + strings.Repeat(".", width) + "]"
	}
	return fmt.Sprintf("%s %s (%d/%d)", bar, b.label, b.run+1, b.runs)
}

func (b *ProgressBar) drawLocked() {
	if b.label == "" {
		return
	}
	io.WriteString(b.w, "\r\033[K"+b.render())
	b.shown = true
}
