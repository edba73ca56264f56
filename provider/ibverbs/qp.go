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

// QP is a queue pair (struct ibv_qp).
//
// The work requests of a post are written into C memory the QP owns,
// sized for its send (receive) queue when it is created: PostSend fills
// one sr_wr and its SGEs per request and crosses into C once per chain
// (once per queue-full of requests for longer chains), where the
// ibv_send_wr chain is linked and posted. PostRecv fills ibv_recv_wr
// directly. Posting allocates nothing.
type QP struct {
	ctx   *Context
	pd    *PD
	qp    *C.struct_ibv_qp
	num   uint32
	typ   verbs.QPType
	state atomic.Uint32
	init  verbs.QPInitAttr
	scq   *CQ
	rcq   *CQ
	srq   *SRQ

	// destroy, if set, destroys a QP created outside this package
	// (WrapQP) instead of ibv_destroy_qp.
	destroy func() error

	smu sync.Mutex // guards the send arrays
	// bound is the type 2 window the batch being posted binds, and
	// boundPrev its rkey before (fillBind); under smu.
	bound     *MW
	boundPrev uint32
	sin       []C.struct_sr_wr
	swr       *C.struct_ibv_send_wr
	ssge      []C.struct_ibv_sge
	sMaxSG    int

	rmu    sync.Mutex // guards the receive arrays
	rwr    []C.struct_ibv_recv_wr
	rsge   []C.struct_ibv_sge
	rMaxSG int

	mu   sync.Mutex // serialises Modify and Destroy
	life verbsobj.Life
}

// CreateQP creates a QP (ibv_create_qp). The capacities the device
// granted (at least those asked) are in the QPInitAttr Query returns.
func (pd *PD) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	if err := pd.check("CreateQP"); err != nil {
		return nil, err
	}
	scq, rcq, srq, err := pd.checkQPInit(attr)
	if err != nil {
		return nil, err
	}
	var ia C.struct_ibv_qp_init_attr
	ia.send_cq = scq.cq
	ia.recv_cq = rcq.cq
	if srq != nil {
		ia.srq = srq.srq
	}
	ia.cap.max_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	ia.cap.max_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	ia.cap.max_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	ia.cap.max_recv_sge = C.uint32_t(attr.Cap.MaxRecvSGE)
	ia.cap.max_inline_data = C.uint32_t(attr.Cap.MaxInlineData)
	ia.qp_type = C.enum_ibv_qp_type(attr.QPType)
	if attr.SigAll {
		ia.sq_sig_all = 1
	}
	q, err := C.ibv_create_qp(pd.pd, &ia)
	if q == nil {
		return nil, errnoErr("CreateQP", err, "ibv_create_qp (check Cap against QueryDevice's MaxQPWR, MaxSGE and the inline limit)")
	}
	init := *attr
	init.Cap = verbs.QPCap{MaxSendWR: uint32(ia.cap.max_send_wr), MaxRecvWR: uint32(ia.cap.max_recv_wr),
		MaxSendSGE: uint32(ia.cap.max_send_sge), MaxRecvSGE: uint32(ia.cap.max_recv_sge),
		MaxInlineData: uint32(ia.cap.max_inline_data)}
	return pd.newQP(q, &init, scq, rcq, srq, nil), nil
}

func (pd *PD) checkQPInit(attr *verbs.QPInitAttr) (scq, rcq *CQ, srq *SRQ, err error) {
	const op = "CreateQP"
	if attr == nil {
		return nil, nil, nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "attr is nil")
	}
	switch attr.QPType {
	case verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD:
	default:
		return nil, nil, nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "unknown QP type %v; use RC, UC or UD", attr.QPType)
	}
	var ok bool
	if scq, ok = attr.SendCQ.(*CQ); !ok || scq == nil {
		return nil, nil, nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "SendCQ must be a CQ of this provider (got %T)", attr.SendCQ)
	}
	if rcq, ok = attr.RecvCQ.(*CQ); !ok || rcq == nil {
		return nil, nil, nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "RecvCQ must be a CQ of this provider (got %T)", attr.RecvCQ)
	}
	if scq.ctx != pd.ctx || rcq.ctx != pd.ctx {
		return nil, nil, nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "the CQs belong to another context")
	}
	if err := scq.life.Check(op, "send CQ"); err != nil {
		return nil, nil, nil, err
	}
	if err := rcq.life.Check(op, "receive CQ"); err != nil {
		return nil, nil, nil, err
	}
	if attr.SRQ != nil {
		if srq, ok = attr.SRQ.(*SRQ); !ok || srq == nil {
			return nil, nil, nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "SRQ must be an SRQ of this provider (got %T)", attr.SRQ)
		}
		if srq.pd != pd {
			return nil, nil, nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "the SRQ belongs to another PD")
		}
		if err := srq.life.Check(op, "SRQ"); err != nil {
			return nil, nil, nil, err
		}
	}
	return scq, rcq, srq, nil
}

// newQP wraps q, allocating the C arrays of its post paths.
func (pd *PD) newQP(q *C.struct_ibv_qp, init *verbs.QPInitAttr, scq, rcq *CQ, srq *SRQ, destroy func() error) *QP {
	qp := &QP{ctx: pd.ctx, pd: pd, qp: q, num: uint32(q.qp_num), typ: init.QPType, init: *init,
		scq: scq, rcq: rcq, srq: srq, destroy: destroy}
	qp.state.Store(uint32(q.state))
	ns := max(int(init.Cap.MaxSendWR), 1)
	qp.sMaxSG = max(int(init.Cap.MaxSendSGE), 1)
	qp.sin = unsafe.Slice((*C.struct_sr_wr)(C.calloc(C.size_t(ns), C.size_t(unsafe.Sizeof(C.struct_sr_wr{})))), ns)
	qp.swr = (*C.struct_ibv_send_wr)(C.calloc(C.size_t(ns), C.size_t(unsafe.Sizeof(C.struct_ibv_send_wr{}))))
	qp.ssge = unsafe.Slice((*C.struct_ibv_sge)(C.calloc(C.size_t(ns*qp.sMaxSG), C.size_t(unsafe.Sizeof(C.struct_ibv_sge{})))), ns*qp.sMaxSG)
	if srq == nil {
		nr := max(int(init.Cap.MaxRecvWR), 1)
		qp.rMaxSG = max(int(init.Cap.MaxRecvSGE), 1)
		qp.rwr = unsafe.Slice((*C.struct_ibv_recv_wr)(C.calloc(C.size_t(nr), C.size_t(unsafe.Sizeof(C.struct_ibv_recv_wr{})))), nr)
		qp.rsge = unsafe.Slice((*C.struct_ibv_sge)(C.calloc(C.size_t(nr*qp.rMaxSG), C.size_t(unsafe.Sizeof(C.struct_ibv_sge{})))), nr*qp.rMaxSG)
		linkRecv(qp.rwr, qp.rsge, qp.rMaxSG)
	}
	pd.life.Add(1)
	scq.life.Add(1)
	rcq.life.Add(1)
	if qp.srq != nil {
		qp.srq.life.Add(1)
	}
	pd.ctx.add(unsafe.Pointer(q), qp)
	return qp
}

// linkRecv points each receive request at its SGEs and the next request
// once, so a post only fills them in.
func linkRecv(wr []C.struct_ibv_recv_wr, sge []C.struct_ibv_sge, maxSG int) {
	for i := range wr {
		wr[i].sg_list = &sge[i*maxSG]
		if i+1 < len(wr) {
			wr[i].next = &wr[i+1]
		}
	}
}

// QPNum is the QP number.
func (qp *QP) QPNum() uint32 { return qp.num }

// Type is the transport service.
func (qp *QP) Type() verbs.QPType { return qp.typ }

// State returns the state the QP was last moved to (or that an
// asynchronous error event reported), without a query.
func (qp *QP) State() verbs.QPState { return verbs.QPState(qp.state.Load()) }

// Modify changes the QP's attributes (ibv_modify_qp), validated first as
// verbs.CheckModify does so an invalid call names what is wrong.
func (qp *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if err := qp.check("ModifyQP"); err != nil {
		return err
	}
	check := attr
	if attr != nil && mask&verbs.QPAttrPort != 0 && attr.PortNum > 1 && attr.PortNum <= qp.ctx.attr.PhysPortCnt {
		a := *attr
		a.PortNum = 1 // CheckModify knows one-port devices; the kernel checks the rest
		check = &a
	}
	next, err := verbs.CheckModify(qp.State(), qp.typ, check, mask)
	if err != nil {
		return err
	}
	var ca C.struct_ibv_qp_attr
	qpAttrToC(attr, &ca)
	if r := C.ibv_modify_qp(qp.qp, &ca, C.int(mask)); r != 0 {
		return errnoCode("ModifyQP", int(r), "ibv_modify_qp to "+next.String()+" with "+mask.String())
	}
	qp.state.Store(uint32(next))
	return nil
}

// Query returns the QP's attributes (ibv_query_qp) and the attributes it
// was created with.
func (qp *QP) Query() (verbs.QPAttr, verbs.QPInitAttr, error) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if err := qp.check("QueryQP"); err != nil {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, err
	}
	var ca C.struct_ibv_qp_attr
	var ci C.struct_ibv_qp_init_attr
	const all = (1 << 21) - 1
	if r := C.ibv_query_qp(qp.qp, &ca, all, &ci); r != 0 {
		return verbs.QPAttr{}, verbs.QPInitAttr{}, errnoCode("QueryQP", int(r), "ibv_query_qp")
	}
	a := qpAttrFromC(&ca)
	qp.state.Store(uint32(a.QPState))
	init := qp.init
	init.Cap = a.Cap
	if qp.srq != nil {
		init.Cap.MaxRecvWR, init.Cap.MaxRecvSGE = 0, 0
	}
	return a, init, nil
}

func (qp *QP) check(op string) error {
	if err := qp.ctx.check(op); err != nil {
		return err
	}
	return qp.life.Check(op, "QP")
}

// wrOpcodes maps verbs' send opcodes to enum ibv_wr_opcode.
var wrOpcodes = [...]uint32{
	verbs.WRRDMAWrite:         C.IBV_WR_RDMA_WRITE,
	verbs.WRRDMAWriteWithImm:  C.IBV_WR_RDMA_WRITE_WITH_IMM,
	verbs.WRSend:              C.IBV_WR_SEND,
	verbs.WRSendWithImm:       C.IBV_WR_SEND_WITH_IMM,
	verbs.WRRDMARead:          C.IBV_WR_RDMA_READ,
	verbs.WRAtomicCmpAndSwp:   C.IBV_WR_ATOMIC_CMP_AND_SWP,
	verbs.WRAtomicFetchAndAdd: C.IBV_WR_ATOMIC_FETCH_AND_ADD,
	verbs.WRSendWithInv:       C.IBV_WR_SEND_WITH_INV,
	verbs.WRLocalInv:          C.IBV_WR_LOCAL_INV,
	verbs.WRBindMW:            C.IBV_WR_BIND_MW,
}

// PostSend posts wr and the requests chained after it (ibv_post_send),
// crossing into C once per chain.
func (qp *QP) PostSend(wr *verbs.SendWR) error {
	if wr == nil {
		return nil
	}
	if st := qp.State(); st < verbs.QPStateRTS || qp.life.Dead() || qp.ctx.closed.Load() {
		return qp.postStateErr("PostSend", wr.WRID, st)
	}
	qp.smu.Lock()
	defer qp.smu.Unlock()
	if qp.life.Dead() {
		return &verbs.PostError{Index: 0, WRID: wr.WRID, Err: verbs.Errorf("PostSend", verbs.ErrDestroyed, "the QP was destroyed")}
	}
	index := 0
	for wr != nil {
		base := index
		n := 0
		var bad error
		// A BIND_MW goes alone in its batch: a type 2 bind writes the
		// window's current rkey into its ibv_mw (fillBind), which a
		// second bind of the window in the same batch would overwrite
		// before the post, and a post that fails takes it back.
		qp.bound = nil
		for ; wr != nil && n < len(qp.sin); wr, n, index = wr.Next, n+1, index+1 {
			if wr.Opcode == verbs.WRBindMW && n > 0 {
				break
			}
			if bad = qp.fillSend(n, wr); bad != nil {
				break
			}
			if wr.Opcode == verbs.WRBindMW {
				wr, n, index = wr.Next, n+1, index+1
				break
			}
		}
		if n > 0 {
			var badIdx C.int
			if r := C.sr_post_send(cHandle(unsafe.Pointer(qp.qp)), cHandle(unsafe.Pointer(&qp.sin[0])), C.int(n), cHandle(unsafe.Pointer(qp.swr)), &qp.ssge[0], C.int(qp.sMaxSG), &badIdx); r != 0 {
				if qp.bound != nil {
					qp.bound.rkey.Store(qp.boundPrev) // the bind was not posted
				}
				i := base + int(badIdx)
				return &verbs.PostError{Index: i, WRID: uint64(qp.sin[badIdx].wr_id), Err: errnoCode("PostSend", int(r), "ibv_post_send")}
			}
		}
		if bad != nil {
			return &verbs.PostError{Index: index, WRID: wr.WRID, Err: bad}
		}
	}
	return nil
}

func (qp *QP) postStateErr(op string, wrid uint64, st verbs.QPState) error {
	if err := qp.check(op); err != nil {
		return &verbs.PostError{WRID: wrid, Err: err}
	}
	return &verbs.PostError{WRID: wrid, Err: verbs.Errorf(op, verbs.ErrInvalidState, "the QP is in %v; move it to RTS first", st)}
}

// fillBind resolves a BIND_MW request's window and region into g (the
// window's new rkey and range travel in rkey, remote_addr and bind_len).
func (qp *QP) fillBind(g *C.struct_sr_wr, b *verbs.MWBind) error {
	const op = "PostSend"
	if b == nil {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "a BIND_MW request needs Bind")
	}
	mw, ok := b.MW.(*MW)
	if !ok || mw == nil || mw.pd.ctx != qp.ctx {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "BIND_MW needs a window allocated on this device")
	}
	g.mw = mw.mw
	if b.MR != nil {
		mr, ok := b.MR.(*MR)
		if !ok || mr.pd.ctx != qp.ctx {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "BIND_MW needs an MR registered on this device")
		}
		g.bind_mr = mr.mr
	}
	g.rkey = C.uint32_t(b.RKey)
	g.remote_addr = C.uint64_t(b.Addr)
	g.bind_len = C.uint64_t(b.Length)
	g.bind_access = C.uint32_t(b.Access)
	if mw.typ == verbs.MWType2 {
		// The kernel finds the window by the rkey in ibv_mw (rxe fails
		// the bind unless it is the window's current one), which
		// libibverbs never updates for type 2: it is the previous
		// bind's. PostSend takes it back if the post fails.
		prev := mw.rkey.Swap(b.RKey)
		mw.mw.rkey = C.uint32_t(prev)
		qp.bound, qp.boundPrev = mw, prev
	}
	return nil
}

// fillSend writes wr into slot n of the send arrays, checking what
// libibverbs leaves to the device: the SGE count, the opcode and UD's
// address handle.
func (qp *QP) fillSend(n int, wr *verbs.SendWR) error {
	const op = "PostSend"
	if len(wr.SGList) > qp.sMaxSG {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "%d SGEs; the QP takes at most %d (Cap.MaxSendSGE)", len(wr.SGList), qp.sMaxSG)
	}
	if int(wr.Opcode) >= len(wrOpcodes) {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "unknown opcode %v", wr.Opcode)
	}
	g := &qp.sin[n]
	g.wr_id = C.uint64_t(wr.WRID)
	g.opcode = C.uint32_t(wrOpcodes[wr.Opcode])
	g.flags = C.uint32_t(wr.SendFlags)
	g.num_sge = C.uint32_t(len(wr.SGList))
	g.imm = C.uint32_t(wr.ImmData)
	g.inv_rkey = C.uint32_t(wr.InvalidateRKey)
	g.remote_addr = C.uint64_t(wr.RemoteAddr)
	g.rkey = C.uint32_t(wr.RKey)
	g.compare_add = C.uint64_t(wr.CompareAdd)
	g.swap = C.uint64_t(wr.Swap)
	g.ah = nil
	g.mw, g.bind_mr = nil, nil
	if wr.Opcode == verbs.WRBindMW {
		if err := qp.fillBind(g, wr.Bind); err != nil {
			return err
		}
	}
	sg := qp.ssge[n*qp.sMaxSG:]
	var total uint64
	for i := range wr.SGList {
		s := &wr.SGList[i]
		sg[i].addr = C.uint64_t(s.Addr)
		sg[i].length = C.uint32_t(s.Length)
		sg[i].lkey = C.uint32_t(s.LKey)
		total += uint64(s.Length)
	}
	switch wr.Opcode {
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		if qp.typ != verbs.QPTypeRC {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "atomics need an RC QP, not %v", qp.typ)
		}
		if err := verbsobj.CheckAtomic(op, total, wr.RemoteAddr); err != nil {
			return err
		}
	case verbs.WRRDMARead:
		if qp.typ != verbs.QPTypeRC {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "RDMA READ needs an RC QP, not %v", qp.typ)
		}
	}
	if qp.typ == verbs.QPTypeUD {
		ah, ok := wr.AH.(*AH)
		if !ok || ah == nil {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "a UD send needs an AH of this provider (got %T)", wr.AH)
		}
		g.ah = ah.ah
		g.remote_qpn = C.uint32_t(wr.RemoteQPN)
		g.remote_qkey = C.uint32_t(wr.RemoteQKey)
	}
	return nil
}

// PostRecv posts receive requests (ibv_post_recv), crossing into C once
// per chain.
func (qp *QP) PostRecv(wr *verbs.RecvWR) error {
	if wr == nil {
		return nil
	}
	if st := qp.State(); st == verbs.QPStateReset || qp.life.Dead() || qp.ctx.closed.Load() {
		return qp.postStateErr("PostRecv", wr.WRID, st)
	}
	if qp.srq != nil {
		return &verbs.PostError{WRID: wr.WRID, Err: verbs.Errorf("PostRecv", verbs.ErrInvalidArgument, "the QP takes its receives from an SRQ; post to the SRQ")}
	}
	qp.rmu.Lock()
	defer qp.rmu.Unlock()
	if qp.life.Dead() {
		return &verbs.PostError{WRID: wr.WRID, Err: verbs.Errorf("PostRecv", verbs.ErrDestroyed, "the QP was destroyed")}
	}
	return postRecvChain(wr, qp.rwr, qp.rsge, qp.rMaxSG, func(n int, bad *C.int) C.int {
		return C.sr_post_recv(cHandle(unsafe.Pointer(qp.qp)), cHandle(unsafe.Pointer(&qp.rwr[0])), C.int(n), bad)
	})
}

// postRecvChain fills the receive arrays with wr's chain, a queue-full at
// a time, and posts each batch with post.
func postRecvChain(wr *verbs.RecvWR, wrs []C.struct_ibv_recv_wr, sges []C.struct_ibv_sge, maxSG int, post func(n int, bad *C.int) C.int) error {
	index := 0
	for wr != nil {
		base, n := index, 0
		var bad error
		for ; wr != nil && n < len(wrs); wr, n, index = wr.Next, n+1, index+1 {
			if len(wr.SGList) > maxSG {
				bad = verbs.Errorf("PostRecv", verbs.ErrInvalidArgument, "%d SGEs; the queue takes at most %d (MaxRecvSGE)", len(wr.SGList), maxSG)
				break
			}
			w := &wrs[n]
			w.wr_id = C.uint64_t(wr.WRID)
			w.num_sge = C.int(len(wr.SGList))
			sg := sges[n*maxSG:]
			for i := range wr.SGList {
				s := &wr.SGList[i]
				sg[i].addr = C.uint64_t(s.Addr)
				sg[i].length = C.uint32_t(s.Length)
				sg[i].lkey = C.uint32_t(s.LKey)
			}
		}
		if n > 0 {
			var badIdx C.int
			r := post(n, &badIdx)
			if n < len(wrs) {
				wrs[n-1].next = &wrs[n] // sr_post_recv ended the chain there
			}
			if r != 0 {
				return &verbs.PostError{Index: base + int(badIdx), WRID: uint64(wrs[badIdx].wr_id), Err: errnoCode("PostRecv", int(r), "ibv_post_recv")}
			}
		}
		if bad != nil {
			return &verbs.PostError{Index: index, WRID: wr.WRID, Err: bad}
		}
	}
	return nil
}

// Destroy destroys the QP (ibv_destroy_qp, or the function WrapQP was
// given).
func (qp *QP) Destroy() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.ctx.closed.Load() {
		return verbs.Errorf("DestroyQP", verbs.ErrDestroyed, "the device %s was closed, which destroyed the QP", qp.ctx.dev.name)
	}
	if err := qp.life.End("DestroyQP", "QP", ""); err != nil {
		return err
	}
	return qp.release()
}

// release destroys the QP once its life ended. Precondition: mu held.
func (qp *QP) release() error {
	qp.ctx.forget(unsafe.Pointer(qp.qp))
	// Posts in flight finish before the arrays go.
	qp.smu.Lock()
	qp.rmu.Lock()
	defer qp.smu.Unlock()
	defer qp.rmu.Unlock()
	var err error
	if qp.destroy != nil {
		err = qp.destroy()
	} else if r := C.ibv_destroy_qp(qp.qp); r != 0 {
		err = errnoCode("DestroyQP", int(r), "ibv_destroy_qp")
	}
	C.free(unsafe.Pointer(&qp.sin[0]))
	C.free(unsafe.Pointer(qp.swr))
	C.free(unsafe.Pointer(&qp.ssge[0]))
	if qp.rwr != nil {
		C.free(unsafe.Pointer(&qp.rwr[0]))
		C.free(unsafe.Pointer(&qp.rsge[0]))
	}
	qp.sin, qp.ssge, qp.rwr, qp.rsge = nil, nil, nil, nil
	qp.pd.life.Add(-1)
	qp.scq.life.Add(-1)
	qp.rcq.life.Add(-1)
	if qp.srq != nil {
		qp.srq.life.Add(-1)
	}
	return err
}

func (qp *QP) order() int { return orderQP }
func (qp *QP) forceDestroy() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.life.End("DestroyQP", "QP", "") == nil {
		qp.release()
	}
}

func qpAttrToC(a *verbs.QPAttr, c *C.struct_ibv_qp_attr) {
	c.qp_state = C.enum_ibv_qp_state(a.QPState)
	c.cur_qp_state = C.enum_ibv_qp_state(a.CurQPState)
	c.path_mtu = C.enum_ibv_mtu(a.PathMTU)
	c.path_mig_state = C.enum_ibv_mig_state(a.PathMigState)
	c.qkey = C.uint32_t(a.QKey)
	c.rq_psn = C.uint32_t(a.RQPSN)
	c.sq_psn = C.uint32_t(a.SQPSN)
	c.dest_qp_num = C.uint32_t(a.DestQPNum)
	c.qp_access_flags = C.uint(a.QPAccessFlags)
	c.cap.max_send_wr = C.uint32_t(a.Cap.MaxSendWR)
	c.cap.max_recv_wr = C.uint32_t(a.Cap.MaxRecvWR)
	c.cap.max_send_sge = C.uint32_t(a.Cap.MaxSendSGE)
	c.cap.max_recv_sge = C.uint32_t(a.Cap.MaxRecvSGE)
	c.cap.max_inline_data = C.uint32_t(a.Cap.MaxInlineData)
	ahAttrToC(&a.AHAttr, &c.ah_attr)
	ahAttrToC(&a.AltAHAttr, &c.alt_ah_attr)
	c.pkey_index = C.uint16_t(a.PKeyIndex)
	c.alt_pkey_index = C.uint16_t(a.AltPKeyIndex)
	if a.EnSQDAsyncNotify {
		c.en_sqd_async_notify = 1
	}
	c.max_rd_atomic = C.uint8_t(a.MaxRdAtomic)
	c.max_dest_rd_atomic = C.uint8_t(a.MaxDestRdAtomic)
	c.min_rnr_timer = C.uint8_t(a.MinRNRTimer)
	c.port_num = C.uint8_t(a.PortNum)
	c.timeout = C.uint8_t(a.Timeout)
	c.retry_cnt = C.uint8_t(a.RetryCnt)
	c.rnr_retry = C.uint8_t(a.RNRRetry)
	c.alt_port_num = C.uint8_t(a.AltPortNum)
	c.alt_timeout = C.uint8_t(a.AltTimeout)
}

func qpAttrFromC(c *C.struct_ibv_qp_attr) verbs.QPAttr {
	return verbs.QPAttr{
		QPState:      verbs.QPState(c.qp_state),
		CurQPState:   verbs.QPState(c.cur_qp_state),
		PathMTU:      verbs.MTU(c.path_mtu),
		PathMigState: uint8(c.path_mig_state),
		QKey:         uint32(c.qkey),
		RQPSN:        uint32(c.rq_psn),
		SQPSN:        uint32(c.sq_psn),
		DestQPNum:    uint32(c.dest_qp_num),
		QPAccessFlags: verbs.Access(c.qp_access_flags) &
			(verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic),
		Cap: verbs.QPCap{MaxSendWR: uint32(c.cap.max_send_wr), MaxRecvWR: uint32(c.cap.max_recv_wr),
			MaxSendSGE: uint32(c.cap.max_send_sge), MaxRecvSGE: uint32(c.cap.max_recv_sge),
			MaxInlineData: uint32(c.cap.max_inline_data)},
		AHAttr:           ahAttrFromC(&c.ah_attr),
		AltAHAttr:        ahAttrFromC(&c.alt_ah_attr),
		PKeyIndex:        uint16(c.pkey_index),
		AltPKeyIndex:     uint16(c.alt_pkey_index),
		EnSQDAsyncNotify: c.en_sqd_async_notify != 0,
		SQDraining:       c.sq_draining != 0,
		MaxRdAtomic:      uint8(c.max_rd_atomic),
		MaxDestRdAtomic:  uint8(c.max_dest_rd_atomic),
		MinRNRTimer:      uint8(c.min_rnr_timer),
		PortNum:          uint8(c.port_num),
		Timeout:          uint8(c.timeout),
		RetryCnt:         uint8(c.retry_cnt),
		RNRRetry:         uint8(c.rnr_retry),
		AltPortNum:       uint8(c.alt_port_num),
		AltTimeout:       uint8(c.alt_timeout),
	}
}
