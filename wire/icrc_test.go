package wire

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"net/netip"
	"testing"
)

// testIPv4 and testIPv6 are addresses like the captures'.
var (
	testIPv4 = IPInfo{
		Src: netip.MustParseAddr("10.77.0.3"), Dst: netip.MustParseAddr("10.77.0.2"),
		SrcPort: 51000, DstPort: UDPPort, ID: 0x52d3, DF: true,
	}
	testIPv6 = IPInfo{
		Src: netip.MustParseAddr("fd00::3"), Dst: netip.MustParseAddr("fd00::2"),
		SrcPort: 0xC123, DstPort: UDPPort,
	}
)

// headersFor builds real IP and UDP headers for a packet of pktLen bytes
// (BTH through ICRC) as described by ip, with the variant fields (which the
// ICRC masks) set to the given junk.
func headersFor(ip *IPInfo, pktLen int, junk uint32) (ipHdr, udpHdr []byte) {
	udpLen := 8 + pktLen
	udpHdr = make([]byte, 8)
	binary.BigEndian.PutUint16(udpHdr[0:], ip.SrcPort)
	binary.BigEndian.PutUint16(udpHdr[2:], ip.DstPort)
	binary.BigEndian.PutUint16(udpHdr[4:], uint16(udpLen))
	binary.BigEndian.PutUint16(udpHdr[6:], uint16(junk>>3)) // checksum
	if ip.Src.Unmap().Is4() && ip.Dst.Unmap().Is4() {
		ipHdr = make([]byte, 20)
		ipHdr[0] = 0x45
		ipHdr[1] = byte(junk) // TOS
		binary.BigEndian.PutUint16(ipHdr[2:], uint16(20+udpLen))
		binary.BigEndian.PutUint16(ipHdr[4:], ip.ID)
		if ip.DF {
			ipHdr[6] = 0x40
		}
		ipHdr[8] = byte(junk >> 8) // TTL
		ipHdr[9] = 17
		binary.BigEndian.PutUint16(ipHdr[10:], uint16(junk>>16)) // checksum
		s, d := ip.Src.Unmap().As4(), ip.Dst.Unmap().As4()
		copy(ipHdr[12:], s[:])
		copy(ipHdr[16:], d[:])
		return ipHdr, udpHdr
	}
	ipHdr = make([]byte, 40)
	binary.BigEndian.PutUint32(ipHdr[0:], 6<<28|junk&0x0FFFFFFF) // traffic class, flow label
	binary.BigEndian.PutUint16(ipHdr[4:], uint16(udpLen))
	ipHdr[6] = 17
	ipHdr[7] = byte(junk >> 5) // hop limit
	s, d := ip.Src.As16(), ip.Dst.As16()
	copy(ipHdr[8:], s[:])
	copy(ipHdr[24:], d[:])
	return ipHdr, udpHdr
}

// refICRC is the ICRC written out as the specification reads: CRC-32 over
// the concatenation of the masked pieces.
func refICRC(ipHdr, udpHdr, pkt []byte) uint32 {
	ipm, udpm := bytes.Clone(ipHdr), bytes.Clone(udpHdr)
	if ipm[0]>>4 == 4 {
		ipm[1], ipm[8], ipm[10], ipm[11] = 0xFF, 0xFF, 0xFF, 0xFF
	} else {
		ipm[0] |= 0x0F
		ipm[1], ipm[2], ipm[3], ipm[7] = 0xFF, 0xFF, 0xFF, 0xFF
	}
	udpm[6], udpm[7] = 0xFF, 0xFF
	pm := bytes.Clone(pkt)
	if len(pm) > 4 {
		pm[4] = 0xFF
	}
	all := append(bytes.Repeat([]byte{0xFF}, 8), ipm...)
	all = append(append(all, udpm...), pm...)
	return crc32.ChecksumIEEE(all)
}

func TestICRCKnownPacket(t *testing.T) {
	// Frame 25 of atomic_lat.pcap, with the IPv4 ID and ports it was sent with.
	b, _ := hex.DecodeString(atomicFrame)
	ip := testIPv4
	if !CheckICRC(b, &ip) {
		t.Fatalf("ICRC = %#08x, want %#08x", ICRC(&ip, b[:len(b)-4]), binary.LittleEndian.Uint32(b[len(b)-4:]))
	}
	// The fields the ICRC covers change it; the masked ones do not.
	for name, change := range map[string]func(*IPInfo, []byte){
		"IPv4 ID":     func(ip *IPInfo, _ []byte) { ip.ID = 0 },
		"DF":          func(ip *IPInfo, _ []byte) { ip.DF = false },
		"source port": func(ip *IPInfo, _ []byte) { ip.SrcPort++ },
		"source":      func(ip *IPInfo, _ []byte) { ip.Src = netip.MustParseAddr("10.77.0.4") },
		"PSN":         func(_ *IPInfo, b []byte) { b[11]++ },
		"payload":     func(_ *IPInfo, b []byte) { b[30]++ },
	} {
		ip, c := testIPv4, bytes.Clone(b)
		change(&ip, c)
		if CheckICRC(c, &ip) {
			t.Errorf("changing the %s leaves the ICRC valid", name)
		}
	}
	c := bytes.Clone(b)
	c[4] = 0xC0 // FECN and BECN may be set by switches on the way
	if !CheckICRC(c, &ip) {
		t.Error("BTH byte 4 is not masked")
	}
	mapped := ip
	mapped.Src = netip.AddrFrom16(ip.Src.As16()) // ::ffff:10.77.0.3
	mapped.Dst = netip.AddrFrom16(ip.Dst.As16())
	if !CheckICRC(b, &mapped) {
		t.Error("4in6-mapped addresses are not treated as IPv4")
	}
	if CheckICRC(b[:BTHLen+3], &ip) {
		t.Error("CheckICRC accepted a short packet")
	}
	PutICRC(c, &ip)
	if !bytes.Equal(c[len(c)-4:], b[len(b)-4:]) {
		t.Errorf("PutICRC wrote %x", c[len(c)-4:])
	}
}

func TestICRCMatchesHeaders(t *testing.T) {
	pkt := build(RCSendOnlyImm, []byte("softrdma ICRC test payload"))
	body := pkt[:len(pkt)-ICRCLen]
	for _, ip := range []IPInfo{testIPv4, testIPv6} {
		for _, junk := range []uint32{0, 0xFFFFFFFF, 0x12345678} {
			ipHdr, udpHdr := headersFor(&ip, len(pkt), junk)
			want := refICRC(ipHdr, udpHdr, body)
			if got := ICRCFromHeaders(ipHdr, udpHdr, body); got != want {
				t.Errorf("%v junk %#x: ICRCFromHeaders = %#x, want %#x", ip.Src, junk, got, want)
			}
			if got := ICRC(&ip, body); got != want {
				t.Errorf("%v junk %#x: ICRC = %#x, want %#x", ip.Src, junk, got, want)
			}
		}
	}
}

// FuzzICRC checks ICRC against ICRCFromHeaders over real-looking headers
// with random masked fields, and both against the reference.
func FuzzICRC(f *testing.F) {
	b, _ := hex.DecodeString(atomicFrame)
	f.Add(b[:len(b)-4], uint16(51000), uint16(0x52d3), true, false, uint32(0))
	f.Add([]byte{}, uint16(0), uint16(0), false, true, uint32(0xFFFFFFFF))
	f.Add(make([]byte, 1100), uint16(0xC000), uint16(1), false, true, uint32(7))
	f.Fuzz(func(t *testing.T, pkt []byte, sport, id uint16, df, v6 bool, junk uint32) {
		ip := testIPv4
		if v6 {
			ip = testIPv6
		}
		ip.SrcPort, ip.ID, ip.DF = sport, id, df
		ipHdr, udpHdr := headersFor(&ip, len(pkt)+ICRCLen, junk)
		want := refICRC(ipHdr, udpHdr, pkt)
		if got := ICRCFromHeaders(ipHdr, udpHdr, pkt); got != want {
			t.Fatalf("ICRCFromHeaders = %#x, want %#x", got, want)
		}
		if got := ICRC(&ip, pkt); got != want {
			t.Fatalf("ICRC = %#x, want %#x", got, want)
		}
		full := append(bytes.Clone(pkt), 0, 0, 0, 0)
		PutICRC(full, &ip)
		if len(full) >= BTHLen+ICRCLen && !CheckICRC(full, &ip) {
			t.Fatal("CheckICRC rejects what PutICRC wrote")
		}
		if len(pkt) < BTHLen {
			return
		}
		// Gathered: the same packet in three pieces, cut where junk says.
		s1 := BTHLen + int(junk%uint32(len(pkt)-BTHLen+1))
		s2 := s1 + int(junk>>16)%(len(pkt)-s1+1)
		if got := ICRCv(&ip, pkt[:s1], pkt[s1:s2], pkt[s2:]); got != want {
			t.Fatalf("ICRCv cut at %d, %d = %#x, want %#x", s1, s2, got, want)
		}
		tail := append(bytes.Clone(pkt[s2:]), 0, 0, 0, 0)
		PutICRCv(pkt[:s1], pkt[s1:s2], tail, &ip)
		if !bytes.Equal(tail[len(tail)-ICRCLen:], full[len(full)-ICRCLen:]) {
			t.Fatalf("PutICRCv cut at %d, %d wrote %x, PutICRC %x", s1, s2, tail[len(tail)-ICRCLen:], full[len(full)-ICRCLen:])
		}
	})
}

// updateSmall must agree with hash/crc32 for every length and start state,
// including the lengths around its 8-byte steps.
func TestUpdateSmall(t *testing.T) {
	buf := make([]byte, 200)
	for i := range buf {
		buf[i] = byte(i*131 + 7)
	}
	for _, start := range []uint32{0, crcFF, 0xDEADBEEF} {
		for n := 0; n <= len(buf); n++ {
			want := crc32.Update(start, crc32.IEEETable, buf[:n])
			if got := updateSmall(start, buf[:n]); got != want {
				t.Fatalf("updateSmall(%#x, %d bytes) = %#x, want %#x", start, n, got, want)
			}
		}
	}
}

// crcUpdate must agree with hash/crc32 for every length around its
// 128-byte steps and its threshold, from any start state and alignment.
func TestCRCUpdate(t *testing.T) {
	buf := make([]byte, 4096+300)
	for i := range buf {
		buf[i] = byte(i*167 + i>>8 + 3)
	}
	for _, start := range []uint32{0, crcFF, 0xDEADBEEF} {
		for off := 0; off < 3; off++ {
			for n := 0; n+off <= len(buf); n += 1 + n/64 {
				p := buf[off : off+n]
				want := crc32.Update(start, crc32.IEEETable, p)
				if got := crcUpdate(start, p); got != want {
					t.Fatalf("crcUpdate(%#x, %d bytes at %d) = %#x, want %#x", start, n, off, got, want)
				}
			}
		}
	}
}

func BenchmarkCRCUpdate4096(b *testing.B) {
	p := make([]byte, 4096)
	b.SetBytes(4096)
	for b.Loop() {
		crcUpdate(0, p)
	}
}

func FuzzCRCUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 300))
	f.Add(crcFF, make([]byte, 4100))
	f.Fuzz(func(t *testing.T, start uint32, p []byte) {
		if got, want := crcUpdate(start, p), crc32.Update(start, crc32.IEEETable, p); got != want {
			t.Fatalf("crcUpdate(%#x, %d bytes) = %#x, want %#x", start, len(p), got, want)
		}
	})
}
