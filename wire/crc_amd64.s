//go:build !purego

#include "textflag.h"

// Folding constants for the reflected CRC-32 (IEEE) polynomial, as in
// Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ":
// the low qword is (x^(D+32) mod P)' << 1, the high qword
// (x^(D-32) mod P)' << 1, ' being a 32-bit bit reversal, for a fold
// distance of D bits. hash/crc32 uses the same construction for D = 512 and
// D = 128 (its r2r1 and r4r3).
DATA k1024<>+0(SB)/8, $0x1e88ef372
DATA k1024<>+8(SB)/8, $0x14a7fe880
DATA k1024<>+16(SB)/8, $0x1e88ef372
DATA k1024<>+24(SB)/8, $0x14a7fe880
GLOBL k1024<>(SB), RODATA, $32

DATA k128<>+0(SB)/8, $0x1751997d0
DATA k128<>+8(SB)/8, $0x0ccaa009e
GLOBL k128<>(SB), RODATA, $16

// func foldIEEE256(crc uint32, p []byte, out *[16]byte)
//
// Folds p, whose length is a non-zero multiple of 128, starting from the
// raw (not inverted) CRC register crc, into 16 bytes out such that the CRC
// of p followed by any data equals the CRC, from register 0, of out
// followed by the same data. Eight 16-byte lanes in four YMM registers
// fold 128 bytes forward per step (D = 1024); the lanes are then folded
// into one (D = 128). Requires AVX2 and VPCLMULQDQ.
TEXT ·foldIEEE256(SB), NOSPLIT, $0-40
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ out+32(FP), DI

	VMOVDQU (SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	VMOVDQU 96(SI), Y4
	VMOVD   AX, X0 // zeroes the rest of Y0
	VPXOR   Y0, Y1, Y1
	ADDQ    $128, SI
	SUBQ    $128, CX
	JZ      reduce

	VMOVDQU k1024<>(SB), Y0

loop:
	VPCLMULQDQ $0x00, Y0, Y1, Y5
	VPCLMULQDQ $0x11, Y0, Y1, Y1
	VPCLMULQDQ $0x00, Y0, Y2, Y6
	VPCLMULQDQ $0x11, Y0, Y2, Y2
	VPCLMULQDQ $0x00, Y0, Y3, Y7
	VPCLMULQDQ $0x11, Y0, Y3, Y3
	VPCLMULQDQ $0x00, Y0, Y4, Y8
	VPCLMULQDQ $0x11, Y0, Y4, Y4
	VPXOR      (SI), Y5, Y5
	VPXOR      32(SI), Y6, Y6
	VPXOR      64(SI), Y7, Y7
	VPXOR      96(SI), Y8, Y8
	VPXOR      Y5, Y1, Y1
	VPXOR      Y6, Y2, Y2
	VPXOR      Y7, Y3, Y3
	VPXOR      Y8, Y4, Y4
	ADDQ       $128, SI
	SUBQ       $128, CX
	JNZ        loop

reduce:
	// Lanes in memory order: X1, Y1 high, X2, Y2 high, ... Fold each into
	// the accumulator X1 in turn.
	VMOVDQU      k128<>(SB), X0
	VEXTRACTI128 $1, Y1, X9
	VPCLMULQDQ   $0x00, X0, X1, X5
	VPCLMULQDQ   $0x11, X0, X1, X1
	VPXOR        X5, X1, X1
	VPXOR        X9, X1, X1

	VEXTRACTI128 $1, Y2, X9
	VPCLMULQDQ   $0x00, X0, X1, X5
	VPCLMULQDQ   $0x11, X0, X1, X1
	VPXOR        X5, X1, X1
	VPXOR        X2, X1, X1
	VPCLMULQDQ   $0x00, X0, X1, X5
	VPCLMULQDQ   $0x11, X0, X1, X1
	VPXOR        X5, X1, X1
	VPXOR        X9, X1, X1

	VEXTRACTI128 $1, Y3, X9
	VPCLMULQDQ   $0x00, X0, X1, X5
	VPCLMULQDQ   $0x11, X0, X1, X1
	VPXOR        X5, X1, X1
	VPXOR        X3, X1, X1
	VPCLMULQDQ   $0x00, X0, X1, X5
	VPCLMULQDQ   $0x11, X0, X1, X1
	VPXOR        X5, X1, X1
	VPXOR        X9, X1, X1

	VEXTRACTI128 $1, Y4, X9
	VPCLMULQDQ   $0x00, X0, X1, X5
	VPCLMULQDQ   $0x11, X0, X1, X1
	VPXOR        X5, X1, X1
	VPXOR        X4, X1, X1
	VPCLMULQDQ   $0x00, X0, X1, X5
	VPCLMULQDQ   $0x11, X0, X1, X1
	VPXOR        X5, X1, X1
	VPXOR        X9, X1, X1

	VMOVDQU X1, (DI)
	VZEROUPPER
	RET

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET
