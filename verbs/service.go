package verbs

import "net/netip"

// ServiceDirectory is implemented by contexts whose peers are not found
// by IP routing, so that the connection manager can still reach them by
// "address:port": the shared-memory provider's devices reach only
// processes on the same host, one device (and GID) per process, and an
// IP address cannot say which. A listener binds its rdma_cm service ID
// (port space and port) on the host; a dialer looks up which device
// holds it. Like TCP ports, one device at a time holds a service ID.
type ServiceDirectory interface {
	// BindService makes this device the one that serviceID reaches on
	// its host, until release is called or the device closes. It fails
	// with ErrInUse while another device holds the service ID.
	BindService(port uint8, serviceID uint64) (release func(), err error)
	// LookupService returns the GID of the device that a dialer of
	// serviceID at host addr reaches: if addr is such a device's GID,
	// that device; if it is an address of this host (loopback, or one
	// of its interfaces' addresses), the device that bound serviceID.
	// It fails with ErrNotFound if nobody holds the service ID, with
	// ErrUnreachable if the named device is gone, and with
	// ErrInvalidArgument for an address this kind of device cannot
	// reach (another host's).
	LookupService(port uint8, addr netip.Addr, serviceID uint64) (GID, error)
}
