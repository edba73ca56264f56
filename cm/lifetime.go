package cm

// Lifetimes: a CM agent runs as long as its device. It starts the first
// time Listen or Dial uses a device and registers with the device's
// close hook (verbs.CloseNotifier); closing the device ends it:
//
//	dev.Close ──▶ close hook ──▶ agent.shutdown
//	                               ├─ connections: Close (a DREQ each, cm's objects destroyed), Err ErrDeviceClosed
//	                               ├─ Dial / Accept waiting for the peer: fail with ErrDeviceClosed
//	                               ├─ listeners: Close (Accept returns ErrClosed)
//	                               └─ MAD handler removed, run loop stopped
//
// So a program never detaches cm from a device; it closes the device.

import (
	"errors"
	"fmt"

	"github.com/softrdma/softrdma/verbs"
)

// ErrDeviceClosed: the device the connection, listener or connection
// attempt ran on was closed.
var ErrDeviceClosed = errors.New("cm: the device was closed")

// watchClose has the agent shut down when its device closes. It fails if
// the device is closed already.
func (a *agent) watchClose() error {
	cn, ok := a.ctx.(verbs.CloseNotifier)
	if !ok {
		return nil // a device that cannot tell: Detach ends the agent
	}
	remove := cn.OnClose(a.shutdown)
	a.mu.Lock()
	a.unhook = remove
	a.mu.Unlock()
	if a.stopped.Load() {
		return fmt.Errorf("%w (%s): open a device and use that (%w)", ErrDeviceClosed, a.ctx.Device().Name(), verbs.ErrInvalidState)
	}
	return nil
}

// shutdown ends everything the agent runs: it closes the connections
// (each sends its DREQ once; the agent stops before any resend) and the
// listeners, fails the connection attempts in progress, removes the MAD
// handler and stops the run loop. It runs once; later calls do nothing.
func (a *agent) shutdown() {
	a.stopOnce.Do(func() {
		agents.mu.Lock()
		if agents.m[a.ctx] == a {
			delete(agents.m, a.ctx)
		}
		agents.mu.Unlock()
		a.stopped.Store(true)

		a.mu.Lock()
		conns := make([]*Conn, 0, len(a.conns))
		for c := range a.conns {
			conns = append(conns, c)
		}
		for _, id := range a.ids {
			switch id.state {
			case stateReqSent, stateMRAReqRcvd, stateSIDRReqSent, stateRepSent, stateMRARepRcvd:
				a.removeLocked(id)
				select {
				case id.ev <- event{reqErr: ErrDeviceClosed}:
				default:
				}
			}
		}
		listeners := make([]*Listener, 0, len(a.listeners))
		for _, l := range a.listeners {
			listeners = append(listeners, l)
		}
		unhook := a.unhook
		a.mu.Unlock()

		for _, c := range conns {
			c.closeWith(ErrDeviceClosed)
			c.Close()
		}
		for _, l := range listeners {
			l.Close()
		}
		a.gsi.HandleMADs(a.port, nil)
		if u, ok := a.ctx.(verbs.GSIUnreachable); ok {
			u.HandleUnreachable(a.port, nil)
		}
		close(a.stop)
		if unhook != nil {
			unhook()
		}
	})
}

// adopt makes c one of the connections the agent closes when the device
// closes, until c.Close. It fails (and closes c) if the device closed
// while c was being established.
func (a *agent) adopt(c *Conn) error {
	a.mu.Lock()
	if a.stopped.Load() {
		a.mu.Unlock()
		c.closeWith(ErrDeviceClosed)
		c.Close()
		return ErrDeviceClosed
	}
	// Close runs c.owned last to first: forgetting c comes after what
	// cm created is destroyed.
	forget := func() error {
		a.mu.Lock()
		delete(a.conns, c)
		last := a.closeWhenIdle && len(a.conns) == 0
		if last {
			a.closeWhenIdle = false
		}
		a.mu.Unlock()
		if last {
			a.ctx.Close()
		}
		return nil
	}
	c.owned = append([]func() error{forget}, c.owned...)
	if a.conns == nil {
		a.conns = map[*Conn]struct{}{}
	}
	a.conns[c] = struct{}{}
	a.mu.Unlock()
	return nil
}

// closeIdle closes a device that a listener on every device opened for
// itself, once the listener is closed: at once if no connection runs on
// it, else when the last one closes (closing a listener leaves the
// connections it accepted running, as net's listeners do).
func closeIdle(ctx verbs.Context) {
	agents.mu.Lock()
	a := agents.m[ctx]
	agents.mu.Unlock()
	if a != nil {
		a.mu.Lock()
		busy := len(a.conns) > 0
		a.closeWhenIdle = busy
		a.mu.Unlock()
		if busy {
			return
		}
	}
	ctx.Close()
}

// Detach ends cm's work on ctx at once, as closing ctx does: its
// connections close, its listeners stop, connection attempts fail.
//
// Deprecated: close the device instead; cm ends its work on a device
// when the device closes (verbs.CloseNotifier). Detach remains for
// programs written when closing was not enough; calling it before Close
// is harmless.
func Detach(ctx verbs.Context) {
	agents.mu.Lock()
	a := agents.m[ctx]
	agents.mu.Unlock()
	if a != nil {
		a.shutdown()
	}
}
