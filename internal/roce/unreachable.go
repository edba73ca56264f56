package roce

import (
	"net/netip"

	"github.com/softrdma/softrdma/verbs"
)

// HandleUnreachable installs h as the receiver of the network's reports
// that a destination takes no RoCEv2 (verbs.GSIUnreachable).
func (d *Device) HandleUnreachable(port uint8, h func(dst verbs.GID, err error)) error {
	if port != 1 {
		return verbs.Errorf("HandleUnreachable", verbs.ErrNotFound, "port %d: softrdma devices have one port, number 1", port)
	}
	if h == nil {
		d.gsi.unreach.Store(nil)
	} else {
		d.gsi.unreach.Store(&h)
	}
	return nil
}

// PeerUnreachable is the driver's report that the network answered a
// datagram sent to dst with an error (an ICMP port or host unreachable;
// err says which, e.g. syscall.ECONNREFUSED). Reports for another port
// than the fabric's are not about RoCEv2 and are ignored. It must not be
// called with a lock of the device held; it is safe for concurrent use.
func (d *Device) PeerUnreachable(dst netip.AddrPort, err error) {
	if dst.Port() != d.port {
		return
	}
	if h := d.gsi.unreach.Load(); h != nil {
		(*h)(verbs.GIDFromAddr(dst.Addr().Unmap()), err)
	}
}
