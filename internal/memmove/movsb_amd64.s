//go:build amd64 && !race

#include "textflag.h"

// func movsb(dst, src *byte, n int)
TEXT ·movsb(SB), NOSPLIT, $0-24
	MOVQ	dst+0(FP), DI
	MOVQ	src+8(FP), SI
	MOVQ	n+16(FP), CX
	REP;	MOVSB
	// The stores of a fast-string operation may become visible out of
	// order; SFENCE puts them all before any later store, so a caller
	// may still store a flag (the last byte of an RDMA WRITE) after Copy.
	SFENCE
	RET
