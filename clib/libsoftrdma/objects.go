//go:build cgo && clib

package main

/*
#include <string.h>
#include "ibverbs.h"
*/
import "C"

import (
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/softrdma/softrdma/internal/handle"
	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
)

func sysWrite(fd int, b []byte) (int, error) {
	for {
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		return n, err
	}
}

func ctxOf(h C.uintptr_t) *ctxObj { return handle.Handle(h).Value().(*ctxObj) }

// ---- device and port queries ----

//export srdgo_query_device
func srdgo_query_device(h C.uintptr_t, a *C.struct_ibv_device_attr) (ret C.int) {
	defer guard("ibv_query_device", &ret)
	d, err := ctxOf(h).ctx.QueryDevice()
	if err != nil {
		return errnoOf("ibv_query_device", err)
	}
	fw := unsafe.Slice((*byte)(unsafe.Pointer(&a.fw_ver[0])), len(a.fw_ver))
	copy(fw[:len(fw)-1], d.FWVer)
	a.node_guid = C.__be64(bswap64(d.NodeGUID))
	a.sys_image_guid = C.__be64(bswap64(d.SysImageGUID))
	a.max_mr_size = C.uint64_t(d.MaxMRSize)
	a.page_size_cap = C.uint64_t(d.PageSizeCap)
	a.vendor_id = C.uint32_t(d.VendorID)
	a.vendor_part_id = C.uint32_t(d.VendorPartID)
	a.hw_ver = C.uint32_t(d.HWVer)
	a.max_qp = C.int(d.MaxQP)
	a.max_qp_wr = C.int(d.MaxQPWR)
	a.device_cap_flags = C.uint(d.DeviceCapFlags)
	a.max_sge = C.int(d.MaxSGE)
	a.max_sge_rd = C.int(d.MaxSGERd)
	a.max_cq = C.int(d.MaxCQ)
	a.max_cqe = C.int(d.MaxCQE)
	a.max_mr = C.int(d.MaxMR)
	a.max_pd = C.int(d.MaxPD)
	a.max_qp_rd_atom = C.int(d.MaxQPRdAtom)
	a.max_ee_rd_atom = C.int(d.MaxEECRdAtom)
	a.max_res_rd_atom = C.int(d.MaxResRdAtom)
	a.max_qp_init_rd_atom = C.int(d.MaxQPInitRdAtom)
	a.max_ee_init_rd_atom = C.int(d.MaxEEInitRdAtom)
	a.atomic_cap = uint32(d.AtomicCap)
	a.max_ee = C.int(d.MaxEE)
	a.max_rdd = C.int(d.MaxRDD)
	a.max_mw = C.int(d.MaxMW)
	a.max_raw_ipv6_qp = C.int(d.MaxRawIPv6QP)
	a.max_raw_ethy_qp = C.int(d.MaxRawEthyQP)
	a.max_mcast_grp = C.int(d.MaxMcastGrp)
	a.max_mcast_qp_attach = C.int(d.MaxMcastQPAttach)
	a.max_total_mcast_qp_attach = C.int(d.MaxTotalMcastQPAttach)
	a.max_ah = C.int(d.MaxAH)
	a.max_fmr = C.int(d.MaxFMR)
	a.max_map_per_fmr = C.int(d.MaxMapPerFMR)
	a.max_srq = C.int(d.MaxSRQ)
	a.max_srq_wr = C.int(d.MaxSRQWR)
	a.max_srq_sge = C.int(d.MaxSRQSGE)
	a.max_pkeys = C.uint16_t(d.MaxPKeys)
	a.local_ca_ack_delay = C.uint8_t(d.LocalCADelayAck)
	a.phys_port_cnt = C.uint8_t(d.PhysPortCnt)
	return 0
}

//export srdgo_query_port
func srdgo_query_port(h C.uintptr_t, port C.uint8_t, a *C.struct_ibv_port_attr) (ret C.int) {
	defer guard("ibv_query_port", &ret)
	p, err := ctxOf(h).ctx.QueryPort(uint8(port))
	if errors.Is(err, verbs.ErrNotFound) {
		return C.EINVAL // a port the device does not have, as the kernel says
	}
	if err != nil {
		return errnoOf("ibv_query_port", err)
	}
	a.state = uint32(p.State)
	a.max_mtu = uint32(p.MaxMTU)
	a.active_mtu = uint32(p.ActiveMTU)
	a.gid_tbl_len = C.int(p.GIDTblLen)
	a.port_cap_flags = C.uint32_t(p.PortCapFlags)
	a.max_msg_sz = C.uint32_t(p.MaxMsgSz)
	a.bad_pkey_cntr = C.uint32_t(p.BadPKeyCntr)
	a.qkey_viol_cntr = C.uint32_t(p.QKeyViolCntr)
	a.pkey_tbl_len = C.uint16_t(p.PKeyTblLen)
	a.lid = C.uint16_t(p.LID)
	a.sm_lid = C.uint16_t(p.SMLID)
	a.lmc = C.uint8_t(p.LMC)
	a.max_vl_num = C.uint8_t(p.MaxVLNum)
	a.sm_sl = C.uint8_t(p.SMSL)
	a.subnet_timeout = C.uint8_t(p.SubnetTimeout)
	a.init_type_reply = C.uint8_t(p.InitTypeReply)
	a.active_width = C.uint8_t(p.ActiveWidth)
	a.active_speed = C.uint8_t(p.ActiveSpeed)
	a.phys_state = C.uint8_t(p.PhysState)
	a.link_layer = C.uint8_t(p.LinkLayer)
	return 0
}

//export srdgo_query_gid
func srdgo_query_gid(h C.uintptr_t, port C.uint8_t, index C.int, raw *C.uint8_t) (ret C.int) {
	defer guard("ibv_query_gid", &ret)
	g, err := ctxOf(h).ctx.QueryGID(uint8(port), int(index))
	if err != nil {
		return errnoOf("ibv_query_gid", err)
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(raw)), 16), g[:])
	return 0
}

// ---- PD and MR ----

type pdObj struct {
	c  *ctxObj
	pd verbs.PD
}

func pdOf(h C.uintptr_t) *pdObj { return handle.Handle(h).Value().(*pdObj) }

//export srdgo_alloc_pd
func srdgo_alloc_pd(ch C.uintptr_t, h *C.uintptr_t) (ret C.int) {
	defer guard("ibv_alloc_pd", &ret)
	c := ctxOf(ch)
	pd, err := c.ctx.AllocPD()
	if err != nil {
		return errnoOf("ibv_alloc_pd", err)
	}
	*h = C.uintptr_t(c.add(&pdObj{c: c, pd: pd}, nil, nil, nil))
	return 0
}

//export srdgo_dealloc_pd
func srdgo_dealloc_pd(h C.uintptr_t) (ret C.int) {
	defer guard("ibv_dealloc_pd", &ret)
	p := pdOf(h)
	if err := p.pd.Dealloc(); err != nil {
		return errnoOf("ibv_dealloc_pd", err)
	}
	p.c.remove(handle.Handle(h), nil)
	return 0
}

type mrObj struct {
	c       *ctxObj
	mr      verbs.MR
	span    span // the program's memory it registers
	inPlace bool // shm registered it in place (RegMapped)
}

//export srdgo_reg_mr
func srdgo_reg_mr(pdh C.uintptr_t, addr unsafe.Pointer, length C.size_t, access C.int, h *C.uintptr_t, lkey, rkey *C.uint32_t) (ret C.int) {
	defer guard("ibv_reg_mr", &ret)
	p := pdOf(pdh)
	var buf []byte
	if length > 0 {
		buf = unsafe.Slice((*byte)(addr), int(length))
	}
	m := &mrObj{c: p.c, span: span{uintptr(addr), uintptr(length)}}
	regions.mu.Lock()
	defer regions.mu.Unlock()
	mr, inPlace, err := regMR(p.pd, buf, verbs.Access(access), !regions.overlaps(m.span, nil))
	if err != nil {
		return errnoOf("ibv_reg_mr", err)
	}
	m.mr, m.inPlace = mr, inPlace
	regions.add(m)
	*lkey, *rkey = C.uint32_t(mr.LKey()), C.uint32_t(mr.RKey())
	*h = C.uintptr_t(p.c.add(m, nil, nil, m.closed))
	return 0
}

// inPlaceRegistrar is shm's PD: it registers a C program's own pages in
// place (shm.PD.RegMapped), so that peers reach them with a memcpy rather
// than a copy through this process per operation.
type inPlaceRegistrar interface {
	RegMapped(addr unsafe.Pointer, length int, access verbs.Access) (verbs.MR, error)
}

// sharedDereger is shm's in-place MR: DeregShared leaves its pages
// shared rather than moving them back, which could lose the writes of
// another registration of the same pages.
type sharedDereger interface{ DeregShared() error }

// regMR registers the program's memory buf: in place where the provider
// can, the pages allow it and mayMove says no other registration uses
// them (moving pages loses a write made meanwhile); else as RegMR does.
func regMR(pd verbs.PD, buf []byte, access verbs.Access, mayMove bool) (verbs.MR, bool, error) {
	if r, ok := pd.(inPlaceRegistrar); ok && mayMove && len(buf) > 0 {
		mr, err := r.RegMapped(unsafe.Pointer(&buf[0]), len(buf), access)
		if !errors.Is(err, verbs.ErrNotSupported) {
			return mr, err == nil, err
		}
	}
	mr, err := pd.RegMR(buf, access)
	return mr, false, err
}

// span is a range of the program's memory.
type span struct{ addr, n uintptr }

func (a span) overlaps(b span) bool { return a.addr < b.addr+b.n && b.addr < a.addr+a.n }

// regions are the program's live registrations, every device's: a
// registration in place must not move pages another one uses.
var regions = liveRegions{live: map[*mrObj]bool{}}

type liveRegions struct {
	mu   sync.Mutex
	live map[*mrObj]bool
}

func (r *liveRegions) add(m *mrObj) { r.live[m] = true }

// overlaps reports whether a live registration other than self uses
// memory of s. Precondition: mu held.
func (r *liveRegions) overlaps(s span, self *mrObj) bool {
	for m := range r.live {
		if m != self && m.span.overlaps(s) {
			return true
		}
	}
	return false
}

// deregister deregisters m: in place, without moving its pages back
// while another live registration uses them.
func (m *mrObj) deregister() error {
	regions.mu.Lock()
	defer regions.mu.Unlock()
	dereg := m.mr.Dereg
	if d, ok := m.mr.(sharedDereger); ok && m.inPlace && regions.overlaps(m.span, m) {
		dereg = d.DeregShared
	}
	if err := dereg(); err != nil {
		return err
	}
	delete(regions.live, m)
	return nil
}

// closed is ibv_close_device's release of a region the program left
// registered: deregistered here, by the rule above, rather than by the
// device's Close, which knows nothing of other devices' registrations.
func (m *mrObj) closed() {
	if m.deregister() != nil {
		regions.mu.Lock()
		delete(regions.live, m)
		regions.mu.Unlock()
	}
}

//export srdgo_dereg_mr
func srdgo_dereg_mr(h C.uintptr_t) (ret C.int) {
	defer guard("ibv_dereg_mr", &ret)
	m := handle.Handle(h).Value().(*mrObj)
	if err := m.deregister(); err != nil {
		return errnoOf("ibv_dereg_mr", err)
	}
	m.c.remove(handle.Handle(h), nil)
	return 0
}

// srdgo_rereg_mr moves the region oldh to PD pdh with access, keeping
// its keys (ibv_rereg_mr); EOPNOTSUPP for a provider whose regions cannot
// change (verbs.Rereger).
//
//export srdgo_rereg_mr
func srdgo_rereg_mr(h, pdh C.uintptr_t, access C.int) (ret C.int) {
	defer guard("ibv_rereg_mr", &ret)
	m := handle.Handle(h).Value().(*mrObj)
	r, ok := m.mr.(verbs.Rereger)
	if !ok {
		return C.EOPNOTSUPP
	}
	return errnoOf("ibv_rereg_mr", r.Rereg(pdOf(pdh).pd, verbs.Access(access)))
}

// mwObj is a memory window (struct srd_mw's handle).
type mwObj struct {
	c  *ctxObj
	mw verbs.MW
}

//export srdgo_alloc_mw
func srdgo_alloc_mw(pdh C.uintptr_t, typ C.int, h *C.uintptr_t, rkey *C.uint32_t) (ret C.int) {
	defer guard("ibv_alloc_mw", &ret)
	p := pdOf(pdh)
	mw, err := p.pd.AllocMW(verbs.MWType(typ))
	if err != nil {
		return errnoOf("ibv_alloc_mw", err)
	}
	*rkey = C.uint32_t(mw.RKey())
	*h = C.uintptr_t(p.c.add(&mwObj{c: p.c, mw: mw}, nil, nil, nil))
	return 0
}

//export srdgo_dealloc_mw
func srdgo_dealloc_mw(h C.uintptr_t) (ret C.int) {
	defer guard("ibv_dealloc_mw", &ret)
	m := handle.Handle(h).Value().(*mwObj)
	if err := m.mw.Dealloc(); err != nil {
		return errnoOf("ibv_dealloc_mw", err)
	}
	m.c.remove(handle.Handle(h), nil)
	return 0
}

// ---- completion channels ----

// chanObj is a completion channel: the provider hands each of its CQs'
// events to event (verbs.NewCompChannelFunc), which writes the ibv_cq
// pointer into the pipe whose read end is the channel's fd. It writes on
// the provider's goroutine, after the batch of packets that raised the
// event has been answered (an earlier version forwarded events through a
// goroutine, a hop that woke a thread per event), or on the C thread
// that receives for the device in ibv_get_cq_event (srd_event_spin).
type chanObj struct {
	c       *ctxObj
	ch      *verbs.CompChannel
	wfd     int
	pending *uint32 // struct srd_channel's count of records not yet claimed
	// The hand-off (struct srd_channel's hand and hand_cq): a thread
	// spinning in ibv_get_cq_event takes the event without the pipe.
	hand   *uint32
	handCQ *uint64
	// mu guards the write end: stop waits for a write under way, and no
	// write follows it (the C side then closes the descriptor, whose
	// number a later open may take).
	mu     sync.RWMutex
	closed bool
}

// eventSpin is how long ibv_get_cq_event receives for a device before it
// blocks (SOFTRDMA_EVENT_SPIN sets it): about what a wait that ends in a
// sleep costs, two wake-ups across a VM's CPUs (the receive loop's and
// the program's thread's, 30-45 µs each), so that such a wait costs at
// most twice the best choice made in hindsight. With 50 µs, ib_send_lat
// -e's 99th percentile was 8-9 times the Go tool's (615-660 µs against
// 72-76); with 100 µs, about twice (137-163 µs).
const eventSpin = 100 * time.Microsecond

// outsideWaiter is implemented by the soft and shm providers' devices: a thread
// that waits for an event receives without holding ACKs for a post
// (soft.Device.ProgressWaiting), and one about to block outside Go brings
// the receive loop back for it (BeginWait).
type outsideWaiter interface {
	ProgressWaiting()
	BeginWait()
	EndWait()
}

//export srdgo_create_channel
func srdgo_create_channel(ch C.uintptr_t, wfd C.int, pending *C.uint32_t, spinNS *C.int64_t, hand *C.uint32_t, handCQ *C.uint64_t, h *C.uintptr_t) (ret C.int) {
	defer guard("ibv_create_comp_channel", &ret)
	c := ctxOf(ch)
	// The provider's goroutine must never wait for the program: a pipe
	// the program does not read (8192 events) drops further events, as a
	// full verbs.CompChannel does.
	if err := syscall.SetNonblock(int(wfd), true); err != nil {
		return errnoOf("ibv_create_comp_channel", err)
	}
	o := &chanObj{c: c, wfd: int(wfd), pending: (*uint32)(unsafe.Pointer(pending)),
		hand: (*uint32)(unsafe.Pointer(hand)), handCQ: (*uint64)(unsafe.Pointer(handCQ))}
	o.ch = verbs.NewCompChannelFunc(o.event)
	*spinNS = 0
	if _, ok := c.ctx.(verbs.Progresser); ok {
		spin := eventSpin
		if opener.Env.EventSpinSet {
			spin = opener.Env.EventSpin
		}
		*spinNS = C.int64_t(spin)
	}
	*h = C.uintptr_t(c.add(o, nil, nil, o.stop))
	return 0
}

func (o *chanObj) stop() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
}

// event writes cq's record. It runs on the provider's goroutine, which
// may hold a QP's lock: the context's lock, which nothing holds while it
// calls into the provider, is safe to take here.
func (o *chanObj) event(cq verbs.CQ) {
	o.c.mu.Lock()
	p := o.c.cptr[cq]
	o.c.mu.Unlock()
	if p == nil {
		return // destroyed since
	}
	o.mu.RLock()
	defer o.mu.RUnlock()
	if o.closed {
		return
	}
	if atomic.CompareAndSwapUint32(o.hand, C.SRD_HAND_OPEN, C.SRD_HAND_BUSY) {
		*o.handCQ = uint64(uintptr(p))
		atomic.StoreUint32(o.hand, C.SRD_HAND_FULL)
		return
	}
	var rec [8]byte
	*(*uint64)(unsafe.Pointer(&rec[0])) = uint64(uintptr(p))
	// Counted once written: a thread in ibv_get_cq_event reads only a
	// record it claimed from the count, so it never blocks in read. 8
	// bytes go whole or, in a full pipe, not at all.
	if n, _ := sysWrite(o.wfd, rec[:]); n == len(rec) {
		atomic.AddUint32(o.pending, 1)
	}
}

// srdgo_channel_progress receives for the channel's device once: a
// spin of ibv_get_cq_event (srd_event_spin).
//
//export srdgo_channel_progress
func srdgo_channel_progress(h C.uintptr_t) {
	defer guard("ibv_get_cq_event", nil)
	o := handle.Handle(h).Value().(*chanObj)
	switch p := o.c.ctx.(type) {
	case outsideWaiter:
		p.ProgressWaiting()
	case verbs.Progresser:
		p.Progress()
	}
}

// srdgo_channel_block brackets ibv_get_cq_event's sleep in poll (begin
// 1, then 0): the device's receive loop receives while the thread sleeps.
//
//export srdgo_channel_block
func srdgo_channel_block(h C.uintptr_t, begin C.int) {
	defer guard("ibv_get_cq_event", nil)
	o := handle.Handle(h).Value().(*chanObj)
	if w, ok := o.c.ctx.(outsideWaiter); ok {
		if begin != 0 {
			w.BeginWait()
		} else {
			w.EndWait()
		}
	}
}

//export srdgo_destroy_channel
func srdgo_destroy_channel(h C.uintptr_t) (ret C.int) {
	defer guard("ibv_destroy_comp_channel", &ret)
	o := handle.Handle(h).Value().(*chanObj)
	o.stop()
	o.c.remove(handle.Handle(h), nil)
	return 0
}

// ---- CQ ----

type cqObj struct {
	c  *ctxObj
	cq verbs.CQ
	rx packetCounter // the CQ's device, if it counts received packets
	mu sync.Mutex    // guards wc, the poll scratch, and feeds
	wc []verbs.WC
	// feeds are the QPs whose send rings a poll takes first: the QPs
	// with a send ring that complete to this CQ. fed is struct srd_cq's
	// word that says a post queued requests in one of them since.
	feeds []*qpObj
	fed   *uint32
}

func (o *cqObj) addFeed(q *qpObj) {
	o.mu.Lock()
	o.feeds = append(o.feeds, q)
	o.mu.Unlock()
}

// dropFeed removes q; it waits for a poll that may be taking q's ring,
// whose memory C frees after the QP is destroyed.
func (o *cqObj) dropFeed(q *qpObj) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, f := range o.feeds {
		if f == q {
			o.feeds = append(o.feeds[:i], o.feeds[i+1:]...)
			return
		}
	}
}

//export srdgo_create_cq
func srdgo_create_cq(ch C.uintptr_t, cqe C.int, chh C.uintptr_t, cptr *C.struct_ibv_cq, h *C.uintptr_t, actual *C.int32_t) (ret C.int) {
	defer guard("ibv_create_cq", &ret)
	c := ctxOf(ch)
	var comp *verbs.CompChannel
	if chh != 0 {
		comp = handle.Handle(chh).Value().(*chanObj).ch
	}
	cq, err := c.ctx.CreateCQ(int(cqe), comp)
	if err != nil {
		return errnoOf("ibv_create_cq", err)
	}
	o := &cqObj{c: c, cq: cq, wc: make([]verbs.WC, 64)}
	o.fed = (*uint32)(unsafe.Pointer(&(*C.struct_srd_cq)(unsafe.Pointer(cptr)).fed))
	o.rx, _ = c.ctx.(packetCounter)
	*h = C.uintptr_t(c.add(o, unsafe.Pointer(cptr), cq, nil))
	*actual = C.int32_t(cq.CQE())
	return 0
}

// srdgo_resize_cq resizes the CQ (ibv_resize_cq); a provider whose CQs
// cannot (verbs.Resizer) takes a smaller size as it is and refuses a
// larger one.
//
//export srdgo_resize_cq
func srdgo_resize_cq(h C.uintptr_t, cqe C.int, actual *C.int32_t) (ret C.int) {
	defer guard("ibv_resize_cq", &ret)
	o := handle.Handle(h).Value().(*cqObj)
	r, ok := o.cq.(verbs.Resizer)
	switch {
	case ok:
		if err := r.Resize(int(cqe)); err != nil {
			return errnoOf("ibv_resize_cq", err)
		}
	case int(cqe) > o.cq.CQE():
		return C.EOPNOTSUPP
	}
	*actual = C.int32_t(o.cq.CQE())
	return 0
}

//export srdgo_destroy_cq
func srdgo_destroy_cq(h C.uintptr_t) (ret C.int) {
	defer guard("ibv_destroy_cq", &ret)
	o := handle.Handle(h).Value().(*cqObj)
	if err := o.cq.Destroy(); err != nil {
		return errnoOf("ibv_destroy_cq", err)
	}
	o.c.remove(handle.Handle(h), o.cq)
	return 0
}

// packetCounter is implemented by the soft provider's devices: how many
// packets the device has received (soft.Device.PacketsReceived).
type packetCounter interface{ PacketsReceived() uint64 }

// emptyPollTries is how many receive attempts one ibv_poll_cq makes on an
// empty CQ of a device that receives by system call (packetCounter).
// It tells the C side how many it made (*tries): ibverbs.c's idle policy
// counts receive attempts, not calls.
const emptyPollTries = 4

//export srdgo_poll_cq
func srdgo_poll_cq(h C.uintptr_t, n C.int, out *C.struct_ibv_wc, tries *C.int) (ret C.int) {
	defer guardNeg("ibv_poll_cq", &ret)
	o := handle.Handle(h).Value().(*cqObj)
	o.mu.Lock()
	defer o.mu.Unlock()
	if int(n) > len(o.wc) {
		o.wc = make([]verbs.WC, int(n))
	}
	// Requests the program queued in its QPs' send rings since the last
	// poll are taken now, as a Go program's PostSend would have taken
	// them: their packets are built while the QP waits for its next
	// acknowledgement and leave with it. Left in the ring, they were
	// built when that acknowledgement came in, in the path between it
	// and the packets it lets go: ib_send_bw -s 64 moved 0.73 of the Go
	// tool's bytes, ib_write_bw -s 4096 0.81, and 0.94 and 0.97 taken
	// here (docs/results/2026-11-27-clib-perf.md).
	if atomic.LoadUint32(o.fed) != 0 && atomic.SwapUint32(o.fed, 0) != 0 {
		// (A post that sets fed after the swap is the next poll's.)
		for _, q := range o.feeds {
			if q.feed.Pending() {
				q.takeFeed()
			}
		}
	}
	rx := o.rx
	var seen uint64
	if rx != nil {
		seen = rx.PacketsReceived()
	}
	got, err := o.cq.Poll(o.wc[:n])
	if rx != nil && got == 0 && err == nil && n > 0 {
		// An empty poll on a UDP device is a receive system call made
		// inside the crossing, and on this VM a system call inside a
		// crossing costs 150-400 ns more than the same call from C or
		// Go, and the crossing back after it another ~150 (an empty
		// crossing is 50-65 ns; docs/results/2026-11-27-clib-perf.md).
		// A few receive attempts per crossing spread that over them: the
		// C program finds a packet that arrives while it polls almost as
		// soon as a Go poller would. It stops at the first packet the
		// device receives, whichever CQ it completes to (counted from
		// before the first attempt), so a program that polls several
		// CQs in turn goes on to the others at once.
		k := 1
		for ; got == 0 && err == nil && k < emptyPollTries && rx.PacketsReceived() == seen; k++ {
			got, err = o.cq.Poll(o.wc[:n])
		}
		*tries = C.int(k)
	}
	// An overrun is no failure of the poll: the CQ reported it with
	// IBV_EVENT_CQ_ERR when it happened, rxe's ibv_poll_cq goes on after
	// one, and the completions this poll took are the program's.
	if err != nil && !errors.Is(err, verbsobj.ErrCQOverrun) {
		return -errnoOf("ibv_poll_cq", err)
	}
	dst := unsafe.Slice(out, got)
	for i := range got {
		wcToC(&dst[i], &o.wc[i])
	}
	return C.int(got)
}

// wcToC fills the program's ibv_wc. Its imm_data is in network order,
// verbs.WC's in host order; with IBV_WC_WITH_INV the same word holds the
// invalidated rkey in host order.
func wcToC(d *C.struct_ibv_wc, w *verbs.WC) {
	d.wr_id = C.uint64_t(w.WRID)
	d.status = uint32(w.Status)
	d.opcode = uint32(w.Opcode)
	d.vendor_err = C.uint32_t(w.VendorErr)
	d.byte_len = C.uint32_t(w.ByteLen)
	imm := (*uint32)(unsafe.Pointer(&d.anon0))
	switch {
	case w.WCFlags&verbs.WCWithInv != 0:
		*imm = w.ImmData
	default:
		*imm = bswap32(w.ImmData)
	}
	d.qp_num = C.uint32_t(w.QPNum)
	d.src_qp = C.uint32_t(w.SrcQP)
	d.wc_flags = C.uint(w.WCFlags)
	d.pkey_index = C.uint16_t(w.PKeyIndex)
	d.slid = C.uint16_t(w.SLID)
	d.sl = C.uint8_t(w.SL)
	d.dlid_path_bits = C.uint8_t(w.DLIDPathBits)
}

//export srdgo_req_notify_cq
func srdgo_req_notify_cq(h C.uintptr_t, solicited C.int) (ret C.int) {
	defer guard("ibv_req_notify_cq", &ret)
	o := handle.Handle(h).Value().(*cqObj)
	// The program arms a CQ to block outside the library next (in
	// ibv_get_cq_event or poll() on the channel's fd), where no poll of
	// its drives the device: arming tells a driver that stepped aside for
	// busy pollers to receive again (soft's ReqNotify, shm's). This used
	// to call Wait with a done context for that, which spins before it
	// looks at the context: 7.5 µs per call on softrdma_lo and 3.4 ms on
	// shm0, paid by every message of an event-driven program.
	if err := o.cq.ReqNotify(solicited != 0); err != nil {
		return errnoOf("ibv_req_notify_cq", err)
	}
	return 0
}

// ---- SRQ ----

type srqObj struct {
	c   *ctxObj
	srq verbs.SRQ
	mu  sync.Mutex
	rwr []verbs.RecvWR
}

//export srdgo_create_srq
func srdgo_create_srq(pdh C.uintptr_t, a *C.struct_ibv_srq_init_attr, h *C.uintptr_t) (ret C.int) {
	defer guard("ibv_create_srq", &ret)
	p := pdOf(pdh)
	srq, err := p.pd.CreateSRQ(&verbs.SRQInitAttr{
		MaxWR:    uint32(a.attr.max_wr),
		MaxSGE:   uint32(a.attr.max_sge),
		SRQLimit: uint32(a.attr.srq_limit),
	})
	if err != nil {
		return errnoOf("ibv_create_srq", err)
	}
	if q, err := srq.Query(); err == nil {
		a.attr.max_wr = C.uint32_t(q.MaxWR)
		a.attr.max_sge = C.uint32_t(q.MaxSGE)
	}
	*h = C.uintptr_t(p.c.add(&srqObj{c: p.c, srq: srq}, nil, nil, nil))
	return 0
}

//export srdgo_modify_srq
func srdgo_modify_srq(h C.uintptr_t, a *C.struct_ibv_srq_attr, mask C.int) (ret C.int) {
	defer guard("ibv_modify_srq", &ret)
	s := handle.Handle(h).Value().(*srqObj)
	return errnoOf("ibv_modify_srq", s.srq.Modify(&verbs.SRQAttr{
		MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge), SRQLimit: uint32(a.srq_limit),
	}, verbs.SRQAttrMask(mask)))
}

//export srdgo_query_srq
func srdgo_query_srq(h C.uintptr_t, a *C.struct_ibv_srq_attr) (ret C.int) {
	defer guard("ibv_query_srq", &ret)
	s := handle.Handle(h).Value().(*srqObj)
	q, err := s.srq.Query()
	if err != nil {
		return errnoOf("ibv_query_srq", err)
	}
	a.max_wr, a.max_sge, a.srq_limit = C.uint32_t(q.MaxWR), C.uint32_t(q.MaxSGE), C.uint32_t(q.SRQLimit)
	return 0
}

//export srdgo_destroy_srq
func srdgo_destroy_srq(h C.uintptr_t) (ret C.int) {
	defer guard("ibv_destroy_srq", &ret)
	s := handle.Handle(h).Value().(*srqObj)
	if err := s.srq.Destroy(); err != nil {
		return errnoOf("ibv_destroy_srq", err)
	}
	s.c.remove(handle.Handle(h), s.srq)
	return 0
}

//export srdgo_post_srq_recv
func srdgo_post_srq_recv(h C.uintptr_t, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) (ret C.int) {
	defer guard("ibv_post_srq_recv", &ret)
	s := handle.Handle(h).Value().(*srqObj)
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	s.rwr, err = recvWRs(s.rwr[:0], wr)
	if err == nil {
		err = s.srq.PostRecv(&s.rwr[0])
	}
	return postFailed("ibv_post_srq_recv", err, wr, bad)
}

// ---- AH ----

type ahObj struct {
	c  *ctxObj
	ah verbs.AH
}

//export srdgo_create_ah
func srdgo_create_ah(pdh C.uintptr_t, a *C.struct_ibv_ah_attr, h *C.uintptr_t) (ret C.int) {
	defer guard("ibv_create_ah", &ret)
	p := pdOf(pdh)
	attr := ahFromC(a)
	ah, err := p.pd.CreateAH(&attr)
	if err != nil {
		return errnoOf("ibv_create_ah", err)
	}
	*h = C.uintptr_t(p.c.add(&ahObj{c: p.c, ah: ah}, nil, nil, nil))
	return 0
}

//export srdgo_destroy_ah
func srdgo_destroy_ah(h C.uintptr_t) (ret C.int) {
	defer guard("ibv_destroy_ah", &ret)
	a := handle.Handle(h).Value().(*ahObj)
	if err := a.ah.Destroy(); err != nil {
		return errnoOf("ibv_destroy_ah", err)
	}
	a.c.remove(handle.Handle(h), nil)
	return 0
}

func ahFromC(a *C.struct_ibv_ah_attr) verbs.AHAttr {
	var g verbs.GID
	copy(g[:], unsafe.Slice((*byte)(unsafe.Pointer(&a.grh.dgid)), 16))
	return verbs.AHAttr{
		GRH: verbs.GlobalRoute{
			DGID:         g,
			FlowLabel:    uint32(a.grh.flow_label),
			SGIDIndex:    uint8(a.grh.sgid_index),
			HopLimit:     uint8(a.grh.hop_limit),
			TrafficClass: uint8(a.grh.traffic_class),
		},
		DLID:        uint16(a.dlid),
		SL:          uint8(a.sl),
		SrcPathBits: uint8(a.src_path_bits),
		StaticRate:  uint8(a.static_rate),
		IsGlobal:    a.is_global != 0,
		PortNum:     uint8(a.port_num),
	}
}

func ahToC(d *C.struct_ibv_ah_attr, a *verbs.AHAttr) {
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&d.grh.dgid)), 16), a.GRH.DGID[:])
	d.grh.flow_label = C.uint32_t(a.GRH.FlowLabel)
	d.grh.sgid_index = C.uint8_t(a.GRH.SGIDIndex)
	d.grh.hop_limit = C.uint8_t(a.GRH.HopLimit)
	d.grh.traffic_class = C.uint8_t(a.GRH.TrafficClass)
	d.dlid = C.uint16_t(a.DLID)
	d.sl = C.uint8_t(a.SL)
	d.src_path_bits = C.uint8_t(a.SrcPathBits)
	d.static_rate = C.uint8_t(a.StaticRate)
	if a.IsGlobal {
		d.is_global = 1
	}
	d.port_num = C.uint8_t(a.PortNum)
}

func bswap32(v uint32) uint32 {
	return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24
}

func bswap64(v uint64) uint64 {
	return uint64(bswap32(uint32(v)))<<32 | uint64(bswap32(uint32(v>>32)))
}

var errBadWR = errors.New("bad work request")
