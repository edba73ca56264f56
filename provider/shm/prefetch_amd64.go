package shm

import "unsafe"

// prefetchw asks the CPU for the cache line at p in a state it may write
// (PREFETCHW): the line's transfer from the CPU that last read it starts
// now, not at the store that needs it.
//
//go:noescape
func prefetchw(p unsafe.Pointer)
