package roce

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/softrdma/softrdma/internal/memmove"
	"github.com/softrdma/softrdma/internal/verbsobj"
	"github.com/softrdma/softrdma/verbs"
)

// PD is a protection domain.
type PD struct {
	dev  *Device
	refs verbsobj.Life // MRs, QPs, SRQs and AHs in this PD
}

// Context returns the device (the provider's, if it wraps the engine).
func (pd *PD) Context() verbs.Context { return pd.dev.context() }

// Dealloc frees the PD.
func (pd *PD) Dealloc() error {
	if err := pd.refs.End("DeallocPD", "PD", "MRs, QPs, SRQs or AHs"); err != nil {
		return err
	}
	pd.dev.nPD.Add(-1)
	remove(&pd.dev.objs, pd.dev.objs.pds, pd)
	return nil
}

func (pd *PD) check(op string) error { return pd.refs.Check(op, "PD") }

// MR is a registered memory region.
//
// Data movement holds mu for reading while it copies; Dereg takes it for
// writing, so once Dereg returns no copy is in progress and none will start.
type MR struct {
	buf     []byte
	addr    uint64
	lkey    uint32
	rkey    uint32
	mmapped bool
	// The PD and access flags: Rereg changes them under mu while the
	// data path reads them without it.
	pdp    atomic.Pointer[PD]
	access atomic.Uint32 // verbs.Access

	mu      sync.RWMutex
	dead    bool // deregistered: every access fails
	windows int  // memory windows bound to the region (mw.go)

	// Packets that gather their payload from buf pin the MR until they
	// are sent or dropped; Dereg waits for them.
	pins atomic.Int64
}

// isDead reports whether Dereg has begun.
func (mr *MR) isDead() bool {
	mr.mu.RLock()
	defer mr.mu.RUnlock()
	return mr.dead
}

// unpin releases a packet's pin.
func (mr *MR) unpin() { mr.pins.Add(-1) }

func (pd *PD) checkAccess(op string, access verbs.Access) error {
	if err := pd.check(op); err != nil {
		return err
	}
	return verbsobj.CheckAccess(op, access)
}

// RegMR registers buf. The caller keeps buf alive and must not let it move;
// heap memory in Go does not move.
func (pd *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if err := pd.checkAccess("RegMR", access); err != nil {
		return nil, err
	}
	if err := verbsobj.CheckLength("RegMR", len(buf)); err != nil {
		return nil, err
	}
	return pd.register(buf, access, false), nil
}

// AllocMR allocates length bytes with mmap, outside the Go heap, and
// registers them.
func (pd *PD) AllocMR(length int, access verbs.Access) (verbs.MR, error) {
	if err := pd.checkAccess("AllocMR", access); err != nil {
		return nil, err
	}
	if err := verbsobj.CheckLength("AllocMR", length); err != nil {
		return nil, err
	}
	buf, err := syscall.Mmap(-1, 0, length, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, verbs.Errorf("AllocMR", verbs.ErrQueueFull, "mmap of %d bytes: %v", length, err)
	}
	return pd.register(buf, access, true), nil
}

func (pd *PD) register(buf []byte, access verbs.Access, mmapped bool) *MR {
	d := pd.dev
	mr := &MR{
		buf:     buf,
		addr:    d.virtAddr(buf),
		mmapped: mmapped,
	}
	mr.pdp.Store(pd)
	mr.access.Store(uint32(access))
	if d.cfg.ProcessAddrs {
		mr.addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	// Keys are random 32-bit values, so a peer cannot guess another MR's
	// rkey from its own; lkeys and rkeys share one table and never collide.
	d.keys.mu.Lock()
	// A key never shares its index (high 24 bits) with a window (mw.go).
	newKey := func() uint32 {
		for {
			if k := d.randUint32(); !d.keys.has(k) && d.windows.lookup(k>>8) == nil {
				return k
			}
		}
	}
	mr.lkey = newKey()
	d.keys.insert(mr.lkey, mr)
	mr.rkey = newKey()
	d.keys.insert(mr.rkey, mr)
	d.keys.mu.Unlock()
	pd.refs.Add(1)
	d.nMR.Add(1)
	return mr
}

// virtAddr picks the address an MR's first byte has for work requests and
// peers: random above 2^32 (so an rkey and an address seen on the wire
// reveal nothing of the process's memory layout, and a guessed address is
// as unlikely as a guessed key), with the low 12 bits of the real address,
// so page offsets and alignment (atomics need 8) are what the memory's
// are. It leaves room for the region below 2^63.
func (d *Device) virtAddr(buf []byte) uint64 {
	r := uint64(d.randUint32())<<32 | uint64(d.randUint32())
	base := (r&(1<<62-1) | 1<<32) &^ 0xFFF
	return base | uint64(uintptr(unsafe.Pointer(&buf[0])))&0xFFF
}

// Addr returns the virtual address of the first byte, as work requests
// and peers name it: not the memory's address in this process (see
// virtAddr); MR.Bytes is the memory.
func (mr *MR) Addr() uint64 { return mr.addr }

// Len returns the length in bytes.
func (mr *MR) Len() int { return len(mr.buf) }

// LKey returns the local key.
func (mr *MR) LKey() uint32 { return mr.lkey }

// RKey returns the remote key.
func (mr *MR) RKey() uint32 { return mr.rkey }

// Access returns the access flags.
func (mr *MR) Access() verbs.Access { return verbs.Access(mr.access.Load()) }

// pd returns the region's PD.
func (mr *MR) pd() *PD { return mr.pdp.Load() }

// Rereg moves the region to pd (nil: it stays) and gives it access,
// keeping its keys, as ibv_rereg_mr with IBV_REREG_MR_CHANGE_PD and
// IBV_REREG_MR_CHANGE_ACCESS does on rxe: requests that name the keys
// from then on are checked against the new PD and access. A region with
// memory windows bound cannot change (ErrInUse).
func (mr *MR) Rereg(pd verbs.PD, access verbs.Access) error {
	const op = "ReregMR"
	if err := verbsobj.CheckAccess(op, access); err != nil {
		return err
	}
	old := mr.pd()
	npd := old
	if pd != nil {
		p, ok := pd.(*PD)
		if !ok || p.dev != old.dev {
			return verbs.Errorf(op, verbs.ErrInvalidArgument, "the new PD is not of the region's device")
		}
		if err := p.check(op); err != nil {
			return err
		}
		npd = p
	}
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.dead {
		return verbs.Errorf(op, verbs.ErrDestroyed, "MR already deregistered")
	}
	if mr.windows > 0 {
		return verbs.Errorf(op, verbs.ErrInUse, "%d memory windows are bound to the MR; invalidate or deallocate them first", mr.windows)
	}
	if npd != old {
		npd.refs.Add(1)
		old.refs.Add(-1)
		mr.pdp.Store(npd)
	}
	mr.access.Store(uint32(access))
	return nil
}

// Bytes returns the registered memory.
func (mr *MR) Bytes() []byte { return mr.buf }

// SGE returns the scatter/gather element for length bytes at offset off.
func (mr *MR) SGE(off, length int) verbs.SGE {
	return verbs.SGE{Addr: mr.addr + uint64(off), Length: uint32(length), LKey: mr.lkey}
}

// Dereg deregisters the MR. After it returns no data moves into or out of
// the memory, and memory from AllocMR is unmapped.
func (mr *MR) Dereg() error {
	mr.mu.Lock()
	if mr.dead {
		mr.mu.Unlock()
		return verbs.Errorf("DeregMR", verbs.ErrDestroyed, "MR already deregistered")
	}
	if mr.windows > 0 {
		n := mr.windows
		mr.mu.Unlock()
		// IBTA 10.6.7.2.6; rxe refuses too (EINVAL).
		return verbs.Errorf("DeregMR", verbs.ErrInUse, "%d memory windows are bound to the MR; invalidate or deallocate them first", n)
	}
	mr.dead = true
	mr.mu.Unlock()

	d := mr.pd().dev
	d.keys.mu.Lock()
	d.keys.remove(mr.lkey)
	d.keys.remove(mr.rkey)
	d.keys.mu.Unlock()
	mr.pd().refs.Add(-1)
	d.nMR.Add(-1)
	// Packets already built may gather their payload from buf. They leave
	// within one batch (a QP never holds such a packet back for its
	// doorbell, and the receive path flushes its stage at the end of
	// every batch), so the wait is short; after it no byte of the region
	// is read again, and the caller may reuse or free the memory.
	for mr.pins.Load() != 0 {
		runtime.Gosched()
	}
	if mr.mmapped {
		return syscall.Munmap(mr.buf)
	}
	return nil
}

// lookupKey returns the MR with local or remote key k, or nil.
func (d *Device) lookupKey(k uint32) *MR { return d.keys.lookup(k) }

// span returns the byte range [addr, addr+n) of mr, or false if it is not
// entirely inside the region. It is careful with overflow: the values come
// from the network.
func (mr *MR) span(addr uint64, n uint64) ([]byte, bool) {
	return verbsobj.Span(mr.buf, mr.addr, addr, n)
}

// remoteMR resolves an rkey from the network for access, arriving on
// QP qpn of pd, checking PD, permission and bounds; the rkey may name a
// memory window (remoteWindow). It returns the MR read-locked (the caller
// unlocks with mr.mu.RUnlock) and the addressed bytes.
func (pd *PD) remoteMR(rkey uint32, addr, n uint64, access verbs.Access, qpn uint32) (*MR, []byte, bool) {
	mr := pd.dev.lookupKey(rkey)
	if mr == nil {
		return pd.remoteWindow(rkey, addr, n, access, qpn)
	}
	if mr.rkey != rkey {
		return nil, nil, false
	}
	mr.mu.RLock()
	// PD and access under the lock: a Rereg that returned before it is
	// taken binds every access from then on.
	if mr.dead || mr.pd() != pd || !verbsobj.Permits(mr.Access(), access) {
		mr.mu.RUnlock()
		return nil, nil, false
	}
	b, ok := mr.span(addr, n)
	if !ok {
		mr.mu.RUnlock()
		return nil, nil, false
	}
	return mr, b, true
}

// sgl is a work request's resolved scatter/gather list.
type sgl struct {
	sges []verbs.SGE
	mrs  []*MR
}

func (s *sgl) reset() {
	s.sges = s.sges[:0]
	clear(s.mrs[:cap(s.mrs)])
	s.mrs = s.mrs[:0]
}

// load copies the SGEs of a work request and resolves their lkeys. It
// returns false if a key is unknown, belongs to another PD, lacks local
// write access when needWrite, or an SGE is out of bounds; the work
// request then completes with WCLocProtErr.
func (s *sgl) load(pd *PD, src []verbs.SGE, needWrite bool) (total uint64, ok bool) {
	s.reset()
	ok = true
	for _, e := range src {
		s.sges = append(s.sges, e)
		mr := pd.dev.lookupKey(e.LKey)
		if mr == nil || mr.lkey != e.LKey || mr.pd() != pd || (needWrite && mr.Access()&verbs.AccessLocalWrite == 0) {
			ok = false
		} else if _, in := mr.span(e.Addr, uint64(e.Length)); !in {
			ok = false
		}
		s.mrs = append(s.mrs, mr)
		total += uint64(e.Length)
	}
	return total, ok
}

// copyOut copies len(dst) bytes starting at byte off of the list into dst.
// It returns false if an MR was deregistered meanwhile.
func (s *sgl) copyOut(dst []byte, off uint64) bool {
	return s.walk(dst, off, false)
}

// copyIn copies src into the list starting at byte off, the last byte last.
func (s *sgl) copyIn(src []byte, off uint64) bool {
	return s.walk(src, off, true)
}

// pin returns the n bytes at byte off of the list if they lie in one
// SGE of a live MR, and that MR, pinned (MR.unpin releases it); else nil.
func (s *sgl) pin(off, n uint64) ([]byte, *MR) {
	for i, e := range s.sges {
		l := uint64(e.Length)
		if off >= l {
			off -= l
			continue
		}
		mr := s.mrs[i]
		if l-off < n || mr == nil {
			return nil, nil
		}
		mr.mu.RLock()
		m, ok := mr.span(e.Addr+off, n)
		if mr.dead || !ok {
			mr.mu.RUnlock()
			return nil, nil
		}
		mr.pins.Add(1)
		mr.mu.RUnlock()
		return m, mr
	}
	return nil, nil
}

func (s *sgl) walk(b []byte, off uint64, in bool) bool {
	for i, e := range s.sges {
		if len(b) == 0 {
			return true
		}
		l := uint64(e.Length)
		if off >= l {
			off -= l
			continue
		}
		n := min(l-off, uint64(len(b)))
		mr := s.mrs[i]
		if mr == nil {
			return false
		}
		mr.mu.RLock()
		if mr.dead {
			mr.mu.RUnlock()
			return false
		}
		m, _ := mr.span(e.Addr+off, n)
		if in {
			copyLastByteLast(m, b[:n])
		} else {
			memmove.Copy(b[:n], m)
		}
		mr.mu.RUnlock()
		b = b[n:]
		off = 0
	}
	return len(b) == 0
}

// copyLastByteLast copies src to dst so that the final byte is stored after
// all others: a reader polling the last byte of an RDMA WRITE target (as
// ib_write_lat does) then sees a complete message. On amd64 stores are
// seen in program order anyway; on arm64 they are not, so the message's
// bytes in the aligned 32-bit word that holds its last byte go in with one
// atomic (release) store of that word, keeping the word's other bytes: a
// reader that loads that word with sync/atomic (acquire) and sees the new
// last byte sees the whole message. If the word reaches outside dst (its
// other bytes are not ours to touch), a full barrier on the side orders
// the stores instead.
func copyLastByteLast(dst, src []byte) {
	n := len(src)
	if n == 0 {
		return
	}
	last := n - 1
	lead := int(uintptr(unsafe.Pointer(&dst[last])) & 3) // bytes of the word before the last byte
	start := last - lead                                 // index of the word's first byte in dst
	if start < 0 || start+4 > len(dst) {
		memmove.Copy(dst[:last], src[:last])
		barrier.Add(1)
		dst[last] = src[last]
		return
	}
	from := max(start, 0)
	memmove.Copy(dst[:from], src[:from])
	w := (*uint32)(unsafe.Pointer(&dst[start]))
	for {
		old := atomic.LoadUint32(w)
		b := *(*[4]byte)(unsafe.Pointer(&old))
		copy(b[from-start:lead+1], src[from:n])
		if atomic.CompareAndSwapUint32(w, old, *(*uint32)(unsafe.Pointer(&b))) {
			return
		}
	}
}

// barrier is the word copyLastByteLast's fallback orders stores with.
var barrier atomic.Uint32

// Settle orders the caller's later accesses to mr's memory after every
// copy the engine made into or out of it so far, in the Go memory model's
// sense: it takes and releases the MR's lock, under which the engine
// copies. A program that polls memory for an RDMA WRITE to land (as
// ib_write_lat does) sees the bytes through the kernel's ordering anyway;
// tests call Settle so the race detector sees that order too.
func Settle(mr verbs.MR) {
	if m, ok := mr.(*MR); ok {
		m.mu.Lock()
		m.mu.Unlock() //nolint:staticcheck // an empty critical section is the point
	}
}
