package soft

import "github.com/softrdma/softrdma/verbs"

// SettleQP brings the device's QPs up to date before a connection
// manager acts on a disconnect (package cm calls it; qp names the
// connection's QP, and the whole device settles):
//
//   - what another goroutine's receive batch staged to send (an ACK a busy
//     poller left waiting, then staged: its QP no longer counts it as
//     owed) and ACKs still waiting for a poller leave now, so a DREQ sent
//     after SettleQP returns follows them;
//   - what waits in the transport is received and processed once, so a
//     DREQ handled after it finds the ACKs that reached the device ahead
//     of it (or in another socket) already taken by their QPs.
//
// It waits for the receive batch in progress, if any. It does nothing on
// a closed device or one whose transport cannot poll (its receive loop
// blocks in the transport holding the receive lock; it processes in
// arrival order anyway). Safe for concurrent use.
func (d *Device) SettleQP(qp verbs.QP) {
	if d.eng.Closed() || d.poller == nil {
		return
	}
	d.rxMu.Lock()
	defer d.rxMu.Unlock()
	if d.eng.Closed() {
		return
	}
	d.rx.MustNotBlock(false) // this goroutine may wait for the transport
	d.rx.DeferAcks(false)
	d.rx.SendDeferredAcks(d.eng)
	d.resetBufs()
	got, err := d.poller.TryRecv(d.pkts)
	d.received(got, err)
	if got > 0 {
		d.eng.HandleBatch(d.rx, d.pkts[:got], d.clock.Now())
	}
}
