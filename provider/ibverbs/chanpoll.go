//go:build ibverbs && cgo && linux

package ibverbs

// One completion channel's events, shared by every CQ on the channel:
//
//	kernel ──CQ event──▶ channel fd, waiting in Go's netpoller (one goroutine per channel)
//	       ──get: up to eventBatch events per crossing──▶ the CQ handles
//	       ──▶ look each handle up (chanPoller.cqs) ──▶ cqEventSink.cqEvent: wake CQ.Wait,
//	           notify the application's CompChannel
//	       ──▶ count; ack a CQ's events every ackBatch (ibv_ack_cq_events), the rest when
//	           the CQ leaves the channel (before ibv_destroy_cq, which waits for every ack)
//
// The poller holds no cgo: an eventSource does the C calls, so a test
// drives the same code with a pipe.

import (
	"os"
	"sync"
	"syscall"
)

// eventSource is what a chanPoller reads: a libibverbs completion channel
// (compSource), or a fake in tests.
type eventSource interface {
	// get takes up to len(handles) events off the non-blocking channel
	// (fd is its file, as the netpoller hands it) and stores the handle
	// of each event's CQ: how many, 0 if there were none, -1 on an error
	// that ends the channel. drained reports that it found the channel
	// empty after them (EAGAIN).
	get(fd uintptr, handles []uintptr) (n int, drained bool)
	// ack acknowledges n events of the CQ handle.
	ack(handle uintptr, n int)
}

// cqEventSink is told of each event of its CQ.
type cqEventSink interface{ cqEvent() }

const (
	// eventBatch is how many events one get takes at most.
	eventBatch = 32
	// ackBatch is how many events of one CQ are acknowledged together.
	ackBatch = 32
)

// chanPoller dispatches a completion channel's events to the CQs on it.
// attach, detach and stop are safe for concurrent use.
type chanPoller struct {
	src     eventSource
	file    *os.File
	done    chan struct{}       // closed when the loop ended
	handles [eventBatch]uintptr // the C handles (struct ibv_cq *)

	mu  sync.Mutex // guards cqs
	cqs map[uintptr]*cqEvents
}

// cqEvents is one CQ's place on the channel.
type cqEvents struct {
	sink    cqEventSink
	unacked int // events delivered and not acknowledged yet
}

// startPoller starts the goroutine that waits for file (the channel's
// non-blocking descriptor) in the netpoller. The poller owns file.
func startPoller(src eventSource, file *os.File) (*chanPoller, error) {
	raw, err := file.SyscallConn()
	if err != nil {
		return nil, err
	}
	p := &chanPoller{src: src, file: file, done: make(chan struct{}), cqs: map[uintptr]*cqEvents{}}
	go p.loop(raw)
	return p, nil
}

// loop dispatches the events as they come, all within one raw.Read: it
// waits in the netpoller as soon as a get found the channel empty. A
// loop around raw.Read read the empty channel once more every time
// (RawRead's prepareRead forgets a readiness seen before it, so the first
// look after it must read): per event a read that gave it, one that found
// the channel empty, and that third one, each a crossing into C and a
// system call, where C perftest's blocking ibv_get_cq_event makes one.
// Within one raw.Read the netpoller keeps the readiness of an event that
// arrives after the empty read, and the wait returns at once for it.
func (p *chanPoller) loop(raw syscall.RawConn) {
	defer close(p.done)
	// It returns when stop closes the file, or when get fails: either
	// ends the channel.
	raw.Read(func(fd uintptr) bool {
		for {
			n, drained := p.src.get(fd, p.handles[:])
			if n < 0 {
				return true
			}
			p.dispatch(p.handles[:n])
			if drained || n == 0 {
				return false // wait for the next event
			}
		}
	})
}

// dispatch delivers events to their CQs. An event of a CQ that left the
// channel (its ibv_destroy_cq is waiting for the ack) is acknowledged at
// once.
func (p *chanPoller) dispatch(handles []uintptr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range handles {
		e := p.cqs[h]
		if e == nil {
			p.src.ack(h, 1)
			continue
		}
		e.sink.cqEvent()
		if e.unacked++; e.unacked == ackBatch {
			p.src.ack(h, e.unacked)
			e.unacked = 0
		}
	}
}

// attach routes the events of CQ handle h to sink.
func (p *chanPoller) attach(h uintptr, sink cqEventSink) {
	p.mu.Lock()
	p.cqs[h] = &cqEvents{sink: sink}
	p.mu.Unlock()
}

// detach removes CQ handle h from the channel and acknowledges its
// events; after it returns, sink hears of no more events, and an event
// still on its way is acknowledged as it arrives. Call it before
// ibv_destroy_cq.
func (p *chanPoller) detach(h uintptr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.cqs[h]; e != nil {
		if e.unacked > 0 {
			p.src.ack(h, e.unacked)
		}
		delete(p.cqs, h)
	}
}

// stop closes the channel's file and waits for the loop to end.
func (p *chanPoller) stop() {
	p.file.Close()
	<-p.done
}
