package wire

import (
	"encoding/binary"
	"net/netip"
)

// rdma_cm's header (Linux drivers/infiniband/core/cma.c, struct cma_hdr):
// the first 36 bytes of the private data of every REQ and SIDR_REQ that
// librdmacm sends, so that the passive side learns the IP addresses and
// port the connection is for. Layout:
//
//	0   version (0)
//	1   IP version in the high nibble (4 or 6)
//	2   source port (the active side's), big-endian
//	4   source IP (16 bytes; IPv4 in the last 4, the first 12 zero)
//	20  destination IP (16 bytes, the same way)
const (
	CMAHeaderLen = 36
	CMAVersion   = 0
)

// CMAHeader is rdma_cm's private-data header.
type CMAHeader struct {
	Version  uint8
	SrcPort  uint16
	Src, Dst netip.Addr // both IPv4 or both IPv6
}

// Encode writes h into b (len(b) >= CMAHeaderLen). An IPv4 header has IP
// version 4 and its addresses in the last 4 bytes of each 16-byte slot.
func (h *CMAHeader) Encode(b []byte) {
	b = b[:CMAHeaderLen]
	clear(b)
	b[0] = h.Version
	ipv := byte(6)
	if h.Src.Unmap().Is4() {
		ipv = 4
	}
	b[1] = ipv << 4
	binary.BigEndian.PutUint16(b[2:], h.SrcPort)
	putCMAAddr(b[4:20], h.Src, ipv)
	putCMAAddr(b[20:36], h.Dst, ipv)
}

func putCMAAddr(b []byte, a netip.Addr, ipv byte) {
	if ipv == 4 {
		a4 := a.Unmap().As4()
		copy(b[12:], a4[:])
		return
	}
	a16 := a.As16()
	copy(b, a16[:])
}

// ParseCMAHeader reads rdma_cm's header from the start of private data.
// ok is false when b is short or the IP version is neither 4 nor 6.
func ParseCMAHeader(b []byte) (h CMAHeader, ok bool) {
	if len(b) < CMAHeaderLen {
		return h, false
	}
	h.Version = b[0]
	h.SrcPort = binary.BigEndian.Uint16(b[2:])
	switch b[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return h, false
	}
	return h, true
}
