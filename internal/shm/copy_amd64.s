#include "textflag.h"

// func copyStream(dst, src *byte, n uintptr)
//
// Copies n bytes (a multiple of 128) from src to dst, which is 32-byte
// aligned, with non-temporal stores: the destination's lines are written
// whole, without being read first, and do not stay in this core's cache.
// It ends with SFENCE, so the stores are ordered before any later store
// (the release that publishes the copy).
TEXT ·copyStream(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $7, CX
	JZ   done
loop:
	PREFETCHT0 512(SI)
	PREFETCHT0 576(SI)
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VMOVNTDQ Y0, 0(DI)
	VMOVNTDQ Y1, 32(DI)
	VMOVNTDQ Y2, 64(DI)
	VMOVNTDQ Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop
done:
	SFENCE
	VZEROUPPER
	RET
