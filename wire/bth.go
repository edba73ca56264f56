package wire

import "encoding/binary"

// Header lengths in bytes (IBTA 9.2, 9.3).
const (
	BTHLen          = 12 // Base Transport Header (IBTA 9.2)
	RETHLen         = 16 // RDMA Extended Transport Header (IBTA 9.3.3)
	AETHLen         = 4  // ACK Extended Transport Header (IBTA 9.3.5)
	AtomicETHLen    = 28 // Atomic Extended Transport Header (IBTA 9.3.4)
	AtomicAckETHLen = 8  // Atomic Acknowledge Extended Transport Header (IBTA 9.3.6)
	ImmDtLen        = 4  // Immediate Data Extended Transport Header (IBTA 9.3.7)
	IETHLen         = 4  // Invalidate Extended Transport Header (IBTA 9.3.8)
	DETHLen         = 8  // Datagram Extended Transport Header (IBTA 9.3.2)
	ICRCLen         = 4  // Invariant CRC (IBTA 7.8.1)
)

// BTH field offsets and bits (IBTA 9.2, figure 95).
const (
	bthOpcode  = 0
	bthFlags   = 1 // SE(7) M(6) PadCnt(5:4) TVer(3:0)
	bthPKey    = 2
	bthFECN    = 4 // FECN(7) BECN(6) reserved(5:0); masked to 0xFF by the ICRC
	bthDestQP  = 5
	bthAckReq  = 8 // AckReq(7) reserved(6:0)
	bthPSN     = 9
	bthSE      = 0x80
	bthMigReq  = 0x40
	bthPadMask = 0x30
	bthTVer    = 0x0f
)

// BTH is a view of the Base Transport Header (IBTA 9.2), the 12 bytes that
// start every RoCEv2 packet. Accessors need len(b) >= BTHLen.
type BTH []byte

// Opcode returns the OpCode field (IBTA 9.2.1).
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// SetOpcode sets the OpCode field.
func (b BTH) SetOpcode(op Opcode) { b[bthOpcode] = byte(op) }

// SolicitedEvent returns the SE bit (IBTA 9.2.2).
func (b BTH) SolicitedEvent() bool { return b[bthFlags]&bthSE != 0 }

// SetSolicitedEvent sets the SE bit.
func (b BTH) SetSolicitedEvent(v bool) { setBit(&b[bthFlags], bthSE, v) }

// MigReq returns the MigReq bit (IBTA 9.2.3).
func (b BTH) MigReq() bool { return b[bthFlags]&bthMigReq != 0 }

// SetMigReq sets the MigReq bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[bthFlags], bthMigReq, v) }

// PadCount returns the number of pad bytes (0-3) between the payload and
// the ICRC (IBTA 9.2.4).
func (b BTH) PadCount() int { return int(b[bthFlags]&bthPadMask) >> 4 }

// SetPadCount sets the pad count; n is taken modulo 4.
func (b BTH) SetPadCount(n int) {
	b[bthFlags] = b[bthFlags]&^bthPadMask | byte(n&3)<<4
}

// TVer returns the transport header version (IBTA 9.2.5); only 0 is defined.
func (b BTH) TVer() uint8 { return b[bthFlags] & bthTVer }

// PKey returns the partition key (IBTA 9.2.6).
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[bthPKey:], k) }

// FECN returns the forward explicit congestion notification bit (RoCEv2,
// IBTA annex A17: it lives in the formerly reserved byte 4 of the BTH).
func (b BTH) FECN() bool { return b[bthFECN]&0x80 != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthFECN]&0x40 != 0 }

// DestQP returns the 24-bit destination QP number (IBTA 9.2.7).
func (b BTH) DestQP() uint32 { return get24(b[bthDestQP:]) }

// SetDestQP sets the destination QP number; qpn is masked to 24 bits.
func (b BTH) SetDestQP(qpn uint32) { put24(b[bthDestQP:], qpn) }

// AckReq returns the AckReq bit (IBTA 9.2.8): the requester asks the
// responder to acknowledge this packet.
func (b BTH) AckReq() bool { return b[bthAckReq]&0x80 != 0 }

// SetAckReq sets the AckReq bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthAckReq], 0x80, v) }

// PSN returns the 24-bit packet sequence number (IBTA 9.2.9).
func (b BTH) PSN() PSN { return PSN(get24(b[bthPSN:])) }

// SetPSN sets the packet sequence number; p is masked to 24 bits.
func (b BTH) SetPSN(p PSN) { put24(b[bthPSN:], uint32(p)) }

// BTHFields holds every field of a BTH that a sender sets. The zero value
// is an RC_SEND_FIRST to QP 0 with PSN 0 and P_Key 0 (an invalid P_Key: most
// senders want the default 0xFFFF).
type BTHFields struct {
	Opcode         Opcode
	SolicitedEvent bool
	MigReq         bool
	PadCount       int    // 0-3, taken modulo 4
	TVer           uint8  // low 4 bits; 0 is the only defined version
	PKey           uint16 // partition key
	DestQP         uint32 // 24 bits
	AckReq         bool
	PSN            PSN // 24 bits
}

// Encode writes all 12 bytes of the BTH from f. Byte 4 (FECN, BECN and
// reserved bits) and the 7 reserved bits after AckReq are written as zero.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHLen-1]
	b[bthOpcode] = byte(f.Opcode)
	fl := byte(f.PadCount&3)<<4 | f.TVer&bthTVer
	if f.SolicitedEvent {
		fl |= bthSE
	}
	if f.MigReq {
		fl |= bthMigReq
	}
	b[bthFlags] = fl
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	binary.BigEndian.PutUint32(b[bthFECN:], f.DestQP&0xFFFFFF)
	psn := uint32(f.PSN) & PSNMask
	if f.AckReq {
		psn |= 0x80000000
	}
	binary.BigEndian.PutUint32(b[bthAckReq:], psn)
}

// Fields returns the BTH's fields; Encode(&b.Fields()) rewrites the same
// bytes except byte 4 and the reserved bits after AckReq.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode:         b.Opcode(),
		SolicitedEvent: b.SolicitedEvent(),
		MigReq:         b.MigReq(),
		PadCount:       b.PadCount(),
		TVer:           b.TVer(),
		PKey:           b.PKey(),
		DestQP:         b.DestQP(),
		AckReq:         b.AckReq(),
		PSN:            b.PSN(),
	}
}

func setBit(p *byte, mask byte, v bool) {
	if v {
		*p |= mask
	} else {
		*p &^= mask
	}
}

// get24 reads a 24-bit big-endian value.
func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

// put24 writes the low 24 bits of v big-endian.
func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}
