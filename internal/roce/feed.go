package roce

import (
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// SendFeed is a queue of send requests that an RC QP takes in by itself,
// without a call to PostSend: softrdma's libibverbs for C programs (clib)
// fills one from ibv_post_send without entering Go while the QP is armed,
// and the QP takes what waits there whenever it handles its next
// acknowledgement, timeout or state change. A post then costs C no crossing
// into Go, and its packets leave in the batch the acknowledgement sends.
//
// Its methods are called with the QP's lock held, from whichever goroutine
// runs the QP (a poller's inline receive, the device's receive loop, a
// timer, PostSend); they must not call the QP.
//
// The protocol between the producer and the QP is Dekker's: the producer
// publishes a request and then loads the arming; the QP stores the
// arming and then checks for requests (Pending). Both must be sequentially
// consistent, so at least one side sees the other: either the QP takes the
// request, or the producer sees the QP disarmed and calls TakeFeed.
type SendFeed interface {
	// Take posts through post every request queued so far, oldest first.
	// post returns an error for a request the QP refused; the request has
	// then completed in error already, and Take goes on with the next.
	// post keeps nothing of the request after it returns.
	Take(post func(*verbs.SendWR) error)
	// Discard drops every queued request unposted: the QP was reset, or a
	// post raced its reset.
	Discard()
	// Arm tells the producer whether the QP will call Take again by itself
	// (armed), so that requests may be queued without TakeFeed, and how
	// many of its send requests have left the send queue (retired: a count
	// that wraps at 2^32 and counts completed, flushed, refused and reset
	// requests), so that the producer can tell whether the send queue has
	// room without asking.
	Arm(armed bool, retired uint32)
	// Pending reports whether requests wait; the QP calls it right after
	// Arm(false, ...), sequentially consistent with it.
	Pending() bool
}

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
	qp.feedTook, qp.feedFailed = false, false
	f.Take(qp.feedPost)
	if qp.feedFailed {
		// A refused request completed in error; like any error
		// completion of a send queue, it moves the QP to ERR (which
		// flushes the requests posted after it).
		qp.errorLocked()
	}
	return qp.feedTook
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
	qp.feedTook = true
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

// RecvFeed is SendFeed's counterpart for receive requests: a queue the
// QP takes receive requests from when it needs one and its receive queue
// is empty, so that ibv_post_recv (clib) need not enter Go. Receive
// requests wait for messages, so the QP takes them only when a message
// needs one, when PostRecv posts more (the feed's first, for order), and
// when it goes to ERR (they are flushed) or RESET (discarded). It is
// armed while the QP is in a state a posted receive request simply waits
// in (INIT to SQE); in RESET and ERR the producer calls PostRecv, which
// refuses or flushes as it does. The methods are called with the QP's
// lock held and must not call the QP.
type RecvFeed interface {
	// Take posts through post every request queued so far, oldest first;
	// post keeps nothing of the request after it returns, and an error
	// means the request completed in error already.
	Take(post func(*verbs.RecvWR) error)
	// Discard drops every queued request (a reset).
	Discard()
	// Arm tells the producer whether it may queue (armed) and how many
	// receive requests left the receive queue so far (retired: consumed
	// by a message, flushed, refused or reset; it wraps at 2^32).
	Arm(armed bool, retired uint32)
	// Retired is Arm's count alone, told as each request leaves.
	Retired(retired uint32)
	// Pending reports whether requests wait; called right after
	// Arm(false, ...), sequentially consistent with it.
	Pending() bool
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
