//go:build !purego

package wire

import "hash/crc32"

// The ICRC covers every payload byte of every packet, sent and received,
// so its speed bounds bandwidth. hash/crc32 folds 64 bytes per step with
// 128-bit PCLMULQDQ (and with 512-bit VPCLMULQDQ on AVX-512 machines);
// CPUs with AVX2 and VPCLMULQDQ but no AVX-512 (AMD Zen 3, Intel Alder
// Lake) can fold 128 bytes per step in 256-bit registers, about twice as
// fast.

//go:noescape
func foldIEEE256(crc uint32, p []byte, out *[16]byte)

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

// hasFold256 reports AVX2, VPCLMULQDQ and an OS that saves YMM state.
var hasFold256 = func() bool {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const osxsave, avx = 1 << 27, 1 << 28
	if ecx1&osxsave == 0 || ecx1&avx == 0 {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 { // XMM and YMM state enabled
		return false
	}
	_, ebx7, ecx7, _ := cpuid(7, 0)
	const avx2, vpclmulqdq = 1 << 5, 1 << 10
	return ebx7&avx2 != 0 && ecx7&vpclmulqdq != 0
}()

// fold256Min is the length from which folding in YMM registers beats
// hash/crc32 (which takes its own fast path from 64 bytes).
const fold256Min = 256

// crcUpdate is crc32.Update with the IEEE table.
func crcUpdate(crc uint32, p []byte) uint32 {
	if !hasFold256 || len(p) < fold256Min {
		return crc32.Update(crc, crc32.IEEETable, p)
	}
	m := len(p) &^ 127
	var x [16]byte
	foldIEEE256(^crc, p[:m], &x)
	// The CRC of p is that of x followed by the rest, from register 0:
	// Update's register starts at ^c, so c = ^0. (updateSmall, not
	// crc32.Update, for x: the latter would move x to the heap.)
	return crc32.Update(updateSmall(^uint32(0), x[:]), crc32.IEEETable, p[m:])
}
