package verbs

import (
	"fmt"
	"strings"
)

// GlobalRoute is the global routing part of an address (struct ibv_global_route).
// On RoCE it is always present: DGID is the peer's GID and SGIDIndex selects
// the local GID (and so the local IP address).
type GlobalRoute struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr describes a path to a peer (struct ibv_ah_attr).
type AHAttr struct {
	GRH         GlobalRoute
	DLID        uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool
	PortNum     uint8
}

// QPCap is the capacity of a QP's work queues (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// QPInitAttr is what CreateQP needs (struct ibv_qp_init_attr).
type QPInitAttr struct {
	// Context is returned unchanged by QP.Context; the library does not use it.
	Context any
	SendCQ  CQ
	RecvCQ  CQ
	// SRQ, if set, supplies receive WQEs instead of the QP's own receive queue.
	SRQ    SRQ
	Cap    QPCap
	QPType QPType
	// SigAll makes every send request signaled, whatever its flags.
	SigAll bool
}

// QPAttrMask selects the QPAttr fields that Modify sets or Query returns
// (enum ibv_qp_attr_mask).
type QPAttrMask uint32

// QP attribute mask bits, with the values libibverbs uses.
const (
	QPAttrState            QPAttrMask = 1 << 0
	QPAttrCurState         QPAttrMask = 1 << 1
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	QPAttrAccessFlags      QPAttrMask = 1 << 3
	QPAttrPKeyIndex        QPAttrMask = 1 << 4
	QPAttrPort             QPAttrMask = 1 << 5
	QPAttrQKey             QPAttrMask = 1 << 6
	QPAttrAV               QPAttrMask = 1 << 7
	QPAttrPathMTU          QPAttrMask = 1 << 8
	QPAttrTimeout          QPAttrMask = 1 << 9
	QPAttrRetryCnt         QPAttrMask = 1 << 10
	QPAttrRNRRetry         QPAttrMask = 1 << 11
	QPAttrRQPSN            QPAttrMask = 1 << 12
	QPAttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	QPAttrAltPath          QPAttrMask = 1 << 14
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15
	QPAttrSQPSN            QPAttrMask = 1 << 16
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	QPAttrPathMigState     QPAttrMask = 1 << 18
	QPAttrCap              QPAttrMask = 1 << 19
	QPAttrDestQPN          QPAttrMask = 1 << 20
	qpAttrMaskLast                    = 1 << 21
)

var qpAttrMaskNames = [...]string{
	"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX", "PORT",
	"QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN",
	"MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC",
	"PATH_MIG_STATE", "CAP", "DEST_QPN",
}

// String lists the set bits as libibverbs names them, without the IBV_QP_
// prefix: "AV|PATH_MTU|DEST_QPN".
func (m QPAttrMask) String() string {
	if m == 0 {
		return "0"
	}
	var parts []string
	for i, name := range qpAttrMaskNames {
		if m&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	if rest := m &^ (qpAttrMaskLast - 1); rest != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint32(rest)))
	}
	return strings.Join(parts, "|")
}

// QPAttr holds the attributes of a QP (struct ibv_qp_attr). Modify reads the
// fields selected by its mask; Query fills them all.
type QPAttr struct {
	QPState          QPState
	CurQPState       QPState
	PathMTU          MTU
	PathMigState     uint8
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPNum        uint32
	QPAccessFlags    Access
	Cap              QPCap
	AHAttr           AHAttr
	AltAHAttr        AHAttr
	PKeyIndex        uint16
	AltPKeyIndex     uint16
	EnSQDAsyncNotify bool
	SQDraining       bool
	// MaxRdAtomic is the number of RDMA READ and atomic requests this QP
	// may have outstanding as requester.
	MaxRdAtomic uint8
	// MaxDestRdAtomic is the number of incoming RDMA READ and atomic
	// requests this QP keeps resources for as responder.
	MaxDestRdAtomic uint8
	// MinRNRTimer is the RNR NAK timer code (0..31) this QP sends when it
	// has no receive WQE for an incoming SEND.
	MinRNRTimer uint8
	PortNum     uint8
	// Timeout is the local ACK timeout code: 4.096 µs × 2^Timeout; 0 waits
	// forever.
	Timeout uint8
	// RetryCnt is how many times a request is retransmitted after an ACK
	// timeout or a sequence NAK before the QP fails with WCRetryExcErr.
	RetryCnt uint8
	// RNRRetry is how many times a request is retried after an RNR NAK; 7
	// means forever.
	RNRRetry   uint8
	AltPortNum uint8
	AltTimeout uint8
}

// SRQInitAttr is what CreateSRQ needs (struct ibv_srq_init_attr).
type SRQInitAttr struct {
	Context  any
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
}

// SRQAttr holds SRQ attributes (struct ibv_srq_attr).
type SRQAttr struct {
	MaxWR    uint32
	MaxSGE   uint32
	SRQLimit uint32
}

// Device capability flags (enum ibv_device_cap_flags) for
// DeviceAttr.DeviceCapFlags; the others keep libibverbs' values.
const (
	DeviceMemWindow       = 1 << 17 // memory windows (type 1)
	DeviceMemWindowType2A = 1 << 23
	DeviceMemWindowType2B = 1 << 24 // type 2 windows, bound to a QP
)

// DeviceAttr describes a device's capabilities (struct ibv_device_attr).
type DeviceAttr struct {
	FWVer                 string
	NodeGUID              uint64
	SysImageGUID          uint64
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 int
	MaxQPWR               int
	DeviceCapFlags        uint32
	MaxSGE                int
	MaxSGERd              int
	MaxCQ                 int
	MaxCQE                int
	MaxMR                 int
	MaxPD                 int
	MaxQPRdAtom           int
	MaxEECRdAtom          int
	MaxResRdAtom          int
	MaxQPInitRdAtom       int
	MaxEEInitRdAtom       int
	AtomicCap             AtomicCap
	MaxEE                 int
	MaxRDD                int
	MaxMW                 int
	MaxRawIPv6QP          int
	MaxRawEthyQP          int
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
	MaxAH                 int
	MaxFMR                int
	MaxMapPerFMR          int
	MaxSRQ                int
	MaxSRQWR              int
	MaxSRQSGE             int
	MaxPKeys              uint16
	LocalCADelayAck       uint8
	PhysPortCnt           uint8
	// MaxInlineData is softrdma's limit for SendInline payloads.
	MaxInlineData int
}

// AtomicCap says how atomics behave (enum ibv_atomic_cap).
type AtomicCap uint8

// Atomic capabilities.
const (
	AtomicNone AtomicCap = iota
	AtomicHCA            // atomic with respect to this device's operations
	AtomicGlob           // atomic with respect to the CPU too
)

func (a AtomicCap) String() string {
	switch a {
	case AtomicNone:
		return "ATOMIC_NONE"
	case AtomicHCA:
		return "ATOMIC_HCA"
	case AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return fmt.Sprintf("AtomicCap(%d)", uint8(a))
}

// PortState is the logical state of a port (enum ibv_port_state).
type PortState uint8

// Port states.
const (
	PortNop PortState = iota
	PortDown
	PortInit
	PortArmed
	PortActive
	PortActiveDefer
)

var portStateNames = [...]string{"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER"}

func (s PortState) String() string {
	if int(s) < len(portStateNames) {
		return portStateNames[s]
	}
	return fmt.Sprintf("PortState(%d)", uint8(s))
}

// LinkLayer is a port's link layer.
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = iota
	LinkLayerInfiniBand
	LinkLayerEthernet
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unspecified"
}

// PortAttr describes a port (struct ibv_port_attr).
type PortAttr struct {
	State         PortState
	MaxMTU        MTU
	ActiveMTU     MTU
	GIDTblLen     int
	PortCapFlags  uint32
	MaxMsgSz      uint32
	BadPKeyCntr   uint32
	QKeyViolCntr  uint32
	PKeyTblLen    uint16
	LID           uint16
	SMLID         uint16
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8
	ActiveSpeed   uint8
	PhysState     uint8
	LinkLayer     LinkLayer
	// LinkMTU is the IP MTU of the network interface under the port
	// (softrdma's addition; ActiveMTU is derived from it).
	LinkMTU int
}
