//go:build !amd64 && !386

package shm

import "sync/atomic"

// atomicStoreByte stores b at *p after every earlier store: a
// read-modify-write atomic is a full barrier on every architecture Go
// supports, so no store before it moves after it, and the byte store
// cannot move before it.
func atomicStoreByte(p *byte, b byte) {
	var fence uint32
	atomic.AddUint32(&fence, 1)
	*p = b
}

// storeRelease64 stores v at *p after every earlier store.
func storeRelease64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// storeLoadFence orders every earlier store before every later load. The
// release stores here are sync/atomic's, sequentially consistent with
// its loads: nothing to add.
func storeLoadFence(*uint32) {}
