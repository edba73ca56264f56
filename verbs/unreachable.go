package verbs

// GSIUnreachable is implemented by GSI contexts that learn from the
// network that a destination takes no management datagrams: an ICMP port
// unreachable for a MAD sent to it (nothing listens on the RoCEv2 port
// there) or a host or network unreachable. The connection manager uses it
// to fail a connection request at once, as TCP's connect fails on the
// same ICMP errors, instead of resending it until its retries run out.
type GSIUnreachable interface {
	// HandleUnreachable sets the function told of each such error for a
	// datagram from port: dst is the GID it went to, err the error the
	// network reported (syscall.ECONNREFUSED for a port unreachable,
	// syscall.EHOSTUNREACH, ...). It runs on the provider's receive or
	// send path: it must not block or call into the device. nil: none.
	HandleUnreachable(port uint8, h func(dst GID, err error)) error
}
