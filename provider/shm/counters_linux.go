package shm

import "sync/atomic"

// Counters are what a device refused or dropped from its peers: each
// one a hostile or broken peer's message that did no harm, counted so
// that an operator can see it happened. Read them with Device.Counters.
type counters struct {
	ringRefused     atomic.Uint64 // RINGs beyond the per-peer or total limit, or for no RC QP of ours
	badInvalidate   atomic.Uint64 // SEND_WITH_INV naming a key it may not invalidate (every key, today)
	helloRefused    atomic.Uint64 // connections whose HELLO named a device their process does not hold
	ctrlDropped     atomic.Uint64 // connections dropped for a malformed or unexpected control message
	serviceSquatted atomic.Uint64 // service names found held by a process of another uid
	inPlaceShared   atomic.Uint64 // regions registered in place whose pages Dereg could not make private again
}

// Counter is one named count in Device.Counters.
type Counter struct {
	Name  string
	Value uint64
}

// Counters returns the device's refusal counters in a stable order:
//
//	ring_refused      RING messages refused: beyond maxRingsPerPeer pending
//	                  from one connection or maxRings in all, or naming no
//	                  RC QP of this device
//	bad_invalidate    SEND_WITH_INV received (refused: the receive and the
//	                  SEND fail as invalid requests)
//	hello_refused     connections refused because the device id in their
//	                  HELLO is not one their process listens for
//	ctrl_dropped      connections dropped for a malformed control message
//	service_squatted  service names (BindService, LookupService) found held
//	                  by a process of a uid other than the one they name
//	inplace_shared    regions registered in place (RegMapped) whose pages
//	                  Dereg could not move back to private memory: a peer
//	                  that ignored its REVOKE may still map them
//
// Safe for concurrent use.
func (d *Device) Counters() []Counter {
	return []Counter{
		{"ring_refused", d.ctr.ringRefused.Load()},
		{"bad_invalidate", d.ctr.badInvalidate.Load()},
		{"hello_refused", d.ctr.helloRefused.Load()},
		{"ctrl_dropped", d.ctr.ctrlDropped.Load()},
		{"service_squatted", d.ctr.serviceSquatted.Load()},
		{"inplace_shared", d.ctr.inPlaceShared.Load()},
	}
}
