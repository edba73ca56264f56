//go:build ibverbs && cgo && linux

package ibverbs

/*
#include "sr.h"
#include <stdlib.h>
*/
import "C"

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
)

// SRQ is a shared receive queue (struct ibv_srq). Its receive requests
// are written into C memory it owns and posted with one crossing per
// chain, as a QP's.
type SRQ struct {
	pd    *PD
	srq   *C.struct_ibv_srq
	maxWR uint32
	limit atomic.Uint32 // the armed limit; the kernel disarms it when it fires

	rmu   sync.Mutex
	rwr   []C.struct_ibv_recv_wr
	rsge  []C.struct_ibv_sge
	maxSG int

	mu   sync.Mutex
	life verbsobj.Life // QPs
}

// CreateSRQ creates a shared receive queue (ibv_create_srq). As the IBTA
// says, the limit in attr is ignored: Modify arms it.
func (pd *PD) CreateSRQ(attr *verbs.SRQInitAttr) (verbs.SRQ, error) {
	if err := pd.check("CreateSRQ"); err != nil {
		return nil, err
	}
	maxSGE, err := verbsobj.CheckSRQInit(attr, uint32(pd.ctx.attr.MaxSRQWR), uint32(pd.ctx.attr.MaxSRQSGE))
	if err != nil {
		return nil, err
	}
	var ia C.struct_ibv_srq_init_attr
	ia.attr.max_wr = C.uint32_t(attr.MaxWR)
	ia.attr.max_sge = C.uint32_t(maxSGE)
	s, err := C.ibv_create_srq(pd.pd, &ia)
	if s == nil {
		return nil, errnoErr("CreateSRQ", err, "ibv_create_srq")
	}
	srq := &SRQ{pd: pd, srq: s, maxWR: uint32(ia.attr.max_wr), maxSG: max(int(ia.attr.max_sge), 1)}
	n := max(int(srq.maxWR), 1)
	srq.rwr = unsafe.Slice((*C.struct_ibv_recv_wr)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.struct_ibv_recv_wr{})))), n)
	srq.rsge = unsafe.Slice((*C.struct_ibv_sge)(C.calloc(C.size_t(n*srq.maxSG), C.size_t(unsafe.Sizeof(C.struct_ibv_sge{})))), n*srq.maxSG)
	linkRecv(srq.rwr, srq.rsge, srq.maxSG)
	pd.life.Add(1)
	pd.ctx.add(unsafe.Pointer(s), srq)
	return srq, nil
}

// PostRecv posts receive requests to the SRQ (ibv_post_srq_recv).
func (srq *SRQ) PostRecv(wr *verbs.RecvWR) error {
	if wr == nil {
		return nil
	}
	srq.rmu.Lock()
	defer srq.rmu.Unlock()
	if err := srq.check("PostSRQRecv"); err != nil {
		return &verbs.PostError{WRID: wr.WRID, Err: err}
	}
	return postRecvChain(wr, srq.rwr, srq.rsge, srq.maxSG, func(n int, bad *C.int) C.int {
		return C.sr_post_srq_recv(cHandle(unsafe.Pointer(srq.srq)), cHandle(unsafe.Pointer(&srq.rwr[0])), C.int(n), bad)
	})
}

func (srq *SRQ) check(op string) error {
	if err := srq.pd.ctx.check(op); err != nil {
		return err
	}
	return srq.life.Check(op, "SRQ")
}

// Query returns the SRQ's attributes (ibv_query_srq).
func (srq *SRQ) Query() (verbs.SRQAttr, error) {
	srq.mu.Lock()
	defer srq.mu.Unlock()
	if err := srq.check("QuerySRQ"); err != nil {
		return verbs.SRQAttr{}, err
	}
	var a C.struct_ibv_srq_attr
	if r := C.ibv_query_srq(srq.srq, &a); r != 0 {
		return verbs.SRQAttr{}, errnoCode("QuerySRQ", int(r), "ibv_query_srq")
	}
	return verbs.SRQAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge), SRQLimit: uint32(a.srq_limit)}, nil
}

// Modify arms the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT).
// Resizing is refused, as by every provider (verbsobj's rule), though
// some devices could.
func (srq *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	srq.mu.Lock()
	defer srq.mu.Unlock()
	if err := srq.check("ModifySRQ"); err != nil {
		return err
	}
	var rule verbsobj.SRQLimit
	if err := rule.Modify(attr, mask, srq.maxWR); err != nil {
		return err
	}
	if mask&verbs.SRQAttrLimit == 0 {
		return nil
	}
	var a C.struct_ibv_srq_attr
	a.srq_limit = C.uint32_t(attr.SRQLimit)
	if r := C.ibv_modify_srq(srq.srq, &a, C.IBV_SRQ_LIMIT); r != 0 {
		return errnoCode("ModifySRQ", int(r), "ibv_modify_srq")
	}
	srq.limit.Store(attr.SRQLimit)
	return nil
}

// Destroy destroys the SRQ (ibv_destroy_srq); ErrInUse while QPs use it.
func (srq *SRQ) Destroy() error {
	srq.mu.Lock()
	defer srq.mu.Unlock()
	if srq.pd.ctx.closed.Load() {
		return verbs.Errorf("DestroySRQ", verbs.ErrDestroyed, "the device %s was closed, which destroyed the SRQ", srq.pd.ctx.dev.name)
	}
	if err := srq.life.End("DestroySRQ", "SRQ", "QPs"); err != nil {
		return err
	}
	return srq.release()
}

func (srq *SRQ) release() error {
	srq.pd.ctx.forget(unsafe.Pointer(srq.srq))
	srq.rmu.Lock()
	defer srq.rmu.Unlock()
	r := C.ibv_destroy_srq(srq.srq)
	C.free(unsafe.Pointer(&srq.rwr[0]))
	C.free(unsafe.Pointer(&srq.rsge[0]))
	srq.rwr, srq.rsge = nil, nil
	srq.pd.life.Add(-1)
	if r != 0 {
		return errnoCode("DestroySRQ", int(r), "ibv_destroy_srq")
	}
	return nil
}

func (srq *SRQ) order() int { return orderSRQ }
func (srq *SRQ) forceDestroy() {
	srq.mu.Lock()
	defer srq.mu.Unlock()
	srq.life.Add(-srq.life.Users())
	if srq.life.End("DestroySRQ", "SRQ", "") == nil {
		srq.release()
	}
}
