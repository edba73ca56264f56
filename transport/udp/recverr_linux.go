package udp

// ICMP errors. A datagram sent to an address where nothing listens on the
// RoCEv2 port comes back as an ICMP port unreachable (a host that is down
// as host unreachable). An unconnected UDP socket ignores these unless it
// asks for them with IP_RECVERR; then the kernel queues each on the
// socket's error queue and reports it once as the socket's pending error:
//
//	ICMP error ──► sk_err + error queue of the socket that sent
//	   ├─ recvmmsg / sendmmsg on that socket fail once with the errno
//	   │     (ECONNREFUSED, EHOSTUNREACH, ...) ──► drainErrors
//	   └─ ppoll reports POLLERR on it (receive waits poll the sending
//	         sockets too, for no events but errors) ──► drainErrors
//	drainErrors: recvmsg(MSG_ERRQUEUE) until empty ──► for each ICMP
//	   error: the original destination ──► the OnUnreachable function
//
// Nothing of this runs while no error is queued: the data path's only
// cost is a branch on errno values it already examined.

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OnUnreachable sets the function told about every ICMP error for a
// datagram the transport sent: dst is where the datagram went, err the
// errno the error maps to (syscall.ECONNREFUSED for a port unreachable,
// EHOSTUNREACH, ENETUNREACH, ...). It runs on the goroutine that found
// the error (a receive or a send) and must not block or call the
// transport. nil: errors are drained and counted only. It is safe to call
// at any time.
func (t *Transport) OnUnreachable(f func(dst netip.AddrPort, err error)) {
	if f == nil {
		t.unreach.Store(nil)
		return
	}
	t.unreach.Store(&f)
}

// setRecvErr asks for ICMP errors on an unconnected socket.
func setRecvErr(fd int, v6 bool) error {
	if v6 {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1)
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVERR, 1)
}

// icmpErrno says whether errno is what a queued ICMP error makes a
// socket call return (the socket's pending error), as opposed to a
// failure of the call itself.
func icmpErrno(errno syscall.Errno) bool {
	switch errno {
	case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH, unix.EHOSTDOWN, unix.ENONET, unix.EPROTO, unix.EACCES, unix.EPERM:
		return true
	}
	return false
}

// drainErrors reads fd's error queue until it is empty, tells
// OnUnreachable about each ICMP error, and returns how many entries it
// read. Reading the queue also clears the socket's pending error.
func (t *Transport) drainErrors(fd int) int {
	var buf [64]byte // the start of the datagram that caused the error: unused
	var oob [256]byte
	n := 0
	for {
		_, oobn, _, from, err := unix.Recvmsg(fd, buf[:], oob[:], unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if err != nil {
			return n // EAGAIN: empty
		}
		n++
		t.stats.netErrors.Add(1)
		errno, ok := icmpError(oob[:oobn])
		if !ok {
			continue // a local error (a too-large packet with DF): the sender sees it as a loss
		}
		var dst netip.AddrPort
		switch a := from.(type) {
		case *unix.SockaddrInet4:
			dst = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
		case *unix.SockaddrInet6:
			dst = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
		default:
			continue
		}
		if f := t.unreach.Load(); f != nil {
			(*f)(dst, errno)
		}
	}
}

// icmpError finds the extended error of an error-queue message and
// returns its errno if an ICMP or ICMPv6 message caused it.
func icmpError(oob []byte) (syscall.Errno, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		v4 := m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_RECVERR
		v6 := m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_RECVERR
		if (!v4 && !v6) || len(m.Data) < int(unsafe.Sizeof(unix.SockExtendedErr{})) {
			continue
		}
		ee := (*unix.SockExtendedErr)(unsafe.Pointer(&m.Data[0]))
		if ee.Origin == unix.SO_EE_ORIGIN_ICMP || ee.Origin == unix.SO_EE_ORIGIN_ICMP6 {
			return syscall.Errno(ee.Errno), ee.Errno != 0
		}
	}
	return 0, false
}
