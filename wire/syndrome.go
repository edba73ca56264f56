package wire

import "fmt"

// AckType is the kind of an AETH syndrome: its bits 6:5 (IBTA 9.7.5.2,
// table 42).
type AckType uint8

// AETH syndrome kinds.
const (
	AckTypeACK      AckType = 0 // ACK; the low 5 bits are a credit count
	AckTypeRNRNAK   AckType = 1 // receiver not ready; the low 5 bits are an RNR timer code
	AckTypeReserved AckType = 2 // reserved
	AckTypeNAK      AckType = 3 // NAK; the low 5 bits are a NAKCode
)

// String returns "ACK", "RNR_NAK", "RESERVED" or "NAK".
func (t AckType) String() string {
	switch t {
	case AckTypeACK:
		return "ACK"
	case AckTypeRNRNAK:
		return "RNR_NAK"
	case AckTypeReserved:
		return "RESERVED"
	case AckTypeNAK:
		return "NAK"
	default:
		return fmt.Sprintf("AckType(%d)", uint8(t))
	}
}

// NAKCode is the low 5 bits of a NAK syndrome (IBTA 9.7.5.2, table 42).
type NAKCode uint8

// NAK codes.
const (
	NAKPSNSeqError            NAKCode = 0 // PSN sequence error: implicitly ACKs every PSN before it
	NAKInvalidRequest         NAKCode = 1 // invalid request
	NAKRemoteAccessError      NAKCode = 2 // remote access error (rkey, bounds, permissions)
	NAKRemoteOperationalError NAKCode = 3 // remote operational error
	NAKInvalidRDRequest       NAKCode = 4 // invalid RD request
)

// String returns the NAK code's name, e.g. "PSN_SEQ_ERROR".
func (c NAKCode) String() string {
	switch c {
	case NAKPSNSeqError:
		return "PSN_SEQ_ERROR"
	case NAKInvalidRequest:
		return "INVALID_REQUEST"
	case NAKRemoteAccessError:
		return "REMOTE_ACCESS_ERROR"
	case NAKRemoteOperationalError:
		return "REMOTE_OPERATIONAL_ERROR"
	case NAKInvalidRDRequest:
		return "INVALID_RD_REQUEST"
	default:
		return fmt.Sprintf("NAKCode(%d)", uint8(c))
	}
}

// ACKCreditInvalid is the credit count meaning "no end-to-end credits
// advertised" (IBTA 9.7.5.2, end-to-end flow control credits); rxe sends it
// in every ACK.
const ACKCreditInvalid = 0x1F

// SyndromeType returns the kind of an AETH syndrome.
func SyndromeType(s uint8) AckType { return AckType(s >> 5 & 3) }

// SyndromeValue returns the low 5 bits of a syndrome: the credit count of
// an ACK, the timer code of an RNR NAK, or the NAKCode of a NAK.
func SyndromeValue(s uint8) uint8 { return s & 0x1F }

// ACKSyndrome returns the syndrome of an ACK with the given credit count
// (masked to 5 bits). Pass ACKCreditInvalid to do as rxe does.
func ACKSyndrome(credit uint8) uint8 { return credit & 0x1F }

// RNRNAKSyndrome returns the syndrome of an RNR NAK carrying the RNR timer
// code (masked to 5 bits; see RNRTimeout).
func RNRNAKSyndrome(timer uint8) uint8 { return 0x20 | timer&0x1F }

// NAKSyndrome returns the syndrome of a NAK with code c.
func NAKSyndrome(c NAKCode) uint8 { return 0x60 | uint8(c)&0x1F }
