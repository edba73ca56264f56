package wire

import "fmt"

// Opcode is the BTH OpCode field (IBTA 9.2.1, table 38). Its top three bits
// select the transport service (Service), the low five bits the operation.
type Opcode uint8

// Opcodes of the Reliable Connected service (IBTA table 38, prefix 000).
const (
	RCSendFirst          Opcode = 0x00 // RC SEND First
	RCSendMiddle         Opcode = 0x01 // RC SEND Middle
	RCSendLast           Opcode = 0x02 // RC SEND Last
	RCSendLastImm        Opcode = 0x03 // RC SEND Last with Immediate
	RCSendOnly           Opcode = 0x04 // RC SEND Only
	RCSendOnlyImm        Opcode = 0x05 // RC SEND Only with Immediate
	RCWriteFirst         Opcode = 0x06 // RC RDMA WRITE First
	RCWriteMiddle        Opcode = 0x07 // RC RDMA WRITE Middle
	RCWriteLast          Opcode = 0x08 // RC RDMA WRITE Last
	RCWriteLastImm       Opcode = 0x09 // RC RDMA WRITE Last with Immediate
	RCWriteOnly          Opcode = 0x0a // RC RDMA WRITE Only
	RCWriteOnlyImm       Opcode = 0x0b // RC RDMA WRITE Only with Immediate
	RCReadRequest        Opcode = 0x0c // RC RDMA READ Request
	RCReadResponseFirst  Opcode = 0x0d // RC RDMA READ response First
	RCReadResponseMiddle Opcode = 0x0e // RC RDMA READ response Middle
	RCReadResponseLast   Opcode = 0x0f // RC RDMA READ response Last
	RCReadResponseOnly   Opcode = 0x10 // RC RDMA READ response Only
	RCAck                Opcode = 0x11 // RC Acknowledge
	RCAtomicAck          Opcode = 0x12 // RC ATOMIC Acknowledge
	RCCompareSwap        Opcode = 0x13 // RC CmpSwap
	RCFetchAdd           Opcode = 0x14 // RC FetchAdd
	RCSendLastInv        Opcode = 0x16 // RC SEND Last with Invalidate
	RCSendOnlyInv        Opcode = 0x17 // RC SEND Only with Invalidate
)

// Opcodes of the Unreliable Connected service (IBTA table 38, prefix 001).
// Each equals its RC twin with ServiceUC in the top three bits.
const (
	UCSendFirst    Opcode = 0x20 // UC SEND First
	UCSendMiddle   Opcode = 0x21 // UC SEND Middle
	UCSendLast     Opcode = 0x22 // UC SEND Last
	UCSendLastImm  Opcode = 0x23 // UC SEND Last with Immediate
	UCSendOnly     Opcode = 0x24 // UC SEND Only
	UCSendOnlyImm  Opcode = 0x25 // UC SEND Only with Immediate
	UCWriteFirst   Opcode = 0x26 // UC RDMA WRITE First
	UCWriteMiddle  Opcode = 0x27 // UC RDMA WRITE Middle
	UCWriteLast    Opcode = 0x28 // UC RDMA WRITE Last
	UCWriteLastImm Opcode = 0x29 // UC RDMA WRITE Last with Immediate
	UCWriteOnly    Opcode = 0x2a // UC RDMA WRITE Only
	UCWriteOnlyImm Opcode = 0x2b // UC RDMA WRITE Only with Immediate
)

// Opcodes of the Unreliable Datagram service (IBTA table 38, prefix 011).
const (
	UDSendOnly    Opcode = 0x64 // UD SEND Only
	UDSendOnlyImm Opcode = 0x65 // UD SEND Only with Immediate
)

// Service is the transport service an opcode belongs to: the top three
// bits of the opcode (IBTA 9.2.1). RD and XRC have no constants because
// this package implements none of their opcodes; the CNP (cnp.go) is not
// in the opcode table, and Parse refuses it like any unknown opcode.
type Service uint8

// Transport services.
const (
	ServiceRC Service = 0 // Reliable Connected
	ServiceUC Service = 1 // Unreliable Connected
	ServiceUD Service = 3 // Unreliable Datagram
)

// String returns "RC", "UC", "UD", or "Service(n)".
func (t Service) String() string {
	switch t {
	case ServiceRC:
		return "RC"
	case ServiceUC:
		return "UC"
	case ServiceUD:
		return "UD"
	default:
		return fmt.Sprintf("Service(%d)", uint8(t))
	}
}

// Service returns the transport service encoded in the opcode's top three
// bits. It does not check that the opcode is valid.
func (op Opcode) Service() Service { return Service(op >> 5) }

// WithService returns the opcode with the same operation (low five bits)
// in transport t, e.g. RCSendFirst.WithService(ServiceUC) == UCSendFirst.
// The result is not necessarily a valid opcode: check Info().Valid().
func (op Opcode) WithService(t Service) Opcode {
	return Opcode(t&7)<<5 | op&0x1f
}

// String returns the IBTA name of a known opcode with its transport prefix,
// e.g. "RC_SEND_FIRST" or "UD_SEND_ONLY_WITH_IMMEDIATE", and "Opcode(0x1f)"
// for an unknown one. It does not allocate.
func (op Opcode) String() string { return opTable[op].Name }

// Info returns the opcode's entry in the opcode table. The pointer is never
// nil; for an opcode this package does not know, Info().Valid() is false.
// The entry is shared and read-only: callers must not modify it.
func (op Opcode) Info() *OpInfo { return &opTable[op] }

// OpFlags describe an opcode: which extension headers follow the BTH and
// what kind of packet it is. Generic code tests these bits instead of
// switching on opcodes (the model is rxe's rxe_opcode.c).
type OpFlags uint32

// Opcode flags. The header flags say which extension headers are present;
// the others classify the packet.
const (
	FlagRETH         OpFlags = 1 << iota // has an RDMA ETH (IBTA 9.3.3)
	FlagAETH                             // has an ACK ETH (IBTA 9.3.5)
	FlagAtomicETH                        // has an Atomic ETH (IBTA 9.3.4)
	FlagAtomicAckETH                     // has an Atomic Acknowledge ETH (IBTA 9.3.6)
	FlagImm                              // has Immediate Data (IBTA 9.3.7)
	FlagIETH                             // has an Invalidate ETH (IBTA 9.3.8)
	FlagDETH                             // has a Datagram ETH (IBTA 9.3.2)
	FlagPayload                          // may carry payload; Parse rejects payload on any other opcode
	FlagRequest                          // sent by a requester, handled by the responder
	FlagResponse                         // sent by a responder (ACK, atomic ACK, read responses), handled by the completer
	FlagFirst                            // first packet of a message; single-packet opcodes (ONLY, READ request, atomics, ACKs) have FlagFirst and FlagLast
	FlagMiddle                           // middle packet of a message
	FlagLast                             // last packet of a message; see FlagFirst
	FlagSend                             // a SEND packet
	FlagWrite                            // an RDMA WRITE packet
	FlagRead                             // an RDMA READ request or READ response packet; combine with FlagRequest/FlagResponse
	FlagAtomic                           // an atomic request or atomic ACK; combine with FlagRequest/FlagResponse
	FlagRecvWQE                          // needs a receive WQE: every packet of a SEND, and the last/only packet of a WRITE with immediate
	FlagComplete                         // ends a request message at the responder (every last/only request); with FlagRecvWQE it generates a receive completion
)

// OpInfo is one entry of the opcode table. Offsets and Length count bytes
// from the start of the BTH; an offset is 0 when the header is absent (no
// extension header can start at 0, where the BTH is).
type OpInfo struct {
	Name    string  // IBTA name with transport prefix, e.g. "RC_SEND_FIRST"
	Flags   OpFlags // headers present and packet kind
	Service Service // the opcode's top three bits
	Length  int     // BTH and all extension headers: the offset of the payload

	// Offsets of the extension headers present, 0 for those absent.
	RETHOff, AETHOff, AtomicETHOff, AtomicAckETHOff, ImmOff, IETHOff, DETHOff int
}

// Valid reports whether the opcode is one this package implements. Invalid
// entries have zero flags and lengths.
func (i *OpInfo) Valid() bool { return i.Length != 0 }

// Has reports whether all of the flags in f are set.
func (i *OpInfo) Has(f OpFlags) bool { return i.Flags&f == f }

// HeaderLen returns the length of the BTH and extension headers of op: the
// offset of the payload. It is 0 for an unknown opcode.
func HeaderLen(op Opcode) int { return opTable[op].Length }

// opTable is indexed by opcode; with a uint8 index it needs no bounds check.
var opTable = buildOpTable()

// Flag groups shared by table entries.
const (
	sendReq  = FlagPayload | FlagRequest | FlagSend | FlagRecvWQE
	writeReq = FlagPayload | FlagRequest | FlagWrite
	readResp = FlagPayload | FlagResponse | FlagRead
	only     = FlagFirst | FlagLast
	ends     = FlagLast | FlagComplete
)

// opDefs lists every implemented opcode (IBTA table 38) with its flags.
// Header offsets are derived from the flags by buildOpTable.
var opDefs = [...]struct {
	op    Opcode
	name  string
	flags OpFlags
}{
	{RCSendFirst, "SEND_FIRST", sendReq | FlagFirst},
	{RCSendMiddle, "SEND_MIDDLE", sendReq | FlagMiddle},
	{RCSendLast, "SEND_LAST", sendReq | ends},
	{RCSendLastImm, "SEND_LAST_WITH_IMMEDIATE", sendReq | ends | FlagImm},
	{RCSendOnly, "SEND_ONLY", sendReq | only | FlagComplete},
	{RCSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", sendReq | only | FlagComplete | FlagImm},
	{RCWriteFirst, "RDMA_WRITE_FIRST", writeReq | FlagFirst | FlagRETH},
	{RCWriteMiddle, "RDMA_WRITE_MIDDLE", writeReq | FlagMiddle},
	{RCWriteLast, "RDMA_WRITE_LAST", writeReq | ends},
	{RCWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", writeReq | ends | FlagImm | FlagRecvWQE},
	{RCWriteOnly, "RDMA_WRITE_ONLY", writeReq | only | FlagComplete | FlagRETH},
	{RCWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", writeReq | only | FlagComplete | FlagRETH | FlagImm | FlagRecvWQE},
	{RCReadRequest, "RDMA_READ_REQUEST", FlagRequest | FlagRead | only | FlagComplete | FlagRETH},
	{RCReadResponseFirst, "RDMA_READ_RESPONSE_FIRST", readResp | FlagFirst | FlagAETH},
	{RCReadResponseMiddle, "RDMA_READ_RESPONSE_MIDDLE", readResp | FlagMiddle},
	{RCReadResponseLast, "RDMA_READ_RESPONSE_LAST", readResp | FlagLast | FlagAETH},
	{RCReadResponseOnly, "RDMA_READ_RESPONSE_ONLY", readResp | only | FlagAETH},
	{RCAck, "ACKNOWLEDGE", FlagResponse | only | FlagAETH},
	{RCAtomicAck, "ATOMIC_ACKNOWLEDGE", FlagResponse | FlagAtomic | only | FlagAETH | FlagAtomicAckETH},
	{RCCompareSwap, "COMPARE_SWAP", FlagRequest | FlagAtomic | only | FlagComplete | FlagAtomicETH},
	{RCFetchAdd, "FETCH_ADD", FlagRequest | FlagAtomic | only | FlagComplete | FlagAtomicETH},
	{RCSendLastInv, "SEND_LAST_WITH_INVALIDATE", sendReq | ends | FlagIETH},
	{RCSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", sendReq | only | FlagComplete | FlagIETH},

	{UDSendOnly, "SEND_ONLY", sendReq | only | FlagComplete | FlagDETH},
	{UDSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", sendReq | only | FlagComplete | FlagDETH | FlagImm},
}

// buildOpTable fills the table from opDefs: UC twins of the RC SEND and
// WRITE opcodes, then header offsets in IBTA order (9.2: DETH, RETH,
// AtomicETH, AETH, AtomicAckETH, ImmDt, IETH).
func buildOpTable() *[256]OpInfo {
	var t [256]OpInfo
	for i := range t {
		t[i].Name = fmt.Sprintf("Opcode(0x%02x)", i)
		t[i].Service = Opcode(i).Service()
	}
	add := func(op Opcode, name string, flags OpFlags) {
		i := &t[op]
		i.Name = op.Service().String() + "_" + name
		i.Flags = flags
		off := BTHLen
		next := func(f OpFlags, n int) int {
			if flags&f == 0 {
				return 0
			}
			o := off
			off += n
			return o
		}
		i.DETHOff = next(FlagDETH, DETHLen)
		i.RETHOff = next(FlagRETH, RETHLen)
		i.AtomicETHOff = next(FlagAtomicETH, AtomicETHLen)
		i.AETHOff = next(FlagAETH, AETHLen)
		i.AtomicAckETHOff = next(FlagAtomicAckETH, AtomicAckETHLen)
		i.ImmOff = next(FlagImm, ImmDtLen)
		i.IETHOff = next(FlagIETH, IETHLen)
		i.Length = off
	}
	for _, d := range opDefs {
		add(d.op, d.name, d.flags)
		// UC has the SEND and WRITE opcodes of RC without invalidate
		// (IBTA table 38).
		if d.op.Service() == ServiceRC && d.op <= RCWriteOnlyImm {
			add(d.op.WithService(ServiceUC), d.name, d.flags)
		}
	}
	return &t
}
