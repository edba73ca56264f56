package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

// cmCodecs round-trips one CM message kind: parse b, encode the result,
// parse again; the two parses must agree and the re-encoded bytes must
// parse to the same fields (reserved bits are dropped by design).
var cmCodecs = map[CMAttr]func(b []byte) (first, second any, reenc []byte, err error){
	CMReqAttr:     roundTrip(ParseCMReq, (*CMReq).Encode),
	CMMRAAttr:     roundTrip(ParseCMMRA, (*CMMRA).Encode),
	CMRejAttr:     roundTrip(ParseCMRej, (*CMRej).Encode),
	CMRepAttr:     roundTrip(ParseCMRep, (*CMRep).Encode),
	CMRTUAttr:     roundTrip(ParseCMRTU, (*CMRTU).Encode),
	CMDReqAttr:    roundTrip(ParseCMDReq, (*CMDReq).Encode),
	CMDRepAttr:    roundTrip(ParseCMDRep, (*CMDRep).Encode),
	CMSIDRReqAttr: roundTrip(ParseCMSIDRReq, (*CMSIDRReq).Encode),
	CMSIDRRepAttr: roundTrip(ParseCMSIDRRep, (*CMSIDRRep).Encode),
}

func roundTrip[T any](parse func([]byte) (T, error), encode func(*T, []byte)) func([]byte) (any, any, []byte, error) {
	return func(b []byte) (any, any, []byte, error) {
		m, err := parse(b)
		if err != nil {
			return nil, nil, nil, err
		}
		out := make([]byte, CMDataLen)
		encode(&m, out)
		m2, err := parse(out)
		return m, m2, out, err
	}
}

func FuzzCMMessages(f *testing.F) {
	f.Add(uint16(CMReqAttr), bytes.Repeat([]byte{0xff}, CMDataLen))
	f.Add(uint16(CMRepAttr), bytes.Repeat([]byte{0x5a}, CMDataLen))
	f.Add(uint16(CMSIDRRepAttr), make([]byte, 10))
	f.Fuzz(func(t *testing.T, attr uint16, b []byte) {
		codec := cmCodecs[CMAttr(0x10+attr%9)]
		m1, m2, out, err := codec(b)
		if len(b) < CMDataLen {
			if err == nil {
				t.Fatalf("short attribute (%d bytes) parsed", len(b))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if m1 != m2 {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", m1, m2)
		}
		// Encoding never sets a bit the input did not have.
		for i := range out {
			if out[i]&^b[i] != 0 {
				t.Fatalf("byte %d: encoded %#02x from %#02x", i, out[i], b[i])
			}
		}
	})
}

func TestCMReqFieldPositions(t *testing.T) {
	// Each field set alone lands where IBTA table 106 puts it.
	b := make([]byte, CMDataLen)
	cases := []struct {
		set  func(r *CMReq)
		want map[int]byte
	}{
		{func(r *CMReq) { r.LocalQPN = 0x123456; r.ResponderResources = 0x78 }, map[int]byte{32: 0x12, 33: 0x34, 34: 0x56, 35: 0x78}},
		{func(r *CMReq) { r.RemoteCMTimeout = 20; r.Transport = CMTransportUC; r.FlowControl = true }, map[int]byte{43: 20<<3 | 1<<1 | 1}},
		{func(r *CMReq) { r.StartingPSN = 0xabcdef; r.LocalCMTimeout = 20; r.RetryCount = 7 }, map[int]byte{44: 0xab, 45: 0xcd, 46: 0xef, 47: 20<<3 | 7}},
		{func(r *CMReq) { r.PathMTU = 3; r.RNRRetryCount = 7; r.MaxCMRetries = 15; r.SRQ = true }, map[int]byte{50: 3<<4 | 7, 51: 15<<4 | 1<<3}},
		{func(r *CMReq) { r.Primary.FlowLabel = 0xfffff; r.Primary.PacketRate = 0x3f }, map[int]byte{88: 0xff, 89: 0xff, 90: 0xf0, 91: 0x3f}},
		{func(r *CMReq) {
			r.Primary.TrafficClass, r.Primary.HopLimit, r.Primary.SL, r.Primary.LocalACKTimeout = 1, 2, 3, 17
		}, map[int]byte{92: 1, 93: 2, 94: 3 << 4, 95: 17 << 3}},
	}
	for i, c := range cases {
		var r CMReq
		c.set(&r)
		r.Encode(b)
		for j, v := range b {
			if v != c.want[j] {
				t.Errorf("case %d: byte %d = %#02x, want %#02x", i, j, v, c.want[j])
			}
		}
	}
}

func TestCMAHeader(t *testing.T) {
	for _, h := range []CMAHeader{
		{SrcPort: 0x1234, Src: netip.MustParseAddr("10.77.0.1"), Dst: netip.MustParseAddr("10.77.0.2")},
		{SrcPort: 7174, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")},
	} {
		b := make([]byte, CMAHeaderLen)
		h.Encode(b)
		got, ok := ParseCMAHeader(b)
		if !ok || got != h {
			t.Errorf("%+v → % x → %+v, %v", h, b, got, ok)
		}
	}
	b := make([]byte, CMAHeaderLen)
	(&CMAHeader{SrcPort: 1, Src: netip.MustParseAddr("1.2.3.4"), Dst: netip.MustParseAddr("5.6.7.8")}).Encode(b)
	want := []byte{0, 0x40, 0, 1}
	if !bytes.Equal(b[:4], want) || !bytes.Equal(b[16:20], []byte{1, 2, 3, 4}) || !bytes.Equal(b[32:36], []byte{5, 6, 7, 8}) {
		t.Errorf("IPv4 layout: % x", b)
	}
}

func FuzzCMAHeader(f *testing.F) {
	f.Add(make([]byte, CMAHeaderLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, ok := ParseCMAHeader(b)
		if !ok {
			return
		}
		out := make([]byte, CMAHeaderLen)
		h.Encode(out)
		if h2, ok := ParseCMAHeader(out); !ok || h2 != h {
			t.Fatalf("%+v → %+v", h, h2)
		}
	})
}

func FuzzMADHeader(f *testing.F) {
	f.Add(make([]byte, MADHeaderLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMAD(b)
		if err != nil {
			return
		}
		h := m.Fields()
		out := make(MAD, MADHeaderLen)
		out.Encode(&h)
		if out.Fields() != h {
			t.Fatalf("%+v → %+v", h, out.Fields())
		}
	})
}
