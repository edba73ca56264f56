package wire

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"
)

// The invariant CRC (IBTA 7.8.1, extended to RoCEv2 by annex A17) is CRC-32 as
// Go's crc32.ChecksumIEEE computes it, over
//
//	8 bytes of 0xFF (where InfiniBand has its LRH)
//	the IP header with its variant fields set to all ones:
//	  IPv4: type of service, time to live, header checksum
//	  IPv6: traffic class, flow label, hop limit
//	the UDP header with its checksum set to all ones
//	the BTH with byte 4 (FECN, BECN, reserved) set to 0xFF
//	everything after the BTH up to the ICRC (extension headers, payload, pad)
//
// and is appended little-endian. The IPv4 identification and flags are
// not masked, so the sender must know the ID the kernel puts in the header.

// UDPPort is the RoCEv2 destination UDP port (IBTA annex A17).
const UDPPort = 4791

// IPInfo carries what the ICRC covers of the IP and UDP headers that a
// RoCEv2 packet travels in; everything else of them is masked or derived
// from the packet length.
type IPInfo struct {
	// Src and Dst are both IPv4 (4in6-mapped addresses are unmapped) or
	// else the packet is taken to be IPv6.
	Src, Dst         netip.Addr
	SrcPort, DstPort uint16
	ID               uint16 // IPv4 identification (not masked by the ICRC)
	DF               bool   // IPv4 Don't Fragment (the flags/fragment field is not masked)
}

// crcFF is the CRC state after the 8 leading bytes of 0xFF.
var crcFF = crc32.ChecksumIEEE([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})

// Pseudo-header sizes: IPv6 (the larger) + UDP + BTH.
const (
	ipv4HdrLen  = 20
	ipv6HdrLen  = 40
	udpHdrLen   = 8
	maxPseudo   = ipv6HdrLen + udpHdrLen + BTHLen
	maxIPv4Hdr  = 60
	maxFromHdrs = maxIPv4Hdr + udpHdrLen + BTHLen
)

// ICRC returns the invariant CRC of pkt, a RoCEv2 UDP payload from the BTH
// to the end of the pad WITHOUT the 4 ICRC bytes, as sent in the IP and UDP
// headers that ip describes (IPv4: 20-byte header without options, fragment
// offset 0, MF clear). It does not allocate.
func ICRC(ip *IPInfo, pkt []byte) uint32 {
	return ICRCv(ip, pkt, nil, nil)
}

// ICRCv is ICRC of the concatenation head, payload, tail, where head
// holds at least the BTH: the ICRC of a packet gathered from its headers,
// a payload elsewhere, and its pad.
func ICRCv(ip *IPInfo, head, payload, tail []byte) uint32 {
	var buf [maxPseudo]byte
	src, dst := ip.Src.Unmap(), ip.Dst.Unmap()
	udpLen := udpHdrLen + len(head) + len(payload) + len(tail) + ICRCLen
	var n int
	if src.Is4() && dst.Is4() {
		h := buf[:ipv4HdrLen]
		h[0] = 0x45
		h[1] = 0xFF // TOS
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4HdrLen+udpLen))
		binary.BigEndian.PutUint16(h[4:], ip.ID)
		if ip.DF {
			h[6] = 0x40
		}
		h[8] = 0xFF // TTL
		h[9] = 17   // UDP
		h[10], h[11] = 0xFF, 0xFF
		s, d := src.As4(), dst.As4()
		copy(h[12:16], s[:])
		copy(h[16:20], d[:])
		n = ipv4HdrLen
	} else {
		h := buf[:ipv6HdrLen]
		h[0], h[1], h[2], h[3] = 0x6F, 0xFF, 0xFF, 0xFF // version 6, traffic class and flow label masked
		binary.BigEndian.PutUint16(h[4:], uint16(udpLen))
		h[6] = 17   // next header: UDP
		h[7] = 0xFF // hop limit
		s, d := ip.Src.As16(), ip.Dst.As16()
		copy(h[8:24], s[:])
		copy(h[24:40], d[:])
		n = ipv6HdrLen
	}
	u := buf[n : n+udpHdrLen]
	binary.BigEndian.PutUint16(u[0:], ip.SrcPort)
	binary.BigEndian.PutUint16(u[2:], ip.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xFF, 0xFF
	crc := icrcTail(buf[:], n+udpHdrLen, head)
	return crcMore(crcMore(crc, payload), tail)
}

// crcMore continues crc over p.
func crcMore(crc uint32, p []byte) uint32 {
	if len(p) < 64 {
		return updateSmall(crc, p)
	}
	return crcUpdate(crc, p)
}

// ICRCFromHeaders returns the invariant CRC of pkt (as for ICRC: without
// the ICRC bytes) from the real IP header (IPv4 with any options, or the
// 40-byte IPv6 fixed header, chosen by the version nibble) and UDP header
// it travels in, e.g. as captured or read from a raw socket. It does not
// allocate. An IPv4 header longer than 60 bytes is cut at 60.
func ICRCFromHeaders(ipHdr, udpHdr, pkt []byte) uint32 {
	var buf [maxFromHdrs]byte
	var n int
	if len(ipHdr) > 0 && ipHdr[0]>>4 == 6 {
		n = copy(buf[:ipv6HdrLen], ipHdr)
		buf[0] |= 0x0F
		buf[1], buf[2], buf[3] = 0xFF, 0xFF, 0xFF
		buf[7] = 0xFF
	} else {
		n = copy(buf[:maxIPv4Hdr], ipHdr)
		buf[1] = 0xFF
		buf[8] = 0xFF
		buf[10], buf[11] = 0xFF, 0xFF
	}
	copy(buf[n:n+udpHdrLen], udpHdr)
	buf[n+6], buf[n+7] = 0xFF, 0xFF
	return icrcTail(buf[:], n+udpHdrLen, pkt)
}

// icrcTail appends the masked BTH of pkt to buf[:n] and returns the CRC of
// 8 bytes of 0xFF, buf[:n+BTHLen] and the rest of pkt. buf must have room.
func icrcTail(buf []byte, n int, pkt []byte) uint32 {
	b := copy(buf[n:n+BTHLen], pkt)
	if b > bthFECN {
		buf[n+bthFECN] = 0xFF
	}
	crc := updateSmall(crcFF, buf[:n+b])
	return crcMore(crc, pkt[b:])
}

// slicing8 holds the tables of the slicing-by-8 CRC-32 algorithm for the
// IEEE polynomial: slicing8[0] is crc32.IEEETable, slicing8[k][i] the CRC
// state after byte i followed by k zero bytes.
var slicing8 = func() *[8][256]uint32 {
	t := new([8][256]uint32)
	t[0] = *crc32.IEEETable
	for i := range 256 {
		crc := t[0][i]
		for k := 1; k < 8; k++ {
			crc = t[0][byte(crc)] ^ crc>>8
			t[k][i] = crc
		}
	}
	return t
}()

// updateSmall is crc32.Update for the few dozen bytes of pseudo-header and
// short packets, eight bytes a step (slicing-by-8). It is written here
// because crc32.Update's assembly makes its argument escape, which would
// move the callers' stack buffers to the heap, and because for fewer than
// 64 bytes crc32.Update does the same with more overhead.
func updateSmall(crc uint32, p []byte) uint32 {
	t := slicing8
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[7][byte(crc)] ^ t[6][byte(crc>>8)] ^ t[5][byte(crc>>16)] ^ t[4][crc>>24] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}

// PutICRC computes the ICRC of pkt, which includes the 4 trailing ICRC
// bytes, over pkt[:len(pkt)-4] and writes it there little-endian. It
// panics if len(pkt) < ICRCLen.
func PutICRC(pkt []byte, ip *IPInfo) {
	end := len(pkt) - ICRCLen
	binary.LittleEndian.PutUint32(pkt[end:], ICRC(ip, pkt[:end]))
}

// PutICRCv is PutICRC for a packet gathered from head, payload and tail
// (see ICRCv); the ICRC goes into the last 4 bytes of tail.
func PutICRCv(head, payload, tail []byte, ip *IPInfo) {
	end := len(tail) - ICRCLen
	binary.LittleEndian.PutUint32(tail[end:], ICRCv(ip, head, payload, tail[:end]))
}

// CheckICRC reports whether the last 4 bytes of pkt hold the ICRC of the
// rest of it. It is false for a packet too short to hold a BTH and ICRC.
func CheckICRC(pkt []byte, ip *IPInfo) bool {
	if len(pkt) < BTHLen+ICRCLen {
		return false
	}
	end := len(pkt) - ICRCLen
	return binary.LittleEndian.Uint32(pkt[end:]) == ICRC(ip, pkt[:end])
}
