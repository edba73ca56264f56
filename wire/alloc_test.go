package wire

import (
	"testing"
)

// TestZeroAllocs asserts that the packet path allocates nothing.
func TestZeroAllocs(t *testing.T) {
	write := build(RCWriteFirst, make([]byte, 1024))
	ack := build(RCAck, nil)
	ip4, ip6 := testIPv4, testIPv6
	ipHdr, udpHdr := headersFor(&ip4, len(write), 0)
	var p Packet
	var sink uint32
	tests := []struct {
		name string
		fn   func()
	}{
		{"Parse", func() {
			if Parse(write, &p) != nil {
				panic("parse")
			}
		}},
		{"Parse error", func() { _ = Parse(ack[:10], &p) }},
		{"ICRC IPv4", func() { sink += ICRC(&ip4, write[:len(write)-4]) }},
		{"ICRC IPv6", func() { sink += ICRC(&ip6, write[:len(write)-4]) }},
		{"ICRCFromHeaders", func() { sink += ICRCFromHeaders(ipHdr, udpHdr, write[:len(write)-4]) }},
		{"PutICRC", func() { PutICRC(ack, &ip4) }},
		{"CheckICRC", func() {
			if CheckICRC(write, &ip4) {
				sink++
			}
		}},
		{"encode headers", func() {
			BTH(write).Encode(&BTHFields{Opcode: RCWriteFirst, PKey: 0xFFFF, DestQP: 0x11, PSN: 5})
			RETH(write[BTHLen:]).Encode(&RETHFields{VA: 1, RKey: 2, DMALen: 3})
			AETH(ack[BTHLen:]).Encode(&AETHFields{Syndrome: ACKSyndrome(ACKCreditInvalid), MSN: 9})
		}},
		{"accessors", func() {
			b := BTH(write)
			sink += uint32(b.PSN().Add(1)) + b.DestQP() + uint32(b.PadCount())
			sink += RETH(write[BTHLen:]).RKey()
			if b.Opcode().Info().Has(FlagRETH) && b.Opcode().String() != "" {
				sink++
			}
		}},
		{"Opcode.String unknown", func() { sink += uint32(len(Opcode(0x1f).String())) }},
	}
	for _, tt := range tests {
		if n := testing.AllocsPerRun(100, tt.fn); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", tt.name, n)
		}
	}
	_ = sink
}

func BenchmarkParse(b *testing.B) {
	pkt := build(RCWriteFirst, make([]byte, 1024))
	var p Packet
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		if err := Parse(pkt, &p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkICRC1024(b *testing.B) {
	pkt := build(RCWriteMiddle, make([]byte, 1024))
	body := pkt[:len(pkt)-ICRCLen]
	ip := testIPv4
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		ICRC(&ip, body)
	}
}

func BenchmarkICRC4096(b *testing.B) {
	pkt := build(RCWriteMiddle, make([]byte, 4096))
	ip := testIPv4
	b.ReportAllocs()
	b.SetBytes(int64(len(pkt)))
	for b.Loop() {
		PutICRC(pkt, &ip)
	}
}

// BenchmarkICRCWrite8 is the ICRC of an 8-byte RDMA WRITE (BTH, RETH,
// payload), where the pseudo-header is most of the work.
func BenchmarkICRCWrite8(b *testing.B) {
	pkt := build(RCWriteOnly, make([]byte, 8))
	ip := testIPv4
	b.ReportAllocs()
	for b.Loop() {
		PutICRC(pkt, &ip)
	}
}
