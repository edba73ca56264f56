package wire

import (
	"strings"
	"testing"
)

// headerFlags pairs each header flag with its offset field and length.
func headerFlags(i *OpInfo) []struct {
	flag OpFlags
	off  int
	n    int
} {
	return []struct {
		flag OpFlags
		off  int
		n    int
	}{
		{FlagRETH, i.RETHOff, RETHLen},
		{FlagAETH, i.AETHOff, AETHLen},
		{FlagAtomicETH, i.AtomicETHOff, AtomicETHLen},
		{FlagAtomicAckETH, i.AtomicAckETHOff, AtomicAckETHLen},
		{FlagImm, i.ImmOff, ImmDtLen},
		{FlagIETH, i.IETHOff, IETHLen},
		{FlagDETH, i.DETHOff, DETHLen},
	}
}

func TestOpcodeTableConsistent(t *testing.T) {
	valid := 0
	for v := 0; v < 256; v++ {
		op := Opcode(v)
		i := op.Info()
		if i != &opTable[v] || i.Service != op.Service() {
			t.Errorf("%v: Info not the table entry or wrong transport", op)
		}
		if !i.Valid() {
			if i.Flags != 0 || i.Length != 0 || HeaderLen(op) != 0 || PacketLen(op, 0) != 0 {
				t.Errorf("%#x: invalid opcode with flags %#x length %d", v, i.Flags, i.Length)
			}
			if !strings.HasPrefix(op.String(), "Opcode(0x") {
				t.Errorf("%#x: String = %q", v, op.String())
			}
			continue
		}
		valid++
		// Offsets tile the headers after the BTH exactly, without gaps.
		covered := make([]bool, i.Length)
		for j := 0; j < BTHLen; j++ {
			covered[j] = true
		}
		sum := BTHLen
		for _, h := range headerFlags(i) {
			if i.Has(h.flag) != (h.off != 0) {
				t.Errorf("%v: flag %#x and offset %d disagree", op, h.flag, h.off)
			}
			if h.off == 0 {
				continue
			}
			sum += h.n
			if h.off < BTHLen || h.off+h.n > i.Length {
				t.Errorf("%v: header at %d+%d outside %d", op, h.off, h.n, i.Length)
				continue
			}
			for j := h.off; j < h.off+h.n; j++ {
				if covered[j] {
					t.Errorf("%v: headers overlap at byte %d", op, j)
				}
				covered[j] = true
			}
		}
		if sum != i.Length || HeaderLen(op) != i.Length {
			t.Errorf("%v: headers add up to %d, Length %d", op, sum, i.Length)
		}
		// Packet kind.
		if i.Has(FlagRequest) == i.Has(FlagResponse) {
			t.Errorf("%v: must be exactly one of request and response", op)
		}
		kinds := 0
		for _, f := range []OpFlags{FlagSend, FlagWrite, FlagRead, FlagAtomic} {
			if i.Has(f) {
				kinds++
			}
		}
		if kinds > 1 || (kinds == 0 && op != RCAck) {
			t.Errorf("%v: %d operation kinds", op, kinds)
		}
		// Position in the message agrees with the name.
		name := op.String()
		if name != i.Name || !strings.HasPrefix(name, op.Service().String()+"_") {
			t.Errorf("%v: name %q", op, name)
		}
		first, middle, last := i.Has(FlagFirst), i.Has(FlagMiddle), i.Has(FlagLast)
		switch {
		case strings.Contains(name, "_FIRST"):
			if !first || middle || last {
				t.Errorf("%v: FIRST with flags %#x", op, i.Flags)
			}
		case strings.Contains(name, "_MIDDLE"):
			if first || !middle || last {
				t.Errorf("%v: MIDDLE with flags %#x", op, i.Flags)
			}
		case strings.Contains(name, "_LAST"):
			if first || middle || !last {
				t.Errorf("%v: LAST with flags %#x", op, i.Flags)
			}
		default: // ONLY and single-packet operations
			if !first || middle || !last {
				t.Errorf("%v: single-packet opcode with flags %#x", op, i.Flags)
			}
		}
		if i.Has(FlagRequest) && i.Has(FlagComplete) != last {
			t.Errorf("%v: FlagComplete must mark exactly the last/only requests", op)
		}
		if i.Has(FlagResponse) && i.Has(FlagComplete|FlagRecvWQE) {
			t.Errorf("%v: a response completes nothing at the responder", op)
		}
		if i.Has(FlagImm) != strings.Contains(name, "_WITH_IMMEDIATE") ||
			i.Has(FlagIETH) != strings.Contains(name, "_WITH_INVALIDATE") {
			t.Errorf("%v: immediate/invalidate flags disagree with the name", op)
		}
		// Receive WQEs: every SEND packet; WRITE only on its last packet with immediate.
		wantRWR := i.Has(FlagSend) || (i.Has(FlagWrite) && last && i.Has(FlagImm))
		if i.Has(FlagRecvWQE) != wantRWR {
			t.Errorf("%v: FlagRecvWQE %v, want %v", op, i.Has(FlagRecvWQE), wantRWR)
		}
		wantPayload := i.Has(FlagSend) || i.Has(FlagWrite) || (i.Has(FlagRead) && i.Has(FlagResponse))
		if i.Has(FlagPayload) != wantPayload {
			t.Errorf("%v: FlagPayload %v, want %v", op, i.Has(FlagPayload), wantPayload)
		}
		if i.Has(FlagDETH) != (op.Service() == ServiceUD) {
			t.Errorf("%v: DETH iff UD", op)
		}
		if i.Has(FlagRETH) != ((i.Has(FlagWrite) && first) || op == RCReadRequest) {
			t.Errorf("%v: RETH on first WRITE packets and READ requests only", op)
		}
		wantAETH := op == RCAck || op == RCAtomicAck || op == RCReadResponseFirst || op == RCReadResponseLast || op == RCReadResponseOnly
		if i.Has(FlagAETH) != wantAETH {
			t.Errorf("%v: FlagAETH %v", op, i.Has(FlagAETH))
		}
	}
	if valid != 23+12+2 {
		t.Errorf("%d valid opcodes, want 37 (23 RC, 12 UC, 2 UD)", valid)
	}
}

// TestUCTwins checks that every RC SEND and WRITE opcode has a UC twin with
// the same flags and layout, and that RC-only operations have none.
func TestUCTwins(t *testing.T) {
	for v := 0; v < 0x20; v++ {
		rc := Opcode(v)
		uc := rc.WithService(ServiceUC)
		ri, ui := rc.Info(), uc.Info()
		if !ri.Valid() {
			if ui.Valid() {
				t.Errorf("%v valid without an RC twin", uc)
			}
			continue
		}
		twin := ri.Has(FlagSend|FlagRequest) && !ri.Has(FlagIETH) || ri.Has(FlagWrite)
		if !twin {
			if ui.Valid() {
				t.Errorf("%v: UC has no %v", uc, rc)
			}
			continue
		}
		if !ui.Valid() {
			t.Errorf("%v has no UC twin", rc)
			continue
		}
		want := *ri
		want.Name = "UC" + strings.TrimPrefix(ri.Name, "RC")
		want.Service = ServiceUC
		if *ui != want {
			t.Errorf("UC twin of %v:\n got %+v\nwant %+v", rc, *ui, want)
		}
		if uc.WithService(ServiceRC) != rc {
			t.Errorf("WithService does not round-trip %v", rc)
		}
	}
}

func TestOpcodeValues(t *testing.T) {
	// IBTA table 38 values and names for a sample of opcodes.
	tests := []struct {
		op   Opcode
		v    uint8
		name string
		hdr  int
	}{
		{RCSendFirst, 0x00, "RC_SEND_FIRST", 12},
		{RCSendOnlyImm, 0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", 16},
		{RCWriteOnlyImm, 0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32},
		{RCReadRequest, 0x0c, "RC_RDMA_READ_REQUEST", 28},
		{RCReadResponseMiddle, 0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", 12},
		{RCAck, 0x11, "RC_ACKNOWLEDGE", 16},
		{RCAtomicAck, 0x12, "RC_ATOMIC_ACKNOWLEDGE", 24},
		{RCCompareSwap, 0x13, "RC_COMPARE_SWAP", 40},
		{RCFetchAdd, 0x14, "RC_FETCH_ADD", 40},
		{RCSendLastInv, 0x16, "RC_SEND_LAST_WITH_INVALIDATE", 16},
		{RCSendOnlyInv, 0x17, "RC_SEND_ONLY_WITH_INVALIDATE", 16},
		{UCSendFirst, 0x20, "UC_SEND_FIRST", 12},
		{UCWriteOnlyImm, 0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32},
		{UDSendOnly, 0x64, "UD_SEND_ONLY", 20},
		{UDSendOnlyImm, 0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", 24},
		{0x15, 0x15, "Opcode(0x15)", 0},
		{0x1f, 0x1f, "Opcode(0x1f)", 0},
		{0x2c, 0x2c, "Opcode(0x2c)", 0},
		{0xff, 0xff, "Opcode(0xff)", 0},
	}
	for _, tt := range tests {
		if uint8(tt.op) != tt.v || tt.op.String() != tt.name || HeaderLen(tt.op) != tt.hdr {
			t.Errorf("%#x: got %#x %q header %d, want %q header %d", tt.v, uint8(tt.op), tt.op.String(), HeaderLen(tt.op), tt.name, tt.hdr)
		}
	}
	// Layout details an engine relies on.
	if i := RCAtomicAck.Info(); i.AETHOff != 12 || i.AtomicAckETHOff != 16 {
		t.Errorf("ATOMIC_ACK: AETH at %d, AtomicAckETH at %d; want 12, 16", i.AETHOff, i.AtomicAckETHOff)
	}
	if i := RCWriteOnlyImm.Info(); i.RETHOff != 12 || i.ImmOff != 28 {
		t.Errorf("WRITE_ONLY_IMM: RETH at %d, ImmDt at %d; want 12, 28", i.RETHOff, i.ImmOff)
	}
	if i := UDSendOnlyImm.Info(); i.DETHOff != 12 || i.ImmOff != 20 {
		t.Errorf("UD_SEND_ONLY_IMM: DETH at %d, ImmDt at %d; want 12, 20", i.DETHOff, i.ImmOff)
	}
	if ServiceUD.String() != "UD" || Service(2).String() != "Service(2)" {
		t.Errorf("Service strings")
	}
}
