package shm

import (
	"context"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/internal/memmove"
	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
)

// --- PD ---

// PD is a protection domain. Safe for concurrent use.
type PD struct {
	dev  *Device
	objs verbsobj.Life // MRs, QPs, SRQs and AHs alive
	// lastMR is the MR local last found: the data path's SGEs name the
	// same region again and again, and the cache spares the device's MR
	// table lock and map. An entry may be stale: local trusts it only
	// while mr.gone is unset, which Dereg sets before its key leaves the
	// table (so before a new MR can take the key).
	lastMR atomic.Pointer[MR]
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, verbs.Errorf("AllocPD", verbs.ErrDestroyed, "device %s is closed", d.name)
	}
	d.pds++
	return &PD{dev: d}, nil
}

// Context returns the device.
func (pd *PD) Context() verbs.Context { return pd.dev }

// Dealloc frees the PD; verbs.ErrInUse while objects remain.
func (pd *PD) Dealloc() error {
	if err := pd.objs.End("DeallocPD", "PD", "MRs, QPs, SRQs or AHs"); err != nil {
		return err
	}
	pd.dev.mu.Lock()
	pd.dev.pds--
	pd.dev.mu.Unlock()
	return nil
}

// --- MR ---

// MR is a memory region. lkey and rkey are the same unguessable 32-bit
// value. Safe for concurrent use.
type MR struct {
	pd      *PD
	buf     []byte
	addr    uint64
	key     uint32
	access  verbs.Access
	fd      int  // the memfd of AllocMR or RegMapped memory; -1 for RegMR
	inPlace bool // RegMapped: the memory is the caller's, mapped from fd

	gone atomic.Bool // Dereg began: the key no longer names this MR

	mu       sync.RWMutex // RLock around local copies; Lock to change the fields below
	dead     bool
	grantees map[*conn]bool // peers that may have it mapped
}

// checkMR applies the shared rules to a registration: a live PD, valid
// access flags, at least one byte.
func (pd *PD) checkMR(op string, access verbs.Access, length int) error {
	if err := pd.objs.Check(op, "PD"); err != nil {
		return err
	}
	if pd.dev.Closed() {
		return verbs.Errorf(op, verbs.ErrDestroyed, "device %s is closed", pd.dev.name)
	}
	if err := verbsobj.CheckAccess(op, access); err != nil {
		return err
	}
	return verbsobj.CheckLength(op, length)
}

// RegMR registers Go memory. A peer cannot map the Go heap, so its
// WRITEs, READs and atomics on the region are messages this device's
// goroutines apply, a copy through this process's CPU (a round trip over
// the device's socket per 32 KiB; docs/shm.md states the cost). AllocMR
// memory is what peers reach with a single memcpy.
func (pd *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if err := pd.checkMR("RegMR", access, len(buf)); err != nil {
		return nil, err
	}
	return pd.addMR(buf, access, -1, false), nil
}

// AllocMW fails: shm has no memory windows. Its peers map a region's
// pages whole, so a window's narrower range and its revocation could not
// be enforced; use the RoCEv2 provider for windows.
func (pd *PD) AllocMW(typ verbs.MWType) (verbs.MW, error) {
	if err := pd.objs.Check("AllocMW", "PD"); err != nil {
		return nil, err
	}
	return nil, verbs.Errorf("AllocMW", verbs.ErrNotSupported, "shm has no memory windows (peers map whole regions); the RoCEv2 provider has them")
}

// AllocMR allocates length bytes in a sealed memfd, maps it and
// registers it. Peers that present the rkey map the same pages. Dereg
// revokes every peer's mapping before it unmaps the memory.
func (pd *PD) AllocMR(length int, access verbs.Access) (verbs.MR, error) {
	if err := pd.checkMR("AllocMR", access, length); err != nil {
		return nil, err
	}
	page := os.Getpagesize()
	size := (length + page - 1) / page * page
	var extra int
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) == 0 {
		extra = unix.F_SEAL_FUTURE_WRITE // no peer may ever map it writable
	}
	fd, mem, err := newMemfdSeals("softrdma-shm-mr", size, extra)
	if err != nil {
		return nil, verbs.Errorf("AllocMR", verbs.ErrInvalidArgument, "memfd of %d bytes: %v", size, err)
	}
	return pd.addMR(mem[:length:length], access, fd, false), nil
}

// addMR makes the MR and its key, complete before the key names it.
func (pd *PD) addMR(buf []byte, access verbs.Access, fd int, inPlace bool) *MR {
	d := pd.dev
	mr := &MR{pd: pd, buf: buf, addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), access: access, fd: fd, inPlace: inPlace, grantees: map[*conn]bool{}}
	d.mrMu.Lock()
	mr.key = randKey(d.mrs, 0xFFFFFFFF)
	d.mrs[mr.key] = mr
	d.mrMu.Unlock()
	pd.objs.Add(1)
	return mr
}

func (mr *MR) Addr() uint64         { return mr.addr }
func (mr *MR) Len() int             { return len(mr.buf) }
func (mr *MR) LKey() uint32         { return mr.key }
func (mr *MR) RKey() uint32         { return mr.key }
func (mr *MR) Access() verbs.Access { return mr.access }

// Bytes returns the memory; for AllocMR memory it is valid until Dereg.
func (mr *MR) Bytes() []byte { return mr.buf }

// SGE returns the scatter/gather element for length bytes at offset off.
func (mr *MR) SGE(off, length int) verbs.SGE {
	return verbs.SGE{Addr: mr.addr + uint64(off), Length: uint32(length), LKey: mr.key}
}

// Dereg invalidates the keys and, for AllocMR memory, revokes every
// peer's mapping (waiting for accesses in flight to end; a peer that does
// not answer within 2 s loses its connection) before unmapping. RegMapped
// memory is revoked likewise, then moved back to private pages. For
// RegMR memory it waits for the copy in flight, if any. After it returns
// no peer reads or writes the memory.
func (mr *MR) Dereg() error { return mr.dereg(true) }

// DeregShared is Dereg for memory registered in place (RegMapped) that
// leaves the pages shared with the region's memfd rather than moving
// them back to private memory: for a caller that knows another
// registration (of another device) uses the pages, which the move back
// could lose writes of. Peers' grants are revoked as by Dereg.
func (mr *MR) DeregShared() error { return mr.dereg(false) }

func (mr *MR) dereg(moveBackPages bool) error {
	d := mr.pd.dev
	d.mrMu.Lock()
	if d.mrs[mr.key] != mr {
		d.mrMu.Unlock()
		return verbs.Errorf("DeregMR", verbs.ErrDestroyed, "MR already deregistered")
	}
	mr.gone.Store(true)
	delete(d.mrs, mr.key)
	d.mrMu.Unlock()
	mr.pd.lastMR.CompareAndSwap(mr, nil)
	mr.mu.Lock() // waits for local copies in flight
	mr.dead = true
	gs := mr.grantees
	mr.grantees = nil
	mr.mu.Unlock()
	revokeAt(gs, mr.key)
	switch {
	case mr.inPlace:
		if moveBackPages {
			mapsMu.Lock()
			if moveBack(mr.buf, mr.fd) != nil {
				// The grants are revoked, but a peer that ignored its
				// REVOKE still maps these pages (docs/security.md).
				d.ctr.inPlaceShared.Add(1)
			}
			mapsMu.Unlock()
		}
		unix.Close(mr.fd)
	case mr.fd >= 0:
		unix.Munmap(mr.buf[:cap(mr.buf)])
		unix.Close(mr.fd)
	}
	mr.pd.objs.Add(-1)
	return nil
}

// revokeAt asks every grantee to unmap rkey and waits for each answer.
func revokeAt(gs map[*conn]bool, rkey uint32) {
	for c := range gs {
		if c.dead.Load() {
			continue
		}
		if _, err := c.call(&ctrl{typ: mRevoke, c: rkey}, nil, 2*time.Second); err != nil {
			c.close() // a peer that does not answer is cut off
			<-c.done
		}
	}
}

// local returns n bytes at addr of the MR lkey names, if it belongs to pd
// and (when write) allows local write, with mr.mu read-locked.
func (pd *PD) local(lkey uint32, addr uint64, n uint64, write bool) (*MR, []byte, bool) {
	mr := pd.lastMR.Load()
	if mr == nil || mr.key != lkey || mr.gone.Load() {
		d := pd.dev
		d.mrMu.RLock()
		mr = d.mrs[lkey]
		d.mrMu.RUnlock()
		if mr == nil || mr.pd != pd {
			return nil, nil, false
		}
		pd.lastMR.Store(mr)
	}
	if write && !verbsobj.Permits(mr.access, verbs.AccessLocalWrite) {
		return nil, nil, false
	}
	mr.mu.RLock()
	b, ok := verbsobj.Span(mr.buf, mr.addr, addr, n)
	if mr.dead || !ok {
		mr.mu.RUnlock()
		return nil, nil, false
	}
	return mr, b, true
}

// sgl is a scatter/gather list kept in a WQE (its array is reused).
type sgl []verbs.SGE

// gather copies message bytes [off, off+len(dst)) out of the SGEs.
func (s sgl) gather(pd *PD, off uint64, dst []byte) bool {
	for _, e := range s {
		if len(dst) == 0 {
			return true
		}
		l := uint64(e.Length)
		if off >= l {
			off -= l
			continue
		}
		n := min(l-off, uint64(len(dst)))
		mr, b, ok := pd.local(e.LKey, e.Addr+off, n, false)
		if !ok {
			return false
		}
		memmove.Copy(dst, b)
		mr.mu.RUnlock()
		dst = dst[n:]
		off = 0
	}
	return len(dst) == 0
}

// scatter copies src into the SGEs at message offset off.
func (s sgl) scatter(pd *PD, off uint64, src []byte) bool {
	for _, e := range s {
		if len(src) == 0 {
			return true
		}
		l := uint64(e.Length)
		if off >= l {
			off -= l
			continue
		}
		n := min(l-off, uint64(len(src)))
		mr, b, ok := pd.local(e.LKey, e.Addr+off, n, true)
		if !ok {
			return false
		}
		memmove.Copy(b, src[:n])
		mr.mu.RUnlock()
		src = src[n:]
		off = 0
	}
	return len(src) == 0
}

// check reports whether every SGE names memory of pd (with local write if
// write) and returns the total length.
func (s sgl) check(pd *PD, write bool) (uint64, bool) {
	var t uint64
	ok := true
	for _, e := range s {
		t += uint64(e.Length)
		if e.Length == 0 {
			continue
		}
		mr, _, good := pd.local(e.LKey, e.Addr, uint64(e.Length), write)
		if !good {
			ok = false
			continue
		}
		mr.mu.RUnlock()
	}
	return t, ok
}

// --- CQ ---

// CQ is a completion queue: the shared ring (verbsobj.CQRing: arming,
// overrun, destruction). Poll never blocks and never allocates; on an
// empty CQ it services the device's rings first, so a busy poller needs
// no other thread. Safe for concurrent use.
type CQ struct {
	dev  *Device
	ring verbsobj.CQRing
	qps  atomic.Int32
}

// CreateCQ creates a completion queue with room for cqe completions.
func (d *Device) CreateCQ(cqe int, ch *verbs.CompChannel) (verbs.CQ, error) {
	if err := verbsobj.CheckCQE(cqe, maxCQE); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, verbs.Errorf("CreateCQ", verbs.ErrDestroyed, "device %s is closed", d.name)
	}
	d.cqs++
	cq := &CQ{dev: d}
	cq.ring.Init(cqe, ch, cq)
	cq.ring.CountArmed(&d.armed)
	return cq, nil
}

// push adds a completion. An error completion or a solicited receive
// satisfies a solicited-only arm.
func (cq *CQ) push(wc *verbs.WC, solicited bool) {
	if cq.ring.Push(wc, solicited) == verbsobj.Overrun {
		cq.dev.event(verbs.AsyncEvent{Type: verbs.EventCQErr, CQ: cq})
	}
}

// Poll moves up to len(wc) completions into wc.
func (cq *CQ) Poll(wc []verbs.WC) (int, error) {
	if cq.ring.Len() == 0 && !cq.ring.Dead() {
		cq.dev.markActive()
		cq.dev.progress()
	}
	return cq.ring.Poll(wc)
}

// Wait blocks until the CQ holds a completion, ctx is done or the CQ is
// destroyed. It services the rings while it spins, then sleeps.
func (cq *CQ) Wait(ctx context.Context) error {
	for i := 0; i < 200; i++ {
		if cq.ring.Len() > 0 {
			return nil
		}
		if cq.ring.Dead() {
			break
		}
		cq.dev.progress()
		runtime.Gosched()
	}
	// The progress goroutine delivers completions while we sleep; a
	// push after Block registers the waiter wakes it. While any waiter
	// sleeps, the progress goroutine neither naps nor stops short
	// because another goroutine posted (progressLoop).
	cq.dev.waiting.Add(1)
	defer cq.dev.waiting.Add(-1)
	return cq.ring.Block(ctx, cq.dev.wakeForWaiter)
}

// ReqNotify arms the CQ for one event on its CompChannel. While it is
// armed the progress goroutine does not nap (the application is about to
// sleep on the channel and only that goroutine delivers the completion);
// a nap already begun ends now. Not so for an application whose waits
// spin (Device.ProgressWaiting): its spin moves the rings, and the nap
// ends on its own if it stops spinning.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if err := cq.ring.Arm(solicitedOnly); err != nil {
		return err
	}
	if !cq.dev.spinWaits.Load() {
		cq.dev.wakeForWaiter()
	}
	return nil
}

// CQE returns the capacity.
func (cq *CQ) CQE() int { return cq.ring.Cap() }

// Resize changes the capacity to cqe, keeping the completions it holds
// (verbs.Resizer).
func (cq *CQ) Resize(cqe int) error { return cq.ring.Resize(cqe, maxCQE) }

// Destroy frees the CQ; verbs.ErrInUse while QPs use it.
func (cq *CQ) Destroy() error {
	if err := cq.ring.Destroy(cq.qps.Load()); err != nil {
		return err
	}
	cq.dev.mu.Lock()
	cq.dev.cqs--
	cq.dev.mu.Unlock()
	return nil
}

// --- SRQ ---

// SRQ is a shared receive queue. Safe for concurrent use.
type SRQ struct {
	pd     *PD
	mu     sync.Mutex
	wqes   []recvWQE
	head   uint64
	tail   uint64
	maxSGE uint32
	limit  verbsobj.SRQLimit
	qps    verbsobj.Life // the QPs attached
}

type recvWQE struct {
	wrID   uint64
	sgl    sgl
	length uint64
	bad    bool
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr *verbs.SRQInitAttr) (verbs.SRQ, error) {
	if err := pd.objs.Check("CreateSRQ", "PD"); err != nil {
		return nil, err
	}
	nsge, err := verbsobj.CheckSRQInit(attr, maxQPWR, maxSGE)
	if err != nil {
		return nil, err
	}
	s := &SRQ{pd: pd, wqes: make([]recvWQE, attr.MaxWR), maxSGE: nsge}
	for i := range s.wqes {
		s.wqes[i].sgl = make(sgl, 0, s.maxSGE)
	}
	pd.objs.Add(1)
	return s, nil
}

func fillRecv(w *recvWQE, pd *PD, wr *verbs.RecvWR) {
	w.wrID = wr.WRID
	w.sgl = append(w.sgl[:0], wr.SGList...)
	var ok bool
	w.length, ok = w.sgl.check(pd, true)
	w.bad = !ok
}

// PostRecv posts receive requests to the SRQ.
func (s *SRQ) PostRecv(wr *verbs.RecvWR) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; wr != nil; i, wr = i+1, wr.Next {
		switch {
		case s.qps.Dead():
			return &verbs.PostError{Index: i, WRID: wr.WRID, Err: s.qps.Check("PostSRQRecv", "SRQ")}
		case len(wr.SGList) > int(s.maxSGE):
			return &verbs.PostError{Index: i, WRID: wr.WRID, Err: verbs.Errorf("PostSRQRecv", verbs.ErrInvalidArgument, "%d SGEs exceed MaxSGE %d", len(wr.SGList), s.maxSGE)}
		case s.tail-s.head == uint64(len(s.wqes)):
			return &verbs.PostError{Index: i, WRID: wr.WRID, Err: verbs.Errorf("PostSRQRecv", verbs.ErrQueueFull, "the SRQ holds %d requests", len(s.wqes))}
		}
		fillRecv(&s.wqes[s.tail%uint64(len(s.wqes))], s.pd, wr)
		s.tail++
	}
	s.pd.dev.kick()
	return nil
}

// take moves the next WQE into w.
func (s *SRQ) take(w *recvWQE) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.head == s.tail {
		return false
	}
	src := &s.wqes[s.head%uint64(len(s.wqes))]
	w.wrID, w.length, w.bad = src.wrID, src.length, src.bad
	w.sgl = append(w.sgl[:0], src.sgl...)
	s.head++
	if s.limit.Took(uint32(s.tail - s.head)) {
		s.pd.dev.event(verbs.AsyncEvent{Type: verbs.EventSRQLimitReached, SRQ: s})
	}
	return true
}

// Query returns the attributes.
func (s *SRQ) Query() (verbs.SRQAttr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return verbs.SRQAttr{MaxWR: uint32(len(s.wqes)), MaxSGE: s.maxSGE, SRQLimit: s.limit.Get()}, nil
}

// Modify sets SRQLimit; resizing is not supported.
func (s *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.qps.Check("ModifySRQ", "SRQ"); err != nil {
		return err
	}
	return s.limit.Modify(attr, mask, uint32(len(s.wqes)))
}

// Destroy frees the SRQ; verbs.ErrInUse while QPs use it.
func (s *SRQ) Destroy() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.qps.End("DestroySRQ", "SRQ", "QPs"); err != nil {
		return err
	}
	s.pd.objs.Add(-1)
	return nil
}

// --- AH ---

// AH is an address handle: the shm device a UD send goes to.
type AH struct {
	pd   *PD
	attr verbs.AHAttr
	peer uint64
	life verbsobj.Life
}

// CreateAH creates an address handle; attr.GRH.DGID must be a shm GID.
func (pd *PD) CreateAH(attr *verbs.AHAttr) (verbs.AH, error) {
	if err := pd.objs.Check("CreateAH", "PD"); err != nil {
		return nil, err
	}
	if err := verbsobj.CheckAH(attr); err != nil {
		return nil, err
	}
	peer, ok := peerOf(attr.GRH.DGID)
	if !ok {
		return nil, verbs.Errorf("CreateAH", verbs.ErrInvalidArgument, "DGID %v is not a shm device's GID (fd73:686d::/32)", attr.GRH.DGID)
	}
	pd.objs.Add(1)
	return &AH{pd: pd, attr: *attr, peer: peer}, nil
}

// Attr returns the attributes the AH was created with.
func (ah *AH) Attr() verbs.AHAttr { return ah.attr }

// Destroy frees the AH.
func (ah *AH) Destroy() error {
	if err := ah.life.End("DestroyAH", "AH", ""); err != nil {
		return err
	}
	ah.pd.objs.Add(-1)
	return nil
}

// --- asynchronous events ---

// AsyncEvents returns the device's asynchronous events
// (verbs.AsyncEventer): CQ overruns, SRQ limits, a QP's request and
// fatal errors as a responder of SENDs and WRITE_WITH_IMMs, and last
// WQE reached. A peer's one-sided operations do not pass through the
// responder QP, so their access errors raise no event here. The channel
// is closed by Close.
func (d *Device) AsyncEvents() <-chan verbs.AsyncEvent { return d.events.C() }

// event reports an asynchronous event; it never blocks.
func (d *Device) event(e verbs.AsyncEvent) { d.events.Send(e) }
