//go:build !linux

package cmattack

import "net"

// dontFragment does nothing here: receivers must accept unverified ICRCs.
func dontFragment(c *net.UDPConn) error { return nil }
