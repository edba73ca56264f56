package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Management datagram sizes (IBTA 13.4.2).
const (
	MADLen       = 256 // every IB management class MAD is 256 bytes
	MADHeaderLen = 24  // the common MAD header
	// CMDataLen is what follows the common header in a CM MAD: the CM
	// attribute, whose layout depends on the attribute ID.
	CMDataLen = MADLen - MADHeaderLen
)

// MAD header constants for the communication manager (IBTA 12.6.2, 13.4.4).
const (
	MADBaseVersion     = 1    // base version of every IB MAD
	MgmtClassCM        = 0x07 // management class of the connection manager
	CMClassVersion     = 2    // the CM class version Linux speaks
	MADMethodGet       = 0x01
	MADMethodSet       = 0x02
	MADMethodSend      = 0x03 // every CM message is a Send
	MADMethodGetResp   = 0x81
	MADStatusBadVers   = 0x0004 // unsupported class or version (IBTA 13.4.7)
	MADStatusBadMethod = 0x0008 // method not supported
	MADStatusBadAttr   = 0x000C // method/attribute combination not supported
)

// MAD common header offsets (IBTA 13.4.3, figure 148).
const (
	madBaseVersion  = 0
	madMgmtClass    = 1
	madClassVersion = 2
	madMethod       = 3
	madStatus       = 4
	madClassSpec    = 6
	madTID          = 8
	madAttrID       = 16
	madAttrMod      = 20
)

// ErrShortMAD is returned by the parsers when a buffer is shorter than the
// layout they read.
var ErrShortMAD = errors.New("wire: MAD too short")

// MAD is a view of a management datagram: the 24-byte common header (IBTA
// 13.4.3) followed by the class data. Accessors need len(b) >= MADHeaderLen.
type MAD []byte

// MADFields are the fields of the common MAD header.
type MADFields struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8 // bit 7 is the R (response) bit
	Status        uint16
	ClassSpecific uint16
	TransactionID uint64
	AttrID        uint16
	AttrMod       uint32
}

func (m MAD) BaseVersion() uint8    { return m[madBaseVersion] }
func (m MAD) MgmtClass() uint8      { return m[madMgmtClass] }
func (m MAD) ClassVersion() uint8   { return m[madClassVersion] }
func (m MAD) Method() uint8         { return m[madMethod] }
func (m MAD) Status() uint16        { return binary.BigEndian.Uint16(m[madStatus:]) }
func (m MAD) ClassSpecific() uint16 { return binary.BigEndian.Uint16(m[madClassSpec:]) }
func (m MAD) TransactionID() uint64 { return binary.BigEndian.Uint64(m[madTID:]) }
func (m MAD) AttrID() uint16        { return binary.BigEndian.Uint16(m[madAttrID:]) }
func (m MAD) AttrMod() uint32       { return binary.BigEndian.Uint32(m[madAttrMod:]) }

// SetMethod sets the method byte (a response sets bit 7).
func (m MAD) SetMethod(v uint8) { m[madMethod] = v }

// SetStatus sets the MAD status.
func (m MAD) SetStatus(v uint16) { binary.BigEndian.PutUint16(m[madStatus:], v) }

// Data returns what follows the common header.
func (m MAD) Data() []byte { return m[MADHeaderLen:] }

// Fields returns all header fields.
func (m MAD) Fields() MADFields {
	return MADFields{
		BaseVersion: m.BaseVersion(), MgmtClass: m.MgmtClass(), ClassVersion: m.ClassVersion(),
		Method: m.Method(), Status: m.Status(), ClassSpecific: m.ClassSpecific(),
		TransactionID: m.TransactionID(), AttrID: m.AttrID(), AttrMod: m.AttrMod(),
	}
}

// Encode writes f into the header; the two reserved bytes after the
// attribute ID become zero.
func (m MAD) Encode(f *MADFields) {
	m[madBaseVersion], m[madMgmtClass], m[madClassVersion], m[madMethod] =
		f.BaseVersion, f.MgmtClass, f.ClassVersion, f.Method
	binary.BigEndian.PutUint16(m[madStatus:], f.Status)
	binary.BigEndian.PutUint16(m[madClassSpec:], f.ClassSpecific)
	binary.BigEndian.PutUint64(m[madTID:], f.TransactionID)
	binary.BigEndian.PutUint16(m[madAttrID:], f.AttrID)
	m[18], m[19] = 0, 0
	binary.BigEndian.PutUint32(m[madAttrMod:], f.AttrMod)
}

// ParseMAD checks that b holds at least a MAD header and returns the view.
func ParseMAD(b []byte) (MAD, error) {
	if len(b) < MADHeaderLen {
		return nil, ErrShortMAD
	}
	return MAD(b), nil
}

// CMAttr is a CM attribute ID (IBTA 12.6, table 104): it names the message
// a CM MAD carries.
type CMAttr uint16

// CM attribute IDs.
const (
	CMClassPortInfo CMAttr = 0x0001
	CMReqAttr       CMAttr = 0x0010
	CMMRAAttr       CMAttr = 0x0011
	CMRejAttr       CMAttr = 0x0012
	CMRepAttr       CMAttr = 0x0013
	CMRTUAttr       CMAttr = 0x0014
	CMDReqAttr      CMAttr = 0x0015
	CMDRepAttr      CMAttr = 0x0016
	CMSIDRReqAttr   CMAttr = 0x0017
	CMSIDRRepAttr   CMAttr = 0x0018
	CMLAPAttr       CMAttr = 0x0019
	CMAPRAttr       CMAttr = 0x001A
)

var cmAttrNames = map[CMAttr]string{
	CMClassPortInfo: "ClassPortInfo", CMReqAttr: "REQ", CMMRAAttr: "MRA", CMRejAttr: "REJ",
	CMRepAttr: "REP", CMRTUAttr: "RTU", CMDReqAttr: "DREQ", CMDRepAttr: "DREP",
	CMSIDRReqAttr: "SIDR_REQ", CMSIDRRepAttr: "SIDR_REP", CMLAPAttr: "LAP", CMAPRAttr: "APR",
}

func (a CMAttr) String() string {
	if s, ok := cmAttrNames[a]; ok {
		return s
	}
	return fmt.Sprintf("CMAttr(%#04x)", uint16(a))
}

// EncodeCMHeader writes the common header of a CM MAD (a Send of class
// CM, version 2) into m with the given attribute and transaction ID. The
// attribute modifier is zero, as Linux's cm sends it (it carries ECE
// options only for vendors that negotiate them).
func EncodeCMHeader(m MAD, attr CMAttr, tid uint64) {
	m.Encode(&MADFields{BaseVersion: MADBaseVersion, MgmtClass: MgmtClassCM, ClassVersion: CMClassVersion,
		Method: MADMethodSend, TransactionID: tid, AttrID: uint16(attr)})
}

// A bit field of a CM attribute: the value sits in width bits starting
// bit bits below the most significant bit of byte off (IBTA's figures
// number bits this way). Offsets are relative to the attribute, after
// the common header. All fields fit in the 32 bits starting at off.
type field struct{ off, bit, width uint8 }

func (f field) get(b []byte) uint32 {
	v := binary.BigEndian.Uint32(b[f.off:])
	return v >> (32 - uint32(f.bit) - uint32(f.width)) & (1<<f.width - 1)
}

func (f field) put(b []byte, x uint32) {
	shift := 32 - uint32(f.bit) - uint32(f.width)
	mask := uint32(1<<f.width-1) << shift
	v := binary.BigEndian.Uint32(b[f.off:])
	binary.BigEndian.PutUint32(b[f.off:], v&^mask|x<<shift&mask)
}
