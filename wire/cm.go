package wire

import (
	"encoding/binary"
	"fmt"
)

// This file holds the communication manager's messages (IBTA vol 1,
// chapter 12.6, tables 106-120) as Fields structs with Encode and Parse.
// Offsets are relative to the CM attribute, which starts after the
// 24-byte MAD header; b passed to Encode and the parsers is that
// attribute (MAD.Data()), at least CMDataLen bytes. Encode writes every
// byte of the attribute, reserved ones as zero; Parse ignores reserved
// bits, so Encode(Parse(b)) is b with its reserved bits cleared.

// Private data sizes of the CM messages (IBTA 12.6.5-12.6.11).
const (
	ReqPrivateLen     = 92
	MRAPrivateLen     = 222
	RejPrivateLen     = 148
	RejARILen         = 72
	RepPrivateLen     = 196
	RTUPrivateLen     = 224
	DReqPrivateLen    = 220
	DRepPrivateLen    = 224
	SIDRReqPrivateLen = 216
	SIDRRepPrivateLen = 136
	SIDRRepInfoLen    = 72
)

// CMTransport is the transport service type of a REQ (IBTA 12.6.5).
type CMTransport uint8

const (
	CMTransportRC CMTransport = 0
	CMTransportUC CMTransport = 1
	CMTransportRD CMTransport = 2
)

// CMMsgKind says which message an MRA or REJ refers to (IBTA 12.6.6, 12.6.7).
type CMMsgKind uint8

const (
	CMMsgREQ   CMMsgKind = 0
	CMMsgREP   CMMsgKind = 1
	CMMsgOther CMMsgKind = 2 // LAP for an MRA; "no message" for a REJ
)

func (k CMMsgKind) String() string {
	switch k {
	case CMMsgREQ:
		return "REQ"
	case CMMsgREP:
		return "REP"
	case CMMsgOther:
		return "other"
	}
	return fmt.Sprintf("CMMsgKind(%d)", uint8(k))
}

// CMPath is a primary or alternate path of a REQ (IBTA 12.6.5).
type CMPath struct {
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID [16]byte
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalACKTimeout     uint8 // 5 bits
}

// REQ fields (IBTA 12.6.5, table 106).
var (
	reqLocalQPN       = field{32, 0, 24}
	reqRespResources  = field{32, 24, 8}
	reqLocalEECN      = field{36, 0, 24}
	reqInitDepth      = field{36, 24, 8}
	reqRemoteEECN     = field{40, 0, 24}
	reqRemoteCMTime   = field{43, 0, 5}
	reqTransport      = field{43, 5, 2}
	reqFlowControl    = field{43, 7, 1}
	reqStartingPSN    = field{44, 0, 24}
	reqLocalCMTime    = field{47, 0, 5}
	reqRetryCount     = field{47, 5, 3}
	reqPKey           = field{48, 0, 16}
	reqMTU            = field{50, 0, 4}
	reqRDCExists      = field{50, 4, 1}
	reqRNRRetry       = field{50, 5, 3}
	reqMaxCMRetries   = field{51, 0, 4}
	reqSRQ            = field{51, 4, 1}
	reqExtTransport   = field{51, 5, 3}
	reqPrimaryPath    = 52
	reqAlternatePath  = 96
	reqSAPSupported   = field{139, 5, 1}
	reqPrivateDataOff = 140
)

// CMReq is a connection request (REQ).
type CMReq struct {
	LocalCommID        uint32
	ServiceID          uint64
	LocalCAGUID        uint64
	LocalQKey          uint32
	LocalQPN           uint32 // 24 bits
	ResponderResources uint8
	LocalEECN          uint32 // 24 bits
	InitiatorDepth     uint8
	RemoteEECN         uint32 // 24 bits
	RemoteCMTimeout    uint8  // 5 bits: 4.096 µs × 2^n
	Transport          CMTransport
	FlowControl        bool
	StartingPSN        uint32 // 24 bits
	LocalCMTimeout     uint8  // 5 bits
	RetryCount         uint8  // 3 bits
	PKey               uint16
	PathMTU            uint8 // 4 bits, the IBTA MTU enumeration
	RDCExists          bool
	RNRRetryCount      uint8 // 3 bits
	MaxCMRetries       uint8 // 4 bits
	SRQ                bool
	ExtendedTransport  uint8 // 3 bits
	Primary, Alternate CMPath
	SAPSupported       bool
	PrivateData        [ReqPrivateLen]byte
}

func putPath(b []byte, off int, p *CMPath) {
	binary.BigEndian.PutUint16(b[off:], p.LocalLID)
	binary.BigEndian.PutUint16(b[off+2:], p.RemoteLID)
	copy(b[off+4:], p.LocalGID[:])
	copy(b[off+20:], p.RemoteGID[:])
	o := uint8(off)
	field{o + 36, 0, 20}.put(b, p.FlowLabel)
	field{o + 39, 2, 6}.put(b, uint32(p.PacketRate))
	b[off+40] = p.TrafficClass
	b[off+41] = p.HopLimit
	field{o + 42, 0, 4}.put(b, uint32(p.SL))
	field{o + 42, 4, 1}.put(b, b2u(p.SubnetLocal))
	field{o + 43, 0, 5}.put(b, uint32(p.LocalACKTimeout))
}

func getPath(b []byte, off int) CMPath {
	var p CMPath
	p.LocalLID = binary.BigEndian.Uint16(b[off:])
	p.RemoteLID = binary.BigEndian.Uint16(b[off+2:])
	copy(p.LocalGID[:], b[off+4:])
	copy(p.RemoteGID[:], b[off+20:])
	o := uint8(off)
	p.FlowLabel = field{o + 36, 0, 20}.get(b)
	p.PacketRate = uint8(field{o + 39, 2, 6}.get(b))
	p.TrafficClass = b[off+40]
	p.HopLimit = b[off+41]
	p.SL = uint8(field{o + 42, 0, 4}.get(b))
	p.SubnetLocal = field{o + 42, 4, 1}.get(b) != 0
	p.LocalACKTimeout = uint8(field{o + 43, 0, 5}.get(b))
	return p
}

func b2u(v bool) uint32 {
	if v {
		return 1
	}
	return 0
}

func short(b []byte) error {
	if len(b) < CMDataLen {
		return ErrShortMAD
	}
	return nil
}

// Encode writes the REQ into b (the CM attribute, len(b) >= CMDataLen).
func (r *CMReq) Encode(b []byte) {
	b = b[:CMDataLen]
	clear(b)
	binary.BigEndian.PutUint32(b[0:], r.LocalCommID)
	binary.BigEndian.PutUint64(b[8:], r.ServiceID)
	binary.BigEndian.PutUint64(b[16:], r.LocalCAGUID)
	binary.BigEndian.PutUint32(b[28:], r.LocalQKey)
	reqLocalQPN.put(b, r.LocalQPN)
	reqRespResources.put(b, uint32(r.ResponderResources))
	reqLocalEECN.put(b, r.LocalEECN)
	reqInitDepth.put(b, uint32(r.InitiatorDepth))
	reqRemoteEECN.put(b, r.RemoteEECN)
	reqRemoteCMTime.put(b, uint32(r.RemoteCMTimeout))
	reqTransport.put(b, uint32(r.Transport))
	reqFlowControl.put(b, b2u(r.FlowControl))
	reqStartingPSN.put(b, r.StartingPSN)
	reqLocalCMTime.put(b, uint32(r.LocalCMTimeout))
	reqRetryCount.put(b, uint32(r.RetryCount))
	reqPKey.put(b, uint32(r.PKey))
	reqMTU.put(b, uint32(r.PathMTU))
	reqRDCExists.put(b, b2u(r.RDCExists))
	reqRNRRetry.put(b, uint32(r.RNRRetryCount))
	reqMaxCMRetries.put(b, uint32(r.MaxCMRetries))
	reqSRQ.put(b, b2u(r.SRQ))
	reqExtTransport.put(b, uint32(r.ExtendedTransport))
	putPath(b, reqPrimaryPath, &r.Primary)
	putPath(b, reqAlternatePath, &r.Alternate)
	reqSAPSupported.put(b, b2u(r.SAPSupported))
	copy(b[reqPrivateDataOff:], r.PrivateData[:])
}

// ParseCMReq reads a REQ from the CM attribute b.
func ParseCMReq(b []byte) (CMReq, error) {
	var r CMReq
	if err := short(b); err != nil {
		return r, err
	}
	r.LocalCommID = binary.BigEndian.Uint32(b[0:])
	r.ServiceID = binary.BigEndian.Uint64(b[8:])
	r.LocalCAGUID = binary.BigEndian.Uint64(b[16:])
	r.LocalQKey = binary.BigEndian.Uint32(b[28:])
	r.LocalQPN = reqLocalQPN.get(b)
	r.ResponderResources = uint8(reqRespResources.get(b))
	r.LocalEECN = reqLocalEECN.get(b)
	r.InitiatorDepth = uint8(reqInitDepth.get(b))
	r.RemoteEECN = reqRemoteEECN.get(b)
	r.RemoteCMTimeout = uint8(reqRemoteCMTime.get(b))
	r.Transport = CMTransport(reqTransport.get(b))
	r.FlowControl = reqFlowControl.get(b) != 0
	r.StartingPSN = reqStartingPSN.get(b)
	r.LocalCMTimeout = uint8(reqLocalCMTime.get(b))
	r.RetryCount = uint8(reqRetryCount.get(b))
	r.PKey = uint16(reqPKey.get(b))
	r.PathMTU = uint8(reqMTU.get(b))
	r.RDCExists = reqRDCExists.get(b) != 0
	r.RNRRetryCount = uint8(reqRNRRetry.get(b))
	r.MaxCMRetries = uint8(reqMaxCMRetries.get(b))
	r.SRQ = reqSRQ.get(b) != 0
	r.ExtendedTransport = uint8(reqExtTransport.get(b))
	r.Primary = getPath(b, reqPrimaryPath)
	r.Alternate = getPath(b, reqAlternatePath)
	r.SAPSupported = reqSAPSupported.get(b) != 0
	copy(r.PrivateData[:], b[reqPrivateDataOff:])
	return r, nil
}

// CMMRA is a message receipt acknowledgement (IBTA 12.6.6, table 107):
// "I got your REQ/REP/LAP; my answer takes up to ServiceTimeout".
type CMMRA struct {
	LocalCommID, RemoteCommID uint32
	MessageMRAed              CMMsgKind // 2 bits
	ServiceTimeout            uint8     // 5 bits: 4.096 µs × 2^n
	PrivateData               [MRAPrivateLen]byte
}

// Encode writes the MRA into b.
func (m *CMMRA) Encode(b []byte) {
	b = b[:CMDataLen]
	clear(b)
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	field{8, 0, 2}.put(b, uint32(m.MessageMRAed))
	field{9, 0, 5}.put(b, uint32(m.ServiceTimeout))
	copy(b[10:], m.PrivateData[:])
}

// ParseCMMRA reads an MRA.
func ParseCMMRA(b []byte) (CMMRA, error) {
	var m CMMRA
	if err := short(b); err != nil {
		return m, err
	}
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.MessageMRAed = CMMsgKind(field{8, 0, 2}.get(b))
	m.ServiceTimeout = uint8(field{9, 0, 5}.get(b))
	copy(m.PrivateData[:], b[10:])
	return m, nil
}

// CMRejReason is the reason code of a REJ (IBTA 12.6.7.2, table 109).
type CMRejReason uint16

// REJ reasons Linux uses.
const (
	RejNoQP                  CMRejReason = 1
	RejNoEEC                 CMRejReason = 2
	RejNoResources           CMRejReason = 3
	RejTimeout               CMRejReason = 4
	RejUnsupportedReq        CMRejReason = 5
	RejInvalidCommID         CMRejReason = 6
	RejInvalidCommInstance   CMRejReason = 7
	RejInvalidServiceID      CMRejReason = 8
	RejInvalidTransportType  CMRejReason = 9
	RejStaleConn             CMRejReason = 10
	RejRDCNotExist           CMRejReason = 11
	RejInvalidGID            CMRejReason = 12
	RejInvalidLID            CMRejReason = 13
	RejInvalidSL             CMRejReason = 14
	RejInvalidTrafficClass   CMRejReason = 15
	RejInvalidHopLimit       CMRejReason = 16
	RejInvalidPacketRate     CMRejReason = 17
	RejPortCMRedirect        CMRejReason = 24
	RejPortRedirect          CMRejReason = 25
	RejInvalidMTU            CMRejReason = 26
	RejInsufficientRespRes   CMRejReason = 27
	RejConsumerDefined       CMRejReason = 28
	RejInvalidRNRRetry       CMRejReason = 29
	RejDuplicateLocalCommID  CMRejReason = 30
	RejInvalidClassVersion   CMRejReason = 31
	RejInvalidFlowLabel      CMRejReason = 32
	RejInvalidAltFlowLabel   CMRejReason = 33
	RejVendorOptionUnsupport CMRejReason = 35
)

var rejNames = map[CMRejReason]string{
	RejNoQP: "no QP", RejNoEEC: "no EEC", RejNoResources: "no resources", RejTimeout: "timeout",
	RejUnsupportedReq: "unsupported request", RejInvalidCommID: "invalid comm ID",
	RejInvalidCommInstance: "invalid comm instance", RejInvalidServiceID: "invalid service ID",
	RejInvalidTransportType: "invalid transport type", RejStaleConn: "stale connection",
	RejRDCNotExist: "RDC does not exist", RejInvalidGID: "invalid GID", RejInvalidLID: "invalid LID",
	RejInvalidSL: "invalid SL", RejInvalidTrafficClass: "invalid traffic class",
	RejInvalidHopLimit: "invalid hop limit", RejInvalidPacketRate: "invalid packet rate",
	RejPortCMRedirect: "port CM redirect", RejPortRedirect: "port redirect",
	RejInvalidMTU: "invalid MTU", RejInsufficientRespRes: "insufficient responder resources",
	RejConsumerDefined: "consumer defined", RejInvalidRNRRetry: "invalid RNR retry count",
	RejDuplicateLocalCommID: "duplicate local comm ID", RejInvalidClassVersion: "invalid class version",
	RejInvalidFlowLabel: "invalid flow label", RejInvalidAltFlowLabel: "invalid alternate flow label",
	RejVendorOptionUnsupport: "vendor option not supported",
}

func (r CMRejReason) String() string {
	if s, ok := rejNames[r]; ok {
		return s
	}
	return fmt.Sprintf("reason %d", uint16(r))
}

// CMRej is a reject (IBTA 12.6.7, table 108).
type CMRej struct {
	LocalCommID, RemoteCommID uint32
	MessageRejected           CMMsgKind // 2 bits
	RejectedInfoLength        uint8     // 7 bits: bytes of ARI used
	Reason                    CMRejReason
	ARI                       [RejARILen]byte // additional rejection information
	PrivateData               [RejPrivateLen]byte
}

// Encode writes the REJ into b.
func (r *CMRej) Encode(b []byte) {
	b = b[:CMDataLen]
	clear(b)
	binary.BigEndian.PutUint32(b[0:], r.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], r.RemoteCommID)
	field{8, 0, 2}.put(b, uint32(r.MessageRejected))
	field{9, 0, 7}.put(b, uint32(r.RejectedInfoLength))
	binary.BigEndian.PutUint16(b[10:], uint16(r.Reason))
	copy(b[12:], r.ARI[:])
	copy(b[84:], r.PrivateData[:])
}

// ParseCMRej reads a REJ.
func ParseCMRej(b []byte) (CMRej, error) {
	var r CMRej
	if err := short(b); err != nil {
		return r, err
	}
	r.LocalCommID = binary.BigEndian.Uint32(b[0:])
	r.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	r.MessageRejected = CMMsgKind(field{8, 0, 2}.get(b))
	r.RejectedInfoLength = uint8(field{9, 0, 7}.get(b))
	r.Reason = CMRejReason(binary.BigEndian.Uint16(b[10:]))
	copy(r.ARI[:], b[12:])
	copy(r.PrivateData[:], b[84:])
	return r, nil
}

// CMRep is a reply to a REQ (IBTA 12.6.8, table 110).
type CMRep struct {
	LocalCommID, RemoteCommID uint32
	LocalQKey                 uint32
	LocalQPN                  uint32 // 24 bits
	LocalEECN                 uint32 // 24 bits
	StartingPSN               uint32 // 24 bits
	ResponderResources        uint8
	InitiatorDepth            uint8
	TargetACKDelay            uint8 // 5 bits
	FailoverAccepted          uint8 // 2 bits
	FlowControl               bool
	RNRRetryCount             uint8 // 3 bits
	SRQ                       bool
	LocalCAGUID               uint64
	PrivateData               [RepPrivateLen]byte
}

// Encode writes the REP into b.
func (r *CMRep) Encode(b []byte) {
	b = b[:CMDataLen]
	clear(b)
	binary.BigEndian.PutUint32(b[0:], r.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], r.RemoteCommID)
	binary.BigEndian.PutUint32(b[8:], r.LocalQKey)
	field{12, 0, 24}.put(b, r.LocalQPN)
	field{16, 0, 24}.put(b, r.LocalEECN)
	field{20, 0, 24}.put(b, r.StartingPSN)
	b[24], b[25] = r.ResponderResources, r.InitiatorDepth
	field{26, 0, 5}.put(b, uint32(r.TargetACKDelay))
	field{26, 5, 2}.put(b, uint32(r.FailoverAccepted))
	field{26, 7, 1}.put(b, b2u(r.FlowControl))
	field{27, 0, 3}.put(b, uint32(r.RNRRetryCount))
	field{27, 3, 1}.put(b, b2u(r.SRQ))
	binary.BigEndian.PutUint64(b[28:], r.LocalCAGUID)
	copy(b[36:], r.PrivateData[:])
}

// ParseCMRep reads a REP.
func ParseCMRep(b []byte) (CMRep, error) {
	var r CMRep
	if err := short(b); err != nil {
		return r, err
	}
	r.LocalCommID = binary.BigEndian.Uint32(b[0:])
	r.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	r.LocalQKey = binary.BigEndian.Uint32(b[8:])
	r.LocalQPN = field{12, 0, 24}.get(b)
	r.LocalEECN = field{16, 0, 24}.get(b)
	r.StartingPSN = field{20, 0, 24}.get(b)
	r.ResponderResources, r.InitiatorDepth = b[24], b[25]
	r.TargetACKDelay = uint8(field{26, 0, 5}.get(b))
	r.FailoverAccepted = uint8(field{26, 5, 2}.get(b))
	r.FlowControl = field{26, 7, 1}.get(b) != 0
	r.RNRRetryCount = uint8(field{27, 0, 3}.get(b))
	r.SRQ = field{27, 3, 1}.get(b) != 0
	r.LocalCAGUID = binary.BigEndian.Uint64(b[28:])
	copy(r.PrivateData[:], b[36:])
	return r, nil
}

// CMRTU is ready to use (IBTA 12.6.9), CMDRep a disconnect reply (IBTA
// 12.6.11): both are two comm IDs and private data.
type CMRTU struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               [RTUPrivateLen]byte
}

// Encode writes the RTU (or, with the same layout, a DREP) into b.
func (r *CMRTU) Encode(b []byte) {
	b = b[:CMDataLen]
	clear(b)
	binary.BigEndian.PutUint32(b[0:], r.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], r.RemoteCommID)
	copy(b[8:], r.PrivateData[:])
}

// ParseCMRTU reads an RTU (or a DREP).
func ParseCMRTU(b []byte) (CMRTU, error) {
	var r CMRTU
	if err := short(b); err != nil {
		return r, err
	}
	r.LocalCommID = binary.BigEndian.Uint32(b[0:])
	r.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	copy(r.PrivateData[:], b[8:])
	return r, nil
}

// CMDRep has the RTU's layout (IBTA 12.6.11, table 113).
type CMDRep = CMRTU

// ParseCMDRep reads a DREP.
func ParseCMDRep(b []byte) (CMDRep, error) { return ParseCMRTU(b) }

// CMDReq is a disconnect request (IBTA 12.6.10, table 112).
type CMDReq struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // 24 bits: the receiver's QPN
	PrivateData               [DReqPrivateLen]byte
}

// Encode writes the DREQ into b.
func (d *CMDReq) Encode(b []byte) {
	b = b[:CMDataLen]
	clear(b)
	binary.BigEndian.PutUint32(b[0:], d.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], d.RemoteCommID)
	field{8, 0, 24}.put(b, d.RemoteQPN)
	copy(b[12:], d.PrivateData[:])
}

// ParseCMDReq reads a DREQ.
func ParseCMDReq(b []byte) (CMDReq, error) {
	var d CMDReq
	if err := short(b); err != nil {
		return d, err
	}
	d.LocalCommID = binary.BigEndian.Uint32(b[0:])
	d.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	d.RemoteQPN = field{8, 0, 24}.get(b)
	copy(d.PrivateData[:], b[12:])
	return d, nil
}

// CMSIDRReq is a service ID resolution request (IBTA 12.11.1, table 119):
// a UD client asks for the QPN and Q_Key behind a service ID.
type CMSIDRReq struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData [SIDRReqPrivateLen]byte
}

// Encode writes the SIDR_REQ into b.
func (s *CMSIDRReq) Encode(b []byte) {
	b = b[:CMDataLen]
	clear(b)
	binary.BigEndian.PutUint32(b[0:], s.RequestID)
	binary.BigEndian.PutUint16(b[4:], s.PKey)
	binary.BigEndian.PutUint64(b[8:], s.ServiceID)
	copy(b[16:], s.PrivateData[:])
}

// ParseCMSIDRReq reads a SIDR_REQ.
func ParseCMSIDRReq(b []byte) (CMSIDRReq, error) {
	var s CMSIDRReq
	if err := short(b); err != nil {
		return s, err
	}
	s.RequestID = binary.BigEndian.Uint32(b[0:])
	s.PKey = binary.BigEndian.Uint16(b[4:])
	s.ServiceID = binary.BigEndian.Uint64(b[8:])
	copy(s.PrivateData[:], b[16:])
	return s, nil
}

// SIDRStatus is the status of a SIDR_REP (IBTA 12.11.2, table 121).
type SIDRStatus uint8

const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupportedService SIDRStatus = 1 // no listener for the service ID
	SIDRReject             SIDRStatus = 2
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5
)

// CMSIDRRep is a service ID resolution reply (IBTA 12.11.2, table 120).
type CMSIDRRep struct {
	RequestID      uint32
	Status         SIDRStatus
	InfoLength     uint8
	QPN            uint32 // 24 bits
	ServiceID      uint64
	QKey           uint32
	AdditionalInfo [SIDRRepInfoLen]byte
	PrivateData    [SIDRRepPrivateLen]byte
}

// Encode writes the SIDR_REP into b.
func (s *CMSIDRRep) Encode(b []byte) {
	b = b[:CMDataLen]
	clear(b)
	binary.BigEndian.PutUint32(b[0:], s.RequestID)
	b[4], b[5] = uint8(s.Status), s.InfoLength
	field{8, 0, 24}.put(b, s.QPN)
	binary.BigEndian.PutUint64(b[12:], s.ServiceID)
	binary.BigEndian.PutUint32(b[20:], s.QKey)
	copy(b[24:], s.AdditionalInfo[:])
	copy(b[96:], s.PrivateData[:])
}

// ParseCMSIDRRep reads a SIDR_REP.
func ParseCMSIDRRep(b []byte) (CMSIDRRep, error) {
	var s CMSIDRRep
	if err := short(b); err != nil {
		return s, err
	}
	s.RequestID = binary.BigEndian.Uint32(b[0:])
	s.Status, s.InfoLength = SIDRStatus(b[4]), b[5]
	s.QPN = field{8, 0, 24}.get(b)
	s.ServiceID = binary.BigEndian.Uint64(b[12:])
	s.QKey = binary.BigEndian.Uint32(b[20:])
	copy(s.AdditionalInfo[:], b[24:])
	copy(s.PrivateData[:], b[96:])
	return s, nil
}
