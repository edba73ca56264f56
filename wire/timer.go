package wire

import "time"

// LocalACKTimeout returns the local ACK timeout that the 5-bit QP attribute
// code t stands for: 4.096 µs × 2^t (IBTA 9.7.6, the transport timer).
// t == 0 means the timer is disabled (infinite) and returns 0. Codes above
// 31 are treated as 31, the largest the attribute holds.
func LocalACKTimeout(t uint8) time.Duration {
	if t == 0 {
		return 0
	}
	if t > 31 {
		t = 31
	}
	return 4096 * time.Nanosecond << t
}

// rnrTimeouts is IBTA table 45 (the RNR NAK timer field encoding), in
// microseconds. rxe's rnrnak_usec table has a typo for code 25 (61410);
// this is the IBTA value 61440.
var rnrTimeouts = [32]time.Duration{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimeout returns the minimum RNR NAK timer delay that the 5-bit code
// stands for (IBTA 9.7.5.2, table 45): code 0 is 655.36 ms, codes 1-31
// rise from 0.01 ms to 491.52 ms. Only the low 5 bits of code are used.
func RNRTimeout(code uint8) time.Duration {
	return rnrTimeouts[code&31] * time.Microsecond
}
