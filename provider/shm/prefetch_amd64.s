#include "textflag.h"

// func prefetchw(p unsafe.Pointer)
TEXT ·prefetchw(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	// PREFETCHW (AX): 0F 0D /1, which the Go assembler does not name. A
	// CPU without it (before Broadwell) runs it as a NOP.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET
