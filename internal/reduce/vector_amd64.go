package reduce

import (
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"golang.org/x/sys/cpu"
)

// On amd64 with AVX2, the element-wise kernels run 32 bytes an
// instruction (vector_amd64.s): Sum and Prod of floats, Sum of every
// integer type, Prod of 16- and 32-bit integers, Min and Max of integers
// up to 32 bits. The rest (Min and Max of floats, whose NaN and signed
// zero rules the instructions do not follow; 64-bit integer Prod, Min and
// Max, which AVX2 lacks; the 16-bit floats, combined in float32) stay
// scalar, as does the tail of every buffer (under 32 bytes). The results
// are the scalar code's to the bit: each element is one operation either
// way, with a as the first operand.
//
// A scalar float32 Sum moved 4.4 GB/s on the 2-core AMD machine where a
// 16 MiB Allreduce on 4 ranks over TCP spent 12-15 % of its time in it
// (docs/benchmarks.md, "Vector kernels for the reductions").

//go:noescape
func addF32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func addF64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mulF32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mulF64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func add8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func add16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func add32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func add64(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mul16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func mul32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minI8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxI8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minU8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxU8(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minI16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxI16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minU16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxU16(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minI32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxI32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func minU32(dst, a, b unsafe.Pointer, n int)

//go:noescape
func maxU32(dst, a, b unsafe.Pointer, n int)

// vectors is whether the kernels may run (a variable: the tests turn it
// off to compare with the scalar code).
var vectors = cpu.X86.HasAVX2

// kernel is a vector kernel.
type kernel func(dst, a, b unsafe.Pointer, n int)

// kernels holds the vector kernel of each operator (by Sum, Prod, Min,
// Max: the operators' order, from Sum) for each element type, nil where
// there is none.
var kernels = func() (k [backend.Complex128 + 1][4]kernel) {
	set := func(t backend.DType, sum, prod, mn, mx kernel) { k[t] = [4]kernel{sum, prod, mn, mx} }
	set(backend.Int8, add8, nil, minI8, maxI8)
	set(backend.Uint8, add8, nil, minU8, maxU8)
	set(backend.Int16, add16, mul16, minI16, maxI16)
	set(backend.Uint16, add16, mul16, minU16, maxU16)
	set(backend.Int32, add32, mul32, minI32, maxI32)
	set(backend.Uint32, add32, mul32, minU32, maxU32)
	set(backend.Int64, add64, nil, nil, nil)
	set(backend.Uint64, add64, nil, nil, nil)
	set(backend.Float32, addF32, mulF32, nil, nil)
	set(backend.Float64, addF64, mulF64, nil, nil)
	return k
}()

// vector combines the longest front of the buffers that is a multiple of
// 32 bytes, where a kernel applies, and returns the elements it did.
func vector(dst, a, b backend.Buffer, op backend.ReduceOp) int64 {
	if !vectors || int(dst.Type) >= len(kernels) || !op.Valid() {
		return 0
	}
	k := kernels[dst.Type][op-backend.Sum]
	n := dst.Len() &^ 31
	if k == nil || n == 0 {
		return 0
	}
	k(dst.Ptr, a.Ptr, b.Ptr, int(n))
	return n / int64(dst.Type.Size())
}
