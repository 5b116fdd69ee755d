package reduce

import (
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

// Combine sets dst to a op b, element by element: dst[i] = a[i] op b[i].
// The three are host buffers of dst's type, a and b of at least dst's
// count; dst may be a or b itself (the same memory, not a part of it). The
// operator must apply to the type (ReduceOp.AppliesTo); an operator that
// does not leaves dst as it was.
//
// Which operand is a matters for the bits of a floating-point result (a
// NaN's payload, a complex product): callers that must agree on the bits
// pass the value of the lower ranks as a.
func Combine(dst, a, b backend.Buffer, op backend.ReduceOp) {
	if dst.Count == 0 {
		return
	}
	if k := vector(dst, a, b, op); k > 0 {
		if k == dst.Count {
			return
		}
		dst, a, b = after(dst, k), after(a, k), after(b, k)
	}
	switch dst.Type {
	case backend.Int8:
		nums(view[int8](dst), view[int8](a), view[int8](b), op)
	case backend.Uint8:
		nums(view[uint8](dst), view[uint8](a), view[uint8](b), op)
	case backend.Int16:
		nums(view[int16](dst), view[int16](a), view[int16](b), op)
	case backend.Uint16:
		nums(view[uint16](dst), view[uint16](a), view[uint16](b), op)
	case backend.Int32:
		nums(view[int32](dst), view[int32](a), view[int32](b), op)
	case backend.Uint32:
		nums(view[uint32](dst), view[uint32](a), view[uint32](b), op)
	case backend.Int64:
		nums(view[int64](dst), view[int64](a), view[int64](b), op)
	case backend.Uint64:
		nums(view[uint64](dst), view[uint64](a), view[uint64](b), op)
	case backend.Float32:
		nums(view[float32](dst), view[float32](a), view[float32](b), op)
	case backend.Float64:
		nums(view[float64](dst), view[float64](a), view[float64](b), op)
	case backend.Float16:
		halves(view[uint16](dst), view[uint16](a), view[uint16](b), op, F16To32, F32To16)
	case backend.BFloat16:
		halves(view[uint16](dst), view[uint16](a), view[uint16](b), op, BF16To32, F32ToBF16)
	case backend.Complex64:
		complexes(view[complex64](dst), view[complex64](a), view[complex64](b), op)
	case backend.Complex128:
		complexes(view[complex128](dst), view[complex128](a), view[complex128](b), op)
	}
}

// after is b past its first k elements.
func after(b backend.Buffer, k int64) backend.Buffer {
	b.Ptr = unsafe.Add(b.Ptr, k*int64(b.Type.Size()))
	b.Count -= k
	return b
}

// view is host buffer b as a slice of T.
func view[T any](b backend.Buffer) []T {
	return unsafe.Slice((*T)(b.Ptr), b.Count)
}

// number is the element types nums combines.
type number interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// nums combines integers (wrapping around) and floats (min and max of a
// NaN are NaN).
func nums[T number](dst, a, b []T, op backend.ReduceOp) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case backend.Sum:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case backend.Prod:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	case backend.Min:
		for i := range dst {
			dst[i] = min(a[i], b[i])
		}
	case backend.Max:
		for i := range dst {
			dst[i] = max(a[i], b[i])
		}
	}
}

// complexes combines complex numbers: Sum and Prod only.
func complexes[T ~complex64 | ~complex128](dst, a, b []T, op backend.ReduceOp) {
	a, b = a[:len(dst)], b[:len(dst)]
	switch op {
	case backend.Sum:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case backend.Prod:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	}
}

// halves combines 16-bit floats in float32, rounding each result.
func halves(dst, a, b []uint16, op backend.ReduceOp, toF func(uint16) float32, fromF func(float32) uint16) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		x, y := toF(a[i]), toF(b[i])
		var r float32
		switch op {
		case backend.Sum:
			r = x + y
		case backend.Prod:
			r = x * y
		case backend.Min:
			r = min(x, y)
		case backend.Max:
			r = max(x, y)
		default:
			continue
		}
		dst[i] = fromF(r)
	}
}
