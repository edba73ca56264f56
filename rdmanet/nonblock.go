package rdmanet

import (
	"fmt"
	"syscall"
)

// Calls that never wait, for event loops (rsocket's non-blocking rrecv,
// rsend and rpoll in softrdma's librdmacm):
//
//	TryRead / TryWrite ─► poll the CQ once (the data path runs inline on
//	                      a software provider) ─► what Read / Write would
//	                      do now, or ErrWouldBlock
//	Ready(wait)        ─► the same look, without moving bytes; wait says
//	                      the caller sleeps next, so the poller watches
//	                      the CQ and SetNotify's function tells it of news
//
// Each call counts as a busy-polling spell (see poll): a program that
// retries at once is the connection's poller, as Config.BusyPoll makes
// Read and Write.

// ErrWouldBlock is what TryRead and TryWrite return when they would have
// to wait; errors.Is(ErrWouldBlock, syscall.EAGAIN) holds. It is one
// value, so a loop that retries allocates nothing.
var ErrWouldBlock = fmt.Errorf("rdmanet: the call would wait: %w", syscall.EAGAIN)

// TryRead is Read without waiting: what the ring holds now (up to
// len(p)), io.EOF or the connection's error, else ErrWouldBlock. It
// ignores the read deadline. Safe to call concurrently with Write; it
// serializes with Read.
func (c *Conn) TryRead(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.spins.Add(1)
	c.progress(false)
	c.mu.Lock()
	n, done, err := c.readLocked(p)
	c.mu.Unlock()
	if !done {
		return 0, ErrWouldBlock
	}
	return n, err
}

// TryWrite is Write without waiting: it sends as much of p as the send
// buffer and the peer's credits take now and returns that count; if that
// is nothing, ErrWouldBlock (or why writing failed). It ignores the write
// deadline. Safe to call concurrently with Read; it serializes with
// Write.
func (c *Conn) TryWrite(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.spins.Add(1)
	c.progress(false)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.writeErrLocked(); err != nil {
		return 0, c.opError("write", err)
	}
	n := 0
	for n < len(p) && c.canSendLocked() {
		n += c.writeChunkLocked(p[n:])
	}
	if n == 0 && len(p) > 0 {
		return 0, ErrWouldBlock
	}
	return n, nil
}

// Readiness is what Ready found: which calls would return at once.
type Readiness struct {
	Read  bool // Read returns at once: data, io.EOF or an error
	Write bool // Write sends a chunk at once, or fails at once
	EOF   bool // the peer sent its last byte and Read has returned them all
	Err   bool // the connection failed (or was closed)
}

// Ready polls the CQ once and reports what Read and Write would do now.
// A caller that sleeps next until SetNotify's function calls it passes
// wait: the poller then watches the CQ at once, instead of after a
// busy-polling spell's check.
func (c *Conn) Ready(wait bool) Readiness {
	if wait {
		c.kickPoller()
	} else {
		c.spins.Add(1)
	}
	c.progress(false)
	c.mu.Lock()
	defer c.mu.Unlock()
	var r Readiness
	r.Err = c.closed || c.err != nil
	r.EOF = c.rdShut && c.rx.count == 0
	r.Read = c.rx.count > 0 || r.EOF || r.Err
	r.Write = c.writeErrLocked() != nil || c.canSendLocked()
	return r
}

// SetNotify makes f run whenever completions may have changed what Read,
// Write and Ready find, and when the connection fails or ends; nil stops
// it. f runs on the goroutine that found them, often with a Read or
// Write waiting for it: it must be quick and must not call the Conn.
func (c *Conn) SetNotify(f func()) {
	if f == nil {
		c.notify.Store(nil)
		return
	}
	c.notify.Store(&f)
}
