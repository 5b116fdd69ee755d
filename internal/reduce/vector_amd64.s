#include "textflag.h"

// The AVX2 kernels of vector_amd64.go. Each is
//
//	func k(dst, a, b unsafe.Pointer, n int)
//
// and sets dst = a op b over n bytes, n a multiple of 32: 128 bytes a
// turn while that many are left, then 32. a is each instruction's first
// source, as in the scalar code (a float NaN in both operands keeps a's
// payload). dst may be a or b (each block is loaded before it is stored).

#define KERNEL(NAME, INSTR) \
TEXT NAME(SB), NOSPLIT, $0-32; \
	MOVQ	dst+0(FP), DI; \
	MOVQ	a+8(FP), SI; \
	MOVQ	b+16(FP), DX; \
	MOVQ	n+24(FP), CX; \
	XORQ	AX, AX; \
	CMPQ	CX, $128; \
	JB	tail; \
big: \
	VMOVDQU	(SI)(AX*1), Y0; \
	VMOVDQU	32(SI)(AX*1), Y1; \
	VMOVDQU	64(SI)(AX*1), Y2; \
	VMOVDQU	96(SI)(AX*1), Y3; \
	INSTR	(DX)(AX*1), Y0, Y0; \
	INSTR	32(DX)(AX*1), Y1, Y1; \
	INSTR	64(DX)(AX*1), Y2, Y2; \
	INSTR	96(DX)(AX*1), Y3, Y3; \
	VMOVDQU	Y0, (DI)(AX*1); \
	VMOVDQU	Y1, 32(DI)(AX*1); \
	VMOVDQU	Y2, 64(DI)(AX*1); \
	VMOVDQU	Y3, 96(DI)(AX*1); \
	ADDQ	$128, AX; \
	LEAQ	128(AX), BX; \
	CMPQ	BX, CX; \
	JBE	big; \
tail: \
	LEAQ	32(AX), BX; \
	CMPQ	BX, CX; \
	JA	done; \
	VMOVDQU	(SI)(AX*1), Y0; \
	INSTR	(DX)(AX*1), Y0, Y0; \
	VMOVDQU	Y0, (DI)(AX*1); \
	ADDQ	$32, AX; \
	JMP	tail; \
done: \
	VZEROUPPER; \
	RET

KERNEL(·addF32, VADDPS)
KERNEL(·addF64, VADDPD)
KERNEL(·mulF32, VMULPS)
KERNEL(·mulF64, VMULPD)
KERNEL(·add8, VPADDB)
KERNEL(·add16, VPADDW)
KERNEL(·add32, VPADDD)
KERNEL(·add64, VPADDQ)
KERNEL(·mul16, VPMULLW)
KERNEL(·mul32, VPMULLD)
KERNEL(·minI8, VPMINSB)
KERNEL(·maxI8, VPMAXSB)
KERNEL(·minU8, VPMINUB)
KERNEL(·maxU8, VPMAXUB)
KERNEL(·minI16, VPMINSW)
KERNEL(·maxI16, VPMAXSW)
KERNEL(·minU16, VPMINUW)
KERNEL(·maxU16, VPMAXUW)
KERNEL(·minI32, VPMINSD)
KERNEL(·maxI32, VPMAXSD)
KERNEL(·minU32, VPMINUD)
KERNEL(·maxU32, VPMAXUD)
