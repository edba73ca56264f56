package wire

import "strconv"

// PSN is a 24-bit packet sequence number (IBTA 9.2, 9.7.1). All arithmetic
// wraps modulo 2^24 and all comparisons are modular with a window of 2^23:
// p is before q when q-p, taken in 24-bit space, is in [1, 2^23). The zero
// value is PSN 0. A PSN read from or written to a header is always masked
// with PSNMask, so the upper byte of a PSN value is always zero.
type PSN uint32

// PSNMask masks a value to the 24 bits of a PSN.
const PSNMask = 0xFFFFFF

// Add returns p+n modulo 2^24.
func (p PSN) Add(n uint32) PSN { return (p + PSN(n)) & PSNMask }

// Sub returns the signed distance p-q in 24-bit space, in [-2^23, 2^23).
func (p PSN) Sub(q PSN) int32 { return int32(uint32(p-q)<<8) >> 8 }

// Less reports whether p comes before q (modular, window 2^23).
func (p PSN) Less(q PSN) bool { return p.Sub(q) < 0 }

// LessEq reports whether p comes before q or equals it.
func (p PSN) LessEq(q PSN) bool { return p.Sub(q) <= 0 }

// InWindow reports whether start <= p < start+n, modularly: whether p is one
// of the n PSNs starting at start. It is false for every p when n is 0.
func (p PSN) InWindow(start PSN, n uint32) bool {
	return uint32((p-start)&PSNMask) < n
}

// String returns the PSN in decimal, as tshark and rdma-core tools print it.
func (p PSN) String() string { return strconv.FormatUint(uint64(p), 10) }
