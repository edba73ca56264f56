package verbsobj

import (
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/verbs"
)

// Events is a device's asynchronous event channel (verbs.AsyncEventer):
// buffered, never blocking the sender (an event that finds it full is
// dropped and counted), closed when the device is. Safe for concurrent
// use; call Init first.
type Events struct {
	mu      sync.RWMutex // read-held to send, held to close
	ch      chan verbs.AsyncEvent
	closed  bool
	dropped atomic.Uint64
}

// EventBuffer is how many asynchronous events wait for the application.
const EventBuffer = 256

// Init makes the channel.
func (e *Events) Init() { e.ch = make(chan verbs.AsyncEvent, EventBuffer) }

// C returns the channel (AsyncEvents).
func (e *Events) C() <-chan verbs.AsyncEvent { return e.ch }

// Dropped returns how many events found the channel full.
func (e *Events) Dropped() uint64 { return e.dropped.Load() }

// Send delivers ev. It reports dropped if the channel was full (the
// event is lost and counted); after Close it discards ev silently.
func (e *Events) Send(ev verbs.AsyncEvent) (dropped bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return false
	}
	select {
	case e.ch <- ev:
		return false
	default:
		e.dropped.Add(1)
		return true
	}
}

// Close closes the channel; later events are discarded.
func (e *Events) Close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		close(e.ch)
	}
}
