package wire

import (
	"testing"
	"time"
)

func TestLocalACKTimeout(t *testing.T) {
	tests := []struct {
		code uint8
		want time.Duration
	}{
		{0, 0},
		{1, 8192 * time.Nanosecond},
		{14, 67108864 * time.Nanosecond}, // 67.1 ms: ibv_rc_pingpong's and perftest's default
		{17, 536870912 * time.Nanosecond},
		{31, 4096 * time.Nanosecond << 31},
		{200, 4096 * time.Nanosecond << 31},
	}
	for _, tt := range tests {
		if got := LocalACKTimeout(tt.code); got != tt.want {
			t.Errorf("LocalACKTimeout(%d) = %v, want %v", tt.code, got, tt.want)
		}
	}
}

func TestRNRTimeout(t *testing.T) {
	// IBTA table 45, in milliseconds.
	ms := []float64{655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
		2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52}
	for code, m := range ms {
		want := time.Duration(m*1000+0.5) * time.Microsecond
		if got := RNRTimeout(uint8(code)); got != want {
			t.Errorf("RNRTimeout(%d) = %v, want %v", code, got, want)
		}
		if code > 1 && RNRTimeout(uint8(code)) <= RNRTimeout(uint8(code-1)) {
			t.Errorf("RNRTimeout not increasing at %d", code)
		}
	}
	if RNRTimeout(32+12) != RNRTimeout(12) {
		t.Error("RNRTimeout must use the low 5 bits")
	}
}

func TestSourcePorts(t *testing.T) {
	// Seen in the captures (Linux 6.1 rxe): RC QP pairs and UD QPs.
	for _, tt := range []struct {
		a, b uint32
		port uint16
	}{
		{0x11, 0x13, 49475}, {0x2a, 0x2c, 51000}, {0x25, 0x27, 50595}, {0x11, 0x11, 49441},
	} {
		if got := SourcePort(tt.a, tt.b); got != tt.port || SourcePort(tt.b, tt.a) != tt.port {
			t.Errorf("SourcePort(%#x, %#x) = %d, want %d", tt.a, tt.b, got, tt.port)
		}
	}
	if UDSourcePort(0x13) != 53368 || UDSourcePort(0x15) != 49500 {
		t.Errorf("UDSourcePort = %d, %d", UDSourcePort(0x13), UDSourcePort(0x15))
	}
	for _, qpn := range []uint32{0, 1, 0xFFFFFF, 0x123456} {
		if p := SourcePort(qpn, qpn^0x5555); p < 0xC000 {
			t.Errorf("SourcePort %d outside the dynamic range", p)
		}
		if p := UDSourcePort(qpn); p < 0xC000 {
			t.Errorf("UDSourcePort %d outside the dynamic range", p)
		}
	}
}
