//go:build ibverbs && cgo && linux

package ibverbs

/*
#include "sr.h"
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
)

// pollBatch is how many completions one ibv_poll_cq may return: the size
// of the C arrays each CQ owns.
const pollBatch = 64

// CQ is a completion queue (struct ibv_cq) on a completion channel,
// whose file descriptor waits in Go's netpoller. The CQs created with the
// same CompChannel share one channel, and the CQs created without one
// share the context's (channel.go): one goroutine per channel, which
// hands each event to its CQ.
//
// Poll crosses into C once per call: one ibv_poll_cq of up to
// min(len(wc), 64) completions into the CQ's C arrays, converted into wc
// in Go. Wait arms the CQ, polls once more (into the CQ's stash, which
// the next Poll returns first) and then sleeps until the CQ's next event,
// the context's end or Destroy. While the application's ReqNotify(true)
// waits for a solicited completion, Wait does not arm the CQ (arming for
// any completion would widen the application's arm: the device keeps the
// wider of the two); it naps and polls instead.
type CQ struct {
	ctx *Context
	cq  *C.struct_ibv_cq
	chn *compChannel
	ch  *verbs.CompChannel
	cqe int

	mu    sync.Mutex // guards the arrays and the stash
	wcs   *C.struct_ibv_wc
	flat  []C.struct_sr_wc // C memory
	stash int              // completions Wait polled: flat[stashOff:stashOff+stash]
	off   int

	overrun   atomic.Bool   // CQ_ERR arrived: the next Poll reports it
	userArmed atomic.Uint32 // armNone, armAny, armSolicited: how ReqNotify armed; the next event goes to ch

	waitMu sync.Mutex
	waitCh chan struct{} // closed at each channel event

	life verbsobj.Life // QPs using the CQ
	done chan struct{} // closed by Destroy
}

// CreateCQ creates a CQ of at least cqe entries (ibv_create_cq) on the
// completion channel of ch (the context's own if ch is nil). If ch is
// not nil, ReqNotify arms the CQ to deliver an event to it.
func (c *Context) CreateCQ(cqe int, ch *verbs.CompChannel) (verbs.CQ, error) {
	if err := c.check("CreateCQ"); err != nil {
		return nil, err
	}
	if err := verbsobj.CheckCQE(cqe, c.attr.MaxCQE); err != nil {
		return nil, err
	}
	chn, err := c.acquireChannel(ch)
	if err != nil {
		return nil, err
	}
	cq, err := C.ibv_create_cq(c.ctx, C.int(cqe), nil, chn.channel, 0)
	if cq == nil {
		c.releaseChannel(chn)
		return nil, errnoErr("CreateCQ", err, "ibv_create_cq")
	}
	q := &CQ{ctx: c, cq: cq, chn: chn, ch: ch, cqe: int(cq.cqe),
		waitCh: make(chan struct{}), done: make(chan struct{})}
	q.wcs = (*C.struct_ibv_wc)(C.calloc(pollBatch, C.size_t(unsafe.Sizeof(C.struct_ibv_wc{}))))
	q.flat = unsafe.Slice((*C.struct_sr_wc)(C.calloc(pollBatch, C.size_t(unsafe.Sizeof(C.struct_sr_wc{})))), pollBatch)
	chn.poller.attach(uintptr(q.handle()), q)
	c.add(unsafe.Pointer(cq), q)
	return q, nil
}

// handle is the CQ's key on its channel.
func (q *CQ) handle() C.uintptr_t { return C.uintptr_t(uintptr(unsafe.Pointer(q.cq))) }

// cqEvent is the channel's event for the CQ: it wakes the goroutines in
// Wait and, if the application armed the CQ, notifies its CompChannel.
func (q *CQ) cqEvent() {
	q.waitMu.Lock()
	close(q.waitCh)
	q.waitCh = make(chan struct{})
	q.waitMu.Unlock()
	if q.userArmed.Swap(armNone) != armNone && q.ch != nil {
		q.ch.Notify(q)
	}
}

// CQE is the capacity the device gave the CQ (at least what was asked).
func (q *CQ) CQE() int { return q.cqe }

// Poll moves up to len(wc) completions into wc: those Wait found first,
// then one ibv_poll_cq. It never blocks and never allocates. After the
// CQ overflowed (CQ_ERR), one Poll returns an error wrapping
// verbs.ErrQueueFull with what it moved.
func (q *CQ) Poll(wc []verbs.WC) (int, error) {
	q.mu.Lock()
	if q.life.Dead() {
		q.mu.Unlock()
		return 0, q.destroyedErr("PollCQ")
	}
	n := 0
	for q.stash > 0 && n < len(wc) {
		q.convert(&wc[n], &q.flat[q.off])
		q.off++
		q.stash--
		n++
	}
	if n < len(wc) && q.stash == 0 {
		want := min(len(wc)-n, pollBatch)
		r := int(C.sr_poll_cq(q.handle(), C.int(want), q.wcs, &q.flat[0]))
		if r < 0 {
			q.mu.Unlock()
			return n, verbs.Errorf("PollCQ", verbs.ErrInvalidState, "ibv_poll_cq failed (%d)", r)
		}
		for i := 0; i < r; i++ {
			q.convert(&wc[n], &q.flat[i])
			n++
		}
	}
	q.mu.Unlock()
	if q.overrun.Load() && q.overrun.Swap(false) {
		return n, verbs.Errorf("PollCQ", verbs.ErrQueueFull, "the CQ overflowed and completions were lost (CQ_ERR); make it larger or poll it sooner")
	}
	return n, nil
}

// wcOpcodes maps enum ibv_wc_opcode to verbs'; receive opcodes have the
// 128 bit in both.
func wcOpcode(op uint32) verbs.WCOpcode {
	switch op {
	case C.IBV_WC_SEND, C.IBV_WC_RDMA_WRITE, C.IBV_WC_RDMA_READ, C.IBV_WC_COMP_SWAP, C.IBV_WC_FETCH_ADD:
		return verbs.WCOpcode(op)
	case C.IBV_WC_RECV:
		return verbs.WCRecv
	case C.IBV_WC_RECV_RDMA_WITH_IMM:
		return verbs.WCRecvRDMAWithImm
	}
	return verbs.WCOpcode(op) // LOCAL_INV, BIND_MW, TSO: passed through
}

// convert converts one completion; an error completion also records
// that its QP went to the error state, as the device moved it there.
func (q *CQ) convert(w *verbs.WC, f *C.struct_sr_wc) {
	convertWC(w, f)
	if w.Status != verbs.WCSuccess {
		q.ctx.qpErrored(w.QPNum)
	}
}

func convertWC(w *verbs.WC, f *C.struct_sr_wc) {
	*w = verbs.WC{
		WRID:         uint64(f.wr_id),
		Status:       verbs.WCStatus(f.status),
		Opcode:       wcOpcode(uint32(f.opcode)),
		VendorErr:    uint32(f.vendor_err),
		ByteLen:      uint32(f.byte_len),
		ImmData:      uint32(f.imm),
		QPNum:        uint32(f.qp_num),
		SrcQP:        uint32(f.src_qp),
		WCFlags:      verbs.WCFlags(f.wc_flags) & (verbs.WCWithGRH | verbs.WCWithImm | verbs.WCWithInv),
		PKeyIndex:    uint16(f.pkey_index),
		SLID:         uint16(f.slid),
		SL:           uint8(f.sl),
		DLIDPathBits: uint8(f.dlid_path_bits),
	}
}

// peek polls into the stash if it is empty and reports whether the CQ
// holds a completion for Poll. Precondition: mu not held.
func (q *CQ) peek() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.life.Dead() {
		return false
	}
	if q.stash == 0 {
		r := int(C.sr_poll_cq(q.handle(), pollBatch, q.wcs, &q.flat[0]))
		if r > 0 {
			q.stash, q.off = r, 0
		}
	}
	return q.stash > 0
}

// spinPolls is how many polls Wait tries before it arms the CQ and
// sleeps.
const spinPolls = 64

// How ReqNotify armed the CQ (CQ.userArmed).
const (
	armNone = iota
	armAny
	armSolicited
)

// Wait's naps while the application's solicited-only arm is pending:
// from napMin, doubling up to napMax.
const (
	napMin = 10 * time.Microsecond
	napMax = time.Millisecond
)

// Wait blocks until the CQ holds a completion, ctx is done or the CQ is
// destroyed. It blocks no OS thread: the channel's file waits in the
// netpoller.
func (q *CQ) Wait(ctx context.Context) error {
	for i := 0; i < spinPolls; i++ {
		if q.peek() {
			return nil
		}
		if q.life.Dead() {
			return q.destroyedErr("WaitCQ")
		}
	}
	var nap *time.Timer
	napFor := napMin
	for {
		q.waitMu.Lock()
		wake := q.waitCh
		q.waitMu.Unlock()
		q.mu.Lock()
		dead := q.life.Dead()
		solicited := q.userArmed.Load() == armSolicited
		if !dead && !solicited {
			C.sr_req_notify_cq(q.cq, 0)
		}
		q.mu.Unlock()
		var napped <-chan time.Time
		if solicited {
			// The device's arm is the application's; the event it
			// raises wakes us too, the naps catch the other completions.
			if nap == nil {
				nap = time.NewTimer(napFor)
				defer nap.Stop()
			} else {
				nap.Reset(napFor)
			}
			napped = nap.C
			napFor = min(2*napFor, napMax)
		}
		if dead {
			return q.destroyedErr("WaitCQ")
		}
		if q.peek() {
			return nil
		}
		select {
		case <-wake:
		case <-napped:
		case <-ctx.Done():
			return ctx.Err()
		case <-q.done:
			return q.destroyedErr("WaitCQ")
		}
		if q.peek() {
			return nil
		}
	}
}

// ReqNotify arms the CQ (ibv_req_notify_cq): the next completion (the
// next solicited one) delivers an event to the CQ's CompChannel.
func (q *CQ) ReqNotify(solicitedOnly bool) error {
	if q.life.Dead() {
		return q.destroyedErr("ReqNotify")
	}
	if q.ch == nil {
		return verbs.Errorf("ReqNotify", verbs.ErrInvalidState, "the CQ has no completion channel to deliver the event to; pass one to CreateCQ")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.life.Dead() {
		return q.destroyedErr("ReqNotify")
	}
	s, arm := C.int(0), uint32(armAny)
	if solicitedOnly {
		s, arm = 1, armSolicited
	}
	q.userArmed.Store(arm)
	if r := C.sr_req_notify_cq(q.cq, s); r != 0 {
		return errnoCode("ReqNotify", int(r), "ibv_req_notify_cq")
	}
	if q.stash > 0 {
		// Completions Wait took off the device's CQ would not raise the
		// event the application now waits for.
		q.userArmed.Store(armNone)
		q.ch.Notify(q)
	}
	return nil
}

// Destroy destroys the CQ (ibv_destroy_cq); ErrInUse while QPs use it.
func (q *CQ) Destroy() error {
	q.mu.Lock()
	if q.ctx.closed.Load() {
		q.mu.Unlock()
		return verbs.Errorf("DestroyCQ", verbs.ErrDestroyed, "the device %s was closed, which destroyed the CQ", q.ctx.dev.name)
	}
	if err := q.life.End("DestroyCQ", "CQ", "QPs"); err != nil {
		q.mu.Unlock()
		return err
	}
	q.mu.Unlock()
	return q.release()
}

// destroyedErr is op's error on a destroyed CQ: it says whether the
// device's Close destroyed it.
func (q *CQ) destroyedErr(op string) error {
	if err := q.ctx.check(op); err != nil {
		return err
	}
	return verbs.Errorf(op, verbs.ErrDestroyed, "the CQ was destroyed")
}

// release tears the CQ down once its life ended.
func (q *CQ) release() error {
	close(q.done)
	q.ctx.forget(unsafe.Pointer(q.cq))
	q.chn.poller.detach(uintptr(q.handle()))
	q.mu.Lock()
	r := C.ibv_destroy_cq(q.cq)
	C.free(unsafe.Pointer(q.wcs))
	C.free(unsafe.Pointer(&q.flat[0]))
	q.flat = nil
	q.mu.Unlock()
	if r != 0 {
		return errnoCode("DestroyCQ", int(r), "ibv_destroy_cq")
	}
	q.ctx.releaseChannel(q.chn)
	return nil
}

func (q *CQ) order() int { return orderCQ }
func (q *CQ) forceDestroy() {
	q.mu.Lock()
	q.life.Add(-q.life.Users())
	err := q.life.End("DestroyCQ", "CQ", "")
	q.mu.Unlock()
	if err == nil {
		q.release()
	}
}
