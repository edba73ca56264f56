package wire

import "fmt"

// MTU is the InfiniBand path MTU enumeration that QP attributes carry (the
// IBTA PortInfo and PathRecord MTU encoding): at most 256 << (m-1) bytes of
// payload per packet. The zero value is not a valid MTU.
type MTU uint8

// Path MTUs.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// rxeMaxHdrLen is what rxe subtracts from the Ethernet MTU for the headers
// of a RoCEv2 packet (RXE_MAX_HDR_LENGTH, rxe_param.h).
const rxeMaxHdrLen = 80

// Bytes returns the MTU in bytes, or 0 for an invalid enum value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 256 << (m - 1)
}

// Valid reports whether m is one of MTU256 ... MTU4096.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// String returns the MTU in bytes ("1024"), or "MTU(n)" for an invalid value.
func (m MTU) String() string {
	if !m.Valid() {
		return fmt.Sprintf("MTU(%d)", uint8(m))
	}
	return fmt.Sprint(m.Bytes())
}

// MTUFromBytes returns the largest MTU of at most n bytes, capped at
// MTU4096, or 0 if n < 256.
func MTUFromBytes(n int) MTU {
	switch {
	case n >= 4096:
		return MTU4096
	case n >= 2048:
		return MTU2048
	case n >= 1024:
		return MTU1024
	case n >= 512:
		return MTU512
	case n >= 256:
		return MTU256
	default:
		return 0
	}
}

// MTUFromLinkMTU returns the path MTU rxe uses on a link with the given
// Ethernet (IP) MTU: the largest IB MTU that fits in linkMTU - 80 bytes,
// capped at 4096, and 256 when even that does not fit (rxe_set_mtu and
// eth_mtu_int_to_enum in rxe). A 1500-byte link gives MTU1024; 9000 gives
// MTU4096.
func MTUFromLinkMTU(linkMTU int) MTU {
	if m := MTUFromBytes(linkMTU - rxeMaxHdrLen); m != 0 {
		return m
	}
	return MTU256
}
