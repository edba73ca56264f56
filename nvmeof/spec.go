package nvmeof

import (
	"encoding/binary"
	"fmt"
)

// The sizes of the queue entries NVMe over Fabrics uses (NVMe-oF 1.1,
// 2.1: the SQE is 64 bytes, the CQE 16).
const (
	CommandSize    = 64
	CompletionSize = 16
)

// Admin command opcodes (NVMe 1.4, figure 139) that the target serves.
const (
	AdminGetLogPage    = 0x02
	AdminIdentify      = 0x06
	AdminAbort         = 0x08
	AdminSetFeatures   = 0x09
	AdminGetFeatures   = 0x0a
	AdminAsyncEvent    = 0x0c
	AdminKeepAlive     = 0x18
	OpcodeFabrics      = 0x7f // fabrics commands, admin or I/O queue; FCTYPE says which
	fabricsPropertySet = 0x00
	fabricsConnect     = 0x01
	fabricsPropertyGet = 0x04
	fabricsDisconnect  = 0x08
)

// I/O command opcodes of the NVM command set (NVMe 1.4, figure 346).
const (
	IOFlush       = 0x00
	IOWrite       = 0x01
	IORead        = 0x02
	IOWriteZeroes = 0x08
	IODSM         = 0x09
)

// Controller properties (NVMe-oF 1.1, 3.5.2; the register offsets of
// NVMe 1.4, 3.1).
const (
	propCAP  = 0x00
	propVS   = 0x08
	propCC   = 0x14
	propCSTS = 0x1c
)

// Feature identifiers (NVMe 1.4, figure 271) the target keeps.
const (
	FeatNumQueues   = 0x07
	FeatAsyncEvent  = 0x0b
	FeatKeepAlive   = 0x0f
	featArbitration = 0x01
)

// Identify CNS values (NVMe 1.4, figure 244).
const (
	cnsNamespace      = 0x00
	cnsController     = 0x01
	cnsActiveNSList   = 0x02
	cnsNSDescriptors  = 0x03
	identifyDataBytes = 4096
)

// Log page identifiers.
const (
	LogError     = 0x01
	LogSMART     = 0x02
	LogFirmware  = 0x03
	LogChangedNS = 0x04
	LogDiscovery = 0x70
)

// DiscoveryNQN is the well-known NQN of a discovery subsystem (NVMe-oF
// 1.1, 7.1).
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// Status is an NVMe completion status: the status code type in bits 10:8,
// the status code in bits 7:0 and Do Not Retry in bit 14, the layout of the
// CQE's status field shifted right by one (the phase bit), as Linux's
// NVME_SC_* constants have it.
type Status uint16

// Status values the target returns and the host interprets.
const (
	StatusSuccess            Status = 0x000
	StatusInvalidOpcode      Status = 0x001
	StatusInvalidField       Status = 0x002
	StatusDataXferError      Status = 0x004
	StatusInternal           Status = 0x006
	StatusAbortRequested     Status = 0x007
	StatusInvalidNamespace   Status = 0x00b
	StatusSGLInvalidData     Status = 0x00f // data SGL length invalid
	StatusSGLInvalidType     Status = 0x011 // SGL descriptor type invalid
	StatusSGLInvalidOffset   Status = 0x016
	StatusCmdSeqError        Status = 0x00c
	StatusLBARange           Status = 0x080
	StatusCapExceeded        Status = 0x081
	StatusNSNotReady         Status = 0x082
	StatusInvalidLogPage     Status = 0x109
	StatusFeatureNotSaveable Status = 0x10d
	StatusConnectFormat      Status = 0x180 // connect: incompatible format
	StatusConnectCtrlBusy    Status = 0x181
	StatusConnectInvalidParm Status = 0x182
	StatusConnectInvalidHost Status = 0x184
	StatusInvalidQueue       Status = 0x101 // invalid queue identifier
	StatusInvalidQueueSize   Status = 0x102
	StatusWriteFault         Status = 0x280
	StatusUnrecoveredRead    Status = 0x281
	StatusDNR                Status = 0x4000
)

// Code is the status without the Do Not Retry bit.
func (s Status) Code() Status { return s &^ StatusDNR }

// Error makes a failed status an error; a host's I/O errors are *Status.
func (s Status) Error() string {
	name, ok := statusNames[s.Code()]
	if !ok {
		name = fmt.Sprintf("status type %d code %#02x", s>>8&7, uint8(s))
	}
	if s&StatusDNR != 0 {
		name += " (do not retry)"
	}
	return "nvme: " + name
}

var statusNames = map[Status]string{
	StatusSuccess:            "success",
	StatusInvalidOpcode:      "invalid command opcode",
	StatusInvalidField:       "invalid field in command",
	StatusDataXferError:      "data transfer error",
	StatusInternal:           "internal error",
	StatusAbortRequested:     "command abort requested",
	StatusInvalidNamespace:   "invalid namespace or format",
	StatusCmdSeqError:        "command sequence error",
	StatusSGLInvalidData:     "data SGL length invalid",
	StatusSGLInvalidType:     "SGL descriptor type invalid",
	StatusSGLInvalidOffset:   "SGL offset invalid",
	StatusLBARange:           "LBA out of range",
	StatusCapExceeded:        "capacity exceeded",
	StatusNSNotReady:         "namespace not ready",
	StatusInvalidLogPage:     "invalid log page",
	StatusFeatureNotSaveable: "feature identifier not saveable",
	StatusConnectFormat:      "connect: incompatible format",
	StatusConnectCtrlBusy:    "connect: controller busy",
	StatusConnectInvalidParm: "connect: invalid parameters",
	StatusConnectInvalidHost: "connect: invalid host",
	StatusInvalidQueue:       "invalid queue identifier",
	StatusInvalidQueueSize:   "invalid queue size",
	StatusWriteFault:         "write fault",
	StatusUnrecoveredRead:    "unrecovered read error",
}

// Command is a view of a 64-byte submission queue entry (NVMe 1.4, 4.2;
// the fabrics form of NVMe-oF 1.1, 2.1). Accessors assume len ≥ 64.
type Command []byte

func (c Command) Opcode() uint8 { return c[0] }

// Flags is CDW0 bits 15:8: FUSE in 1:0, PSDT in 7:6 (01 or 10: SGL).
func (c Command) Flags() uint8       { return c[1] }
func (c Command) CID() uint16        { return binary.LittleEndian.Uint16(c[2:]) }
func (c Command) NSID() uint32       { return binary.LittleEndian.Uint32(c[4:]) }
func (c Command) FCType() uint8      { return c[4] } // fabrics commands
func (c Command) SGL() SGLDescriptor { return SGLDescriptor(c[24:40]) }

// CDW returns command dword n (10 ≤ n ≤ 15).
func (c Command) CDW(n int) uint32 { return binary.LittleEndian.Uint32(c[4*n:]) }

// SLBA is the starting LBA of a Read, Write or Write Zeroes (CDW10-11).
func (c Command) SLBA() uint64 { return binary.LittleEndian.Uint64(c[40:]) }

// NLB is the number of logical blocks, 0's based (CDW12 15:0).
func (c Command) NLB() uint16 { return binary.LittleEndian.Uint16(c[48:]) }

func (c Command) setHeader(opcode uint8, cid uint16, nsid uint32) {
	clear(c[:CommandSize])
	c[0] = opcode
	c[1] = 0x40 // PSDT 01: SGLs for data; the only form fabrics allows
	binary.LittleEndian.PutUint16(c[2:], cid)
	binary.LittleEndian.PutUint32(c[4:], nsid)
}

func (c Command) setCDW(n int, v uint32) { binary.LittleEndian.PutUint32(c[4*n:], v) }

// SGL descriptor types (NVMe 1.4, figure 114) in the high nibble of the
// identifier byte, subtypes in the low nibble.
const (
	sglTypeDataBlock      = 0x0
	sglTypeKeyedDataBlock = 0x4
	sglSubtypeAddress     = 0x0
	sglSubtypeOffset      = 0x1
	sglSubtypeInvalidate  = 0xf
)

// SGLDescriptor is a view of a 16-byte SGL descriptor.
type SGLDescriptor []byte

func (d SGLDescriptor) Addr() uint64 { return binary.LittleEndian.Uint64(d) }
func (d SGLDescriptor) Type() uint8  { return d[15] >> 4 }
func (d SGLDescriptor) Sub() uint8   { return d[15] & 0xf }

// Length is the data length: 32 bits for a data block, 24 for a keyed one.
func (d SGLDescriptor) Length() uint32 {
	if d.Type() == sglTypeKeyedDataBlock {
		return uint32(d[8]) | uint32(d[9])<<8 | uint32(d[10])<<16
	}
	return binary.LittleEndian.Uint32(d[8:])
}

// Key is the remote key of a keyed data block.
func (d SGLDescriptor) Key() uint32 { return binary.LittleEndian.Uint32(d[11:]) }

// SetKeyed makes d a keyed data block descriptor for length bytes at addr
// under rkey; invalidate asks the target to invalidate rkey with its
// response (SEND_WITH_INV).
func (d SGLDescriptor) SetKeyed(addr uint64, length, rkey uint32, invalidate bool) {
	binary.LittleEndian.PutUint64(d, addr)
	d[8], d[9], d[10] = byte(length), byte(length>>8), byte(length>>16)
	binary.LittleEndian.PutUint32(d[11:], rkey)
	d[15] = sglTypeKeyedDataBlock<<4 | sglSubtypeAddress
	if invalidate {
		d[15] = sglTypeKeyedDataBlock<<4 | sglSubtypeInvalidate
	}
}

// SetInCapsule makes d a data block descriptor for length bytes of
// in-capsule data at offset off after the command.
func (d SGLDescriptor) SetInCapsule(off uint64, length uint32) {
	binary.LittleEndian.PutUint64(d, off)
	binary.LittleEndian.PutUint32(d[8:], length)
	d[12], d[13], d[14] = 0, 0, 0
	d[15] = sglTypeDataBlock<<4 | sglSubtypeOffset
}

// Completion is a view of a 16-byte completion queue entry.
type Completion []byte

func (c Completion) Result() uint64 { return binary.LittleEndian.Uint64(c) }
func (c Completion) SQHead() uint16 { return binary.LittleEndian.Uint16(c[8:]) }
func (c Completion) SQID() uint16   { return binary.LittleEndian.Uint16(c[10:]) }
func (c Completion) CID() uint16    { return binary.LittleEndian.Uint16(c[12:]) }

// Status is the status field without the phase tag.
func (c Completion) Status() Status { return Status(binary.LittleEndian.Uint16(c[14:]) >> 1) }

func (c Completion) set(result uint64, sqhd, sqid, cid uint16, st Status) {
	binary.LittleEndian.PutUint64(c, result)
	binary.LittleEndian.PutUint16(c[8:], sqhd)
	binary.LittleEndian.PutUint16(c[10:], sqid)
	binary.LittleEndian.PutUint16(c[12:], cid)
	binary.LittleEndian.PutUint16(c[14:], uint16(st)<<1)
}

// The RDMA transport's CM private data (NVMe-oF 1.1, 7.3.1: the RDMA
// transport binding; Linux's struct nvme_rdma_cm_req/rep/rej).
const (
	cmReqLen = 32
	cmRepLen = 32
	cmRejLen = 4
)

// CMRequest is the private data of a host's connect request.
type CMRequest struct {
	RecFmt  uint16 // record format: 0
	QID     uint16 // 0 for the admin queue
	HRQSize uint16 // host receive queue size: completions it can take
	HSQSize uint16 // host send queue size, 0's based: the SQ size minus one
	CNTLID  uint16 // the controller of an I/O queue (0xffff: not given)
}

// AppendBinary appends the 32-byte encoding.
func (r CMRequest) AppendBinary(b []byte) ([]byte, error) {
	b = binary.LittleEndian.AppendUint16(b, r.RecFmt)
	b = binary.LittleEndian.AppendUint16(b, r.QID)
	b = binary.LittleEndian.AppendUint16(b, r.HRQSize)
	b = binary.LittleEndian.AppendUint16(b, r.HSQSize)
	b = binary.LittleEndian.AppendUint16(b, r.CNTLID)
	return append(b, make([]byte, cmReqLen-10)...), nil
}

// UnmarshalBinary parses the private data of a connect request.
func (r *CMRequest) UnmarshalBinary(b []byte) error {
	if len(b) < cmReqLen {
		return fmt.Errorf("nvmeof: %d bytes of connect private data, want %d", len(b), cmReqLen)
	}
	r.RecFmt = binary.LittleEndian.Uint16(b)
	r.QID = binary.LittleEndian.Uint16(b[2:])
	r.HRQSize = binary.LittleEndian.Uint16(b[4:])
	r.HSQSize = binary.LittleEndian.Uint16(b[6:])
	r.CNTLID = binary.LittleEndian.Uint16(b[8:])
	return nil
}

// RDMA CM reject status codes (NVMe-oF 1.1, figure 50).
const (
	CMRejInvalidLen     = 0x01
	CMRejInvalidRecFmt  = 0x02
	CMRejInvalidQID     = 0x03
	CMRejInvalidHSQSize = 0x04
	CMRejInvalidHRQSize = 0x05
	CMRejNoResources    = 0x06
	CMRejInvalidIRD     = 0x07
	CMRejInvalidORD     = 0x08
	CMRejInvalidCNTLID  = 0x09
)

func cmRej(sts uint16) []byte {
	return binary.LittleEndian.AppendUint16([]byte{0, 0}, sts)
}

func cmRep(crqsize uint16) []byte {
	b := make([]byte, cmRepLen)
	binary.LittleEndian.PutUint16(b[2:], crqsize)
	return b
}

// CMRejectError is a target's refusal of a queue, from its REJ's private
// data.
type CMRejectError struct{ Status uint16 }

func (e *CMRejectError) Error() string {
	names := map[uint16]string{CMRejInvalidLen: "invalid private data length", CMRejInvalidRecFmt: "invalid record format",
		CMRejInvalidQID: "invalid queue ID", CMRejInvalidHSQSize: "invalid host SQ size", CMRejInvalidHRQSize: "invalid host RQ size",
		CMRejNoResources: "no resources", CMRejInvalidIRD: "invalid IRD", CMRejInvalidORD: "invalid ORD", CMRejInvalidCNTLID: "invalid controller ID"}
	if n, ok := names[e.Status]; ok {
		return "nvmeof: the target rejected the queue: " + n
	}
	return fmt.Sprintf("nvmeof: the target rejected the queue (status %#x)", e.Status)
}

// connectData is the 1024-byte data of a fabrics Connect command
// (NVMe-oF 1.1, figure 20).
type connectData struct {
	HostID  [16]byte
	CNTLID  uint16
	SubNQN  string
	HostNQN string
}

const connectDataLen = 1024

func (d *connectData) encode(b []byte) {
	clear(b[:connectDataLen])
	copy(b, d.HostID[:])
	binary.LittleEndian.PutUint16(b[16:], d.CNTLID)
	copy(b[256:511], d.SubNQN)
	copy(b[512:767], d.HostNQN)
}

func (d *connectData) decode(b []byte) {
	copy(d.HostID[:], b)
	d.CNTLID = binary.LittleEndian.Uint16(b[16:])
	d.SubNQN = cString(b[256:512])
	d.HostNQN = cString(b[512:768])
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// putPadded writes s into b padded with spaces, as Identify's ASCII fields.
func putPadded(b []byte, s string) {
	n := copy(b, s)
	for i := n; i < len(b); i++ {
		b[i] = ' '
	}
}
