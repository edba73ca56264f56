//go:build darwin || freebsd

package udp

import "golang.org/x/sys/unix"

// setDontFragment sets Don't Fragment on a UDP socket. FreeBSD then sends
// IP ID 0 (RFC 6864, sysctl net.inet.ip.rfc6864, on by default), the value
// the ICRC is computed for.
func setDontFragment(fd int, v6 bool) error {
	if v6 {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1)
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_DONTFRAG, 1)
}
