package wire

import "encoding/binary"

// The RoCEv2 Congestion Notification Packet (IBTA RoCEv2 Annex A17.9.3):
// what a notification point sends back to a sender whose packets arrived
// marked Congestion Experienced. On the wire:
//
//	BTH: opcode 0x81 (CNP service, top bits 100), SE 0, M 0, pad 0,
//	     TVer 0, P_Key, FECN 0, BECN 1, dest QP = the sender's QP, AckReq 0,
//	     PSN 0
//	16 reserved bytes of zero
//	ICRC
//
// It is no request and no response: it retires nothing and consumes no
// PSN. Linux rxe has no CNP opcode and drops it as an opcode of another
// transport; RoCE NICs feed it to their reaction point.

// CNPOpcode is the BTH opcode of a CNP.
const CNPOpcode Opcode = 0x81

// cnpReserved is the length of the CNP's reserved payload.
const cnpReserved = 16

// CNPLen is the length of a CNP from the BTH to the ICRC.
const CNPLen = BTHLen + cnpReserved + ICRCLen

// bthBECN is the BECN bit in BTH byte 4.
const bthBECN = 0x40

// EncodeCNP writes a CNP to dest QP destQP into b[:CNPLen] (the ICRC is
// left for the transport) and returns b[:CNPLen]. b must hold CNPLen bytes.
func EncodeCNP(b []byte, pkey uint16, destQP uint32) []byte {
	b = b[:CNPLen]
	BTH(b).Encode(&BTHFields{Opcode: CNPOpcode, PKey: pkey, DestQP: destQP})
	b[bthFECN] |= bthBECN
	clear(b[BTHLen : BTHLen+cnpReserved])
	return b
}

// ParseCNP reports whether b (BTH to ICRC) is a CNP, and the QP it
// names. It checks the opcode and the length, which a CNP fixes; the
// reserved bytes, BECN and PSN are not checked (IBTA has receivers ignore
// reserved fields, and some senders set BECN only).
func ParseCNP(b []byte) (destQP uint32, ok bool) {
	if len(b) != CNPLen || Opcode(b[bthOpcode]) != CNPOpcode {
		return 0, false
	}
	return binary.BigEndian.Uint32(b[bthFECN:]) & 0xFFFFFF, true
}
