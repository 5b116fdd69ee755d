#include "textflag.h"

// func callerPC() uintptr
//
// The return address of the function that calls callerPC: with no frame
// of its own, BP is still that function's frame pointer, and the return
// address sits one word above it.
TEXT ·callerPC(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ 8(BP), AX
	MOVQ AX, ret+0(FP)
	RET
