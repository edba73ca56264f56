package roce

import (
	"sync"
	"sync/atomic"
	"time"
)

// backlog lists the QPs whose requests wait for the transport because the
// receive path that built them must not block (RxBatch.MustNotBlock). Its
// lock is taken after a QP's.
type backlog struct {
	mu    sync.Mutex
	qps   []*QP
	spare []*QP
	n     atomic.Int32
}

// backlogLocked puts the QP on the device's backlog, once.
// Precondition: qp.mu held.
func (qp *QP) backlogLocked() {
	if qp.inBacklog {
		return
	}
	qp.inBacklog = true
	b := &qp.dev.backlog
	b.mu.Lock()
	b.qps = append(b.qps, qp)
	b.n.Store(int32(len(b.qps)))
	b.mu.Unlock()
}

// Backlogged reports whether requests wait for FlushBacklog. It takes no
// lock.
func (d *Device) Backlogged() bool { return d.backlog.n.Load() > 0 }

// take empties the backlog and returns what was on it.
func (b *backlog) take() []*QP {
	b.mu.Lock()
	defer b.mu.Unlock()
	qps := b.qps
	b.qps, b.spare = b.spare[:0], nil
	b.n.Store(0)
	return qps
}

// giveBack returns take's slice, emptied, for reuse.
func (b *backlog) giveBack(qps []*QP) {
	clear(qps)
	b.mu.Lock()
	if b.spare == nil {
		b.spare = qps[:0]
	}
	b.mu.Unlock()
}

// FlushBacklog sends the requests that wait for the transport, blocking
// until it takes them, and lets each QP's requester go on where it
// stopped. The driver calls it from a goroutine that may block.
func (d *Device) FlushBacklog(now time.Time) {
	qps := d.backlog.take()
	for _, qp := range qps {
		qp.mu.Lock()
		qp.inBacklog = false
		if !qp.destroyed {
			qp.flushLocked()
			qp.runRequesterLocked(now)
			qp.flushLocked()
			qp.rearmLocked()
		}
		qp.mu.Unlock()
	}
	d.backlog.giveBack(qps)
}

// RetryBacklog is FlushBacklog for a goroutine that must not block (a
// busy poller, holding rx): each QP on the backlog hands the transport
// what it takes now and lets its requester go on as far as the transport
// takes its packets; what stays goes back on the backlog, responses into
// rx's stage (sent, as far as the transport takes them, before it
// returns). A busy poller calls it on every poll while requests wait, so
// they leave as soon as the socket has room instead of at the next timer.
func (d *Device) RetryBacklog(rx *RxBatch, now time.Time) {
	qps := d.backlog.take()
	for _, qp := range qps {
		qp.mu.Lock()
		qp.inBacklog = false
		if !qp.destroyed {
			qp.tx.attach(rx.stage)
			qp.flushLocked()
			if qp.tx.n == 0 {
				qp.runRequesterLocked(now)
				qp.flushLocked()
			}
			qp.rearmLocked()
			qp.tx.detach()
		}
		qp.mu.Unlock()
	}
	d.backlog.giveBack(qps)
	rx.stage.flush(d)
}
