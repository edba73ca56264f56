package roce

// Timers. The engine reads no clock and starts no timer: every entry point
// that needs the time takes it as an argument (HandleBatch, OnTimeout) or
// asks the driver's Config.Clock (PostSend, ModifyQP), and the deadlines
// of all QPs live in one queue the driver serves:
//
//	QP arms a deadline ──► timerQueue (min-heap of (at, QP)) ──► if earlier
//	                       than what the driver was asked for:
//	                       Config.SetTimer(at)
//	driver's timer fires ──► Device.OnTimeout(now): every QP whose deadline
//	                         passed runs its timeout step (retransmit after
//	                         a local ACK timeout, resume after an RNR wait)
//	                         and re-arms; SetTimer(next)
//
// A QP has one deadline (QP.timerAt), the earliest of its local ACK
// timeout, its RNR wait and, idle, its keepalive probe (keepalive.go). Moving it later leaves the queue alone (the earlier
// entry fires, finds the QP's deadline moved and re-arms), so a busy QP
// touches the queue about once per timeout period, not once per packet.

import (
	"container/heap"
	"github.com/softrdma/softrdma/verbs"
	"sync"
	"sync/atomic"
	"time"
)

// timerEntry is one armed deadline. It is stale once its QP's timerAt is
// no longer at (the QP re-armed, disarmed or was destroyed).
type timerEntry struct {
	at time.Time
	qp *QP
}

type timerHeap []timerEntry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timerEntry)) }
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = timerEntry{}
	*h = old[:len(old)-1]
	return e
}

// timerQueue holds the QPs' deadlines. Its lock is taken after a QP's,
// never before.
type timerQueue struct {
	mu    sync.Mutex
	h     timerHeap
	asked time.Time // the deadline the driver was last given; zero: none
	due   []timerEntry
	set   func(time.Time)
	// first is the earliest queued deadline in Unix nanoseconds (0: none),
	// readable without mu: busy pollers look at it on every poll.
	first atomic.Int64
}

// updateFirst publishes the earliest queued deadline. Precondition: mu held.
func (q *timerQueue) updateFirst() {
	if len(q.h) == 0 {
		q.first.Store(0)
		return
	}
	q.first.Store(q.h[0].at.UnixNano())
}

// add queues a deadline and tells the driver if it is the earliest.
// Precondition: qp.mu held.
func (q *timerQueue) add(qp *QP, at time.Time) {
	q.mu.Lock()
	heap.Push(&q.h, timerEntry{at: at, qp: qp})
	q.updateFirst()
	if q.asked.IsZero() || at.Before(q.asked) {
		q.asked = at
		q.set(at)
	}
	q.mu.Unlock()
}

// NextDeadline returns when the driver must next call OnTimeout, or the
// zero time if no QP waits for anything. It takes no lock, so a busy
// poller can look at every poll whether a deadline is due and call
// OnTimeout itself (the driver's timer may fire late while pollers hold
// every CPU). It is safe for concurrent use.
func (d *Device) NextDeadline() time.Time {
	if n := d.timers.first.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// OnTimeout runs the timeout step of every QP whose deadline is at or
// before now, then asks the driver (Config.SetTimer) for the next one. The
// driver calls it when the time it was given comes; an early or repeated
// call is harmless. It is safe for concurrent use.
func (d *Device) OnTimeout(now time.Time) {
	q := &d.timers
	q.mu.Lock()
	q.asked = time.Time{}
	due := q.due[:0]
	for len(q.h) > 0 && !q.h[0].at.After(now) {
		due = append(due, heap.Pop(&q.h).(timerEntry))
	}
	q.updateFirst()
	q.due = nil // owned by this call until it gives it back
	q.mu.Unlock()
	for i, e := range due {
		e.qp.onTimer(e.at, now)
		due[i] = timerEntry{}
	}
	q.mu.Lock()
	if q.due == nil {
		q.due = due[:0]
	}
	if len(q.h) > 0 && (q.asked.IsZero() || q.h[0].at.Before(q.asked)) {
		q.asked = q.h[0].at
		q.set(q.asked)
	}
	q.mu.Unlock()
}

// armTimerLocked makes sure the QP's timeout step runs no later than at.
func (qp *QP) armTimerLocked(at time.Time) {
	if !qp.timerAt.IsZero() && !at.Before(qp.timerAt) {
		return // an earlier deadline is queued; it re-arms when it fires
	}
	qp.timerAt = at
	qp.dev.timers.add(qp, at)
}

// stopTimerLocked forgets the QP's deadline; its queue entry goes stale.
func (qp *QP) stopTimerLocked() { qp.timerAt = time.Time{} }

// onTimer is the timeout step of the QP whose deadline at has come.
func (qp *QP) onTimer(at, now time.Time) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed || !qp.timerAt.Equal(at) {
		return // stale: the QP re-armed or stopped since
	}
	qp.timerAt = time.Time{}
	if st := qp.stateLocked(); st == verbs.QPStateRTS || st == verbs.QPStateSQD {
		took := qp.takeFeedLocked()
		qp.onTimeoutLocked(now)
		qp.keepaliveLocked(now)
		if qp.ccTimerLocked(now) || took {
			qp.runRequesterLocked(now)
		}
		qp.flushLocked()
		qp.rearmLocked()
	}
	qp.armFeedLocked()
	// Outside RTS and SQD no deadline is served: re-arming for one left
	// behind (an ACK deadline of a QP an error moved to ERR) would fire
	// again at once, for ever.
}

// rearmLocked arms the timer for the earliest pending deadline.
func (qp *QP) rearmLocked() {
	var at time.Time
	if qp.req.rnrWait {
		at = qp.req.rnrUntil
	}
	if !qp.comp.ackDeadline.IsZero() && (at.IsZero() || qp.comp.ackDeadline.Before(at)) {
		at = qp.comp.ackDeadline
	}
	if ka := qp.keepaliveAtLocked(); !ka.IsZero() && (at.IsZero() || ka.Before(at)) {
		at = ka
	}
	if cc := qp.ccDeadlineLocked(); !cc.IsZero() && (at.IsZero() || cc.Before(at)) {
		at = cc
	}
	if !at.IsZero() {
		qp.armTimerLocked(at)
	}
}
