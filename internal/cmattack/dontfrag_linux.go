package cmattack

import (
	"net"
	"syscall"
)

// dontFragment sets Don't Fragment, which makes Linux send IPv4 ID 0:
// the ID the receiver's ICRC check assumes.
func dontFragment(c *net.UDPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_MTU_DISCOVER, syscall.IP_PMTUDISC_DO)
	})
	if err != nil {
		return err
	}
	return serr
}
