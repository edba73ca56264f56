package soft

// Structured logging (Config.Logger): what the engine notes (QP errors,
// go-back-N retransmissions, RNR waits, asynchronous events) and, once a
// second, what it dropped and why — at a rate a flood cannot raise: each
// kind of note has a burst of logBurst and then logPerSecond a second,
// and a line says how many were left out before it.

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/verbs"
)

const (
	logBurst     = 10
	logPerSecond = 1
	logDropEvery = time.Second
)

// logger rate-limits and writes a device's notes.
type logger struct {
	log  *slog.Logger
	dev  string
	mu   sync.Mutex
	kind map[roce.NoteKind]*bucket
	stop chan struct{}
	done chan struct{}
}

type bucket struct {
	tokens     float64
	last       time.Time
	suppressed int
}

func newLogger(l *slog.Logger, dev string) *logger {
	return &logger{log: l.With("device", dev), dev: dev, kind: map[roce.NoteKind]*bucket{}, stop: make(chan struct{}), done: make(chan struct{})}
}

// allow takes a token for kind; it returns how many notes of the kind were
// suppressed since the last one allowed, and whether this one may go.
func (l *logger) allow(kind roce.NoteKind, now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.kind[kind]
	if b == nil {
		b = &bucket{tokens: logBurst, last: now}
		l.kind[kind] = b
	}
	b.tokens = min(logBurst, b.tokens+now.Sub(b.last).Seconds()*logPerSecond)
	b.last = now
	if b.tokens < 1 {
		b.suppressed++
		return 0, false
	}
	b.tokens--
	s := b.suppressed
	b.suppressed = 0
	return s, true
}

// note is the engine's Config.Notify.
func (l *logger) note(n roce.Note) {
	suppressed, ok := l.allow(n.Kind, time.Now())
	if !ok {
		return
	}
	attrs := []any{"qpn", n.QPN}
	if n.Peer.IsValid() {
		attrs = append(attrs, "peer", n.Peer)
	}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	ctx := context.Background()
	switch n.Kind {
	case roce.NoteQPError:
		l.log.WarnContext(ctx, "QP moved to the error state", append(attrs, "status", n.Status.String())...)
	case roce.NoteRetransmit:
		l.log.InfoContext(ctx, "retransmitting (go-back-N)", append(attrs, "from_psn", uint32(n.PSN), "cause", n.Reason)...)
	case roce.NoteRNRWait:
		l.log.InfoContext(ctx, "peer not ready (RNR NAK): waiting", append(attrs, "psn", uint32(n.PSN))...)
	case roce.NoteEvent:
		attrs = attrs[:0]
		if suppressed > 0 {
			attrs = append(attrs, "suppressed", suppressed)
		}
		level := slog.LevelWarn
		switch n.Event.Type {
		case verbs.EventCommEst, verbs.EventSQDrained, verbs.EventSRQLimitReached, verbs.EventPortActive, verbs.EventQPLastWQEReached:
			level = slog.LevelInfo
		}
		l.log.Log(ctx, level, "asynchronous event", append(attrs, "event", n.Event.String())...)
	}
}

// watchDrops logs, once a second, the drop and error counters that grew.
func (l *logger) watchDrops(counters func() []Counter) {
	defer close(l.done)
	prev := map[string]uint64{}
	for _, c := range counters() {
		prev[c.Name] = c.Value
	}
	t := time.NewTicker(logDropEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		var grew []string
		attrs := []any{}
		for _, c := range counters() {
			d := c.Value - prev[c.Name]
			prev[c.Name] = c.Value
			if d == 0 || !(strings.HasPrefix(c.Name, "drop_") || strings.HasSuffix(c.Name, "_err") || c.Name == "bad_invalidate" || c.Name == "cq_overrun" || c.Name == "events_dropped") {
				continue
			}
			grew = append(grew, c.Name)
			attrs = append(attrs, c.Name, d)
		}
		if len(grew) > 0 {
			sort.Strings(grew)
			l.log.Warn("packets dropped or refused in the last second", attrs...)
		}
	}
}

func (l *logger) close() {
	close(l.stop)
	<-l.done
}
