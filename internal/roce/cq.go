package roce

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/internal/spin"
	"github.com/softrdma/softrdma/verbs"
)

// spinPolls is how many times CQ.Wait polls before it sleeps, giving the
// CPU to other threads every few polls (spin.Idle): tens of microseconds,
// about a loopback round trip, so a busy CQ is caught without a wake-up
// (which costs 30-45 µs across vCPUs), and short enough that an idle
// waiter costs no CPU. It counts polls rather than time so that Wait also
// works under testing/synctest, where time stands still while a goroutine
// spins.
const spinPolls = 256

// CQ is a completion queue: a ring of work completions filled by QPs under
// their own locks and drained by Poll.
type CQ struct {
	dev *Device
	ch  *verbs.CompChannel

	mu        sync.Mutex // guards the ring and the notification state
	ring      []verbs.WC
	head      int
	armed     bool
	solicited bool // armed for solicited completions only
	overrun   bool

	count   atomic.Int32 // completions in the ring, readable without mu
	waiters atomic.Int32
	wake    chan struct{}
	users   atomic.Int32 // QPs that use this CQ
	dead    atomic.Bool
}

// CreateCQ creates a completion queue.
func (d *Device) CreateCQ(cqe int, ch *verbs.CompChannel) (verbs.CQ, error) {
	if cqe < 1 || cqe > maxCQE {
		return nil, verbs.Errorf("CreateCQ", verbs.ErrInvalidArgument, "cqe %d: must be 1..%d", cqe, maxCQE)
	}
	if d.closed.Load() {
		return nil, verbs.Errorf("CreateCQ", verbs.ErrDestroyed, "device %s is closed", d.cfg.Name)
	}
	d.nCQ.Add(1)
	cq := &CQ{dev: d, ch: ch, ring: make([]verbs.WC, cqe), wake: make(chan struct{}, 1)}
	add(&d.objs, d.objs.cqs, cq)
	return cq, nil
}

// CQE returns the capacity.
func (cq *CQ) CQE() int { return len(cq.ring) }

// push adds a completion. solicited says whether it may wake a CQ armed for
// solicited events only (solicited receives and every error).
func (cq *CQ) push(wc *verbs.WC, solicited bool) {
	cq.mu.Lock()
	n := int(cq.count.Load())
	if n == len(cq.ring) {
		first := !cq.overrun
		cq.overrun = true
		cq.mu.Unlock()
		cq.dev.Counters.CQOverrun.Add(1)
		if first {
			cq.dev.Event(verbs.AsyncEvent{Type: verbs.EventCQErr, CQ: cq})
		}
		return
	}
	i := cq.head + n
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = *wc
	cq.count.Add(1)
	notify := cq.armed && (!cq.solicited || solicited || wc.Status != verbs.WCSuccess)
	if notify {
		cq.armed = false
	}
	cq.mu.Unlock()
	if notify && cq.ch != nil {
		cq.ch.Notify(cq)
	}
	if cq.waiters.Load() > 0 {
		select {
		case cq.wake <- struct{}{}:
		default:
		}
	}
}

// Poll moves up to len(wc) completions into wc.
func (cq *CQ) Poll(wc []verbs.WC) (int, error) {
	if cq.count.Load() == 0 {
		// Receive inline: a busy poller processes the packets that would
		// complete its work itself, without a hop through Serve.
		if poll := cq.dev.cfg.Poll; poll != nil {
			poll()
		}
	}
	if cq.count.Load() == 0 {
		if cq.dead.Load() {
			return 0, verbs.Errorf("PollCQ", verbs.ErrDestroyed, "the CQ was destroyed")
		}
		return 0, nil
	}
	cq.mu.Lock()
	n := min(int(cq.count.Load()), len(wc))
	for i := 0; i < n; i++ {
		wc[i] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
	}
	cq.count.Add(int32(-n))
	overrun := cq.overrun
	cq.overrun = false
	cq.mu.Unlock()
	if overrun {
		return n, errCQOverrun
	}
	return n, nil
}

var errCQOverrun = &verbs.Error{Op: "PollCQ", Err: verbs.ErrQueueFull,
	Detail: "CQ overrun: completions were lost; size the CQ for every outstanding work request"}

// Wait blocks until the CQ holds a completion.
func (cq *CQ) Wait(ctx context.Context) error {
	// A waiter may block: the driver must be receiving.
	before := cq.dev.cfg.BeforeWait
	if before != nil {
		before()
	}
	for i := 0; i < spinPolls; i++ {
		if cq.count.Load() > 0 {
			return nil
		}
		spin.Idle(i + 1)
	}
	cq.waiters.Add(1)
	defer cq.waiters.Add(-1)
	// It blocks: the driver must receive for as long as it does
	// (Device.Waiting), even if it stepped aside after the call above.
	// Counted first, then told again: a driver that steps aside and then
	// looks sees the count, or this call sees it aside.
	cq.dev.cqWaits.Add(1)
	defer cq.dev.cqWaits.Add(-1)
	if before != nil {
		before()
	}
	for {
		if cq.count.Load() > 0 {
			return nil
		}
		if cq.dead.Load() {
			return verbs.Errorf("WaitCQ", verbs.ErrDestroyed, "the CQ was destroyed")
		}
		select {
		case <-cq.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ReqNotify arms the CQ's completion channel.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq.ch == nil {
		return verbs.Errorf("ReqNotifyCQ", verbs.ErrInvalidState, "the CQ has no completion channel; pass one to CreateCQ")
	}
	cq.mu.Lock()
	cq.armed = true
	cq.solicited = solicitedOnly
	cq.mu.Unlock()
	return nil
}

// Destroy destroys the CQ.
func (cq *CQ) Destroy() error {
	if n := cq.users.Load(); n > 0 {
		return verbs.Errorf("DestroyCQ", verbs.ErrInUse, "%d QPs still use the CQ; destroy them first", n)
	}
	if !cq.dead.CompareAndSwap(false, true) {
		return verbs.Errorf("DestroyCQ", verbs.ErrDestroyed, "CQ already destroyed")
	}
	cq.dev.nCQ.Add(-1)
	remove(&cq.dev.objs, cq.dev.objs.cqs, cq)
	select {
	case cq.wake <- struct{}{}:
	default:
	}
	return nil
}
