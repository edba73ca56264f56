//go:build amd64 || 386

package shm

// storeRelease64 stores v at *p after every earlier store. x86 keeps
// stores in program order (TSO) and the compiler does not move stores
// past one another, so a plain store is enough; it leaves the store
// buffer while the CPU goes on, where an atomic store (XCHG) would wait
// until this CPU owned the line, a transfer from the peer's CPU when the
// peer read it.
func storeRelease64(p *uint64, v uint64) { *p = v }
