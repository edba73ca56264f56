package perftest

import (
	"errors"
	"testing"
)

func TestDestWire(t *testing.T) {
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77, 14: 0, 15: 2}
	tests := []struct {
		d       Dest
		withGID bool
		wire    string
	}{
		// From read_bw.pcap (server side).
		{Dest{OutReads: 0x80, QPN: 0x27, PSN: 0x5fb1d4, RKey: 0x995, VAddr: 0x56303c6d2000, GID: gid}, true,
			"0000:0080:000027:5fb1d4:00000995:000056303c6d2000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:\x00"},
		// KEY_PRINT_FMT, no GID.
		{Dest{LID: 0x1a, OutReads: 16, QPN: 0xabcdef, PSN: 0x123456, RKey: 0xdeadbeef, VAddr: 0x7f0011223344, SRQN: 0x42}, false,
			"001a:0010:abcdef:123456:deadbeef:00007f0011223344:00000042\x00"},
		{Dest{}, false, "0000:0000:000000:000000:00000000:0000000000000000:00000000\x00"},
		{Dest{LID: 0xffff, OutReads: 0xffff, QPN: 0xffffff, PSN: 0xffffff, RKey: 0xffffffff, VAddr: 1<<64 - 1,
			GID: [16]byte{0xfe, 0x80, 15: 0xab}, SRQN: 0xffffffff}, true,
			"ffff:ffff:ffffff:ffffff:ffffffff:ffffffffffffffff:fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:ab:ffffffff:\x00"},
	}
	for _, tt := range tests {
		got := MarshalDest(tt.d, tt.withGID)
		if string(got) != tt.wire {
			t.Errorf("MarshalDest(%+v) = %q, want %q", tt.d, got, tt.wire)
		}
		wantLen := KeyMsgSize
		if tt.withGID {
			wantLen = KeyMsgSizeGID
		}
		if len(got) != wantLen {
			t.Errorf("len = %d, want %d", len(got), wantLen)
		}
		back, err := ParseDest(got, tt.withGID)
		if err != nil || back != tt.d {
			t.Errorf("ParseDest(%q) = %+v, %v", got, back, err)
		}
	}
}

func TestDestMasks(t *testing.T) {
	got := MarshalDest(Dest{OutReads: 0x10080, QPN: 0x1000027, PSN: 0xff5fb1d4}, true)
	if len(got) != KeyMsgSizeGID || string(got[:23]) != "0000:0080:000027:5fb1d4" {
		t.Errorf("got %q", got)
	}
}

func TestParseDestErrors(t *testing.T) {
	for _, tt := range []struct {
		in      string
		withGID bool
	}{
		{"", false},
		{"0000:0001:000024:6539be:000006de:0000559f13b3a000", false},
		{"0000:0001:000024:6539be:000006de:0000559f13b3a000:00000000:", false},
		{"0000:0001:000024:6539be:000006de:0000559f13b3a000:00000000", true},
		{"0000:0001:000024:6539be:000006de:0000559f13b3a000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:100:00000000:", true},
		{"000g:0001:000024:6539be:000006de:0000559f13b3a000:00000000", false},
		{"10000:0001:000024:6539be:000006de:0000559f13b3a000:00000000", false},
	} {
		if _, err := ParseDest([]byte(tt.in), tt.withGID); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseDest(%q, %v) error = %v", tt.in, tt.withGID, err)
		}
	}
}

func TestGIDCompatible(t *testing.T) {
	v4 := [16]byte{10: 0xff, 11: 0xff, 12: 10, 15: 3}
	mc4 := [16]byte{0xff, 0x0e, 10: 0xff, 11: 0xff, 12: 224}
	v6 := [16]byte{0xfe, 0x80, 15: 1}
	almost := [16]byte{4: 1, 10: 0xff, 11: 0xff}
	for _, tt := range []struct {
		a, b [16]byte
		want bool
	}{
		{v4, v4, true}, {v4, mc4, true}, {v6, v6, true}, {[16]byte{}, v6, true},
		{v4, v6, false}, {v4, [16]byte{}, false}, {almost, v4, false},
	} {
		if got := GIDCompatible(tt.a, tt.b); got != tt.want {
			t.Errorf("GIDCompatible(% x, % x) = %v", tt.a, tt.b, got)
		}
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte("0000:0080:000027:5fb1d4:00000995:000056303c6d2000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:02:00000000:\x00"), true)
	f.Add([]byte("001a:0010:abcdef:123456:deadbeef:00007f0011223344:00000042\x00"), false)
	f.Fuzz(func(t *testing.T, b []byte, withGID bool) {
		d, err := ParseDest(b, withGID)
		if err != nil {
			return
		}
		d.QPN &= 0xffffff
		d.PSN &= 0xffffff
		back, err := ParseDest(MarshalDest(d, withGID), withGID)
		if err != nil || back != d {
			t.Fatalf("round trip of %+v: %+v, %v", d, back, err)
		}
	})
}
