package cm

// A disconnect takes effect after what preceded it.
//
// A peer's last messages and its disconnect travel apart: the messages
// (and their ACKs) to the data QP, the DREQ to QP1, which the device hands
// to the agent's goroutine. When the agent ends a connection on a DREQ,
// an application waiting for its last SEND's completion sees the end and
// gives up; the SEND must already show as taken if the peer took it. And
// when this side disconnects, the ACK its QP owes the peer must leave
// before the DREQ does. A device that can order these (provider/soft,
// provider/shm) implements qpSettler:
//
//	peer: ... SEND ─► our QP ─► ACK ────────────────────────────────┐
//	      Close: QP to ERR ─► SettleQP (the owed ACK leaves) ─► DREQ │
//	us:   DREQ ─► agent ─► SettleQP (what reached the device before  │
//	      it, the ACK, is processed) ─► Conn.Done ◄──────────────────┘

import "github.com/softrdma/softrdma/verbs"

// qpSettler is a device that can bring a QP up to date with its own
// receive and send paths.
//
// SettleQP returns once every packet (or, over shared memory, every
// acknowledgement) that had reached the device for qp when it was called
// has been processed by qp, its completions pushed, and once what qp
// produced before the call (an ACK) has been handed to the network. It
// may block briefly for another goroutine's receive batch; it never
// waits for the peer. It does nothing for a destroyed QP or a closed
// device.
type qpSettler interface {
	SettleQP(qp verbs.QP)
}

// settles reports whether c's end must wait for its device to settle
// its QP: a connected QP on a device that can (not a kernel device, not
// UD, which has nothing to acknowledge).
func (c *Conn) settles() bool {
	if c.kc != nil || c.QP == nil || c.QP.Type() == verbs.QPTypeUD {
		return false
	}
	_, ok := c.Context.(qpSettler)
	return ok
}

// settle brings c's QP up to date (qpSettler), if its device can.
func (c *Conn) settle() {
	if c.settles() {
		c.Context.(qpSettler).SettleQP(c.QP)
	}
}

// endConnLocked ends c with err once what reached its QP before the
// message that ends it has been processed: the agent's goroutine does
// it (endSettled) after it releases mu, since settling may wait for the
// device's receive path, which hands MADs to this agent.
// Precondition: a.mu held.
func (a *agent) endConnLocked(c *Conn, err error) {
	if !c.settles() || a.stopped.Load() {
		c.closeWith(err)
		return
	}
	a.ending = append(a.ending, connEnd{c, err})
	a.wake()
}

// connEnd is a connection the agent ends once its QP has settled.
type connEnd struct {
	c   *Conn
	err error
}

// endSettled settles and ends the connections endConnLocked left, in
// order. It runs on the agent's goroutine without mu.
func (a *agent) endSettled() {
	a.mu.Lock()
	ending := a.ending
	a.ending = nil
	a.mu.Unlock()
	for _, e := range ending {
		e.c.settle()
		e.c.closeWith(e.err)
	}
}
