//go:build ibverbs && cgo && linux

package ibverbs

/*
#include "sr.h"
*/
import "C"

import (
	"unsafe"

	"github.com/softrdma/softrdma/verbs"
)

// The C handles behind the objects, for code that calls libibverbs or
// librdmacm itself (a connection manager over librdmacm, a device
// feature this package does not expose). Each returns the pointer as
// unsafe.Pointer, since cgo types are private to the package that
// declares them: convert it to that package's *C.struct_ibv_...
// The pointer is valid until the object is destroyed; the caller must
// not destroy it behind the object's back.

// cHandle passes p, which points to C memory, to the data path's C calls
// as an integer, which cgo does not check for Go pointers (cgo.go).
func cHandle(p unsafe.Pointer) C.uintptr_t { return C.uintptr_t(uintptr(p)) }

// CHandle returns the struct ibv_context *.
func (c *Context) CHandle() unsafe.Pointer { return unsafe.Pointer(c.ctx) }

// CHandle returns the struct ibv_pd *.
func (pd *PD) CHandle() unsafe.Pointer { return unsafe.Pointer(pd.pd) }

// CHandle returns the struct ibv_cq *.
func (q *CQ) CHandle() unsafe.Pointer { return unsafe.Pointer(q.cq) }

// CHandle returns the struct ibv_qp *.
func (qp *QP) CHandle() unsafe.Pointer { return unsafe.Pointer(qp.qp) }

// CHandle returns the struct ibv_srq *.
func (srq *SRQ) CHandle() unsafe.Pointer { return unsafe.Pointer(srq.srq) }

// CHandle returns the struct ibv_ah *.
func (ah *AH) CHandle() unsafe.Pointer { return unsafe.Pointer(ah.ah) }

// CHandle returns the struct ibv_mr *.
func (mr *MR) CHandle() unsafe.Pointer { return unsafe.Pointer(mr.mr) }

// WrapContext makes a Context of a struct ibv_context * that other code
// opened and keeps owning (an rdma_cm_id's verbs, which librdmacm opens
// once per device and closes itself): Close destroys what was created
// through the Context and stops its event goroutine, but does not close
// the device. ctx must stay open until Close returns.
//
// The Context reads the device's asynchronous events: the owner must not
// call ibv_get_async_event on it too.
func WrapContext(ctx unsafe.Pointer, cfg Config) (*Context, error) {
	if ctx == nil {
		return nil, verbs.Errorf("ibverbs.WrapContext", verbs.ErrInvalidArgument, "ctx is nil")
	}
	c := (*C.struct_ibv_context)(ctx)
	dev := &Device{name: C.GoString(C.ibv_get_device_name(c.device)),
		guid:     beToHost64(uint64(C.ibv_get_device_guid(c.device))),
		nodeType: int(c.device.node_type), transport: int(c.device.transport_type)}
	return newContext(dev, c, cfg, false)
}

// WrapQP makes a QP of a struct ibv_qp * created on this PD by other
// code (librdmacm's rdma_create_qp), with the attributes it was created
// with (init's CQs and SRQ must be this provider's objects that the QP
// uses; Cap says the capacities it has, which size the post arrays).
// Destroy calls destroy instead of ibv_destroy_qp (for rdma_destroy_qp);
// nil means ibv_destroy_qp. The QP's state is read from the ibv_qp, so a
// QP librdmacm already moved to RTS posts at once.
func (pd *PD) WrapQP(qp unsafe.Pointer, init *verbs.QPInitAttr, destroy func() error) (*QP, error) {
	if qp == nil {
		return nil, verbs.Errorf("WrapQP", verbs.ErrInvalidArgument, "qp is nil")
	}
	if err := pd.check("WrapQP"); err != nil {
		return nil, err
	}
	scq, rcq, srq, err := pd.checkQPInit(init)
	if err != nil {
		return nil, err
	}
	q := (*C.struct_ibv_qp)(qp)
	if q.pd != pd.pd {
		return nil, verbs.Errorf("WrapQP", verbs.ErrInvalidArgument, "the QP was created on another PD")
	}
	if q.send_cq != scq.cq || q.recv_cq != rcq.cq {
		return nil, verbs.Errorf("WrapQP", verbs.ErrInvalidArgument, "init's CQs are not the QP's")
	}
	return pd.newQP(q, init, scq, rcq, srq, destroy), nil
}

// SyncState re-reads the QP's state from the device (ibv_query_qp), for
// code that moved it with ibv_modify_qp or rdma_cm calls outside this
// package.
func (qp *QP) SyncState() (verbs.QPState, error) {
	a, _, err := qp.Query()
	return a.QPState, err
}
