package shm

import "github.com/softrdma/softrdma/verbs"

// SettleQP brings qp up to date before a connection manager acts on a
// disconnect (package cm calls it): the peer's consumer index in qp's
// ring, its acknowledgement, is read and the SENDs it covers complete.
// The peer moves that index before its application sees the message, so
// before it can disconnect; a DREQ handled after SettleQP returns thus
// finds every SEND the peer took completed. Unlike the progress pass,
// which skips a QP another goroutine holds, it waits for qp's lock. It
// does nothing for a QP of another device or a destroyed one. Safe for
// concurrent use.
func (d *Device) SettleQP(v verbs.QP) {
	qp, ok := v.(*QP)
	if !ok || qp.dev != d {
		return
	}
	qp.mu.Lock()
	defer qp.unlock()
	qp.progressLocked()
}
