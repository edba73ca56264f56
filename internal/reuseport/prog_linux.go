// This file is the steering program: some ninety eBPF instructions,
// assembled here (no compiler, no object files), that pick for each
// datagram the socket of the process owning its destination.

package reuseport

import "golang.org/x/sys/unix"

// insn is struct bpf_insn.
type insn struct {
	code uint8
	regs uint8 // dst in the low nibble, src in the high
	off  int16
	imm  int32
}

// Registers, opcodes and helpers used (include/uapi/linux/bpf.h).
const (
	r0, r1, r2, r3, r4, r6, r7, r8, r10 = 0, 1, 2, 3, 4, 6, 7, 8, 10

	opMovReg  = 0xbf // BPF_ALU64 | BPF_MOV | BPF_X
	opMovImm  = 0xb7 // BPF_ALU64 | BPF_MOV | BPF_K
	opAddImm  = 0x07
	opAndImm  = 0x57
	opRshImm  = 0x77
	opToBE    = 0xdc // BPF_ALU | BPF_END | BPF_TO_BE
	opLdxW    = 0x61 // BPF_LDX | BPF_MEM | BPF_W
	opStxW    = 0x63
	opLdImm64 = 0x18 // BPF_LD | BPF_DW | BPF_IMM
	opJa      = 0x05
	opJeqImm  = 0x15
	opJneImm  = 0x55
	opCall    = 0x85
	opExit    = 0x95

	fnMapLookupElem     = 1
	fnSkbLoadBytes      = 26
	fnSkSelectReuseport = 82

	skDrop = 0
	skPass = 1
)

// Offsets in the datagram from the UDP header, where the program's
// context starts: the BTH after the 8-byte UDP header, and for a MAD to
// QP1 (BTH, DETH, MAD) the fields that name its recipient.
const (
	offBTHQPN     = 8 + 4       // BTH bytes 4..7: reserved, destination QPN
	offMAD        = 8 + 12 + 8  // after the BTH and DETH
	offMADClass   = offMAD      // base version, class, class version, method
	offMADAttr    = offMAD + 16 // attribute ID, reserved
	offCMLocalID  = offMAD + 24 // first CM field: the sender's comm ID, SIDR's request ID
	offCMRemoteID = offMAD + 28 // the recipient's comm ID
	offCMService  = offMAD + 36 // low 32 bits of a REQ's or SIDR_REQ's service ID

	mgmtClassCM = 0x07
	attrREQ     = 0x0010
	attrSIDRReq = 0x0017
	attrSIDRRep = 0x0018
)

// asm builds a program with labelled jumps.
type asm struct {
	insns  []insn
	labels map[string]int
	fixups map[int]string // instruction index → label it jumps to
}

func (a *asm) emit(code, dst, src uint8, off int16, imm int32) {
	a.insns = append(a.insns, insn{code: code, regs: dst | src<<4, off: off, imm: imm})
}
func (a *asm) movReg(dst, src uint8)        { a.emit(opMovReg, dst, src, 0, 0) }
func (a *asm) movImm(dst uint8, v int32)    { a.emit(opMovImm, dst, 0, 0, v) }
func (a *asm) addImm(dst uint8, v int32)    { a.emit(opAddImm, dst, 0, 0, v) }
func (a *asm) andImm(dst uint8, v int32)    { a.emit(opAndImm, dst, 0, 0, v) }
func (a *asm) rshImm(dst uint8, v int32)    { a.emit(opRshImm, dst, 0, 0, v) }
func (a *asm) be32(dst uint8)               { a.emit(opToBE, dst, 0, 0, 32) }
func (a *asm) call(fn int32)                { a.emit(opCall, 0, 0, 0, fn) }
func (a *asm) exit()                        { a.emit(opExit, 0, 0, 0, 0) }
func (a *asm) label(name string)            { a.labels[name] = len(a.insns) }
func (a *asm) ldxW(dst, src uint8, o int16) { a.emit(opLdxW, dst, src, o, 0) }
func (a *asm) stxW(dst, src uint8, o int16) { a.emit(opStxW, dst, src, o, 0) }

// ldMap loads a map's address (the fd, resolved by the kernel at load).
func (a *asm) ldMap(dst uint8, fd int) {
	a.emit(opLdImm64, dst, unix.BPF_PSEUDO_MAP_FD, 0, int32(fd))
	a.emit(0, 0, 0, 0, 0)
}

func (a *asm) jump(code, dst uint8, imm int32, to string) {
	a.fixups[len(a.insns)] = to
	a.emit(code, dst, 0, 0, imm)
}

// load32 loads the 4 bytes at off in the datagram into r7, as a host
// number, or jumps to drop when the datagram is shorter.
func (a *asm) load32(off int32) {
	a.movReg(r1, r6)
	a.movImm(r2, off)
	a.movReg(r3, r10)
	a.addImm(r3, -4)
	a.movImm(r4, 4)
	a.call(fnSkbLoadBytes)
	a.jump(opJneImm, r0, 0, "drop")
	a.ldxW(r7, r10, -4)
	a.be32(r7)
}

func (a *asm) link() []insn {
	for i, to := range a.fixups {
		a.insns[i].off = int16(a.labels[to] - i - 1)
	}
	return a.insns
}

// program returns the steering program for a group whose socket array
// and service map are the given fds:
//
//   - a packet to a QP other than QP1 goes to the slot in its QPN's top
//     SlotBits bits, or is dropped when no socket holds that slot (the
//     QP's process has gone);
//   - a connection-manager MAD to QP1 goes to the slot in its recipient's
//     comm ID (SIDR_REP: request ID), or for a REQ or SIDR_REQ to the slot
//     that listens on its service ID;
//   - other MADs, and CM MADs whose slot has no socket or whose service
//     nobody listens on, go to a socket by hash: any process answers them
//     (a REJ for an unknown service, a stale connection, an unsupported
//     class), as the kernel would.
func program(socks, services int) []insn {
	a := &asm{labels: map[string]int{}, fixups: map[int]string{}}
	a.movReg(r6, r1)
	a.load32(offBTHQPN)
	a.andImm(r7, 0xFFFFFF)
	a.jump(opJeqImm, r7, 1, "mad")
	a.rshImm(r7, 24-SlotBits)
	a.movImm(r8, skDrop) // no socket in the slot: drop
	a.jump(opJa, 0, 0, "select")

	a.label("mad")
	a.load32(offMADClass)
	a.rshImm(r7, 16)
	a.andImm(r7, 0xFF)
	a.jump(opJneImm, r7, mgmtClassCM, "pass")
	a.load32(offMADAttr)
	a.rshImm(r7, 16)
	a.jump(opJeqImm, r7, attrREQ, "service")
	a.jump(opJeqImm, r7, attrSIDRReq, "service")
	a.jump(opJeqImm, r7, attrSIDRRep, "sidrrep")
	a.load32(offCMRemoteID)
	a.jump(opJa, 0, 0, "commid")
	a.label("sidrrep")
	a.load32(offCMLocalID)
	a.label("commid")
	a.rshImm(r7, 32-SlotBits)
	a.movImm(r8, skPass) // no socket in the slot: any process
	a.jump(opJa, 0, 0, "select")

	a.label("service")
	a.load32(offCMService) // leaves the raw bytes at r10-4: the map's key
	a.ldMap(r1, services)
	a.movReg(r2, r10)
	a.addImm(r2, -4)
	a.call(fnMapLookupElem)
	a.jump(opJeqImm, r0, 0, "pass")
	a.ldxW(r7, r0, 0)
	a.movImm(r8, skPass)

	a.label("select")
	a.stxW(r10, r7, -8)
	a.movReg(r1, r6)
	a.ldMap(r2, socks)
	a.movReg(r3, r10)
	a.addImm(r3, -8)
	a.movImm(r4, 0)
	a.call(fnSkSelectReuseport)
	a.jump(opJeqImm, r0, 0, "pass")
	a.jump(opJeqImm, r8, skDrop, "drop")
	a.label("pass")
	a.movImm(r0, skPass)
	a.exit()
	a.label("drop")
	a.movImm(r0, skDrop)
	a.exit()
	return a.link()
}
