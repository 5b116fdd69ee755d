package mp

import (
	"math"
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

// combine sets dst to a op b (host memory of one shape), element by
// element: dst[i] = a[i] op b[i]. dst may be a or b itself (the same
// memory, not a part of it). The operator applies to the type (checkColl
// made sure). Which operand is a matters for the bits of a floating-point
// result (a NaN's payload, a complex product), so every algorithm passes
// the value of the lower ranks as a: ranks that combine the same two
// values get the same bits.
func combine(dst, a, b backend.Buffer, op Op) {
	if dst.Count == 0 {
		return
	}
	switch dst.Type {
	case backend.Int8:
		combineNums(view[int8](dst), view[int8](a), view[int8](b), op)
	case backend.Uint8:
		combineNums(view[uint8](dst), view[uint8](a), view[uint8](b), op)
	case backend.Int16:
		combineNums(view[int16](dst), view[int16](a), view[int16](b), op)
	case backend.Uint16:
		combineNums(view[uint16](dst), view[uint16](a), view[uint16](b), op)
	case backend.Int32:
		combineNums(view[int32](dst), view[int32](a), view[int32](b), op)
	case backend.Uint32:
		combineNums(view[uint32](dst), view[uint32](a), view[uint32](b), op)
	case backend.Int64:
		combineNums(view[int64](dst), view[int64](a), view[int64](b), op)
	case backend.Uint64:
		combineNums(view[uint64](dst), view[uint64](a), view[uint64](b), op)
	case backend.Float32:
		combineNums(view[float32](dst), view[float32](a), view[float32](b), op)
	case backend.Float64:
		combineNums(view[float64](dst), view[float64](a), view[float64](b), op)
	case backend.Float16:
		combineHalves(view[uint16](dst), view[uint16](a), view[uint16](b), op, f16to32, f32to16)
	case backend.BFloat16:
		combineHalves(view[uint16](dst), view[uint16](a), view[uint16](b), op, bf16to32, f32tobf16)
	case backend.Complex64:
		combineComplex(view[complex64](dst), view[complex64](a), view[complex64](b), op)
	case backend.Complex128:
		combineComplex(view[complex128](dst), view[complex128](a), view[complex128](b), op)
	}
}

// view is host buffer b as a slice of T.
func view[T any](b backend.Buffer) []T {
	return unsafe.Slice((*T)(b.Ptr), b.Count)
}

// number is the element types combineNums combines.
type number interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// combineNums combines integers (wrapping around) and floats (min and max
// of a NaN are NaN).
func combineNums[T number](dst, a, b []T, op Op) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case Sum:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case Prod:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	case Min:
		for i := range dst {
			dst[i] = min(a[i], b[i])
		}
	case Max:
		for i := range dst {
			dst[i] = max(a[i], b[i])
		}
	}
}

func combineComplex[T ~complex64 | ~complex128](dst, a, b []T, op Op) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case Sum:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case Prod:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	}
}

// combineHalves combines 16-bit floats in float32, rounding each result.
func combineHalves(dst, a, b []uint16, op Op, toF func(uint16) float32, fromF func(float32) uint16) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		x, y := toF(a[i]), toF(b[i])
		var r float32
		switch op {
		case Sum:
			r = x + y
		case Prod:
			r = x * y
		case Min:
			r = min(x, y)
		case Max:
			r = max(x, y)
		}
		dst[i] = fromF(r)
	}
}

// f16to32 widens an IEEE 754 half to float32 (exactly).
func f16to32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // infinity or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0: // zero or subnormal: man × 2^-24
		f := float32(man) / (1 << 24)
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// f32to16 rounds a float32 to the nearest IEEE 754 half, ties to even;
// too large a value becomes infinity, a NaN a quiet NaN.
func f32to16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // the half's biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e >= 1 { // normal: drop 13 bits, rounding (a carry may reach infinity, rightly)
		h := uint32(e)<<10 | man>>13
		if rem := man & 0x1fff; rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
			h++
		}
		return sign | uint16(h)
	}
	// Subnormal half: m × 2^-24, with m = (1.man × 2^(exp−127)) × 2^24.
	shift := uint32(14 - e)
	if shift > 24 {
		return sign
	}
	full := man | 0x800000
	m := full >> shift
	half := uint32(1) << (shift - 1)
	if rem := full & (1<<shift - 1); rem > half || rem == half && m&1 == 1 {
		m++
	}
	return sign | uint16(m)
}

// bf16to32 widens a bfloat16 to float32 (exactly).
func bf16to32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32tobf16 rounds a float32 to the nearest bfloat16, ties to even; a NaN
// stays a (quiet) NaN.
func f32tobf16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}
