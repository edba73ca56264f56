//go:build amd64 || 386

package shm

import "sync/atomic"

// The release stores of the rings and of WRITE's last byte. x86 keeps
// stores in program order (TSO) and the compiler does not move stores
// past one another, so a plain store is enough: no fence on the WRITE
// path, and a store that leaves the store buffer while the CPU goes on,
// where an atomic store (XCHG) would wait until this CPU owned the line,
// a transfer from the peer's CPU when the peer read it.

// atomicStoreByte stores b at *p after every earlier store.
func atomicStoreByte(p *byte, b byte) { *p = b }

// storeRelease64 stores v at *p after every earlier store.
func storeRelease64(p *uint64, v uint64) { *p = v }

// storeLoadFence orders every earlier store before every later load: a
// locked add of 0 to *w (the word should be private to the caller's
// data, so that no other CPU owns its line). A plain store and a later
// load of another address are the one pair x86 reorders.
func storeLoadFence(w *uint32) { atomic.AddUint32(w, 0) }
