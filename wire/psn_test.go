package wire

import (
	"fmt"
	"testing"
)

func TestPSNArithmetic(t *testing.T) {
	tests := []struct {
		p, q    PSN
		sub     int32
		less    bool
		lessEq  bool
		comment string
	}{
		{0, 0, 0, false, true, "equal"},
		{1, 0, 1, false, false, "one after"},
		{0, 1, -1, true, true, "one before"},
		{0, 0xFFFFFF, 1, false, false, "0 follows 0xFFFFFF"},
		{0xFFFFFF, 0, -1, true, true, "0xFFFFFF precedes 0"},
		{5, 0xFFFFFA, 11, false, false, "across the wrap"},
		{0xFFFFFA, 5, -11, true, true, "across the wrap, reversed"},
		{0x7FFFFF, 0, 0x7FFFFF, false, false, "largest forward distance"},
		{0, 0x7FFFFF, -0x7FFFFF, true, true, "largest backward distance"},
		{0x800000, 0, -0x800000, true, true, "half the space is taken as behind"},
		{0x123456, 0x123456, 0, false, true, "equal, mid-range"},
	}
	for _, tt := range tests {
		t.Run(tt.comment, func(t *testing.T) {
			if got := tt.p.Sub(tt.q); got != tt.sub {
				t.Errorf("%v.Sub(%v) = %d, want %d", tt.p, tt.q, got, tt.sub)
			}
			if got := tt.p.Less(tt.q); got != tt.less {
				t.Errorf("%v.Less(%v) = %v, want %v", tt.p, tt.q, got, tt.less)
			}
			if got := tt.p.LessEq(tt.q); got != tt.lessEq {
				t.Errorf("%v.LessEq(%v) = %v, want %v", tt.p, tt.q, got, tt.lessEq)
			}
		})
	}
}

func TestPSNAdd(t *testing.T) {
	tests := []struct {
		p    PSN
		n    uint32
		want PSN
	}{
		{0, 0, 0},
		{0, 1, 1},
		{0xFFFFFF, 1, 0},
		{0xFFFFFE, 5, 3},
		{0x123456, 0x1000000, 0x123456}, // a whole cycle
		{7, 0xFFFFFFFF, 6},              // n wraps too: -1
	}
	for _, tt := range tests {
		if got := tt.p.Add(tt.n); got != tt.want {
			t.Errorf("%v.Add(%#x) = %v, want %v", tt.p, tt.n, got, tt.want)
		}
	}
}

func TestPSNInWindow(t *testing.T) {
	tests := []struct {
		p, start PSN
		n        uint32
		want     bool
	}{
		{5, 5, 1, true},
		{5, 5, 0, false},
		{6, 5, 1, false},
		{4, 5, 10, false},
		{14, 5, 10, true},
		{15, 5, 10, false},
		{0, 0xFFFFFE, 3, true}, // window wraps: 0xFFFFFE, 0xFFFFFF, 0
		{1, 0xFFFFFE, 3, false},
		{0xFFFFFD, 0xFFFFFE, 3, false},
		{0xFFFFFF, 0xFFFFFE, 3, true},
	}
	for _, tt := range tests {
		if got := tt.p.InWindow(tt.start, tt.n); got != tt.want {
			t.Errorf("%v.InWindow(%v, %d) = %v, want %v", tt.p, tt.start, tt.n, got, tt.want)
		}
	}
}

// TestPSNProperties checks Add, Sub and Less against each other around the
// wrap and at random-looking points.
func TestPSNProperties(t *testing.T) {
	for _, base := range []PSN{0, 1, 0x7FFFFF, 0x800000, 0xFFFFF0, 0xFFFFFF} {
		for _, d := range []int32{-0x7FFFFF, -1000, -1, 0, 1, 1000, 0x7FFFFF} {
			q := base.Add(uint32(d))
			if q > PSNMask {
				t.Fatalf("%v.Add(%d) = %#x exceeds 24 bits", base, d, uint32(q))
			}
			if got := q.Sub(base); got != d {
				t.Errorf("(%v+%d).Sub(%v) = %d", base, d, base, got)
			}
			if got := base.Less(q); got != (d > 0) {
				t.Errorf("%v.Less(%v+%d) = %v", base, base, d, got)
			}
			if d > 0 && !base.InWindow(base, uint32(d)) {
				t.Errorf("%v not in its own window of %d", base, d)
			}
		}
	}
}

func TestPSNString(t *testing.T) {
	if got := fmt.Sprint(PSN(1137446)); got != "1137446" {
		t.Errorf("String = %q", got)
	}
}
