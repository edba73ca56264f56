package wire

import (
	"encoding/binary"
	"errors"
)

// Parse errors. Parse returns these values themselves (compare with ==
// or errors.Is), so a rejected packet costs no allocation.
var (
	ErrShort         = errors.New("wire: packet shorter than its headers and ICRC")
	ErrUnknownOpcode = errors.New("wire: unknown or unsupported BTH opcode")
	ErrBadPad        = errors.New("wire: BTH pad count exceeds the payload")
	ErrTVer          = errors.New("wire: BTH transport header version is not 0")
	ErrPayload       = errors.New("wire: payload on an opcode that carries none")
)

// Packet is a parsed view of a RoCEv2 UDP payload: BTH, extension headers,
// payload, pad and ICRC (IBTA 9.2, 9.3, 7.8). All slices alias the input;
// headers absent from the opcode are nil. Parse checks lengths only: it
// verifies neither the ICRC (see CheckICRC) nor any field's value beyond
// the opcode and TVer. A Packet may be reused across Parse calls.
type Packet struct {
	Raw          []byte  // the whole input
	Info         *OpInfo // the opcode's table entry; never nil after a successful Parse
	BTH          BTH
	RETH         RETH
	AETH         AETH
	AtomicETH    AtomicETH
	AtomicAckETH AtomicAckETH
	ImmDt        ImmDt
	IETH         IETH
	DETH         DETH
	Payload      []byte // excluding pad and ICRC
	ICRC         uint32 // the last 4 bytes read little-endian, as the ICRC is sent
}

// Parse parses b, a whole RoCEv2 UDP payload including the ICRC, into p.
// It fails with ErrShort, ErrUnknownOpcode, ErrTVer, ErrBadPad or
// ErrPayload; on error p is left partly filled and must not be used.
// Parse does not allocate.
func Parse(b []byte, p *Packet) error {
	if len(b) < BTHLen+ICRCLen {
		return ErrShort
	}
	bth := BTH(b[:BTHLen])
	info := bth.Opcode().Info()
	if !info.Valid() {
		return ErrUnknownOpcode
	}
	if bth.TVer() != 0 {
		return ErrTVer
	}
	end := len(b) - ICRCLen
	n := end - info.Length // payload and pad
	if n < 0 {
		return ErrShort
	}
	pad := bth.PadCount()
	if n < pad {
		return ErrBadPad
	}
	if n > 0 && info.Flags&FlagPayload == 0 {
		return ErrPayload
	}
	*p = Packet{
		Raw:     b,
		Info:    info,
		BTH:     bth,
		Payload: b[info.Length : end-pad : end-pad],
		ICRC:    binary.LittleEndian.Uint32(b[end:]),
	}
	if info.Flags&(FlagRETH|FlagAETH|FlagAtomicETH|FlagAtomicAckETH|FlagImm|FlagIETH|FlagDETH) == 0 {
		return nil
	}
	if o := info.RETHOff; o != 0 {
		p.RETH = RETH(b[o : o+RETHLen : o+RETHLen])
	}
	if o := info.AETHOff; o != 0 {
		p.AETH = AETH(b[o : o+AETHLen : o+AETHLen])
	}
	if o := info.AtomicETHOff; o != 0 {
		p.AtomicETH = AtomicETH(b[o : o+AtomicETHLen : o+AtomicETHLen])
	}
	if o := info.AtomicAckETHOff; o != 0 {
		p.AtomicAckETH = AtomicAckETH(b[o : o+AtomicAckETHLen : o+AtomicAckETHLen])
	}
	if o := info.ImmOff; o != 0 {
		p.ImmDt = ImmDt(b[o : o+ImmDtLen : o+ImmDtLen])
	}
	if o := info.IETHOff; o != 0 {
		p.IETH = IETH(b[o : o+IETHLen : o+IETHLen])
	}
	if o := info.DETHOff; o != 0 {
		p.DETH = DETH(b[o : o+DETHLen : o+DETHLen])
	}
	return nil
}

// PadFor returns the number of pad bytes that bring a payload of payloadLen
// bytes to a multiple of 4 (IBTA 9.2.4): (4 - payloadLen%4) % 4.
func PadFor(payloadLen int) int { return -payloadLen & 3 }

// PacketLen returns the length of a whole RoCEv2 UDP payload with opcode op
// and payloadLen bytes of payload: headers, payload, pad and ICRC. It is 0
// for an unknown opcode.
func PacketLen(op Opcode, payloadLen int) int {
	h := HeaderLen(op)
	if h == 0 {
		return 0
	}
	return h + payloadLen + PadFor(payloadLen) + ICRCLen
}
