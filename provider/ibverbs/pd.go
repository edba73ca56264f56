//go:build ibverbs && cgo && linux

package ibverbs

/*
#include "sr.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
)

// PD is a protection domain (struct ibv_pd).
type PD struct {
	ctx  *Context
	pd   *C.struct_ibv_pd
	life verbsobj.Life // MRs, QPs, SRQs and AHs
	mu   sync.Mutex
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() (verbs.PD, error) {
	if err := c.check("AllocPD"); err != nil {
		return nil, err
	}
	p, err := C.ibv_alloc_pd(c.ctx)
	if p == nil {
		return nil, errnoErr("AllocPD", err, "ibv_alloc_pd")
	}
	pd := &PD{ctx: c, pd: p}
	c.add(unsafe.Pointer(p), pd)
	return pd, nil
}

// Context returns the context the PD belongs to.
func (pd *PD) Context() verbs.Context { return pd.ctx }

func (pd *PD) check(op string) error {
	if err := pd.ctx.check(op); err != nil {
		return err
	}
	return pd.life.Check(op, "PD")
}

// Dealloc frees the PD (ibv_dealloc_pd); ErrInUse while objects remain.
func (pd *PD) Dealloc() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.ctx.closed.Load() {
		return verbs.Errorf("DeallocPD", verbs.ErrDestroyed, "the device %s was closed, which released the PD", pd.ctx.dev.name)
	}
	if err := pd.life.End("DeallocPD", "PD", "MRs, QPs, SRQs or AHs"); err != nil {
		return err
	}
	pd.ctx.forget(unsafe.Pointer(pd.pd))
	if r := C.ibv_dealloc_pd(pd.pd); r != 0 {
		return errnoCode("DeallocPD", int(r), "ibv_dealloc_pd")
	}
	return nil
}

func (pd *PD) order() int { return orderPD }
func (pd *PD) forceDestroy() {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.life.Dead() {
		return
	}
	pd.life.Add(-pd.life.Users())
	pd.life.End("DeallocPD", "PD", "")
	C.ibv_dealloc_pd(pd.pd)
}

// MR is a registered memory region (struct ibv_mr).
type MR struct {
	pd     *PD
	mr     *C.struct_ibv_mr
	buf    []byte
	addr   uint64
	lkey   uint32
	rkey   uint32
	access verbs.Access
	pin    runtime.Pinner
	mapped bool // buf came from mmap (AllocMR)
	life   verbsobj.Life
	mu     sync.Mutex
}

// RegMR registers buf (ibv_reg_mr) and pins it until Dereg.
func (pd *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if err := pd.check("RegMR"); err != nil {
		return nil, err
	}
	if err := verbsobj.CheckAccess("RegMR", access); err != nil {
		return nil, err
	}
	if err := verbsobj.CheckLength("RegMR", len(buf)); err != nil {
		return nil, err
	}
	mr := &MR{pd: pd, buf: buf, access: access}
	mr.pin.Pin(&buf[0])
	if err := mr.register("RegMR"); err != nil {
		mr.pin.Unpin()
		return nil, err
	}
	return mr, nil
}

// AllocMR maps length bytes of anonymous memory and registers them.
func (pd *PD) AllocMR(length int, access verbs.Access) (verbs.MR, error) {
	if err := pd.check("AllocMR"); err != nil {
		return nil, err
	}
	if err := verbsobj.CheckAccess("AllocMR", access); err != nil {
		return nil, err
	}
	if err := verbsobj.CheckLength("AllocMR", length); err != nil {
		return nil, err
	}
	buf, err := syscall.Mmap(-1, 0, length, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, errnoErr("AllocMR", err, "mmap")
	}
	mr := &MR{pd: pd, buf: buf, access: access, mapped: true}
	if err := mr.register("AllocMR"); err != nil {
		syscall.Munmap(buf)
		return nil, err
	}
	return mr, nil
}

func (mr *MR) register(op string) error {
	acc := C.uint(mr.access)
	if mr.pd.ctx.cfg.RelaxedOrdering {
		acc |= C.IBV_ACCESS_RELAXED_ORDERING
	}
	m, err := C.sr_reg_mr(mr.pd.pd, unsafe.Pointer(&mr.buf[0]), C.size_t(len(mr.buf)), acc)
	if m == nil {
		return errnoErr(op, err, "ibv_reg_mr (ENOMEM or EPERM: raise the locked-memory limit, ulimit -l)")
	}
	mr.mr = m
	mr.addr = uint64(uintptr(unsafe.Pointer(&mr.buf[0])))
	mr.lkey, mr.rkey = uint32(m.lkey), uint32(m.rkey)
	mr.pd.life.Add(1)
	mr.pd.ctx.add(unsafe.Pointer(m), mr)
	return nil
}

// Addr is the virtual address of the first byte.
func (mr *MR) Addr() uint64 { return mr.addr }

// Len is the length of the region.
func (mr *MR) Len() int { return len(mr.buf) }

// LKey is the local key.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey is the remote key.
func (mr *MR) RKey() uint32 { return mr.rkey }

// Access is the access the region was registered with.
func (mr *MR) Access() verbs.Access { return mr.access }

// Bytes returns the registered memory.
func (mr *MR) Bytes() []byte { return mr.buf }

// SGE returns the scatter/gather element for length bytes at off.
func (mr *MR) SGE(off, length int) verbs.SGE {
	return verbs.SGE{Addr: mr.addr + uint64(off), Length: uint32(length), LKey: mr.lkey}
}

// Dereg deregisters the region (ibv_dereg_mr), unpins RegMR memory and
// unmaps AllocMR memory.
func (mr *MR) Dereg() error {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.pd.ctx.closed.Load() {
		return verbs.Errorf("DeregMR", verbs.ErrDestroyed, "the device %s was closed, which deregistered the MR", mr.pd.ctx.dev.name)
	}
	if err := mr.life.Check("DeregMR", "MR"); err != nil {
		return err // deregistered already: the C object is gone
	}
	if n := mr.life.Users(); n > 0 {
		return verbs.Errorf("DeregMR", verbs.ErrInUse, "%d objects still use the MR", n)
	}
	// The kernel refuses a region with memory windows bound (rxe:
	// EINVAL): the MR then stays registered and usable. It leaves the
	// context's table first: once freed, its address may be another
	// object's.
	mr.pd.ctx.forget(unsafe.Pointer(mr.mr))
	if r := C.ibv_dereg_mr(mr.mr); r != 0 {
		mr.pd.ctx.add(unsafe.Pointer(mr.mr), mr)
		return errnoCode("DeregMR", int(r), "ibv_dereg_mr (memory windows bound to the region make it fail)")
	}
	mr.life.End("DeregMR", "MR", "objects")
	mr.afterDereg()
	return nil
}

// release deregisters; mu held and life ended.
func (mr *MR) release() error {
	mr.pd.ctx.forget(unsafe.Pointer(mr.mr))
	if r := C.ibv_dereg_mr(mr.mr); r != 0 {
		return errnoCode("DeregMR", int(r), "ibv_dereg_mr")
	}
	mr.afterDereg()
	return nil
}

// afterDereg releases what the registration held: the PD's count and
// the memory's pin or mapping.
func (mr *MR) afterDereg() {
	mr.pd.life.Add(-1)
	if mr.mapped {
		syscall.Munmap(mr.buf)
	} else {
		mr.pin.Unpin()
	}
}

func (mr *MR) order() int { return orderMR }
func (mr *MR) forceDestroy() {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.life.End("DeregMR", "MR", "") == nil {
		mr.release()
	}
}

// AH is an address handle (struct ibv_ah).
type AH struct {
	pd   *PD
	ah   *C.struct_ibv_ah
	attr verbs.AHAttr
	life verbsobj.Life
	mu   sync.Mutex
}

// MW is a memory window (struct ibv_mw).
type MW struct {
	pd   *PD
	mw   *C.struct_ibv_mw
	typ  verbs.MWType
	rkey atomic.Uint32 // type 2: the rkey of the latest bind posted (libibverbs leaves mw->rkey)
	life verbsobj.Life
	mu   sync.Mutex
}

// AllocMW allocates a memory window (ibv_alloc_mw); ErrNotSupported on a
// device without them.
func (pd *PD) AllocMW(typ verbs.MWType) (verbs.MW, error) {
	if err := pd.check("AllocMW"); err != nil {
		return nil, err
	}
	if typ != verbs.MWType1 && typ != verbs.MWType2 {
		return nil, verbs.Errorf("AllocMW", verbs.ErrInvalidArgument, "%v: windows are type 1 or type 2", typ)
	}
	m, err := C.sr_alloc_mw(pd.pd, C.int(typ))
	if m == nil {
		return nil, errnoErr("AllocMW", err, "ibv_alloc_mw")
	}
	mw := &MW{pd: pd, mw: m, typ: typ}
	mw.rkey.Store(uint32(m.rkey))
	pd.life.Add(1)
	pd.ctx.add(unsafe.Pointer(m), mw)
	return mw, nil
}

// Type returns the window's type.
func (mw *MW) Type() verbs.MWType { return mw.typ }

// RKey returns the window's rkey: a type 1 window's as ibv_bind_mw left
// it, a type 2 window's as the latest BIND_MW posted chose it.
func (mw *MW) RKey() uint32 {
	if mw.typ == verbs.MWType1 {
		mw.mu.Lock()
		defer mw.mu.Unlock()
		return uint32(mw.mw.rkey)
	}
	return mw.rkey.Load()
}

// BindType1 binds a type 1 window with ibv_bind_mw (verbs.BindMW calls
// it: kernel devices bind type 1 windows through that verb, not through
// a BIND_MW request).
func (mw *MW) BindType1(qp verbs.QP, wrID uint64, flags verbs.SendFlags, b verbs.MWBind) (uint32, error) {
	const op = "BindMW"
	q, ok := qp.(*QP)
	if !ok || q.ctx != mw.pd.ctx {
		return 0, verbs.Errorf(op, verbs.ErrInvalidArgument, "the QP is not of the window's device")
	}
	var mr *C.struct_ibv_mr
	if b.MR != nil {
		m, ok := b.MR.(*MR)
		if !ok || m.pd.ctx != mw.pd.ctx {
			return 0, verbs.Errorf(op, verbs.ErrInvalidArgument, "the MR is not of the window's device")
		}
		mr = m.mr
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if err := mw.life.Check(op, "MW"); err != nil {
		return 0, err
	}
	q.smu.Lock()
	defer q.smu.Unlock()
	var rkey C.uint32_t
	if r := C.sr_bind_mw(q.qp, mw.mw, C.uint64_t(wrID), C.uint(flags), mr, C.uint64_t(b.Addr), C.uint64_t(b.Length), C.uint(b.Access), &rkey); r != 0 {
		return 0, errnoCode(op, int(r), "ibv_bind_mw")
	}
	return uint32(rkey), nil
}

// Dealloc frees the window (ibv_dealloc_mw).
func (mw *MW) Dealloc() error {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.pd.ctx.closed.Load() {
		return verbs.Errorf("DeallocMW", verbs.ErrDestroyed, "the device %s was closed, which released the window", mw.pd.ctx.dev.name)
	}
	if err := mw.life.End("DeallocMW", "MW", ""); err != nil {
		return err
	}
	return mw.release()
}

// release deallocates; mu held and life ended.
func (mw *MW) release() error {
	mw.pd.ctx.forget(unsafe.Pointer(mw.mw))
	if r := C.sr_dealloc_mw(mw.mw); r != 0 {
		return errnoCode("DeallocMW", int(r), "ibv_dealloc_mw")
	}
	mw.pd.life.Add(-1)
	return nil
}

func (mw *MW) order() int { return orderMW }
func (mw *MW) forceDestroy() {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.life.End("DeallocMW", "MW", "") == nil {
		mw.release()
	}
}

// CreateAH creates an address handle (ibv_create_ah). On an Ethernet
// (RoCE) port it needs a global route, as the kernel requires.
func (pd *PD) CreateAH(attr *verbs.AHAttr) (verbs.AH, error) {
	if err := pd.check("CreateAH"); err != nil {
		return nil, err
	}
	if attr == nil {
		return nil, verbs.Errorf("CreateAH", verbs.ErrInvalidArgument, "attr is nil")
	}
	if pd.ctx.link == verbs.LinkLayerEthernet {
		if err := verbsobj.CheckAH(attr); err != nil {
			return nil, err
		}
	}
	a := *attr
	if a.PortNum == 0 {
		a.PortNum = 1
	}
	var ca C.struct_ibv_ah_attr
	ahAttrToC(&a, &ca)
	h, err := C.ibv_create_ah(pd.pd, &ca)
	if h == nil {
		return nil, errnoErr("CreateAH", err, "ibv_create_ah (is the destination GID reachable from GID index "+itoa(int(a.GRH.SGIDIndex))+"?)")
	}
	ah := &AH{pd: pd, ah: h, attr: a}
	pd.life.Add(1)
	pd.ctx.add(unsafe.Pointer(h), ah)
	return ah, nil
}

// Attr returns the attributes the AH was created with.
func (ah *AH) Attr() verbs.AHAttr { return ah.attr }

// Destroy destroys the AH (ibv_destroy_ah).
func (ah *AH) Destroy() error {
	ah.mu.Lock()
	defer ah.mu.Unlock()
	if ah.pd.ctx.closed.Load() {
		return verbs.Errorf("DestroyAH", verbs.ErrDestroyed, "the device %s was closed, which destroyed the AH", ah.pd.ctx.dev.name)
	}
	if err := ah.life.End("DestroyAH", "AH", ""); err != nil {
		return err
	}
	return ah.release()
}

func (ah *AH) release() error {
	ah.pd.ctx.forget(unsafe.Pointer(ah.ah))
	if r := C.ibv_destroy_ah(ah.ah); r != 0 {
		return errnoCode("DestroyAH", int(r), "ibv_destroy_ah")
	}
	ah.pd.life.Add(-1)
	return nil
}

func (ah *AH) order() int { return orderAH }
func (ah *AH) forceDestroy() {
	ah.mu.Lock()
	defer ah.mu.Unlock()
	if ah.life.End("DestroyAH", "AH", "") == nil {
		ah.release()
	}
}

func ahAttrToC(a *verbs.AHAttr, c *C.struct_ibv_ah_attr) {
	*(*[16]byte)(unsafe.Pointer(&c.grh.dgid)) = a.GRH.DGID
	c.grh.flow_label = C.uint32_t(a.GRH.FlowLabel)
	c.grh.sgid_index = C.uint8_t(a.GRH.SGIDIndex)
	c.grh.hop_limit = C.uint8_t(a.GRH.HopLimit)
	if a.IsGlobal && a.GRH.HopLimit == 0 {
		c.grh.hop_limit = 64 // a zero hop limit never leaves the host
	}
	c.grh.traffic_class = C.uint8_t(a.GRH.TrafficClass)
	c.dlid = C.uint16_t(a.DLID)
	c.sl = C.uint8_t(a.SL)
	c.src_path_bits = C.uint8_t(a.SrcPathBits)
	c.static_rate = C.uint8_t(a.StaticRate)
	c.is_global = 0
	if a.IsGlobal {
		c.is_global = 1
	}
	c.port_num = C.uint8_t(a.PortNum)
}

func ahAttrFromC(c *C.struct_ibv_ah_attr) verbs.AHAttr {
	return verbs.AHAttr{
		GRH: verbs.GlobalRoute{
			DGID:         verbs.GID(*(*[16]byte)(unsafe.Pointer(&c.grh.dgid))),
			FlowLabel:    uint32(c.grh.flow_label),
			SGIDIndex:    uint8(c.grh.sgid_index),
			HopLimit:     uint8(c.grh.hop_limit),
			TrafficClass: uint8(c.grh.traffic_class),
		},
		DLID:        uint16(c.dlid),
		SL:          uint8(c.sl),
		SrcPathBits: uint8(c.src_path_bits),
		StaticRate:  uint8(c.static_rate),
		IsGlobal:    c.is_global != 0,
		PortNum:     uint8(c.port_num),
	}
}
