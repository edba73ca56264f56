package verbs

import (
	"fmt"
	"net/netip"
	"strings"
)

// GID is a 128-bit global identifier. On RoCEv2 it is an IPv6 address, or
// an IPv4-mapped IPv6 address (::ffff:a.b.c.d) for IPv4.
type GID [16]byte

// GIDFromAddr returns the GID of an IP address: the address itself for IPv6,
// the IPv4-mapped form for IPv4.
func GIDFromAddr(a netip.Addr) GID {
	return GID(a.As16())
}

// Addr returns the IP address a GID stands for: IPv4 for an IPv4-mapped GID,
// otherwise IPv6.
func (g GID) Addr() netip.Addr {
	return netip.AddrFrom16(g).Unmap()
}

// IsZero reports whether g is all zeros.
func (g GID) IsZero() bool { return g == GID{} }

// String formats g as an IPv6 address, as ibv_devinfo prints GIDs.
func (g GID) String() string {
	return netip.AddrFrom16(g).String()
}

// ParseGID parses a GID written as an IPv6 address (fe80::1, ::ffff:10.0.0.1)
// or an IPv4 address (which maps to ::ffff:a.b.c.d).
func ParseGID(s string) (GID, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return GID{}, Errorf("ParseGID", ErrInvalidArgument, "%q is not an IPv6 or IPv4 address", s)
	}
	return GIDFromAddr(a), nil
}

// MTU is an InfiniBand path MTU as enum ibv_mtu numbers it (IBTA 7.7.8,
// the PortInfo and PathRecord encoding): at most 256 << (m-1) bytes of
// payload per packet. It is softrdma's only MTU type: the engine, the tools
// and the perftest exchange all use it. The zero value is not a valid MTU.
type MTU uint8

// MTU values (IBTA 7.7.8): the path MTU of a connected QP.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// rxeMaxHdrLen is what rxe subtracts from the Ethernet MTU for the headers
// of a RoCEv2 packet (RXE_MAX_HDR_LENGTH, rxe_param.h).
const rxeMaxHdrLen = 80

// Bytes returns the MTU in bytes, or 0 for an invalid value.
func (m MTU) Bytes() int {
	if !m.Valid() {
		return 0
	}
	return 128 << m
}

// Valid reports whether m is one of the five IB MTUs.
func (m MTU) Valid() bool { return m >= MTU256 && m <= MTU4096 }

// String returns the MTU in bytes ("1024"), or "MTU(n)" for an invalid value.
func (m MTU) String() string {
	if !m.Valid() {
		return fmt.Sprintf("MTU(%d)", uint8(m))
	}
	return fmt.Sprint(m.Bytes())
}

// MTUFromBytes returns the largest IB MTU not above n bytes (capped at
// MTU4096), or 0 if n < 256.
func MTUFromBytes(n int) MTU {
	for m := MTU4096; m >= MTU256; m-- {
		if m.Bytes() <= n {
			return m
		}
	}
	return 0
}

// MTUFromLinkMTU returns the path MTU rxe uses on a link with the given
// Ethernet (IP) MTU: the largest IB MTU that fits in linkMTU - 80 bytes,
// capped at 4096, and 256 when even that does not fit (rxe_set_mtu and
// eth_mtu_int_to_enum in rxe). A 1500-byte link gives MTU1024; 9000 gives
// MTU4096. It is the one place that derivation is written.
func MTUFromLinkMTU(linkMTU int) MTU {
	if m := MTUFromBytes(linkMTU - rxeMaxHdrLen); m != 0 {
		return m
	}
	return MTU256
}

// QPType is the transport service of a queue pair.
type QPType uint8

// QP types (enum ibv_qp_type).
const (
	QPTypeRC QPType = 2 // Reliable Connected
	QPTypeUC QPType = 3 // Unreliable Connected
	QPTypeUD QPType = 4 // Unreliable Datagram
)

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is the state of a queue pair (enum ibv_qp_state).
type QPState uint8

// QP states (IBTA 10.3.1).
const (
	QPStateReset QPState = iota
	QPStateInit
	QPStateRTR
	QPStateRTS
	QPStateSQD
	QPStateSQE
	QPStateErr
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// Access is a set of memory and QP access permissions (enum ibv_access_flags).
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	// AccessMWBind lets memory windows be bound to the region
	// (IBV_ACCESS_MW_BIND).
	AccessMWBind Access = 1 << 4
)

func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var parts []string
	for _, f := range []struct {
		bit  Access
		name string
	}{{AccessLocalWrite, "LOCAL_WRITE"}, {AccessRemoteWrite, "REMOTE_WRITE"}, {AccessRemoteRead, "REMOTE_READ"}, {AccessRemoteAtomic, "REMOTE_ATOMIC"}, {AccessMWBind, "MW_BIND"}} {
		if a&f.bit != 0 {
			parts = append(parts, f.name)
			a &^= f.bit
		}
	}
	if a != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint32(a)))
	}
	return strings.Join(parts, "|")
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite WROpcode = iota
	WRRDMAWriteWithImm
	WRSend
	WRSendWithImm
	WRRDMARead
	WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd
	WRSendWithInv
	// WRLocalInv invalidates the memory window whose rkey is
	// InvalidateRKey (IBV_WR_LOCAL_INV): a local operation, in order
	// with the QP's other requests, that sends nothing.
	WRLocalInv
	// WRBindMW binds the memory window Bind.MW (IBV_WR_BIND_MW): a
	// local operation, in order with the QP's other requests.
	WRBindMW
)

var wrOpcodeNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "SEND_WITH_INV", "LOCAL_INV", "BIND_MW"}

func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) {
		return wrOpcodeNames[o]
	}
	return fmt.Sprintf("WROpcode(%d)", uint8(o))
}

// WCOpcode is the opcode of the completion a send work request of this
// opcode generates (the SEND forms complete as WCSend).
func (o WROpcode) WCOpcode() WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAndAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	}
	return WCSend
}

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint32

// Send flags.
const (
	// SendFence: wait until all earlier RDMA READ and atomic requests of
	// this QP have completed before starting this one.
	SendFence SendFlags = 1 << 0
	// SendSignaled: generate a completion on success (QPs created with
	// SigAll generate one for every request).
	SendSignaled SendFlags = 1 << 1
	// SendSolicited: set the solicited-event bit, waking a responder that
	// armed its CQ with solicitedOnly.
	SendSolicited SendFlags = 1 << 2
	// SendInline: copy the payload into the work queue at post time, so the
	// buffers may be reused at once and need no lkey.
	SendInline SendFlags = 1 << 3
)

// WCStatus is the status of a work completion (enum ibv_wc_status).
type WCStatus uint8

// Completion statuses.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
)

// The strings ibv_wc_status_str returns.
var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error",
	"remote access error", "remote operation error", "transport retry counter exceeded",
	"RNR retry counter exceeded", "local RDD violation error", "remote invalid RD request",
	"aborted error", "invalid EE context number", "invalid EE context state",
	"fatal error", "response timeout error", "general error",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("WCStatus(%d)", uint8(s))
}

// Error returns the status's name, as String: a status is an error value
// so that layers which turn a failed completion into a Go error (package
// cm's one-sided calls) can wrap it, and errors.Is(err, WCRemAccessErr)
// tells which status it was. Completions themselves carry the status as
// a value, never as an error.
func (s WCStatus) Error() string { return s.String() }

// WCOpcode is the operation a work completion reports (enum ibv_wc_opcode).
type WCOpcode uint8

// Completion opcodes. Receive completions have the 128 bit set, as in
// libibverbs.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCFlags describe a work completion (enum ibv_wc_flags).
type WCFlags uint32

// Work completion flags.
const (
	// WCWithGRH: the first 40 bytes of the receive buffer hold the network
	// header (UD).
	WCWithGRH WCFlags = 1 << 0
	// WCWithImm: ImmData is valid.
	WCWithImm WCFlags = 1 << 1
	// WCWithInv: InvalidatedRKey is valid (SEND_WITH_INV).
	WCWithInv WCFlags = 1 << 3
)

// WC is a work completion (struct ibv_wc). The zero value is a successful
// send completion for wr_id 0.
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	// ByteLen is the number of bytes received (receive completions), or
	// transferred for RDMA READ and atomics.
	ByteLen uint32
	// ImmData is the immediate data of SEND_WITH_IMM / RDMA_WRITE_WITH_IMM
	// in host order (libibverbs delivers it in network order), valid when
	// WCFlags has WCWithImm. For SEND_WITH_INV it holds the invalidated rkey.
	ImmData uint32
	// QPNum is the local QP the completion belongs to.
	QPNum uint32
	// SrcQP is the sending QP of a UD receive.
	SrcQP        uint32
	WCFlags      WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
}

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at virtual
// address Addr inside the memory region whose local key is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request (struct ibv_send_wr). Next chains requests
// as in libibverbs; PostSend posts the whole chain.
//
// RemoteAddr and RKey address the remote memory of RDMA and atomic
// operations; CompareAdd and Swap are the operands of atomics (Swap is
// ignored for fetch-and-add). AH, RemoteQPN and RemoteQKey address a UD
// destination.
type SendWR struct {
	WRID      uint64
	Next      *SendWR
	SGList    []SGE
	Opcode    WROpcode
	SendFlags SendFlags
	// ImmData is sent with *_WITH_IMM, in host order.
	ImmData uint32
	// InvalidateRKey is the key that SEND_WITH_INV (at the peer) or
	// LOCAL_INV (here) invalidates.
	InvalidateRKey uint32
	// Bind is the binding of a BIND_MW request.
	Bind *MWBind

	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64

	AH         AH
	RemoteQPN  uint32
	RemoteQKey uint32
}

// MWBind is what a BIND_MW request binds (struct ibv_mw_bind_info, with
// the window and its new rkey as struct ibv_send_wr's bind_mw holds
// them): Length bytes of MR at Addr, which must lie inside the region,
// reachable by peers through RKey with Access (AccessRemoteRead,
// AccessRemoteWrite, AccessRemoteAtomic). The MR must have been
// registered with AccessMWBind, and with AccessLocalWrite if the window
// grants remote write or atomic access (IBTA C10-73, C10-74). A Length
// of 0 with a nil MR unbinds a type 1 window.
type MWBind struct {
	MW MW
	// RKey is the window's rkey once bound: its current one with only
	// the low 8 bits (the key) changed, usually IncRKey(MW.RKey()).
	RKey   uint32
	MR     MR
	Addr   uint64
	Length uint64
	Access Access
}

// IncRKey returns rkey with its low 8 bits, the consumer's key, advanced
// by one (ibv_inc_rkey): the rkey to bind a window with next, so that the
// rkey of its previous binding stops working.
func IncRKey(rkey uint32) uint32 { return rkey&^0xFF | (rkey+1)&0xFF }

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	WRID   uint64
	Next   *RecvWR
	SGList []SGE
}

// PostError reports which work request of a chain failed to post. Requests
// before it were posted; it and the ones after were not.
type PostError struct {
	Index int // position of the failed request in the chain
	WRID  uint64
	Err   error
}

func (e *PostError) Error() string {
	return fmt.Sprintf("work request %d (wr_id %d): %v", e.Index, e.WRID, e.Err)
}

// Unwrap returns the reason.
func (e *PostError) Unwrap() error { return e.Err }
