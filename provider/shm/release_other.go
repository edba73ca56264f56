//go:build !amd64 && !386

package shm

import "sync/atomic"

// storeRelease64 stores v at *p after every earlier store.
func storeRelease64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
