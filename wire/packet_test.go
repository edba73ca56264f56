package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// build returns a packet with opcode op, the given payload, a valid pad and
// a zero ICRC; extension headers are zero.
func build(op Opcode, payload []byte) []byte {
	b := make([]byte, PacketLen(op, len(payload)))
	BTH(b).Encode(&BTHFields{Opcode: op, PadCount: PadFor(len(payload)), PKey: 0xFFFF})
	copy(b[HeaderLen(op):], payload)
	return b
}

func TestParseHeaders(t *testing.T) {
	b, _ := hex.DecodeString(atomicFrame)
	var p Packet
	if err := Parse(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.Info != RCFetchAdd.Info() || p.AtomicETH.VA() != 0x55c49cedd000 || p.ICRC != 0x19c67ab6 ||
		len(p.Payload) != 0 || p.RETH != nil || p.AETH != nil || p.DETH != nil || p.ImmDt != nil || &p.Raw[0] != &b[0] {
		t.Errorf("parsed %+v", p)
	}
	// Every header view has exactly its length and capacity, so an append
	// to one cannot scribble over the next.
	payload := []byte{1, 2, 3, 4, 5}
	w := build(RCWriteOnlyImm, payload)
	if err := Parse(w, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.RETH) != RETHLen || cap(p.RETH) != RETHLen || len(p.ImmDt) != ImmDtLen || cap(p.ImmDt) != ImmDtLen ||
		!bytes.Equal(p.Payload, payload) || cap(p.Payload) != len(payload) || p.AtomicETH != nil {
		t.Errorf("WRITE_ONLY_IMM parsed %+v", p)
	}
	if &p.ImmDt[0] != &w[28] || &p.Payload[0] != &w[32] {
		t.Error("views do not alias the input at the table offsets")
	}
	// Reusing the Packet clears headers of the previous opcode.
	if err := Parse(build(UDSendOnly, nil), &p); err != nil {
		t.Fatal(err)
	}
	if p.RETH != nil || p.ImmDt != nil || len(p.DETH) != DETHLen || len(p.Payload) != 0 {
		t.Errorf("reused Packet: %+v", p)
	}
}

func TestParseErrors(t *testing.T) {
	withPad := func(b []byte, pad int) []byte { BTH(b).SetPadCount(pad); return b }
	withTVer := func(b []byte) []byte { b[1] |= 1; return b }
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"BTH only", make([]byte, BTHLen), ErrShort},
		{"BTH and ICRC", make([]byte, BTHLen+ICRCLen), nil}, // RC_SEND_FIRST with no payload
		{"zero-length slice", build(RCSendFirst, nil)[:0:0], ErrShort},
		{"reserved opcode 0x15", func() []byte { b := build(RCAck, nil); b[0] = 0x15; return b }(), ErrUnknownOpcode},
		{"RD opcode", func() []byte { b := build(RCAck, nil); b[0] = 0x40; return b }(), ErrUnknownOpcode},
		{"TVer 1", withTVer(build(RCSendOnly, []byte{1, 2, 3, 4})), ErrTVer},
		{"ACK cut in its AETH", build(RCAck, nil)[:BTHLen+2+ICRCLen], ErrShort},
		{"READ request without RETH", build(RCReadRequest, nil)[:BTHLen+ICRCLen], ErrShort},
		{"pad beyond payload", withPad(build(RCSendOnly, nil), 1), ErrBadPad},
		{"pad beyond payload of 2", withPad(build(RCSendOnly, []byte{1, 2, 0, 0}), 3)[:BTHLen+2+ICRCLen], ErrBadPad},
		{"payload on an ACK", append(build(RCAck, nil), 0, 0, 0, 0), ErrPayload},
		{"payload on a READ request", append(build(RCReadRequest, nil), 0, 0, 0, 0), ErrPayload},
		{"pad on an ACK", withPad(append(build(RCAck, nil), 0, 0, 0, 0), 3), ErrPayload},
		{"pad only, no payload", withPad(append(build(RCSendOnly, nil), 0, 0, 0), 3), nil},
		{"UD SEND", build(UDSendOnlyImm, []byte("hello")), nil},
		{"atomic ACK", build(RCAtomicAck, nil), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Packet
			err := Parse(tt.b, &p)
			if err != tt.want {
				t.Fatalf("Parse = %v, want %v", err, tt.want)
			}
			if err == nil {
				n := p.Info.Length + len(p.Payload) + p.BTH.PadCount() + ICRCLen
				if n != len(tt.b) {
					t.Errorf("parts add up to %d of %d bytes", n, len(tt.b))
				}
			} else if !errors.Is(err, tt.want) {
				t.Errorf("errors.Is(%v, %v) false", err, tt.want)
			}
		})
	}
}

func TestPadFor(t *testing.T) {
	for n, want := range []int{0, 3, 2, 1, 0, 3, 2, 1, 0} {
		if got := PadFor(n); got != want {
			t.Errorf("PadFor(%d) = %d, want %d", n, got, want)
		}
	}
	if got := PacketLen(RCSendOnly, 5); got != 12+5+3+4 {
		t.Errorf("PacketLen(SEND_ONLY, 5) = %d", got)
	}
	if got := PacketLen(RCAck, 0); got != 20 {
		t.Errorf("PacketLen(ACK, 0) = %d", got)
	}
}

// FuzzParse feeds arbitrary datagrams to Parse. Parse must never panic,
// must fail only with its sentinel errors, and what it accepts must
// account for every byte and re-encode to the same headers.
func FuzzParse(f *testing.F) {
	seen := map[Opcode]int{}
	for _, path := range captureFiles(f) {
		for _, cp := range readCapture(f, path) {
			if op := Opcode(cp.pkt[0]); seen[op] < 3 {
				seen[op]++
				f.Add(cp.pkt)
			}
		}
	}
	for _, op := range []Opcode{RCSendOnlyImm, RCWriteOnlyImm, RCCompareSwap, RCSendLastInv, UCWriteLastImm, UDSendOnlyImm} {
		f.Add(build(op, []byte{1, 2, 3, 4, 5, 6}))
	}
	f.Add([]byte{})
	// A pad count larger than the payload needs (found by fuzzing).
	f.Add(func() []byte { b := build(UCSendFirst, []byte{1, 2, 3, 4}); BTH(b).SetPadCount(1); return b }())
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		err := Parse(b, &p)
		switch err {
		case nil:
		case ErrShort, ErrUnknownOpcode, ErrBadPad, ErrTVer, ErrPayload:
			return
		default:
			t.Fatalf("Parse returned a non-sentinel error %v", err)
		}
		info := p.Info
		if !info.Valid() || info != p.BTH.Opcode().Info() {
			t.Fatalf("accepted opcode %v", p.BTH.Opcode())
		}
		if n := info.Length + len(p.Payload) + p.BTH.PadCount() + ICRCLen; n != len(b) {
			t.Fatalf("parts add up to %d of %d bytes", n, len(b))
		}
		if len(p.Payload) > 0 && !info.Has(FlagPayload) {
			t.Fatalf("payload accepted on %v", p.BTH.Opcode())
		}
		// Re-encode the headers from the parsed fields. Encode writes zero
		// where the input may have anything: BTH byte 4 (FECN/BECN), the
		// reserved bits after AckReq, and the reserved byte of the DETH.
		out := reencode(&p, nil)
		want := bytes.Clone(b[:info.Length])
		want[4] = 0
		want[8] &= 0x80
		if info.DETHOff != 0 {
			want[info.DETHOff+4] = 0
		}
		if !bytes.Equal(out[:info.Length], want) {
			t.Fatalf("re-encoded headers\n got %x\nwant %x", out[:info.Length], want)
		}
		if !bytes.Equal(out[info.Length:info.Length+len(p.Payload)], p.Payload) {
			t.Fatal("payload differs")
		}
		// A packet built from the parsed fields with the pad its payload
		// needs (the input's pad count may be any that fits) and its ICRC
		// parses to the same fields and passes CheckICRC.
		wantBTH := p.BTH.Fields()
		wantBTH.PadCount = PadFor(len(p.Payload))
		BTH(out).SetPadCount(wantBTH.PadCount)
		ip := testIPv4
		PutICRC(out, &ip)
		var q Packet
		if err := Parse(out, &q); err != nil {
			t.Fatalf("re-encoded packet: %v", err)
		}
		if !CheckICRC(out, &ip) || q.BTH.Fields() != wantBTH || !bytes.Equal(q.Payload, p.Payload) {
			t.Fatalf("re-encoded packet parses to %+v", q.BTH.Fields())
		}
	})
}
