package wire

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// atomicFrame is frame 25 of atomic_lat.pcap from the BTH on: an
// RC_FETCH_ADD to QP 0x2c, PSN 1137446, AckReq, adding 1 at 0x55c49cedd000.
const atomicFrame = "1400ffff0000002c80115b26000055c49cedd00000000ed900000000000000010000000000000000b67ac619"

func TestBTHAccessors(t *testing.T) {
	b, _ := hex.DecodeString(atomicFrame)
	h := BTH(b)
	if h.Opcode() != RCFetchAdd || h.SolicitedEvent() || h.MigReq() || h.PadCount() != 0 || h.TVer() != 0 ||
		h.PKey() != 0xFFFF || h.FECN() || h.BECN() || h.DestQP() != 0x2c || !h.AckReq() || h.PSN() != 1137446 {
		t.Errorf("decoded %+v", h.Fields())
	}
	// Each setter touches its own bits only.
	h = make(BTH, BTHLen)
	h.SetOpcode(RCSendOnlyImm)
	h.SetSolicitedEvent(true)
	h.SetMigReq(true)
	h.SetPadCount(3)
	h.SetPKey(0x8001)
	h.SetDestQP(0xABCDEF12) // masked to 24 bits
	h.SetAckReq(true)
	h.SetPSN(0x1FFFFFF) // masked to 24 bits
	want := []byte{0x05, 0xF0, 0x80, 0x01, 0x00, 0xCD, 0xEF, 0x12, 0x80, 0xFF, 0xFF, 0xFF}
	if !bytes.Equal(h, want) {
		t.Errorf("setters wrote %x, want %x", []byte(h), want)
	}
	h.SetSolicitedEvent(false)
	h.SetPadCount(1)
	h.SetAckReq(false)
	h.SetPSN(0)
	want = []byte{0x05, 0x50, 0x80, 0x01, 0x00, 0xCD, 0xEF, 0x12, 0x00, 0x00, 0x00, 0x00}
	if !bytes.Equal(h, want) {
		t.Errorf("clearing wrote %x, want %x", []byte(h), want)
	}
	h[4] = 0xC0
	if !h.FECN() || !h.BECN() {
		t.Error("FECN/BECN not read from byte 4")
	}
	f := h.Fields()
	h.Encode(&f)
	if h[4] != 0 {
		t.Error("Encode must zero byte 4")
	}
}

func TestExtHeaderAccessors(t *testing.T) {
	b, _ := hex.DecodeString(atomicFrame)
	a := AtomicETH(b[BTHLen:])
	if a.VA() != 0x55c49cedd000 || a.RKey() != 0xed9 || a.SwapAdd() != 1 || a.Compare() != 0 {
		t.Errorf("AtomicETH %+v", a.Fields())
	}

	r := make(RETH, RETHLen)
	r.Encode(&RETHFields{VA: 0x0102030405060708, RKey: 0x090a0b0c, DMALen: 0x0d0e0f10})
	if want, _ := hex.DecodeString("0102030405060708090a0b0c0d0e0f10"); !bytes.Equal(r, want) {
		t.Errorf("RETH %x", []byte(r))
	}

	ae := make(AETH, AETHLen)
	ae.Encode(&AETHFields{Syndrome: NAKSyndrome(NAKRemoteAccessError), MSN: 0x1234567})
	if want := []byte{0x62, 0x23, 0x45, 0x67}; !bytes.Equal(ae, want) {
		t.Errorf("AETH %x", []byte(ae))
	}

	d := make(DETH, DETHLen)
	d[4] = 0xAA // reserved: Encode clears it
	d.Encode(&DETHFields{QKey: 0x11111111, SrcQP: 0x1000013})
	if want := []byte{0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x13}; !bytes.Equal(d, want) {
		t.Errorf("DETH %x", []byte(d))
	}
	d.SetSrcQP(0xABCDEF)
	d.SetQKey(0x80000000)
	if d.SrcQP() != 0xABCDEF || d.QKey() != 0x80000000 {
		t.Errorf("DETH %+v", d.Fields())
	}

	i := make(ImmDt, ImmDtLen)
	i.SetImm(0xDEADBEEF)
	if want := []byte{0xDE, 0xAD, 0xBE, 0xEF}; !bytes.Equal(i, want) || i.Imm() != 0xDEADBEEF {
		t.Errorf("ImmDt %x", []byte(i))
	}
	ie := make(IETH, IETHLen)
	ie.SetRKey(0x01020304)
	if want := []byte{1, 2, 3, 4}; !bytes.Equal(ie, want) || ie.RKey() != 0x01020304 {
		t.Errorf("IETH %x", []byte(ie))
	}
	aa := make(AtomicAckETH, AtomicAckETHLen)
	aa.SetOrigData(0x0102030405060708)
	if want := []byte{1, 2, 3, 4, 5, 6, 7, 8}; !bytes.Equal(aa, want) || aa.OrigData() != 0x0102030405060708 {
		t.Errorf("AtomicAckETH %x", []byte(aa))
	}
}

func TestSyndromes(t *testing.T) {
	tests := []struct {
		s     uint8
		typ   AckType
		value uint8
	}{
		{ACKSyndrome(ACKCreditInvalid), AckTypeACK, 0x1F},
		{ACKSyndrome(0), AckTypeACK, 0},
		{RNRNAKSyndrome(14), AckTypeRNRNAK, 14},
		{RNRNAKSyndrome(0xFF), AckTypeRNRNAK, 0x1F},
		{NAKSyndrome(NAKPSNSeqError), AckTypeNAK, 0},
		{NAKSyndrome(NAKRemoteOperationalError), AckTypeNAK, 3},
		{0x40, AckTypeReserved, 0},
	}
	for _, tt := range tests {
		if SyndromeType(tt.s) != tt.typ || SyndromeValue(tt.s) != tt.value {
			t.Errorf("syndrome %#x: %v %d, want %v %d", tt.s, SyndromeType(tt.s), SyndromeValue(tt.s), tt.typ, tt.value)
		}
	}
	if ACKSyndrome(0x1F) != 0x1F || RNRNAKSyndrome(1) != 0x21 || NAKSyndrome(NAKInvalidRequest) != 0x61 {
		t.Error("syndrome encodings differ from IBTA table 42")
	}
	for _, s := range []string{AckTypeRNRNAK.String(), NAKRemoteAccessError.String(), AckType(9).String(), NAKCode(9).String()} {
		if s == "" {
			t.Error("empty String")
		}
	}
	if AckTypeNAK.String() != "NAK" || NAKPSNSeqError.String() != "PSN_SEQ_ERROR" {
		t.Error("String names")
	}
}

// The header fuzz targets check that decoding what Encode wrote gives back
// the fields, with every value masked to its field's width.

func FuzzBTH(f *testing.F) {
	f.Add(uint8(RCFetchAdd), false, false, 0, uint8(0), uint16(0xFFFF), uint32(0x2c), true, uint32(1137446))
	f.Add(uint8(0xFF), true, true, 7, uint8(0xFF), uint16(0), uint32(0xFFFFFFFF), false, uint32(0xFFFFFFFF))
	f.Fuzz(func(t *testing.T, op uint8, se, m bool, pad int, tver uint8, pkey uint16, qp uint32, ack bool, psn uint32) {
		in := BTHFields{Opcode: Opcode(op), SolicitedEvent: se, MigReq: m, PadCount: pad, TVer: tver, PKey: pkey, DestQP: qp, AckReq: ack, PSN: PSN(psn)}
		b := make(BTH, BTHLen)
		for i := range b {
			b[i] = 0xA5 // Encode must overwrite everything
		}
		b.Encode(&in)
		want := in
		want.PadCount &= 3
		want.TVer &= 0xF
		want.DestQP &= 0xFFFFFF
		want.PSN &= PSNMask
		if got := b.Fields(); got != want {
			t.Fatalf("Encode(%+v) decodes to %+v", in, got)
		}
		if b[4] != 0 || b[8]&0x7F != 0 {
			t.Fatalf("reserved bits set: %x", []byte(b))
		}
		// Setters produce the same bytes as Encode.
		c := make(BTH, BTHLen)
		c.SetOpcode(want.Opcode)
		c.SetSolicitedEvent(se)
		c.SetMigReq(m)
		c.SetPadCount(pad)
		c[1] |= want.TVer
		c.SetPKey(pkey)
		c.SetDestQP(qp)
		c.SetAckReq(ack)
		c.SetPSN(PSN(psn))
		if !bytes.Equal(b, c) {
			t.Fatalf("setters wrote %x, Encode %x", []byte(c), []byte(b))
		}
	})
}

func FuzzRETH(f *testing.F) {
	f.Add(uint64(0x55c49cedd000), uint32(0xed9), uint32(4096))
	f.Fuzz(func(t *testing.T, va uint64, rkey, n uint32) {
		in := RETHFields{VA: va, RKey: rkey, DMALen: n}
		r := make(RETH, RETHLen)
		r.Encode(&in)
		if got := r.Fields(); got != in {
			t.Fatalf("%+v decodes to %+v", in, got)
		}
	})
}

func FuzzAETH(f *testing.F) {
	f.Add(uint8(0x1F), uint32(1))
	f.Add(uint8(0x60), uint32(0xFFFFFFFF))
	f.Fuzz(func(t *testing.T, syn uint8, msn uint32) {
		a := make(AETH, AETHLen)
		a.Encode(&AETHFields{Syndrome: syn, MSN: msn})
		if got := a.Fields(); got != (AETHFields{Syndrome: syn, MSN: msn & 0xFFFFFF}) {
			t.Fatalf("%#x/%#x decodes to %+v", syn, msn, got)
		}
		c := make(AETH, AETHLen)
		c.SetSyndrome(syn)
		c.SetMSN(msn)
		if !bytes.Equal(a, c) {
			t.Fatalf("setters %x, Encode %x", []byte(c), []byte(a))
		}
	})
}

func FuzzAtomicETH(f *testing.F) {
	f.Add(uint64(0x55c49cedd000), uint32(0xed9), uint64(1), uint64(0))
	f.Fuzz(func(t *testing.T, va uint64, rkey uint32, swap, cmp uint64) {
		in := AtomicETHFields{VA: va, RKey: rkey, SwapAdd: swap, Compare: cmp}
		a := make(AtomicETH, AtomicETHLen)
		a.Encode(&in)
		if got := a.Fields(); got != in {
			t.Fatalf("%+v decodes to %+v", in, got)
		}
	})
}

func FuzzDETH(f *testing.F) {
	f.Add(uint32(0x11111111), uint32(0x13))
	f.Fuzz(func(t *testing.T, qkey, src uint32) {
		d := make(DETH, DETHLen)
		d.Encode(&DETHFields{QKey: qkey, SrcQP: src})
		if got := d.Fields(); got != (DETHFields{QKey: qkey, SrcQP: src & 0xFFFFFF}) || d[4] != 0 {
			t.Fatalf("%#x/%#x decodes to %+v (%x)", qkey, src, got, []byte(d))
		}
	})
}

// FuzzSmallHeaders covers the single-field headers: ImmDt, IETH and
// AtomicAckETH.
func FuzzSmallHeaders(f *testing.F) {
	f.Add(uint32(0xDEADBEEF), uint64(0x91cb3ed6c1aa9a5f))
	f.Fuzz(func(t *testing.T, v uint32, w uint64) {
		i := make(ImmDt, ImmDtLen)
		i.SetImm(v)
		e := make(IETH, IETHLen)
		e.SetRKey(v)
		a := make(AtomicAckETH, AtomicAckETHLen)
		a.SetOrigData(w)
		if i.Imm() != v || e.RKey() != v || a.OrigData() != w || !bytes.Equal(i, e) {
			t.Fatalf("round trip of %#x/%#x: %#x %#x %#x", v, w, i.Imm(), e.RKey(), a.OrigData())
		}
	})
}
