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

	"github.com/softrdma/softrdma/verbs"
)

// --- PD ---

// PD is a protection domain. Safe for concurrent use.
type PD struct {
	dev  *Device
	objs atomic.Int32 // MRs, QPs, SRQs and AHs alive
	dead atomic.Bool
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
	if n := pd.objs.Load(); n != 0 {
		return verbs.Errorf("DeallocPD", verbs.ErrInUse, "%d MRs, QPs, SRQs or AHs remain in the PD", n)
	}
	if pd.dead.Swap(true) {
		return verbs.Errorf("DeallocPD", verbs.ErrDestroyed, "PD already deallocated")
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
	pd     *PD
	buf    []byte
	addr   uint64
	key    uint32
	access verbs.Access
	fd     int // the memfd of AllocMR memory; -1 for RegMR

	gone atomic.Bool // Dereg began: the key no longer names this MR

	mu       sync.RWMutex // RLock around local copies; Lock to change the fields below
	dead     bool
	grantees map[*conn]bool // peers that may have it mapped
}

const remoteAccess = verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func checkAccess(op string, access verbs.Access) error {
	if access&^(verbs.AccessLocalWrite|remoteAccess) != 0 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "unknown access bits %v", access)
	}
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0 {
		return verbs.Errorf(op, verbs.ErrInvalidArgument, "remote write or atomic access requires LOCAL_WRITE (IBTA)")
	}
	return nil
}

// RegMR registers Go memory. A peer cannot map the Go heap, so its
// WRITEs, READs and atomics on the region are messages this device's
// goroutines apply, a copy through this process's CPU (a round trip over
// the device's socket per 32 KiB; docs/shm.md states the cost). AllocMR
// memory is what peers reach with a single memcpy.
func (pd *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if err := checkAccess("RegMR", access); err != nil {
		return nil, err
	}
	if len(buf) == 0 {
		return nil, verbs.Errorf("RegMR", verbs.ErrInvalidArgument, "empty buffer")
	}
	return pd.addMR(buf, access, -1)
}

// AllocMR allocates length bytes in a sealed memfd, maps it and
// registers it. Peers that present the rkey map the same pages. Dereg
// revokes every peer's mapping before it unmaps the memory.
func (pd *PD) AllocMR(length int, access verbs.Access) (verbs.MR, error) {
	if err := checkAccess("AllocMR", access); err != nil {
		return nil, err
	}
	if length <= 0 {
		return nil, verbs.Errorf("AllocMR", verbs.ErrInvalidArgument, "length %d must be positive", length)
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
	return pd.addMR(mem[:length:length], access, fd)
}

func (pd *PD) addMR(buf []byte, access verbs.Access, fd int) (*MR, error) {
	if pd.dead.Load() {
		return nil, verbs.Errorf("RegMR", verbs.ErrDestroyed, "PD deallocated")
	}
	d := pd.dev
	mr := &MR{pd: pd, buf: buf, addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), access: access, fd: fd, grantees: map[*conn]bool{}}
	d.mrMu.Lock()
	mr.key = randKey(d.mrs, 0xFFFFFFFF)
	d.mrs[mr.key] = mr
	d.mrMu.Unlock()
	pd.objs.Add(1)
	return mr, nil
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
// not answer within 2 s loses its connection) before unmapping. For
// RegMR memory it waits for the copy in flight, if any. After it returns
// no peer reads or writes the memory.
func (mr *MR) Dereg() error {
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
	if mr.fd >= 0 {
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
	if write && mr.access&verbs.AccessLocalWrite == 0 {
		return nil, nil, false
	}
	mr.mu.RLock()
	off := addr - mr.addr
	if mr.dead || addr < mr.addr || off > uint64(len(mr.buf)) || n > uint64(len(mr.buf))-off {
		mr.mu.RUnlock()
		return nil, nil, false
	}
	return mr, mr.buf[off : off+n], true
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
		copy(dst, b)
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
		copy(b, src[:n])
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

// CQ is a completion queue. Poll never blocks and never allocates; on an
// empty CQ it services the device's rings first, so a busy poller needs
// no other thread. Safe for concurrent use.
type CQ struct {
	dev  *Device
	ch   *verbs.CompChannel
	size int
	qps  atomic.Int32

	mu        sync.Mutex
	buf       []verbs.WC
	head, n   int
	overflow  bool
	armed     bool
	solicited bool
	dead      bool
	wake      chan struct{}
}

// CreateCQ creates a completion queue with room for cqe completions.
func (d *Device) CreateCQ(cqe int, ch *verbs.CompChannel) (verbs.CQ, error) {
	if cqe < 1 || cqe > maxCQE {
		return nil, verbs.Errorf("CreateCQ", verbs.ErrInvalidArgument, "cqe %d: must be 1..%d", cqe, maxCQE)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, verbs.Errorf("CreateCQ", verbs.ErrDestroyed, "device %s is closed", d.name)
	}
	d.cqs++
	return &CQ{dev: d, ch: ch, size: cqe, buf: make([]verbs.WC, cqe), wake: make(chan struct{}, 1)}, nil
}

// push adds a completion. An error completion or a solicited receive
// satisfies a solicited-only arm.
func (cq *CQ) push(wc *verbs.WC, solicited bool) {
	cq.mu.Lock()
	if cq.n == len(cq.buf) {
		cq.overflow = true
		cq.mu.Unlock()
		return
	}
	cq.buf[(cq.head+cq.n)%len(cq.buf)] = *wc
	cq.n++
	notify := cq.armed && (!cq.solicited || solicited || wc.Status != verbs.WCSuccess)
	if notify {
		cq.armed = false
	}
	cq.mu.Unlock()
	if notify && cq.ch != nil {
		cq.ch.Notify(cq)
	}
	select {
	case cq.wake <- struct{}{}:
	default:
	}
}

// Poll moves up to len(wc) completions into wc.
func (cq *CQ) Poll(wc []verbs.WC) (int, error) {
	cq.mu.Lock()
	if cq.n == 0 {
		cq.mu.Unlock()
		cq.dev.markActive()
		cq.dev.progress()
		cq.mu.Lock()
	}
	defer cq.mu.Unlock()
	if cq.dead {
		return 0, errCQDestroyed
	}
	if cq.overflow && cq.n == 0 {
		return 0, errCQOverrun
	}
	k := 0
	for k < len(wc) && cq.n > 0 {
		wc[k] = cq.buf[cq.head]
		cq.head = (cq.head + 1) % len(cq.buf)
		cq.n--
		k++
	}
	return k, nil
}

var (
	errCQDestroyed = verbs.Errorf("PollCQ", verbs.ErrDestroyed, "CQ destroyed")
	errCQOverrun   = verbs.Errorf("PollCQ", verbs.ErrQueueFull, "CQ overrun: completions were lost; make the CQ larger")
)

// Wait blocks until the CQ holds a completion, ctx is done or the CQ is
// destroyed. It services the rings while it spins, then sleeps.
func (cq *CQ) Wait(ctx context.Context) error {
	for i := 0; ; i++ {
		cq.mu.Lock()
		n, dead := cq.n, cq.dead
		cq.mu.Unlock()
		if n > 0 {
			return nil
		}
		if dead {
			return errCQDestroyed
		}
		if i < 200 {
			cq.dev.progress()
			runtime.Gosched()
			continue
		}
		// The progress goroutine delivers completions while we sleep; a
		// push after our check leaves its token in cq.wake.
		if i == 200 {
			cq.dev.wakeForWaiter()
		}
		select {
		case <-cq.wake:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ReqNotify arms the CQ for one event on its CompChannel.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.ch == nil {
		return verbs.Errorf("ReqNotifyCQ", verbs.ErrInvalidArgument, "the CQ has no CompChannel")
	}
	cq.armed, cq.solicited = true, solicitedOnly
	return nil
}

// CQE returns the capacity.
func (cq *CQ) CQE() int { return cq.size }

// Destroy frees the CQ; verbs.ErrInUse while QPs use it.
func (cq *CQ) Destroy() error {
	if n := cq.qps.Load(); n != 0 {
		return verbs.Errorf("DestroyCQ", verbs.ErrInUse, "%d QPs use the CQ", n)
	}
	cq.mu.Lock()
	if cq.dead {
		cq.mu.Unlock()
		return verbs.Errorf("DestroyCQ", verbs.ErrDestroyed, "CQ already destroyed")
	}
	cq.dead = true
	cq.mu.Unlock()
	select {
	case cq.wake <- struct{}{}:
	default:
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
	limit  uint32
	dead   bool
	qps    atomic.Int32
}

type recvWQE struct {
	wrID   uint64
	sgl    sgl
	length uint64
	bad    bool
}

// CreateSRQ creates a shared receive queue.
func (pd *PD) CreateSRQ(attr *verbs.SRQInitAttr) (verbs.SRQ, error) {
	if attr == nil || attr.MaxWR == 0 || attr.MaxWR > maxQPWR || attr.MaxSGE > maxSGE {
		return nil, verbs.Errorf("CreateSRQ", verbs.ErrInvalidArgument, "MaxWR must be 1..%d and MaxSGE at most %d", maxQPWR, maxSGE)
	}
	s := &SRQ{pd: pd, wqes: make([]recvWQE, attr.MaxWR), maxSGE: max(attr.MaxSGE, 1), limit: attr.SRQLimit}
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
		case s.dead:
			return &verbs.PostError{Index: i, WRID: wr.WRID, Err: verbs.Errorf("PostSRQRecv", verbs.ErrDestroyed, "SRQ destroyed")}
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
	return true
}

// Query returns the attributes.
func (s *SRQ) Query() (verbs.SRQAttr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return verbs.SRQAttr{MaxWR: uint32(len(s.wqes)), MaxSGE: s.maxSGE, SRQLimit: s.limit}, nil
}

// Modify sets SRQLimit; resizing is not supported.
func (s *SRQ) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	if mask&verbs.SRQAttrMaxWR != 0 {
		return verbs.Errorf("ModifySRQ", verbs.ErrNotSupported, "SRQ resizing")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if mask&verbs.SRQAttrLimit != 0 {
		s.limit = attr.SRQLimit
	}
	return nil
}

// Destroy frees the SRQ; verbs.ErrInUse while QPs use it.
func (s *SRQ) Destroy() error {
	if n := s.qps.Load(); n != 0 {
		return verbs.Errorf("DestroySRQ", verbs.ErrInUse, "%d QPs use the SRQ", n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		return verbs.Errorf("DestroySRQ", verbs.ErrDestroyed, "SRQ already destroyed")
	}
	s.dead = true
	s.pd.objs.Add(-1)
	return nil
}

// --- AH ---

// AH is an address handle: the shm device a UD send goes to.
type AH struct {
	pd   *PD
	attr verbs.AHAttr
	peer uint64
	dead atomic.Bool
}

// CreateAH creates an address handle; attr.GRH.DGID must be a shm GID.
func (pd *PD) CreateAH(attr *verbs.AHAttr) (verbs.AH, error) {
	if attr == nil {
		return nil, verbs.Errorf("CreateAH", verbs.ErrInvalidArgument, "attr is nil")
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
	if ah.dead.Swap(true) {
		return verbs.Errorf("DestroyAH", verbs.ErrDestroyed, "AH already destroyed")
	}
	ah.pd.objs.Add(-1)
	return nil
}
