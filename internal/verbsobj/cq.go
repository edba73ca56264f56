// Package verbsobj holds the rules of the verbs objects that every
// provider shares: the completion queue's ring with its notification and
// overrun semantics, memory-region access and bounds checks, the SRQ
// limit, address-handle and creation-argument validation, object
// lifetimes (in use, destroyed) and the asynchronous event channel. A
// provider keeps only what differs (how keys are found, how memory is
// reached, how a waiter makes progress); the conformance suite in
// verbs/verbstest checks that each provider follows these rules.
//
// Where the providers once disagreed, libibverbs and the kernel's rxe are
// the reference, and the rule says so where it is chosen.
package verbsobj

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/verbs"
)

// CheckCQE validates the size asked of CreateCQ.
func CheckCQE(cqe, max int) error {
	if cqe < 1 || cqe > max {
		return verbs.Errorf("CreateCQ", verbs.ErrInvalidArgument, "cqe %d: must be 1..%d", cqe, max)
	}
	return nil
}

// CQRing is a completion queue's ring of work completions, filled by QPs
// and drained by Poll, with the CQ's arming and overrun state. Its
// methods are safe for concurrent use; Len, Dead and the wake-ups need no
// lock, so a poller finds an empty ring without taking one.
//
// Overrun follows rxe: a completion that finds the ring full is lost, and
// the first loss raises IBV_EVENT_CQ_ERR (Push returns Overrun). The CQ
// stays usable: the next Poll returns what the ring holds together with
// an error wrapping verbs.ErrQueueFull, once, and the overrun is over; a
// later loss raises the event again.
type CQRing struct {
	ch   *verbs.CompChannel
	self verbs.CQ // what Notify delivers

	mu        sync.Mutex // guards the ring and the notification state
	ring      []verbs.WC
	head      int
	armed     bool
	solicited bool        // armed for solicited completions only
	overrun   atomic.Bool // completions were lost since the last Poll; set under mu

	count   atomic.Int32 // completions in the ring
	size    atomic.Int32 // len(ring), for Cap without the lock (Resize changes it)
	waiters atomic.Int32 // goroutines in Block
	wake    chan struct{}
	dead    atomic.Bool

	armedCount *atomic.Int32 // CountArmed's counter, or nil
}

// CountArmed makes the ring keep c one higher while it is armed: a
// provider whose progress depends on its own goroutine (shm) counts its
// armed CQs like its goroutines blocked in Block, since an application
// that armed a CQ is about to sleep on its CompChannel and waits for that
// goroutine to deliver the completion. Call it before the ring is used.
func (r *CQRing) CountArmed(c *atomic.Int32) { r.armedCount = c }

// disarmLocked clears the arming. Precondition: r.mu held and r.armed.
func (r *CQRing) disarmLocked() {
	r.armed = false
	if r.armedCount != nil {
		r.armedCount.Add(-1)
	}
}

// Init sizes the ring for cqe completions. self is the CQ the ring
// belongs to, which events on ch name.
func (r *CQRing) Init(cqe int, ch *verbs.CompChannel, self verbs.CQ) {
	r.ring = make([]verbs.WC, cqe)
	r.size.Store(int32(cqe))
	r.ch, r.self = ch, self
	r.wake = make(chan struct{}, 1)
}

// Cap returns the capacity (CQ.CQE).
func (r *CQRing) Cap() int { return int(r.size.Load()) }

// Resize gives the ring room for cqe completions, keeping the ones it
// holds in order (ibv_resize_cq). It fails with ErrInvalidArgument if it
// holds more than cqe; max is the provider's largest CQ.
func (r *CQRing) Resize(cqe, max int) error {
	if err := CheckCQE(cqe, max); err != nil {
		return verbs.Errorf("ResizeCQ", verbs.ErrInvalidArgument, "cqe %d: must be 1..%d", cqe, max)
	}
	if r.dead.Load() {
		return verbs.Errorf("ResizeCQ", verbs.ErrDestroyed, "the CQ was destroyed")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := int(r.count.Load())
	if n > cqe {
		return verbs.Errorf("ResizeCQ", verbs.ErrInvalidArgument, "cqe %d: the CQ holds %d completions; poll them first", cqe, n)
	}
	ring := make([]verbs.WC, cqe)
	for i := range n {
		ring[i] = r.ring[(r.head+i)%len(r.ring)]
	}
	r.ring, r.head = ring, 0
	r.size.Store(int32(cqe))
	return nil
}

// Clean removes the completions of QP qpn from the ring, keeping the
// others in order, and returns how many it removed. A QP moved to RESET
// takes its completions with it (its flushed receives, say), as mlx4 and
// mlx5 clean their CQs then: the work requests are gone, and a program
// that reuses the QP would otherwise poll completions of its old life.
func (r *CQRing) Clean(qpn uint32) int {
	if r.count.Load() == 0 {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := int(r.count.Load())
	kept := 0
	for i := range n {
		wc := r.ring[(r.head+i)%len(r.ring)]
		if wc.QPNum == qpn {
			continue
		}
		r.ring[(r.head+kept)%len(r.ring)] = wc
		kept++
	}
	r.count.Add(int32(kept - n))
	return n - kept
}

// Len returns how many completions the ring holds.
func (r *CQRing) Len() int { return int(r.count.Load()) }

// Dead reports whether Destroy succeeded.
func (r *CQRing) Dead() bool { return r.dead.Load() }

// PushResult says what Push did.
type PushResult uint8

const (
	// Queued: the completion is in the ring.
	Queued PushResult = iota
	// Lost: the ring was full and the completion is lost, in an overrun
	// already reported.
	Lost
	// Overrun: the ring was full and the completion is lost; this loss
	// starts an overrun: the provider raises verbs.EventCQErr.
	Overrun
)

// Push adds a completion. solicited says whether it satisfies a CQ armed
// for solicited completions only (a solicited receive); an error
// completion satisfies any arming, as in rxe. An armed CQ delivers one
// event to its CompChannel and is disarmed.
func (r *CQRing) Push(wc *verbs.WC, solicited bool) PushResult {
	res, event := r.PushHoldEvent(wc, solicited)
	if event {
		r.DeliverEvent()
	}
	return res
}

// PushHoldEvent is Push for a caller that delivers the CQ's event itself,
// later: if event is true the push disarmed the CQ, and the caller must
// call DeliverEvent. A provider holds the events its receive loop raises
// until the batch's acknowledgements have left: a program woken by the
// event answers at once, and its answer must not overtake the ACK of
// the message it answers (the peer would see the answer's completion
// before its request's).
func (r *CQRing) PushHoldEvent(wc *verbs.WC, solicited bool) (res PushResult, event bool) {
	r.mu.Lock()
	n := int(r.count.Load())
	if n == len(r.ring) {
		first := !r.overrun.Swap(true)
		r.mu.Unlock()
		if first {
			return Overrun, false
		}
		return Lost, false
	}
	i := r.head + n
	if i >= len(r.ring) {
		i -= len(r.ring)
	}
	r.ring[i] = *wc
	r.count.Add(1)
	notify := r.armed && (!r.solicited || solicited || wc.Status != verbs.WCSuccess)
	if notify {
		r.disarmLocked()
	}
	r.mu.Unlock()
	if r.waiters.Load() > 0 {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return Queued, notify && r.ch != nil
}

// DeliverEvent delivers the event a PushHoldEvent held.
func (r *CQRing) DeliverEvent() { r.ch.Notify(r.self) }

// Poll moves up to len(wc) completions into wc. After an overrun it
// returns, once, the completions it has and ErrCQOverrun.
func (r *CQRing) Poll(wc []verbs.WC) (int, error) {
	if r.dead.Load() {
		return 0, errCQDestroyed
	}
	if r.count.Load() == 0 && !r.overrun.Load() {
		return 0, nil
	}
	r.mu.Lock()
	n := min(int(r.count.Load()), len(wc))
	for i := 0; i < n; i++ {
		wc[i] = r.ring[r.head]
		r.head++
		if r.head == len(r.ring) {
			r.head = 0
		}
	}
	r.count.Add(int32(-n))
	overrun := r.overrun.Swap(false)
	r.mu.Unlock()
	if overrun {
		return n, ErrCQOverrun
	}
	return n, nil
}

// ErrCQOverrun is what Poll returns after completions were lost.
var ErrCQOverrun = &verbs.Error{Op: "PollCQ", Err: verbs.ErrQueueFull,
	Detail: "CQ overrun: completions were lost; size the CQ for every outstanding work request"}

var errCQDestroyed = verbs.Errorf("PollCQ", verbs.ErrDestroyed, "the CQ was destroyed")

// Block waits until the ring holds a completion (nil), the CQ is
// destroyed (ErrDestroyed) or ctx is done (ctx.Err()). Providers spin
// first, their own way, and call Block to sleep; blocking, if set, runs
// once the waiter is registered, so a push after it wakes the waiter.
func (r *CQRing) Block(ctx context.Context, blocking func()) error {
	r.waiters.Add(1)
	defer r.waiters.Add(-1)
	if blocking != nil {
		blocking()
	}
	for {
		if r.count.Load() > 0 {
			return nil
		}
		if r.dead.Load() {
			return verbs.Errorf("WaitCQ", verbs.ErrDestroyed, "the CQ was destroyed")
		}
		select {
		case <-r.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Arm arms the CQ for one event on its CompChannel (ReqNotify). A CQ
// created without a channel could never deliver the event: rxe accepts
// the call and nothing ever arrives; here it is an error that says so,
// wrapping verbs.ErrInvalidState (the CQ's make, not the argument, is
// what is wrong).
func (r *CQRing) Arm(solicitedOnly bool) error {
	if r.dead.Load() {
		return verbs.Errorf("ReqNotifyCQ", verbs.ErrDestroyed, "the CQ was destroyed")
	}
	if r.ch == nil {
		return verbs.Errorf("ReqNotifyCQ", verbs.ErrInvalidState, "the CQ has no completion channel; pass one to CreateCQ")
	}
	r.mu.Lock()
	if !r.armed && r.armedCount != nil {
		r.armedCount.Add(1)
	}
	r.armed, r.solicited = true, solicitedOnly
	r.mu.Unlock()
	return nil
}

// Destroy marks the ring destroyed; users is how many QPs still use the
// CQ (ErrInUse if any). Blocked waiters return ErrDestroyed.
func (r *CQRing) Destroy(users int32) error {
	if users > 0 {
		return verbs.Errorf("DestroyCQ", verbs.ErrInUse, "%d QPs still use the CQ; destroy them first", users)
	}
	if !r.dead.CompareAndSwap(false, true) {
		return verbs.Errorf("DestroyCQ", verbs.ErrDestroyed, "CQ already destroyed")
	}
	r.mu.Lock()
	if r.armed {
		r.disarmLocked()
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return nil
}
