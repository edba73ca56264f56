package roce

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/softrdma/softrdma/internal/spin"
	"github.com/softrdma/softrdma/internal/verbsobj"
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

// CQ is a completion queue: the shared ring (verbsobj.CQRing: arming,
// overrun, destruction) filled by QPs under their own locks and drained
// by Poll, which first lets the driver receive on the polling goroutine.
type CQ struct {
	dev   *Device
	ring  verbsobj.CQRing
	users atomic.Int32 // QPs that use this CQ
}

// CreateCQ creates a completion queue.
func (d *Device) CreateCQ(cqe int, ch *verbs.CompChannel) (verbs.CQ, error) {
	if err := verbsobj.CheckCQE(cqe, maxCQE); err != nil {
		return nil, err
	}
	if d.closed.Load() {
		return nil, verbs.Errorf("CreateCQ", verbs.ErrDestroyed, "device %s is closed", d.cfg.Name)
	}
	d.nCQ.Add(1)
	cq := &CQ{dev: d}
	cq.ring.Init(cqe, ch, cq)
	add(&d.objs, d.objs.cqs, cq)
	return cq, nil
}

// CQE returns the capacity.
func (cq *CQ) CQE() int { return cq.ring.Cap() }

// Resize changes the capacity to cqe, keeping the completions it holds
// (verbs.Resizer).
func (cq *CQ) Resize(cqe int) error { return cq.ring.Resize(cqe, maxCQE) }

// push adds a completion. solicited says whether it may wake a CQ armed for
// solicited events only (solicited receives and every error).
func (cq *CQ) push(wc *verbs.WC, solicited bool) {
	res, event := cq.ring.PushHoldEvent(wc, solicited)
	switch res {
	case verbsobj.Queued:
	case verbsobj.Lost:
		cq.dev.Counters.CQOverrun.Add(1)
	case verbsobj.Overrun:
		cq.dev.Counters.CQOverrun.Add(1)
		cq.dev.Event(verbs.AsyncEvent{Type: verbs.EventCQErr, CQ: cq})
	}
	if event {
		cq.dev.held.deliver(cq)
	}
}

// heldEvents holds the completion events raised while a batch of
// received packets is handled until the batch's packets (its ACKs and
// READ responses) have left: a program woken by an event answers at once,
// and before this its answer could leave ahead of the ACK of the message
// it answered, so that the peer completed its receive before its send (a
// program that takes one event and then polls the CQ it expects, as
// perftest's ib_send_lat -e does, then polls the wrong one). Events
// raised on other goroutines during a batch wait for its end too: they
// are late by at most a batch.
//
// A batch costs two atomic adds; the lock is taken only for events. An
// event counts itself in waiting before it looks at batches, and a batch
// that ends looks at waiting after it counted itself out: one of the two
// sees the other, so no event is left behind.
type heldEvents struct {
	batches atomic.Int32 // HandleBatch calls under way
	waiting atomic.Int32 // events in deliver or in cqs
	mu      sync.Mutex   // guards cqs
	cqs     []*CQ
}

// hold begins a batch.
func (h *heldEvents) hold() { h.batches.Add(1) }

// release ends a batch; the last one under way delivers the held events.
func (h *heldEvents) release() {
	if h.batches.Add(-1) == 0 && h.waiting.Load() > 0 {
		h.mu.Lock()
		h.flushLocked()
		h.mu.Unlock()
	}
}

// deliver delivers cq's event, or holds it while a batch is under way.
func (h *heldEvents) deliver(cq *CQ) {
	h.waiting.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cqs = append(h.cqs, cq)
	h.flushLocked()
}

// flushLocked delivers the held events, in order, unless a batch is under
// way (its release delivers them). A CompChannel delivers without
// blocking. Precondition: mu held.
func (h *heldEvents) flushLocked() {
	if h.batches.Load() > 0 || len(h.cqs) == 0 {
		return
	}
	for i, cq := range h.cqs {
		h.cqs[i] = nil
		cq.ring.DeliverEvent()
	}
	h.waiting.Add(-int32(len(h.cqs)))
	h.cqs = h.cqs[:0]
}

// Poll moves up to len(wc) completions into wc.
func (cq *CQ) Poll(wc []verbs.WC) (int, error) {
	if cq.ring.Len() == 0 && !cq.ring.Dead() {
		// Receive inline: a busy poller processes the packets that would
		// complete its work itself, without a hop through Serve.
		if poll := cq.dev.cfg.Poll; poll != nil {
			poll()
		}
	}
	return cq.ring.Poll(wc)
}

// Wait blocks until the CQ holds a completion.
func (cq *CQ) Wait(ctx context.Context) error {
	// A waiter may block: the driver must be receiving.
	before := cq.dev.cfg.BeforeWait
	if before != nil {
		before()
	}
	for i := 0; i < spinPolls; i++ {
		if cq.ring.Len() > 0 {
			return nil
		}
		spin.Idle(i + 1)
	}
	// It blocks: the driver must receive for as long as it does
	// (Device.Waiting), even if it stepped aside after the call above.
	// Counted first, then told again: a driver that steps aside and then
	// looks sees the count, or this call sees it aside.
	cq.dev.cqWaits.Add(1)
	defer cq.dev.cqWaits.Add(-1)
	return cq.ring.Block(ctx, before)
}

// ReqNotify arms the CQ's completion channel. A program arms a CQ to wait
// for its event on the channel, where no poll of its drives the device:
// like Wait, it tells a driver that stepped aside for busy pollers to
// receive again (Config.OnArm, else Config.BeforeWait), or the event
// would wait for the driver's next look.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if err := cq.ring.Arm(solicitedOnly); err != nil {
		return err
	}
	if arm := cq.dev.cfg.OnArm; arm != nil {
		arm()
	} else if before := cq.dev.cfg.BeforeWait; before != nil {
		before()
	}
	return nil
}

// Destroy destroys the CQ.
func (cq *CQ) Destroy() error {
	if err := cq.ring.Destroy(cq.users.Load()); err != nil {
		return err
	}
	cq.dev.nCQ.Add(-1)
	remove(&cq.dev.objs, cq.dev.objs.cqs, cq)
	return nil
}
