package roce

import (
	"net/netip"

	"github.com/softrdma/softrdma/verbs"
	"github.com/softrdma/softrdma/wire"
)

// NoteKind is what a Note reports.
type NoteKind uint8

// Kinds of notes.
const (
	// NoteQPError: a QP moved to the error state; Status says why (the
	// failed WQE's status, or WCSuccess when the application asked).
	NoteQPError NoteKind = iota + 1
	// NoteRetransmit: the requester goes back to PSN and sends again;
	// Reason is "timeout", "sequence NAK" or "lost response".
	NoteRetransmit
	// NoteRNRWait: the peer had no receive WQE; the requester waits
	// before it sends PSN again.
	NoteRNRWait
	// NoteEvent: an asynchronous event was raised (Event).
	NoteEvent
)

func (k NoteKind) String() string {
	switch k {
	case NoteQPError:
		return "qp-error"
	case NoteRetransmit:
		return "retransmit"
	case NoteRNRWait:
		return "rnr-wait"
	case NoteEvent:
		return "event"
	}
	return "note(?)"
}

// Note is something the driver may want to log: the engine's state
// changes that a counter alone does not explain. Drops are only counted
// (Counters): the driver that wants them logged compares snapshots.
type Note struct {
	Kind   NoteKind
	QPN    uint32
	Peer   netip.Addr
	PSN    wire.PSN
	Status verbs.WCStatus
	Reason string
	Event  verbs.AsyncEvent // NoteEvent
}

// note passes n to Config.Notify, if set. It may run under a QP's lock:
// the driver must not block in it or call into the device.
func (d *Device) note(n Note) {
	if f := d.cfg.Notify; f != nil {
		f(n)
	}
}
