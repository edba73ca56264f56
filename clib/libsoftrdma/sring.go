//go:build cgo && clib

package main

/*
#include "ibverbs.h"
*/
import "C"

import (
	"sync/atomic"
	"unsafe"

	"github.com/softrdma/softrdma/internal/handle"
	"github.com/softrdma/softrdma/internal/roce"
	"github.com/softrdma/softrdma/verbs"
)

// sendFeed is the Go side of a QP's send ring (ibverbs.h,
// ibverbs_sring.c): the roce.SendFeed the QP takes the ring's requests
// through. Its methods run with the QP's lock held, on whichever
// goroutine runs the QP.
type sendFeed struct {
	ring
	slots  []C.struct_srd_sslot
	bounce verbs.MR // registered: the inline data of one request at a time
	wr     verbs.SendWR
	sge    [1]verbs.SGE
}

// ring is the part of a feed both rings share (struct srd_ring): the
// words the producer and the QP exchange, as Go atomics, and the feed
// methods that only move them.
type ring struct {
	w         *C.struct_srd_ring
	discarded uint32 // requests a reset dropped, for the retired count
}

func (g *ring) word(p *C.uint32_t) *uint32 { return (*uint32)(unsafe.Pointer(p)) }

// Discard drops what waits (roce's reset).
func (g *ring) Discard() {
	h, t := atomic.LoadUint32(g.word(&g.w.head)), atomic.LoadUint32(g.word(&g.w.tail))
	g.discarded += t - h
	atomic.StoreUint32(g.word(&g.w.head), t)
}

func (g *ring) Arm(armed bool, retired uint32) {
	g.Retired(retired)
	a := uint32(0)
	if armed {
		a = 1
	}
	atomic.StoreUint32(g.word(&g.w.armed), a)
}

func (g *ring) Retired(retired uint32) {
	atomic.StoreUint32(g.word(&g.w.retired), retired+g.discarded)
}

func (g *ring) Pending() bool {
	return atomic.LoadUint32(g.word(&g.w.tail)) != atomic.LoadUint32(g.word(&g.w.head))
}

// taking returns the slots from head to tail, as counters (slot i is
// i&mask), for a Take; done stores the new head.
func (g *ring) taking() (h, t, mask uint32) {
	return atomic.LoadUint32(g.word(&g.w.head)), atomic.LoadUint32(g.word(&g.w.tail)), uint32(g.w.mask)
}

func (g *ring) done(h uint32) { atomic.StoreUint32(g.word(&g.w.head), h) }

//export srdgo_qp_set_feed
func srdgo_qp_set_feed(h C.uintptr_t, r *C.struct_srd_sring) (ret C.int) {
	defer guard("ibv_create_qp", &ret)
	o := handle.Handle(h).Value().(*qpObj)
	q, ok := o.qp.(interface{ SetSendFeed(roce.SendFeed) error })
	if !ok {
		return C.EOPNOTSUPP
	}
	mr, err := o.pd.pd.AllocMR(C.SRD_SRING_INLINE, verbs.AccessLocalWrite)
	if err != nil {
		return errnoOf("ibv_create_qp", err)
	}
	f := &sendFeed{ring: ring{w: &r.r}, slots: unsafe.Slice(r.slots, int(r.r.mask)+1), bounce: mr}
	if err := q.SetSendFeed(f); err != nil {
		mr.Dereg()
		return errnoOf("ibv_create_qp", err)
	}
	o.feed = f
	o.takeFeed = q.(interface{ TakeFeed() }).TakeFeed
	o.scq.addFeed(o)
	return 0
}

// srdgo_take_feed is the producer's call when it queued a request and
// then found the QP disarmed.
//
//export srdgo_take_feed
func srdgo_take_feed(h C.uintptr_t) {
	defer guard("ibv_post_send", new(C.int))
	handle.Handle(h).Value().(*qpObj).qp.(interface{ TakeFeed() }).TakeFeed()
}

func (f *sendFeed) Take(post func(*verbs.SendWR) error) {
	h, t, mask := f.taking()
	for ; h != t; h++ {
		s := &f.slots[h&mask]
		op, ok := sendOpcode(uint32(s.opcode))
		if !ok {
			op = ^verbs.WROpcode(0) // the producer checked: a QP refusal, should it happen
		}
		wr := &f.wr
		*wr = verbs.SendWR{
			WRID:       uint64(s.wr_id),
			Opcode:     op,
			SendFlags:  verbs.SendFlags(s.send_flags),
			RemoteAddr: uint64(s.remote_addr),
			RKey:       uint32(s.rkey),
		}
		setImmWord(wr, uint32(s.imm))
		if n := int(s.inline_len); n > 0 {
			copy(f.bounce.Bytes(), unsafe.Slice((*byte)(unsafe.Pointer(&s.data[0])), n))
			f.sge[0] = f.bounce.SGE(0, n)
			wr.SGList = f.sge[:]
		} else if n := int(s.num_sge); n > 0 {
			wr.SGList = unsafe.Slice((*verbs.SGE)(unsafe.Pointer(&s.sge[0])), n)
		}
		post(wr) // a refused request has completed in error
	}
	f.done(h)
}

// recvFeed is the Go side of a QP's receive ring: the roce.RecvFeed the
// QP takes the ring's requests through.
type recvFeed struct {
	ring
	slots []C.struct_srd_rslot
	wr    verbs.RecvWR
}

//export srdgo_qp_set_rfeed
func srdgo_qp_set_rfeed(h C.uintptr_t, r *C.struct_srd_rring) (ret C.int) {
	defer guard("ibv_create_qp", &ret)
	o := handle.Handle(h).Value().(*qpObj)
	q, ok := o.qp.(interface{ SetRecvFeed(roce.RecvFeed) error })
	if !ok {
		return C.EOPNOTSUPP
	}
	f := &recvFeed{ring: ring{w: &r.r}, slots: unsafe.Slice(r.slots, int(r.r.mask)+1)}
	if err := q.SetRecvFeed(f); err != nil {
		return errnoOf("ibv_create_qp", err)
	}
	return 0
}

//export srdgo_take_rfeed
func srdgo_take_rfeed(h C.uintptr_t) {
	defer guard("ibv_post_recv", new(C.int))
	handle.Handle(h).Value().(*qpObj).qp.(interface{ TakeRecvFeed() }).TakeRecvFeed()
}

func (f *recvFeed) Take(post func(*verbs.RecvWR) error) {
	h, t, mask := f.taking()
	for ; h != t; h++ {
		s := &f.slots[h&mask]
		f.wr = verbs.RecvWR{WRID: uint64(s.wr_id)}
		if n := int(s.num_sge); n > 0 {
			f.wr.SGList = unsafe.Slice((*verbs.SGE)(unsafe.Pointer(&s.sge[0])), n)
		}
		post(&f.wr) // a refused request has completed in error
	}
	f.done(h)
}
