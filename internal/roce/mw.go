package roce

// Memory windows (IBTA 10.6.7; rxe's rxe_mw.c): a window is a remote key
// for part of a registered region, bound and invalidated through a QP's
// send queue (WRBindMW, WRLocalInv) or by the peer's SEND_WITH_INV,
// without registering memory again.
//
// A window's rkey is its index (the high 24 bits, fixed for its life)
// and a key byte each bind chooses. Windows live in their own table,
// by index; MR keys never share an index with a window (both
// allocations check), so an rkey from the network names at most one
// object and the MR lookup needs no change.
//
// Locks: a window's mu, then its region's mu. A remote access resolves
// the window under its read lock and returns the region read-locked, as
// remoteMR does for a region's own rkey; a bind or invalidation takes
// the window's lock for writing, then the region's to count the binding
// (Dereg refuses a region with windows bound, IBTA 10.6.7.2.6).

import (
	"sync"

	"github.com/softrdma/softrdma/verbs"
)

// MW is a memory window.
type MW struct {
	pd    *PD
	typ   verbs.MWType
	index uint32 // rkey >> 8

	mu     sync.RWMutex
	rkey   uint32
	mr     *MR // the bound region; nil: unbound (a type 2 window is free)
	addr   uint64
	length uint64
	access verbs.Access
	qpn    uint32 // type 2: the QP it was bound through, the only one that reaches it
	dead   bool
}

// mwAccess is what a bind may grant: remote access (local write and
// MW_BIND, which some programs pass, mean nothing for a window and are
// ignored, as rxe does).
const mwAccess = verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic | verbs.AccessLocalWrite | verbs.AccessMWBind

// windowTable maps a window's index to the window.
type windowTable = idTable[MW]

// AllocMW allocates a memory window of type typ.
func (pd *PD) AllocMW(typ verbs.MWType) (verbs.MW, error) {
	const op = "AllocMW"
	if err := pd.check(op); err != nil {
		return nil, err
	}
	if typ != verbs.MWType1 && typ != verbs.MWType2 {
		return nil, verbs.Errorf(op, verbs.ErrInvalidArgument, "%v: windows are type 1 or type 2", typ)
	}
	d := pd.dev
	if d.nMW.Add(1) > maxMW {
		d.nMW.Add(-1)
		return nil, verbs.Errorf(op, verbs.ErrQueueFull, "the device has its maximum of %d windows", maxMW)
	}
	mw := &MW{pd: pd, typ: typ}
	d.keys.mu.Lock()
	d.windows.mu.Lock()
	for {
		i := d.randUint32() >> 8
		if i == 0 || d.windows.lookup(i) != nil || d.keyIndexUsed(i) {
			continue
		}
		mw.index = i
		break
	}
	mw.rkey = mw.index<<8 | d.randUint32()&0xFF
	d.windows.insert(mw.index, mw)
	d.windows.mu.Unlock()
	d.keys.mu.Unlock()
	pd.refs.Add(1)
	return mw, nil
}

// keyIndexUsed reports whether an lkey or rkey has index i (its high 24
// bits). Precondition: d.keys.mu held.
func (d *Device) keyIndexUsed(i uint32) bool {
	for b := uint32(0); b < 256; b++ {
		if d.keys.lookup(i<<8|b) != nil {
			return true
		}
	}
	return false
}

// Type returns the window's type.
func (mw *MW) Type() verbs.MWType { return mw.typ }

// RKey returns the rkey of the window's latest bind.
func (mw *MW) RKey() uint32 {
	mw.mu.RLock()
	defer mw.mu.RUnlock()
	return mw.rkey
}

// Dealloc frees the window; a bound window stops working at once.
func (mw *MW) Dealloc() error {
	mw.mu.Lock()
	if mw.dead {
		mw.mu.Unlock()
		return verbs.Errorf("DeallocMW", verbs.ErrDestroyed, "window already deallocated")
	}
	mw.dead = true
	mw.unbindLocked()
	mw.mu.Unlock()
	d := mw.pd.dev
	d.windows.mu.Lock()
	d.windows.remove(mw.index)
	d.windows.mu.Unlock()
	mw.pd.refs.Add(-1)
	d.nMW.Add(-1)
	return nil
}

// unbindLocked drops the window's binding. Precondition: mw.mu held.
func (mw *MW) unbindLocked() {
	if mw.mr != nil {
		mw.mr.mu.Lock()
		mw.mr.windows--
		mw.mr.mu.Unlock()
	}
	mw.mr, mw.addr, mw.length, mw.access, mw.qpn = nil, 0, 0, 0, 0
}

// bindOp is a WRBindMW request's binding, resolved at post time.
type bindOp struct {
	mw     *MW
	rkey   uint32
	mr     *MR // nil: unbind (type 1)
	addr   uint64
	length uint64
	access verbs.Access
}

// loadBind checks a WRBindMW request as rxe's post path does and
// resolves its objects (EINVAL: the request is not posted).
func (qp *QP) loadBind(b *verbs.MWBind) (bindOp, error) {
	const op = "PostSend"
	if b == nil {
		return bindOp{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "a BIND_MW request needs Bind")
	}
	mw, ok := b.MW.(*MW)
	if !ok || mw == nil || mw.pd.dev != qp.dev {
		return bindOp{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "BIND_MW needs a window allocated on this device")
	}
	if b.RKey>>8 != mw.index {
		return bindOp{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "rkey %#x: a bind changes only the low 8 bits of the window's rkey %#x (use verbs.IncRKey)", b.RKey, mw.RKey())
	}
	if b.Access&^mwAccess != 0 {
		return bindOp{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "access %v: a window grants remote read, write and atomic access only (zero-based windows are not supported)", b.Access&^mwAccess)
	}
	o := bindOp{mw: mw, rkey: b.RKey, addr: b.Addr, length: b.Length, access: b.Access & (verbs.AccessRemoteRead | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic)}
	if b.MR == nil {
		if b.Length != 0 || b.Addr != 0 {
			return bindOp{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "a bind without an MR must have Addr and Length 0 (it unbinds a type 1 window)")
		}
		return o, nil
	}
	mr, ok := b.MR.(*MR)
	if !ok || mr == nil || mr.pd().dev != qp.dev {
		return bindOp{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "BIND_MW needs an MR registered on this device")
	}
	if mr.pd() != mw.pd {
		return bindOp{}, verbs.Errorf(op, verbs.ErrInvalidArgument, "the MR and the window are in different PDs")
	}
	if b.Length != 0 {
		o.mr = mr // else: length 0 unbinds, as in rxe
	}
	return o, nil
}

// bindLocked carries out a bind when the requester reaches it, with
// rxe_check_bind_mw's checks; a failure completes the request with
// WCMWBindErr. Precondition: qp.mu held.
func (qp *QP) bindLocked(o *bindOp) verbs.WCStatus {
	mw := o.mw
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.dead || mw.pd != qp.pd {
		return verbs.WCMWBindErr
	}
	if mw.typ == verbs.MWType2 && (mw.mr != nil || o.mr == nil) {
		// o10-37.2.30: only a free (invalidated) type 2 window may be
		// bound; o10-37.2.40: and not to nothing.
		return verbs.WCMWBindErr
	}
	if o.mr == nil {
		mw.unbindLocked()
		mw.rkey = o.rkey
		return verbs.WCSuccess
	}
	// The region's checks and its count of windows under its lock, so
	// that a Rereg (which refuses a region with windows bound) cannot
	// change its PD or access between them.
	mr := o.mr
	if !mr.bindable(mw, o, mw.mr != mr) {
		return verbs.WCMWBindErr
	}
	if mw.mr != mr {
		mw.unbindLocked()
	}
	mw.mr, mw.addr, mw.length, mw.access, mw.rkey = mr, o.addr, o.length, o.access, o.rkey
	if mw.typ == verbs.MWType2 {
		mw.qpn = qp.qpn
	}
	return verbs.WCSuccess
}

// bindable checks that o may bind mw to the region (its PD, C10-73..75)
// and, if count, counts the binding; all under the region's lock.
func (mr *MR) bindable(mw *MW, o *bindOp, count bool) bool {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	access := mr.Access()
	switch {
	case mr.dead, mr.pd() != mw.pd, // deregistered or moved by Rereg since the post
		access&verbs.AccessMWBind == 0, // C10-73
		o.access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && access&verbs.AccessLocalWrite == 0: // C10-74
		return false
	}
	if _, in := mr.span(o.addr, o.length); !in { // C10-75
		return false
	}
	if count {
		mr.windows++
	}
	return true
}

// unbindQPWindows invalidates the type 2 windows bound through QP qpn,
// which is being reset or destroyed: a window is for the connection that
// bound it, not for whichever peer the QP (or a QP that draws its number
// later) connects to next. Precondition: the QP's mu held.
func (d *Device) unbindQPWindows(qpn uint32) {
	if d.nMW.Load() == 0 {
		return
	}
	d.windows.each(func(_ uint32, mw *MW) bool {
		mw.mu.Lock()
		if mw.typ == verbs.MWType2 && mw.mr != nil && mw.qpn == qpn {
			mw.unbindLocked()
		}
		mw.mu.Unlock()
		return true
	})
}

// localInvLocked carries out a LOCAL_INV when the requester reaches it:
// it invalidates the bound type 2 window of qp's PD whose rkey is rkey.
// Regions cannot be invalidated (softrdma has no fast registration), nor
// type 1 windows (o10-37.2.26); a failure completes the request with
// WCLocQPOpErr, as rxe's. Precondition: qp.mu held.
func (qp *QP) localInvLocked(rkey uint32) verbs.WCStatus {
	if !qp.pd.invalidateWindow(rkey, 0, false) {
		return verbs.WCLocQPOpErr
	}
	return verbs.WCSuccess
}

// window returns the window of pd that rkey names, or nil.
func (pd *PD) window(rkey uint32) *MW {
	if pd.dev.nMW.Load() == 0 {
		return nil
	}
	mw := pd.dev.windows.lookup(rkey >> 8)
	if mw == nil || mw.pd != pd {
		return nil
	}
	return mw
}

// invalidateWindow invalidates the bound type 2 window of pd with rkey,
// for LOCAL_INV or (remote) a SEND_WITH_INV that arrived on QP qpn, which
// must be the QP the window was bound through: a peer on another
// connection cannot revoke a window it cannot reach. It reports whether
// it did.
func (pd *PD) invalidateWindow(rkey, qpn uint32, remote bool) bool {
	mw := pd.window(rkey)
	if mw == nil {
		return false
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if !mw.canInvalidateLocked(rkey, qpn, remote) {
		return false
	}
	mw.unbindLocked()
	return true
}

// canInvalidateLocked says whether an invalidation of rkey applies to
// the window. Precondition: mw.mu held.
func (mw *MW) canInvalidateLocked(rkey, qpn uint32, remote bool) bool {
	return !mw.dead && mw.typ == verbs.MWType2 && mw.rkey == rkey && mw.mr != nil && (!remote || mw.qpn == qpn)
}

// canInvalidateWindow says whether a SEND_WITH_INV arriving on QP qpn
// may invalidate rkey (invalidateWindow would).
func (pd *PD) canInvalidateWindow(rkey, qpn uint32) bool {
	mw := pd.window(rkey)
	if mw == nil {
		return false
	}
	mw.mu.RLock()
	defer mw.mu.RUnlock()
	return mw.canInvalidateLocked(rkey, qpn, true)
}

// remoteWindow resolves an rkey that names a window, for an access that
// arrived on QP qpn: the window must be bound, grant access, cover [addr,
// addr+n), and (type 2) have been bound through qpn. It returns the
// window's region read-locked, as remoteMR does.
func (pd *PD) remoteWindow(rkey uint32, addr, n uint64, access verbs.Access, qpn uint32) (*MR, []byte, bool) {
	mw := pd.window(rkey)
	if mw == nil {
		return nil, nil, false
	}
	mw.mu.RLock()
	mr := mw.mr
	if mr == nil || mw.dead || mw.rkey != rkey || (mw.typ == verbs.MWType2 && mw.qpn != qpn) ||
		mw.access&access != access || !inWindow(addr, n, mw.addr, mw.length) {
		mw.mu.RUnlock()
		return nil, nil, false
	}
	mr.mu.RLock()
	mw.mu.RUnlock()
	b, ok := mr.span(addr, n)
	if mr.dead || !ok {
		mr.mu.RUnlock()
		return nil, nil, false
	}
	return mr, b, true
}

// inWindow reports whether [addr, addr+n) lies in [base, base+length),
// careful with overflow: the values come from the network.
func inWindow(addr, n, base, length uint64) bool {
	return addr >= base && addr-base <= length && n <= length-(addr-base)
}
