package roce

import (
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// Feed is a queue of work requests a QP takes in by itself, without a
// call to PostSend or PostRecv: softrdma's libibverbs for C programs
// (clib) fills one from ibv_post_send or ibv_post_recv without entering Go
// while the QP is armed.
//
// A SendFeed (RC only) is armed while the QP will come back by itself: in
// RTS with requests outstanding, whose acknowledgement, timeout or error
// all come back to the QP, which takes the feed then (and first in every
// PostSend, for order); its packets leave in the batch the acknowledgement
// sends. A RecvFeed is armed from INIT to SQE: a receive request only
// waits for a message, so the QP takes the feed when a message finds its
// receive queue empty, first in every PostRecv, and at ERR (flushed, in
// order). A reset discards either.
//
// Its methods are called with the QP's lock held, from whichever goroutine
// runs the QP (a poller's inline receive, the device's receive loop, a
// timer, a post); they must not call the QP.
//
// The arming is Dekker's handshake: the producer publishes a request and
// then loads the arming; the QP stores the arming and then checks for
// requests (Pending). Both must be sequentially consistent, so at least
// one side sees the other: either the QP takes the request, or the
// producer sees the QP disarmed and calls TakeFeed (TakeRecvFeed).
type Feed[W verbs.SendWR | verbs.RecvWR] interface {
	// Take posts through post every request queued so far, oldest first.
	// post returns an error for a request the QP refused; the request has
	// then completed in error already, and Take goes on with the next.
	// post keeps nothing of the request after it returns.
	Take(post func(*W) error)
	// Discard drops every queued request unposted: the QP was reset, or a
	// post raced its reset.
	Discard()
	// Arm tells the producer whether it may queue (armed) and how many
	// requests have left the QP's queue (retired: a count that wraps at
	// 2^32 and counts completed, consumed, flushed, refused and reset
	// requests), so that it can tell whether the queue has room without
	// asking.
	Arm(armed bool, retired uint32)
	// Retired is Arm's count alone, told as each receive request leaves
	// (a send feed's count changes only with its Arm).
	Retired(retired uint32)
	// Pending reports whether requests wait; the QP calls it right after
	// Arm(false, ...), sequentially consistent with it.
	Pending() bool
}

// SendFeed is the feed of a QP's send queue.
type SendFeed = Feed[verbs.SendWR]

// RecvFeed is the feed of a QP's receive queue.
type RecvFeed = Feed[verbs.RecvWR]

// SetSendFeed makes f the QP's send feed (nil removes it). Only an RC QP
// takes a feed: the acknowledgements that come back while requests are
// outstanding are what lets the QP take the feed by itself.
func (qp *QP) SetSendFeed(f SendFeed) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		return verbs.Errorf("SetSendFeed", verbs.ErrDestroyed, "QP %d was destroyed", qp.qpn)
	}
	if qp.typ != verbs.QPTypeRC {
		return verbs.Errorf("SetSendFeed", verbs.ErrInvalidArgument, "QP %d is %v; only an RC QP takes a send feed", qp.qpn, qp.typ)
	}
	if qp.feed != nil && qp.feed != f {
		qp.feed.Arm(false, qp.sqRetired)
	}
	qp.feed = f
	qp.feedPost = qp.postFedLocked
	qp.armFeedLocked()
	return nil
}

// TakeFeed takes what waits in the send feed and sends it: the producer
// calls it when it queued a request and then found the QP disarmed.
func (qp *QP) TakeFeed() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed || qp.feed == nil {
		return
	}
	if qp.takeFeedLocked() {
		qp.kickLocked(time.Time{})
	}
	qp.armFeedLocked()
}

// takeFeedLocked posts what waits in the feed; it reports whether anything
// was posted, so the caller knows to run the requester.
func (qp *QP) takeFeedLocked() bool {
	f := qp.feed
	if f == nil {
		return false
	}
	switch qp.stateLocked() {
	case verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateSQE, verbs.QPStateErr:
	default:
		// Only a post that raced a reset finds the QP here: the
		// reset discards it, as it does the send queue.
		f.Discard()
		return false
	}
	tail := qp.sq.tail
	qp.feedFailed = false
	f.Take(qp.feedPost)
	if qp.feedFailed {
		// A refused request completed in error; like any error
		// completion of a send queue, it moves the QP to ERR (which
		// flushes the requests posted after it).
		qp.errorLocked()
	}
	return qp.sq.tail != tail
}

// postFedLocked posts one request from the feed. The producer checks
// before it queues everything PostSend would refuse (clib: opcode, SGE
// count, inline size, room); a request that is refused all the same cannot
// be refused to the caller any more, so it completes in error
// (WCLocQPOpErr) and the QP moves to ERR.
func (qp *QP) postFedLocked(wr *verbs.SendWR) error {
	if err := qp.postOneLocked(wr); err != nil {
		wc := verbs.WC{WRID: wr.WRID, Status: verbs.WCLocQPOpErr, Opcode: wr.Opcode.WCOpcode(), QPNum: qp.qpn}
		qp.sendCQ.push(&wc, true)
		qp.sqRetired++
		qp.feedFailed = true
		qp.dev.Counters.FeedRefused.Add(1)
		return err
	}
	qp.dev.Counters.FeedTaken.Add(1)
	return nil
}

// armFeedLocked tells the feed whether the QP will take it again by
// itself: it will while it is in RTS with requests in its send queue, as
// their acknowledgements, a timeout or an error all come back to the QP.
// When it disarms, a request queued meanwhile is taken here: the producer
// may have seen the QP still armed.
//
// An ACK that waits for the poller (Config.NoDeferredAck) disarms it too:
// PostSend sends such an ACK at once with the request (kickLocked), and a
// request queued instead would hold both back until the QP's next event
// (a ping-pong's every round trip: ib_write_lat over the C library took
// 15 % longer).
func (qp *QP) armFeedLocked() {
	f := qp.feed
	if f == nil {
		return
	}
	for {
		armed := !qp.destroyed && qp.stateLocked() == verbs.QPStateRTS && qp.sq.head != qp.sq.tail && !qp.resp.ackPending
		f.Arm(armed, qp.sqRetired)
		if armed || !f.Pending() {
			return
		}
		if !qp.takeFeedLocked() {
			return
		}
		qp.kickLocked(time.Time{})
	}
}

// SetRecvFeed makes f the QP's receive feed (nil removes it). A QP on an
// SRQ takes no receive feed: its requests come from the SRQ.
func (qp *QP) SetRecvFeed(f RecvFeed) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed {
		return verbs.Errorf("SetRecvFeed", verbs.ErrDestroyed, "QP %d was destroyed", qp.qpn)
	}
	if qp.srq != nil {
		return verbs.Errorf("SetRecvFeed", verbs.ErrInvalidArgument, "QP %d takes receive requests from its SRQ", qp.qpn)
	}
	if qp.rq.feed != nil && qp.rq.feed != f {
		qp.rq.feed.Arm(false, qp.rq.retired)
	}
	qp.rq.feed = f
	qp.rq.post = qp.postRecvFedLocked
	qp.armRecvFeedLocked()
	return nil
}

// TakeRecvFeed takes what waits in the receive feed: the producer calls it
// when it queued a request and then found the QP disarmed.
func (qp *QP) TakeRecvFeed() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.destroyed || qp.rq.feed == nil {
		return
	}
	qp.takeRecvFeedLocked()
	qp.armRecvFeedLocked()
}

// takeRecvFeedLocked posts what waits in the receive feed (or discards
// it in RESET); in ERR what it posted is flushed at once, as PostRecv
// flushes.
func (qp *QP) takeRecvFeedLocked() {
	f := qp.rq.feed
	if f == nil {
		return
	}
	if qp.stateLocked() == verbs.QPStateReset {
		f.Discard()
		return
	}
	f.Take(qp.rq.post)
	if qp.stateLocked() == verbs.QPStateErr {
		qp.resp.flushLocked(qp.recvRes())
	}
}

// postRecvFedLocked posts one request from the receive feed. The
// producer checks what PostRecv would refuse (SGE count, room); one
// refused all the same completes in error (WCLocQPOpErr).
func (qp *QP) postRecvFedLocked(wr *verbs.RecvWR) error {
	if err := qp.postRecvOneLocked(wr); err != nil {
		wc := verbs.WC{WRID: wr.WRID, Status: verbs.WCLocQPOpErr, Opcode: verbs.WCRecv, QPNum: qp.qpn}
		qp.recvCQ.push(&wc, true)
		qp.rq.retire()
		qp.dev.Counters.FeedRefused.Add(1)
		return err
	}
	qp.dev.Counters.FeedTaken.Add(1)
	return nil
}

// armRecvFeedLocked tells the receive feed whether the producer may queue,
// and takes what it queued as the QP disarmed.
func (qp *QP) armRecvFeedLocked() {
	f := qp.rq.feed
	if f == nil {
		return
	}
	st := qp.stateLocked()
	armed := !qp.destroyed && st != verbs.QPStateReset && st != verbs.QPStateErr
	f.Arm(armed, qp.rq.retired)
	if !armed && f.Pending() {
		qp.takeRecvFeedLocked()
		f.Arm(false, qp.rq.retired)
	}
}
