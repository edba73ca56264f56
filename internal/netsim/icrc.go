package netsim

import (
	"encoding/binary"
	"hash/crc32"
	"net/netip"

	"github.com/softrdma/softrdma/transport"
)

// icrcLen is the length of the RoCEv2 invariant CRC that ends every packet.
const icrcLen = 4

// flowPort is the UDP source port of a flow, as rxe derives it: the top two
// bits set (the dynamic port range) and the low 14 bits of the flow.
func flowPort(flow uint32) uint16 { return 0xC000 | uint16(flow&0x3FFF) }

// icrc returns the RoCEv2 invariant CRC of pkt (BTH to ICRC, the last four
// bytes excluded) as it travels from src:sport to dst:4791 (IBTA Annex A17,
// "RoCEv2", section A17.4.1.1, and rxe_icrc.c).
//
// The CRC-32 (IEEE 802.3) runs over
//
//	8 bytes of 0xFF           in place of the InfiniBand LRH
//	IPv4 header               TOS, TTL and checksum all ones; ID 0, DF set
//	  or IPv6 header          traffic class, flow label and hop limit all ones
//	UDP header                checksum all ones
//	packet                    BTH byte 4 (FECN, BECN, resv6a) all ones
//
// and is stored little-endian, as rxe stores it. src and dst must be of the
// same family. icrc does not allocate.
func icrc(pkt []byte, src, dst netip.Addr, sport uint16) uint32 {
	var hdr [8 + 40 + 8]byte
	for i := range 8 {
		hdr[i] = 0xFF
	}
	udpLen := 8 + len(pkt)
	n := 8
	if src.Is4() {
		ip := hdr[n : n+20]
		ip[0] = 0x45                                          // version 4, IHL 5
		ip[1] = 0xFF                                          // TOS, masked
		binary.BigEndian.PutUint16(ip[2:], uint16(20+udpLen)) // total length
		// ip[4:6] identification: 0
		ip[6] = 0x40                // flags: DF; fragment offset 0
		ip[8] = 0xFF                // TTL, masked
		ip[9] = 17                  // protocol: UDP
		ip[10], ip[11] = 0xFF, 0xFF // header checksum, masked
		s, d := src.As4(), dst.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		n += 20
	} else {
		ip := hdr[n : n+40]
		ip[0], ip[1], ip[2], ip[3] = 0x6F, 0xFF, 0xFF, 0xFF // version 6; traffic class and flow label masked
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))  // payload length
		ip[6] = 17                                          // next header: UDP
		ip[7] = 0xFF                                        // hop limit, masked
		s, d := src.As16(), dst.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		n += 40
	}
	udp := hdr[n : n+8]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], transport.Port)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0xFF, 0xFF // checksum, masked
	n += 8

	crc := crcUpdate(0, hdr[:n])
	body := pkt[:len(pkt)-icrcLen]
	if len(body) <= 4 {
		return crc32.Update(crc, crc32.IEEETable, body)
	}
	crc = crc32.Update(crc, crc32.IEEETable, body[:4])
	crc = crcUpdate(crc, maskedByte[:])
	return crc32.Update(crc, crc32.IEEETable, body[5:])
}

var maskedByte = [1]byte{0xFF}

// crcUpdate is crc32.Update with the IEEE table for short inputs. It exists
// so that the pseudo-header can live on the stack: crc32.Update lets its
// argument escape.
func crcUpdate(crc uint32, p []byte) uint32 {
	c := ^crc
	for _, b := range p {
		c = crc32.IEEETable[byte(c)^b] ^ c>>8
	}
	return ^c
}

// putICRC writes the ICRC of pkt into its last four bytes.
func putICRC(pkt []byte, src, dst netip.Addr, sport uint16) {
	binary.LittleEndian.PutUint32(pkt[len(pkt)-icrcLen:], icrc(pkt, src, dst, sport))
}

// checkICRC reports whether the last four bytes of pkt hold its ICRC.
func checkICRC(pkt []byte, src, dst netip.Addr, sport uint16) bool {
	if len(pkt) < icrcLen {
		return false
	}
	return binary.LittleEndian.Uint32(pkt[len(pkt)-icrcLen:]) == icrc(pkt, src, dst, sport)
}
