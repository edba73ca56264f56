package soft

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/verbs"
)

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
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

// TestLoggerRateLimit: a flood of notes of one kind logs a burst, then
// about one a second, and the next line says how many were left out.
func TestLoggerRateLimit(t *testing.T) {
	var buf syncBuffer
	l := newLogger(slog.New(slog.NewTextHandler(&buf, nil)), "test")
	for range 1000 {
		l.note(roce.Note{Kind: roce.NoteRetransmit, QPN: 7, Reason: "timeout"})
	}
	if n := strings.Count(buf.String(), "retransmitting"); n != logBurst {
		t.Fatalf("%d lines for 1000 notes; want the burst of %d", n, logBurst)
	}
	// A second later one more goes, with the count of those left out.
	l.mu.Lock()
	l.kind[roce.NoteRetransmit].last = l.kind[roce.NoteRetransmit].last.Add(-time.Second)
	l.mu.Unlock()
	l.note(roce.Note{Kind: roce.NoteRetransmit, QPN: 7, Reason: "timeout"})
	if !strings.Contains(buf.String(), "suppressed=990") {
		t.Fatalf("no count of the suppressed notes:\n%s", buf.String())
	}
}

// TestLoggerEndToEnd: a device with a Logger logs a QP that fails, with
// its status, and the drops of the last second.
func TestLoggerEndToEnd(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	a, b, _ := pair(t, Config{Logger: log}, Config{Logger: log})
	must(t, a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, SendFlags: verbs.SendSignaled,
		SGList: []verbs.SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 1}))
	expectWC(t, a.waitWC(a.scq), 1, verbs.WCRemAccessErr, 0)
	deadline := time.Now().Add(5 * time.Second)
	for !(strings.Contains(buf.String(), "status=\"remote access error\"") && strings.Contains(buf.String(), "QP_ACCESS_ERR")) {
		if time.Now().After(deadline) {
			t.Fatalf("log lacks the QP error or the event:\n%s", buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
