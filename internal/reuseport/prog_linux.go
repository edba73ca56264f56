// This file is the steering program: some ninety eBPF instructions,
// written with cilium/ebpf's asm package (no compiler, no object files),
// that pick for each datagram the socket of the process owning its
// destination.

package reuseport

import "github.com/cilium/ebpf/asm"

// What sk_select_reuseport's caller returns (SK_DROP, SK_PASS).
const (
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

// Registers the program keeps: the context, the field it read, and what
// to return when the slot it selects has no socket.
const (
	rCtx    = asm.R6
	rField  = asm.R7
	rNoSock = asm.R8
)

// load32 loads the 4 bytes at off in the datagram into rField, as a host
// number (leaving the raw bytes at R10-4), or jumps to drop when the
// datagram is shorter.
func load32(off int32) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R1, rCtx),
		asm.Mov.Imm(asm.R2, off),
		asm.Mov.Reg(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, -4),
		asm.Mov.Imm(asm.R4, 4),
		asm.FnSkbLoadBytes.Call(),
		asm.JNE.Imm(asm.R0, 0, "drop"),
		asm.LoadMem(rField, asm.R10, -4, asm.Word),
		asm.HostTo(asm.BE, rField, asm.Word),
	}
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
func program(socks, services int) asm.Instructions {
	var p asm.Instructions
	add := func(insns ...asm.Instruction) { p = append(p, insns...) }
	// label names the next instruction added.
	label := func(name string, ins asm.Instruction) asm.Instruction { return ins.WithSymbol(name) }

	add(asm.Mov.Reg(rCtx, asm.R1))
	add(load32(offBTHQPN)...)
	add(
		asm.And.Imm(rField, 0xFFFFFF),
		asm.JEq.Imm(rField, 1, "mad"),
		asm.RSh.Imm(rField, 24-SlotBits),
		asm.Mov.Imm(rNoSock, skDrop), // no socket in the slot: drop
		asm.Ja.Label("select"),
	)

	mad := load32(offMADClass)
	mad[0] = label("mad", mad[0])
	add(mad...)
	add(
		asm.RSh.Imm(rField, 16),
		asm.And.Imm(rField, 0xFF),
		asm.JNE.Imm(rField, mgmtClassCM, "pass"),
	)
	add(load32(offMADAttr)...)
	add(
		asm.RSh.Imm(rField, 16),
		asm.JEq.Imm(rField, attrREQ, "service"),
		asm.JEq.Imm(rField, attrSIDRReq, "service"),
		asm.JEq.Imm(rField, attrSIDRRep, "sidrrep"),
	)
	add(load32(offCMRemoteID)...)
	add(asm.Ja.Label("commid"))
	sidrrep := load32(offCMLocalID)
	sidrrep[0] = label("sidrrep", sidrrep[0])
	add(sidrrep...)
	add(
		label("commid", asm.RSh.Imm(rField, 32-SlotBits)),
		asm.Mov.Imm(rNoSock, skPass), // no socket in the slot: any process
		asm.Ja.Label("select"),
	)

	service := load32(offCMService) // leaves the raw bytes at R10-4: the map's key
	service[0] = label("service", service[0])
	add(service...)
	add(
		asm.LoadMapPtr(asm.R1, services),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(rField, asm.R0, 0, asm.Word),
		asm.Mov.Imm(rNoSock, skPass),
	)

	add(
		label("select", asm.StoreMem(asm.R10, -8, rField, asm.Word)),
		asm.Mov.Reg(asm.R1, rCtx),
		asm.LoadMapPtr(asm.R2, socks),
		asm.Mov.Reg(asm.R3, asm.R10),
		asm.Add.Imm(asm.R3, -8),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnSkSelectReuseport.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.JEq.Imm(rNoSock, skDrop, "drop"),
		label("pass", asm.Mov.Imm(asm.R0, skPass)),
		asm.Return(),
		label("drop", asm.Mov.Imm(asm.R0, skDrop)),
		asm.Return(),
	)
	return p
}
