//go:build !linux

package udp

import "net/netip"

// Transport is a transport.Transport over net.UDPConn sockets (the
// portable transport, see portable.go): one datagram per system call, no
// GSO, no gathering, no polling. Send and Recv are safe for concurrent
// use; each serialises its callers.
type Transport struct {
	*portable
}

// Listen opens the transport on cfg.Addr.
func Listen(cfg Config) (*Transport, error) {
	p, err := listenPortable(cfg)
	if err != nil {
		return nil, err
	}
	return &Transport{p}, nil
}

// Slot reports that the address is not shared: on this system a device
// binds its address alone (Config.Exclusive is implied).
func (t *Transport) Slot() (uint32, bool) { return 0, false }

// ClaimService does nothing: the address is not shared.
func (t *Transport) ClaimService(uint64) error { return nil }

// ReleaseService does nothing.
func (t *Transport) ReleaseService(uint64) {}

// OnUnreachable does nothing: on this system the sockets do not report
// ICMP errors, and a dial to an address where nothing listens waits for
// the connection manager's retries.
func (t *Transport) OnUnreachable(func(dst netip.AddrPort, err error)) {}
