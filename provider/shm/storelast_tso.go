//go:build linux && (amd64 || 386)

package shm

// atomicStoreByte stores b after every earlier store. x86 keeps stores in
// program order (TSO) and the compiler does not move stores past one
// another, so a plain store is enough: no fence on the WRITE path.
func atomicStoreByte(p *byte, b byte) { *p = b }

// storeRelease64 stores v at *p after every earlier store, as
// atomicStoreByte does: a plain store, which leaves the store buffer while
// the CPU goes on, where an atomic store (XCHG) would wait until this CPU
// owned the line, a transfer from the peer's CPU when the peer read it.
func storeRelease64(p *uint64, v uint64) { *p = v }
