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

// func prefetch(p *byte)
//
// Asks for the cache line at p, to read soon (PREFETCHT0): a hint, which
// never faults and changes nothing the program can see.
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func prefetchWrite(p *byte)
//
// Asks for the cache line at p, to write soon (PREFETCHW: the line comes
// owned, so the store that follows does not wait for the other caches to
// drop their copies). A hint, as prefetch.
TEXT ·prefetchWrite(SB), NOSPLIT, $0-8
	MOVQ p+0(FP), AX
	// PREFETCHW (AX), which the assembler does not know: 0F 0D /1. A
	// processor without it (older Intel ones) runs it as a NOP.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	RET

// func storeRelease(w *atomic.Uint64, v uint64)
//
// An ordinary store, which on amd64 is a release: it becomes visible after
// every store before it. Being a function the compiler cannot see into, it
// also keeps the compiler from moving the caller's stores past it.
TEXT ·storeRelease(SB), NOSPLIT, $0-16
	MOVQ w+0(FP), AX
	MOVQ v+8(FP), BX
	MOVQ BX, (AX)
	RET

// func cpuVendor() (ebx, edx, ecx uint32)
//
// CPUID leaf 0: the vendor's name, twelve bytes in EBX, EDX and ECX.
TEXT ·cpuVendor(SB), NOSPLIT, $0-12
	XORL AX, AX
	XORL CX, CX
	CPUID
	MOVL BX, ebx+0(FP)
	MOVL DX, edx+4(FP)
	MOVL CX, ecx+8(FP)
	RET
