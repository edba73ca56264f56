//go:build linux && (amd64 || 386)

package shm

// atomicStoreByte stores b after every earlier store. x86 keeps stores in
// program order (TSO) and the compiler does not move stores past one
// another, so a plain store is enough: no fence on the WRITE path.
func atomicStoreByte(p *byte, b byte) { *p = b }
