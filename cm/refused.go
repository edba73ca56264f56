package cm

// Refusal by the network: the device reports ICMP errors for its MADs
// (verbs.GSIUnreachable), and a connection request that the peer's host
// answered with one ends at once, as TCP's connect does:
//
//	provider's socket ──ICMP error──► HandleUnreachable handler
//	   (unreachable: hands it to the agent's goroutine, never blocks)
//	   ──► refusedLocked: a REQ or SIDR_REQ to that GID still waiting for
//	       its first answer fails the Dial with *UnreachableError; a DREQ
//	       is taken as answered (the peer is gone).

import (
	"time"

	"github.com/softrdma/softrdma/verbs"
)

// unreachIn is one report of the network that a GID takes no RoCEv2.
type unreachIn struct {
	dst verbs.GID
	err error
}

// watchUnreachable installs the agent as the device's receiver of
// unreachable reports, where the device has them.
func (a *agent) watchUnreachable(ctx verbs.Context) {
	if u, ok := ctx.(verbs.GSIUnreachable); ok {
		u.HandleUnreachable(a.port, a.unreachable)
	}
}

// unreachable is the GSIUnreachable handler. A report that finds the
// queue full is dropped: the request is resent and draws another.
func (a *agent) unreachable(dst verbs.GID, err error) {
	select {
	case a.unreach <- unreachIn{dst, err}:
	default:
	}
}

// refusedLocked ends what waits on u.dst's connection manager: requests
// not answered yet fail, a disconnect is complete.
func (a *agent) refusedLocked(u unreachIn) {
	for _, id := range a.ids {
		if id.peer != u.dst {
			continue
		}
		switch id.state {
		case stateReqSent, stateSIDRReqSent:
			id.msg, id.deadline = nil, time.Time{}
			a.removeLocked(id)
			id.ev <- event{reqErr: &UnreachableError{Addr: u.dst.Addr(), Err: u.err}}
		case stateDReqSent:
			a.enterTimewaitLocked(id)
		}
	}
}
