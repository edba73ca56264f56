package cm

import "net"

// SetInterfaces replaces the host's interface list that a listener on
// every device consults, until the test ends.
func SetInterfaces(f func() ([]net.Interface, error)) (restore func()) {
	old := interfaces
	interfaces = f
	return func() { interfaces = old }
}
