package roce

import (
	"sync"
	"sync/atomic"
)

// doorbells holds the QPs whose posts wait for RingDoorbells (see
// Device.HoldDoorbells).
type doorbells struct {
	mu    sync.Mutex
	holds int // HoldDoorbells calls not yet matched by RingDoorbells
	// held mirrors holds != 0 for the post path, which reads it without
	// the mutex: a post to an idle QP costs one atomic load when no
	// batch is on, not a device-wide lock.
	held  atomic.Bool
	qps   []*QP // the QPs with packets held, each once (QP.onDoorbell)
	spare []*QP
	ring  sync.Mutex // one RingDoorbells sends at a time: it owns stage
	stage *txStage
}

// HoldDoorbells starts a doorbell batch: until the matching RingDoorbells,
// a post to an idle QP of this device (one with nothing in flight, whose
// packets would otherwise leave at once, one system call per QP) builds
// its packets and queues them without sending. RingDoorbells then sends
// every queued packet of every QP together, in as few system calls as the
// transport allows (one sendmmsg per 256 packets on Linux). The hold is
// device-wide: posts from other goroutines in the meantime wait for the
// ring too. Holds nest. Packets that gather their payload from an MR (the
// larger messages) never wait, and a QP with packets in flight batches its
// doorbells by itself, as before.
//
// A post that returns during a hold has not been sent: a program that
// holds must ring, or its peers never see the posts.
func (d *Device) HoldDoorbells() {
	d.doorbells.mu.Lock()
	d.doorbells.holds++
	d.doorbells.held.Store(true)
	d.doorbells.mu.Unlock()
}

// RingDoorbells ends a HoldDoorbells and, when it ends the outermost hold,
// sends everything the hold kept back.
func (d *Device) RingDoorbells() {
	db := &d.doorbells
	db.mu.Lock()
	if db.holds == 0 {
		db.mu.Unlock()
		return
	}
	db.holds--
	db.held.Store(db.holds > 0)
	if db.holds > 0 || len(db.qps) == 0 {
		db.mu.Unlock()
		return
	}
	qps := db.qps
	db.qps, db.spare = db.spare[:0], nil
	db.mu.Unlock()

	db.ring.Lock()
	if db.stage == nil {
		db.stage = newTxStage()
	}
	st := db.stage
	for _, qp := range qps {
		qp.mu.Lock()
		qp.onDoorbell = false
		if !qp.destroyed && qp.tx.n > 0 {
			qp.sealLocked()
			qp.tx.compact(d, stageAll, st, nil)
		}
		qp.mu.Unlock()
	}
	st.flush(d)
	db.ring.Unlock()

	clear(qps)
	db.mu.Lock()
	if db.spare == nil {
		db.spare = qps
	}
	db.mu.Unlock()
}

// holdLocked queues qp's packets for RingDoorbells if a hold is on, and
// reports whether it did.
func (qp *QP) holdLocked() bool {
	db := &qp.dev.doorbells
	if !db.held.Load() {
		// No batch: send now. A hold that starts after this load finds
		// nothing of this post to wait for, which is right: the post
		// began before it.
		return false
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.holds == 0 {
		return false // the ring came between the load and the lock
	}
	if !qp.onDoorbell {
		qp.onDoorbell = true
		db.qps = append(db.qps, qp)
	}
	return true
}
