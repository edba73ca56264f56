//go:build cgo && clib

package main

/*
#include <stddef.h>
#include "ibverbs.h"

// Offsets into ibv_send_wr's unions that the Go side reads; checked here
// against the installed header, so a different layout fails the build.
_Static_assert(offsetof(struct ibv_send_wr, imm_data) == 36, "imm_data");
_Static_assert(offsetof(struct ibv_send_wr, wr.rdma.remote_addr) == 40, "rdma.remote_addr");
_Static_assert(offsetof(struct ibv_send_wr, wr.rdma.rkey) == 48, "rdma.rkey");
_Static_assert(offsetof(struct ibv_send_wr, wr.atomic.remote_addr) == 40, "atomic.remote_addr");
_Static_assert(offsetof(struct ibv_send_wr, wr.atomic.compare_add) == 48, "atomic.compare_add");
_Static_assert(offsetof(struct ibv_send_wr, wr.atomic.swap) == 56, "atomic.swap");
_Static_assert(offsetof(struct ibv_send_wr, wr.atomic.rkey) == 64, "atomic.rkey");
_Static_assert(offsetof(struct ibv_send_wr, wr.ud.ah) == 40, "ud.ah");
_Static_assert(offsetof(struct ibv_send_wr, wr.ud.remote_qpn) == 48, "ud.remote_qpn");
_Static_assert(offsetof(struct ibv_send_wr, wr.ud.remote_qkey) == 52, "ud.remote_qkey");
_Static_assert(offsetof(struct srd_ah, h) == sizeof(struct ibv_ah), "srd_ah.h");
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/softrdma/softrdma/internal/handle"
	"github.com/softrdma/softrdma/verbs"
)

// verbs.SGE has ibv_sge's layout, so an SG list is read in place.
var (
	_ [unsafe.Sizeof(verbs.SGE{}) - 16]byte
	_ [16 - unsafe.Sizeof(verbs.SGE{})]byte
	_ [unsafe.Offsetof(verbs.SGE{}.LKey) - 12]byte
	_ [12 - unsafe.Offsetof(verbs.SGE{}.LKey)]byte
)

// bounceSize is the inline data one post can carry through a QP's bounce
// buffer before the chain is split into several posts.
const bounceSize = 64 << 10

type qpObj struct {
	c   *ctxObj
	pd  *pdObj
	qp  verbs.QP
	typ verbs.QPType

	smu    sync.Mutex // guards the send scratch below
	swr    []verbs.SendWR
	sge    []verbs.SGE // one per inline WR: its copy in bounce
	inl    []int       // per converted WR: its index in sge, or -1
	bounce verbs.MR    // registered copy of inline data (C's may be unregistered)

	rmu sync.Mutex
	rwr []verbs.RecvWR

	feed     *sendFeed // the send ring's Go side (sring.go); nil without one
	scq      *cqObj    // the send CQ, whose polls take the send ring
	takeFeed func()    // the QP's TakeFeed
}

//export srdgo_create_qp
func srdgo_create_qp(pdh C.uintptr_t, a *C.struct_ibv_qp_init_attr, scq, rcq, srq C.uintptr_t, cptr *C.struct_ibv_qp, h *C.uintptr_t, qpn *C.uint32_t) (ret C.int) {
	defer guard("ibv_create_qp", &ret)
	p := pdOf(pdh)
	sc := handle.Handle(scq).Value().(*cqObj)
	attr := verbs.QPInitAttr{
		SendCQ: sc.cq,
		Cap: verbs.QPCap{
			MaxSendWR:     uint32(a.cap.max_send_wr),
			MaxRecvWR:     uint32(a.cap.max_recv_wr),
			MaxSendSGE:    uint32(a.cap.max_send_sge),
			MaxRecvSGE:    uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data),
		},
		QPType: verbs.QPType(a.qp_type),
		SigAll: a.sq_sig_all != 0,
	}
	if rcq != 0 {
		attr.RecvCQ = handle.Handle(rcq).Value().(*cqObj).cq
	} else {
		attr.RecvCQ = attr.SendCQ
	}
	if srq != 0 {
		attr.SRQ = handle.Handle(srq).Value().(*srqObj).srq
	}
	qp, err := p.pd.CreateQP(&attr)
	if err != nil {
		return errnoOf("ibv_create_qp", err)
	}
	if _, init, err := qp.Query(); err == nil {
		a.cap.max_send_wr = C.uint32_t(init.Cap.MaxSendWR)
		a.cap.max_recv_wr = C.uint32_t(init.Cap.MaxRecvWR)
		a.cap.max_send_sge = C.uint32_t(init.Cap.MaxSendSGE)
		a.cap.max_recv_sge = C.uint32_t(init.Cap.MaxRecvSGE)
		a.cap.max_inline_data = C.uint32_t(init.Cap.MaxInlineData)
	}
	o := &qpObj{c: p.c, pd: p, qp: qp, typ: attr.QPType, scq: sc}
	*qpn = C.uint32_t(qp.QPNum())
	*h = C.uintptr_t(p.c.add(o, unsafe.Pointer(cptr), qp, o.release))
	return 0
}

func (o *qpObj) release() {
	if o.bounce != nil {
		o.bounce.Dereg()
	}
	if o.feed != nil {
		o.scq.dropFeed(o)
		o.feed.bounce.Dereg()
	}
}

//export srdgo_destroy_qp
func srdgo_destroy_qp(h C.uintptr_t) (ret C.int) {
	defer guard("ibv_destroy_qp", &ret)
	o := handle.Handle(h).Value().(*qpObj)
	if err := o.qp.Destroy(); err != nil {
		return errnoOf("ibv_destroy_qp", err)
	}
	o.release()
	o.c.remove(handle.Handle(h), o.qp)
	return 0
}

//export srdgo_modify_qp
func srdgo_modify_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask C.int, state *C.int32_t) (ret C.int) {
	defer guard("ibv_modify_qp", &ret)
	o := handle.Handle(h).Value().(*qpObj)
	attr := verbs.QPAttr{
		QPState:          verbs.QPState(a.qp_state),
		CurQPState:       verbs.QPState(a.cur_qp_state),
		PathMTU:          verbs.MTU(a.path_mtu),
		PathMigState:     uint8(a.path_mig_state),
		QKey:             uint32(a.qkey),
		RQPSN:            uint32(a.rq_psn),
		SQPSN:            uint32(a.sq_psn),
		DestQPNum:        uint32(a.dest_qp_num),
		QPAccessFlags:    verbs.Access(a.qp_access_flags),
		AHAttr:           ahFromC(&a.ah_attr),
		AltAHAttr:        ahFromC(&a.alt_ah_attr),
		PKeyIndex:        uint16(a.pkey_index),
		AltPKeyIndex:     uint16(a.alt_pkey_index),
		EnSQDAsyncNotify: a.en_sqd_async_notify != 0,
		MaxRdAtomic:      uint8(a.max_rd_atomic),
		MaxDestRdAtomic:  uint8(a.max_dest_rd_atomic),
		MinRNRTimer:      uint8(a.min_rnr_timer),
		PortNum:          uint8(a.port_num),
		Timeout:          uint8(a.timeout),
		RetryCnt:         uint8(a.retry_cnt),
		RNRRetry:         uint8(a.rnr_retry),
		AltPortNum:       uint8(a.alt_port_num),
		AltTimeout:       uint8(a.alt_timeout),
		Cap: verbs.QPCap{
			MaxSendWR:     uint32(a.cap.max_send_wr),
			MaxRecvWR:     uint32(a.cap.max_recv_wr),
			MaxSendSGE:    uint32(a.cap.max_send_sge),
			MaxRecvSGE:    uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data),
		},
	}
	m := verbs.QPAttrMask(mask)
	if err := o.qp.Modify(&attr, m); err != nil {
		return errnoOf("ibv_modify_qp", err)
	}
	*state = C.int32_t(o.qp.State())
	return 0
}

//export srdgo_query_qp
func srdgo_query_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, init *C.struct_ibv_qp_init_attr) (ret C.int) {
	defer guard("ibv_query_qp", &ret)
	o := handle.Handle(h).Value().(*qpObj)
	q, ia, err := o.qp.Query()
	if err != nil {
		return errnoOf("ibv_query_qp", err)
	}
	qpAttrToC(a, &q)
	init.cap = a.cap
	if ia.SigAll {
		init.sq_sig_all = 1
	}
	return 0
}

// qpAttrToC writes q into a (ibv_query_qp, rdma_init_qp_attr).
func qpAttrToC(a *C.struct_ibv_qp_attr, q *verbs.QPAttr) {
	a.qp_state = uint32(q.QPState)
	a.cur_qp_state = uint32(q.CurQPState)
	a.path_mtu = uint32(q.PathMTU)
	a.path_mig_state = uint32(q.PathMigState)
	a.qkey = C.uint32_t(q.QKey)
	a.rq_psn = C.uint32_t(q.RQPSN)
	a.sq_psn = C.uint32_t(q.SQPSN)
	a.dest_qp_num = C.uint32_t(q.DestQPNum)
	a.qp_access_flags = C.uint(q.QPAccessFlags)
	a.cap.max_send_wr = C.uint32_t(q.Cap.MaxSendWR)
	a.cap.max_recv_wr = C.uint32_t(q.Cap.MaxRecvWR)
	a.cap.max_send_sge = C.uint32_t(q.Cap.MaxSendSGE)
	a.cap.max_recv_sge = C.uint32_t(q.Cap.MaxRecvSGE)
	a.cap.max_inline_data = C.uint32_t(q.Cap.MaxInlineData)
	ahToC(&a.ah_attr, &q.AHAttr)
	ahToC(&a.alt_ah_attr, &q.AltAHAttr)
	a.pkey_index = C.uint16_t(q.PKeyIndex)
	a.alt_pkey_index = C.uint16_t(q.AltPKeyIndex)
	if q.EnSQDAsyncNotify {
		a.en_sqd_async_notify = 1
	}
	if q.SQDraining {
		a.sq_draining = 1
	}
	a.max_rd_atomic = C.uint8_t(q.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(q.MaxDestRdAtomic)
	a.min_rnr_timer = C.uint8_t(q.MinRNRTimer)
	a.port_num = C.uint8_t(q.PortNum)
	a.timeout = C.uint8_t(q.Timeout)
	a.retry_cnt = C.uint8_t(q.RetryCnt)
	a.rnr_retry = C.uint8_t(q.RNRRetry)
	a.alt_port_num = C.uint8_t(q.AltPortNum)
	a.alt_timeout = C.uint8_t(q.AltTimeout)
}

// sendOpcode maps enum ibv_wr_opcode to the verbs opcode; ok is false for
// the ones softrdma does not carry (TSO, DRIVER1).
func sendOpcode(op uint32) (verbs.WROpcode, bool) {
	switch op {
	case C.IBV_WR_RDMA_WRITE:
		return verbs.WRRDMAWrite, true
	case C.IBV_WR_RDMA_WRITE_WITH_IMM:
		return verbs.WRRDMAWriteWithImm, true
	case C.IBV_WR_SEND:
		return verbs.WRSend, true
	case C.IBV_WR_SEND_WITH_IMM:
		return verbs.WRSendWithImm, true
	case C.IBV_WR_RDMA_READ:
		return verbs.WRRDMARead, true
	case C.IBV_WR_ATOMIC_CMP_AND_SWP:
		return verbs.WRAtomicCmpAndSwp, true
	case C.IBV_WR_ATOMIC_FETCH_AND_ADD:
		return verbs.WRAtomicFetchAndAdd, true
	case C.IBV_WR_SEND_WITH_INV:
		return verbs.WRSendWithInv, true
	case C.IBV_WR_LOCAL_INV:
		return verbs.WRLocalInv, true
	case C.IBV_WR_BIND_MW:
		return verbs.WRBindMW, true
	}
	return 0, false
}

// setImmWord sets what ibv_send_wr's imm_data / invalidate_rkey word means
// for s's opcode: immediate data (sent big-endian, as the program wrote
// it) or the rkey to invalidate.
func setImmWord(s *verbs.SendWR, word uint32) {
	switch s.Opcode {
	case verbs.WRSendWithInv, verbs.WRLocalInv:
		s.InvalidateRKey = word
	case verbs.WRSendWithImm, verbs.WRRDMAWriteWithImm:
		s.ImmData = bswap32(word)
	}
}

// bindFromC reads the bind_mw member of the ibv_send_wr at base (offsets
// checked against verbs.h in ibverbs.c): the window, its new rkey and
// struct ibv_mw_bind_info. ok is false for a window or region that is
// not softrdma's (NULL window).
func bindFromC(base unsafe.Pointer) (*verbs.MWBind, bool) {
	mw := *(**C.struct_srd_mw)(unsafe.Add(base, 80))
	if mw == nil {
		return nil, false
	}
	b := &verbs.MWBind{
		MW:     handle.Handle(mw.h).Value().(*mwObj).mw,
		RKey:   *(*uint32)(unsafe.Add(base, 88)),
		Addr:   *(*uint64)(unsafe.Add(base, 104)),
		Length: *(*uint64)(unsafe.Add(base, 112)),
		Access: verbs.Access(*(*uint32)(unsafe.Add(base, 120))),
	}
	if mr := *(**C.struct_srd_mr)(unsafe.Add(base, 96)); mr != nil {
		b.MR = handle.Handle(mr.h).Value().(*mrObj).mr
	}
	return b, true
}

func sgList(p *C.struct_ibv_sge, n C.int) ([]verbs.SGE, bool) {
	if n < 0 || (n > 0 && p == nil) {
		return nil, false
	}
	if n == 0 {
		return nil, true
	}
	return unsafe.Slice((*verbs.SGE)(unsafe.Pointer(p)), int(n)), true
}

// srdgo_post_send and qpObj.postSend each have one defer and one return,
// so that the compiler open-codes the defers: with the many returns of
// postSendLocked they were records made and run on every call, 50 ns of
// each ibv_post_send from C.
//
//export srdgo_post_send
func srdgo_post_send(h C.uintptr_t, wr *C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) (ret C.int) {
	defer guard("ibv_post_send", &ret)
	return handle.Handle(h).Value().(*qpObj).postSend(wr, bad)
}

func (o *qpObj) postSend(wr *C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) C.int {
	o.smu.Lock()
	defer o.smu.Unlock()
	return o.postSendLocked(wr, bad)
}

// postSendLocked converts and posts the chain wr. Precondition: o.smu held.
func (o *qpObj) postSendLocked(wr *C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) C.int {
	first := wr // the first request of the chain being converted
	o.swr, o.sge, o.inl = o.swr[:0], o.sge[:0], o.inl[:0]
	used := 0
	for w := wr; w != nil; w = w.next {
		op, ok := sendOpcode(uint32(w.opcode))
		sgl, sok := sgList(w.sg_list, w.num_sge)
		if !ok || !sok {
			// Post what precedes the bad request, then report it.
			if err := o.postSends(); err != nil {
				return postSendFailed(err, first, bad)
			}
			*bad = w
			return C.EINVAL
		}
		base := unsafe.Pointer(w)
		s := verbs.SendWR{
			WRID:      uint64(w.wr_id),
			SGList:    sgl,
			Opcode:    op,
			SendFlags: verbs.SendFlags(w.send_flags),
		}
		setImmWord(&s, *(*uint32)(unsafe.Add(base, 36)))
		switch op {
		case verbs.WRBindMW:
			b, ok := bindFromC(base)
			if !ok {
				if err := o.postSends(); err != nil {
					return postSendFailed(err, first, bad)
				}
				*bad = w
				return C.EINVAL
			}
			s.Bind = b
		case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
			s.RemoteAddr = *(*uint64)(unsafe.Add(base, 40))
			s.CompareAdd = *(*uint64)(unsafe.Add(base, 48))
			s.Swap = *(*uint64)(unsafe.Add(base, 56))
			s.RKey = *(*uint32)(unsafe.Add(base, 64))
		default:
			if o.typ == verbs.QPTypeUD {
				ah := *(*unsafe.Pointer)(unsafe.Add(base, 40))
				if ah == nil {
					if err := o.postSends(); err != nil {
						return postSendFailed(err, first, bad)
					}
					*bad = w
					return C.EINVAL
				}
				ahh := (*C.struct_srd_ah)(ah).h
				s.AH = handle.Handle(ahh).Value().(*ahObj).ah
				s.RemoteQPN = *(*uint32)(unsafe.Add(base, 48))
				s.RemoteQKey = *(*uint32)(unsafe.Add(base, 52))
			} else {
				s.RemoteAddr = *(*uint64)(unsafe.Add(base, 40))
				s.RKey = *(*uint32)(unsafe.Add(base, 48))
			}
		}
		if s.SendFlags&verbs.SendInline != 0 && op != verbs.WRRDMARead && op != verbs.WRAtomicCmpAndSwp && op != verbs.WRAtomicFetchAndAdd {
			// The program's inline data may lie in memory it never
			// registered: copy it into the QP's registered bounce buffer,
			// which the provider copies again at post, as it does inline
			// data.
			n := 0
			for _, e := range sgl {
				n += int(e.Length)
			}
			if n > bounceSize {
				if err := o.postSends(); err != nil {
					return postSendFailed(err, first, bad)
				}
				*bad = w
				return C.EINVAL
			}
			if used+n > bounceSize {
				if err := o.postSends(); err != nil {
					return postSendFailed(err, first, bad)
				}
				first, used = w, 0
			}
			if o.bounce == nil {
				mr, err := o.pd.pd.AllocMR(bounceSize, verbs.AccessLocalWrite)
				if err != nil {
					*bad = w
					return errnoOf("ibv_post_send", err)
				}
				o.bounce = mr
			}
			buf := o.bounce.Bytes()
			off := used
			for _, e := range sgl {
				if e.Length > 0 {
					used += copy(buf[used:], unsafe.Slice((*byte)(unsafe.Add(nil, uintptr(e.Addr))), int(e.Length)))
				}
			}
			o.sge = append(o.sge, o.bounce.SGE(off, n))
			o.inl = append(o.inl, len(o.sge)-1)
		} else {
			o.inl = append(o.inl, -1)
		}
		o.swr = append(o.swr, s)
	}
	if err := o.postSends(); err != nil {
		return postSendFailed(err, first, bad)
	}
	return 0
}

// postSends posts the converted chain in o.swr.
func (o *qpObj) postSends() error {
	if len(o.swr) == 0 {
		return nil
	}
	// Link the chain now: appending may have moved the slices.
	for i := range o.swr {
		o.swr[i].Next = nil
		if i+1 < len(o.swr) {
			o.swr[i].Next = &o.swr[i+1]
		}
		if k := o.inl[i]; k >= 0 {
			o.swr[i].SGList = o.sge[k : k+1]
		}
	}
	err := o.qp.PostSend(&o.swr[0])
	o.swr, o.sge, o.inl = o.swr[:0], o.sge[:0], o.inl[:0]
	return err
}

// postSendFailed sets *bad to the request a *verbs.PostError names,
// counting from first, and returns the errno.
func postSendFailed(err error, first *C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) C.int {
	*bad = first
	if pe, ok := err.(*verbs.PostError); ok {
		for i := 0; i < pe.Index && *bad != nil && (*bad).next != nil; i++ {
			*bad = (*bad).next
		}
	}
	return errnoOf("ibv_post_send", err)
}

func recvWRs(dst []verbs.RecvWR, wr *C.struct_ibv_recv_wr) ([]verbs.RecvWR, error) {
	for w := wr; w != nil; w = w.next {
		sgl, ok := sgList(w.sg_list, w.num_sge)
		if !ok {
			return dst, &verbs.PostError{Index: len(dst), WRID: uint64(w.wr_id), Err: verbs.ErrInvalidArgument}
		}
		dst = append(dst, verbs.RecvWR{WRID: uint64(w.wr_id), SGList: sgl})
	}
	for i := range dst {
		if i+1 < len(dst) {
			dst[i].Next = &dst[i+1]
		} else {
			dst[i].Next = nil
		}
	}
	return dst, nil
}

func postFailed(op string, err error, first *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	if err == nil {
		return 0
	}
	*bad = first
	if pe, ok := err.(*verbs.PostError); ok {
		for i := 0; i < pe.Index && (*bad).next != nil; i++ {
			*bad = (*bad).next
		}
	}
	return errnoOf(op, err)
}

//export srdgo_post_recv
func srdgo_post_recv(h C.uintptr_t, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) (ret C.int) {
	defer guard("ibv_post_recv", &ret)
	o := handle.Handle(h).Value().(*qpObj)
	o.rmu.Lock()
	defer o.rmu.Unlock()
	var err error
	o.rwr, err = recvWRs(o.rwr[:0], wr)
	if err == nil {
		err = o.qp.PostRecv(&o.rwr[0])
	}
	return postFailed("ibv_post_recv", err, wr, bad)
}
