package roce

// The device's objects and events over its life: every PD, CQ, SRQ and AH
// is registered (QPs and MRs are in their lookup tables), so Close can
// release whatever the application left, and asynchronous events go to one
// buffered channel (verbs.AsyncEventer).

import (
	"sync"

	"github.com/softrdma/softrdma/verbs"
)

// objects are the device's PDs, CQs, SRQs and AHs.
type objects struct {
	mu   sync.Mutex
	pds  map[*PD]struct{}
	cqs  map[*CQ]struct{}
	srqs map[*SRQ]struct{}
	ahs  map[*AH]struct{}
}

func (o *objects) init() {
	o.pds, o.cqs, o.srqs, o.ahs = map[*PD]struct{}{}, map[*CQ]struct{}{}, map[*SRQ]struct{}{}, map[*AH]struct{}{}
}

func add[T comparable](o *objects, m map[T]struct{}, x T) {
	o.mu.Lock()
	m[x] = struct{}{}
	o.mu.Unlock()
}

func remove[T comparable](o *objects, m map[T]struct{}, x T) {
	o.mu.Lock()
	delete(m, x)
	o.mu.Unlock()
}

func list[T comparable](o *objects, m map[T]struct{}) []T {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]T, 0, len(m))
	for x := range m {
		out = append(out, x)
	}
	return out
}

// AsyncEvents returns the channel of the device's asynchronous events
// (verbs.AsyncEventer); it is closed when the device is.
func (d *Device) AsyncEvents() <-chan verbs.AsyncEvent { return d.events.C() }

// Event reports an asynchronous event. It never blocks: an event the
// channel has no room for is dropped and counted (events_dropped). The
// engine raises the QP, SRQ and CQ events; the driver the port and device
// ones.
func (d *Device) Event(e verbs.AsyncEvent) {
	d.note(Note{Kind: NoteEvent, Event: e})
	if d.events.Send(e) {
		d.Counters.EventsDropped.Add(1)
	}
}

// Close stops the device and releases everything the application left:
// its QPs are destroyed (as ibv_destroy_qp: outstanding work requests are
// discarded), its memory windows deallocated, its MRs deregistered, its SRQs, AHs and CQs destroyed and
// its PDs deallocated; then the transport is closed, which ends the
// driver's receive loop, and the event channel. A driver that keeps
// receiving state of its own (an RxBatch) stops and drops it first: use
// Stop, then Release. Closing a closed device does nothing.
func (d *Device) Close() error {
	err := d.Stop()
	d.Release()
	return err
}

// Stop is the first half of Close: the device takes no more work and its
// transport closes, which ends the driver's receive loop.
func (d *Device) Stop() error {
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	return d.tr.Close()
}

// Release is the second half of Close: it releases every object the
// application left, then closes the event channel. Call it once the driver
// has stopped receiving.
func (d *Device) Release() {
	d.gsi.handler.Store(nil)
	var qps []*QP
	d.qps.each(func(qp *QP) { qps = append(qps, qp) })
	for _, qp := range qps {
		qp.Destroy()
	}
	for _, s := range list(&d.objs, d.objs.srqs) {
		s.Destroy()
	}
	var mws []*MW
	d.windows.each(func(_ uint32, mw *MW) bool {
		mws = append(mws, mw)
		return true
	})
	for _, mw := range mws {
		mw.Dealloc()
	}
	var mrs []*MR
	d.keys.each(func(k uint32, mr *MR) bool {
		if k == mr.lkey {
			mrs = append(mrs, mr)
		}
		return true
	})
	for _, mr := range mrs {
		mr.Dereg()
	}
	for _, ah := range list(&d.objs, d.objs.ahs) {
		ah.Destroy()
	}
	for _, cq := range list(&d.objs, d.objs.cqs) {
		cq.Destroy()
	}
	for _, pd := range list(&d.objs, d.objs.pds) {
		pd.Dealloc()
	}
	d.events.Close()
}
