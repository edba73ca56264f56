package wire

import "testing"

func TestCNP(t *testing.T) {
	b := make([]byte, CNPLen+10)
	for i := range b {
		b[i] = 0xAA
	}
	p := EncodeCNP(b, 0xFFFF, 0x123456)
	if len(p) != 32 {
		t.Fatalf("CNP is %d bytes, want 32 (BTH, 16 reserved, ICRC)", len(p))
	}
	h := BTH(p)
	if h.Opcode() != 0x81 || !h.BECN() || h.FECN() || h.PKey() != 0xFFFF || h.DestQP() != 0x123456 || h.PSN() != 0 || h.AckReq() || h.PadCount() != 0 {
		t.Errorf("CNP header %x", p[:BTHLen])
	}
	for _, c := range p[BTHLen : BTHLen+16] {
		if c != 0 {
			t.Fatalf("reserved bytes %x, want zero", p[BTHLen:BTHLen+16])
		}
	}
	if qp, ok := ParseCNP(p); !ok || qp != 0x123456 {
		t.Errorf("ParseCNP = %#x, %v", qp, ok)
	}
	if _, ok := ParseCNP(p[:31]); ok {
		t.Error("a short CNP parsed")
	}
	p[0] = byte(RCAck)
	if _, ok := ParseCNP(p); ok {
		t.Error("an ACK parsed as a CNP")
	}
	// The opcode's service is not one Parse knows: Parse refuses it.
	p[0] = byte(CNPOpcode)
	var pk Packet
	if err := Parse(p, &pk); err == nil {
		t.Error("Parse took a CNP as a packet of a transport it implements")
	}
}

// FuzzParseCNP: ParseCNP never panics, accepts exactly the 32-byte
// packets with opcode 0x81, and what it accepts re-encodes to the same
// header fields.
func FuzzParseCNP(f *testing.F) {
	f.Add(EncodeCNP(make([]byte, CNPLen), 0xFFFF, 0x11))
	f.Add([]byte{0x81})
	f.Add(make([]byte, CNPLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		qp, ok := ParseCNP(b)
		if ok != (len(b) == CNPLen && b[0] == 0x81) {
			t.Fatalf("ParseCNP(%x) ok = %v", b, ok)
		}
		if ok {
			re := EncodeCNP(make([]byte, CNPLen), BTH(b).PKey(), qp)
			if q2, ok2 := ParseCNP(re); !ok2 || q2 != qp || BTH(re).DestQP() != BTH(b).DestQP() {
				t.Fatalf("re-encoded CNP for QP %#x parses as %#x", qp, q2)
			}
		}
	})
}
