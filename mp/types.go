package mp

import (
	"reflect"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/reduce"
)

// Float16 is an IEEE 754 half-precision number, stored as its bits.
type Float16 uint16

// BFloat16 is a bfloat16 number (the top 16 bits of a float32), stored as
// its bits.
type BFloat16 uint16

// Buffer is the set of buffer types the message calls accept: a slice of any
// Go integer, float or complex type, or of Float16 or BFloat16, including
// named slice types (host memory); or a cuda.Slice of the same element
// types (device memory, from cuda.Alloc). The element type and count come
// from the buffer, so there is no datatype argument and no per-type
// function name. An empty or nil slice is a valid buffer of zero elements.
//
// Either kind works on either backend: the NCCL backend moves device memory
// directly and stages host memory through pinned buffers; the TCP backend
// stages device memory through host memory.
type Buffer interface {
	~[]int8 | ~[]uint8 | ~[]int16 | ~[]uint16 | ~[]int32 | ~[]uint32 |
		~[]int64 | ~[]uint64 | ~[]int | ~[]uint | ~[]uintptr |
		~[]float32 | ~[]float64 | ~[]complex64 | ~[]complex128 |
		~[]Float16 | ~[]BFloat16 |
		cuda.Slice[int8] | cuda.Slice[uint8] | cuda.Slice[int16] | cuda.Slice[uint16] |
		cuda.Slice[int32] | cuda.Slice[uint32] | cuda.Slice[int64] | cuda.Slice[uint64] |
		cuda.Slice[int] | cuda.Slice[uint] | cuda.Slice[uintptr] |
		cuda.Slice[float32] | cuda.Slice[float64] | cuda.Slice[complex64] | cuda.Slice[complex128] |
		cuda.Slice[Float16] | cuda.Slice[BFloat16]
}

// DeviceBuffer is the set of device buffers: a cuda.Slice of any element
// type Buffer admits. The stream-ordered calls (IsendOnStream,
// IrecvOnStream, IallreduceOnStream and the other …OnStream collectives)
// take only these.
type DeviceBuffer interface {
	cuda.Slice[int8] | cuda.Slice[uint8] | cuda.Slice[int16] | cuda.Slice[uint16] |
		cuda.Slice[int32] | cuda.Slice[uint32] | cuda.Slice[int64] | cuda.Slice[uint64] |
		cuda.Slice[int] | cuda.Slice[uint] | cuda.Slice[uintptr] |
		cuda.Slice[float32] | cuda.Slice[float64] | cuda.Slice[complex64] | cuda.Slice[complex128] |
		cuda.Slice[Float16] | cuda.Slice[BFloat16]
}

// deviceTypes maps each cuda.Slice instantiation the Buffer constraint
// admits to its element code.
var deviceTypes = map[reflect.Type]backend.DType{}

func init() {
	add := func(t reflect.Type, elem reflect.Type) { deviceTypes[t] = elemTypes[elem] }
	add(reflect.TypeFor[cuda.Slice[int8]](), reflect.TypeFor[int8]())
	add(reflect.TypeFor[cuda.Slice[uint8]](), reflect.TypeFor[uint8]())
	add(reflect.TypeFor[cuda.Slice[int16]](), reflect.TypeFor[int16]())
	add(reflect.TypeFor[cuda.Slice[uint16]](), reflect.TypeFor[uint16]())
	add(reflect.TypeFor[cuda.Slice[int32]](), reflect.TypeFor[int32]())
	add(reflect.TypeFor[cuda.Slice[uint32]](), reflect.TypeFor[uint32]())
	add(reflect.TypeFor[cuda.Slice[int64]](), reflect.TypeFor[int64]())
	add(reflect.TypeFor[cuda.Slice[uint64]](), reflect.TypeFor[uint64]())
	add(reflect.TypeFor[cuda.Slice[int]](), reflect.TypeFor[int]())
	add(reflect.TypeFor[cuda.Slice[uint]](), reflect.TypeFor[uint]())
	add(reflect.TypeFor[cuda.Slice[uintptr]](), reflect.TypeFor[uintptr]())
	add(reflect.TypeFor[cuda.Slice[float32]](), reflect.TypeFor[float32]())
	add(reflect.TypeFor[cuda.Slice[float64]](), reflect.TypeFor[float64]())
	add(reflect.TypeFor[cuda.Slice[complex64]](), reflect.TypeFor[complex64]())
	add(reflect.TypeFor[cuda.Slice[complex128]](), reflect.TypeFor[complex128]())
	add(reflect.TypeFor[cuda.Slice[Float16]](), reflect.TypeFor[Float16]())
	add(reflect.TypeFor[cuda.Slice[BFloat16]](), reflect.TypeFor[BFloat16]())
}

// elemTypes maps each element type the Buffer constraint admits to its
// element code.
var elemTypes = map[reflect.Type]backend.DType{
	reflect.TypeFor[int8]():       backend.Int8,
	reflect.TypeFor[uint8]():      backend.Uint8,
	reflect.TypeFor[int16]():      backend.Int16,
	reflect.TypeFor[uint16]():     backend.Uint16,
	reflect.TypeFor[int32]():      backend.Int32,
	reflect.TypeFor[uint32]():     backend.Uint32,
	reflect.TypeFor[int64]():      backend.Int64,
	reflect.TypeFor[uint64]():     backend.Uint64,
	reflect.TypeFor[int]():        intCode(unsafe.Sizeof(int(0)), true),
	reflect.TypeFor[uint]():       intCode(unsafe.Sizeof(uint(0)), false),
	reflect.TypeFor[uintptr]():    intCode(unsafe.Sizeof(uintptr(0)), false),
	reflect.TypeFor[float32]():    backend.Float32,
	reflect.TypeFor[float64]():    backend.Float64,
	reflect.TypeFor[complex64]():  backend.Complex64,
	reflect.TypeFor[complex128](): backend.Complex128,
	reflect.TypeFor[Float16]():    backend.Float16,
	reflect.TypeFor[BFloat16]():   backend.BFloat16,
}

func intCode(size uintptr, signed bool) backend.DType {
	switch {
	case size == 8 && signed:
		return backend.Int64
	case size == 8:
		return backend.Uint64
	case signed:
		return backend.Int32
	default:
		return backend.Uint32
	}
}

// sliceHeader is the layout of every slice type.
type sliceHeader struct {
	data unsafe.Pointer
	len  int
	cap  int
}

// describe turns a buffer into the transport's descriptor. It does not
// allocate.
func describe[B Buffer](buf B) backend.Buffer {
	t := reflect.TypeFor[B]()
	if t.Kind() == reflect.Struct { // a cuda.Slice: device memory
		h := (*cuda.SliceHeader)(unsafe.Pointer(&buf))
		b := backend.Buffer{Count: h.Len, Type: deviceTypes[t], Mem: backend.Device, Device: int(h.Device)}
		if h.Len > 0 {
			// The device address travels in Ptr's bits; Go never dereferences
			// it, and it lies outside the Go heap (backend.Buffer's doc).
			b.Ptr = *(*unsafe.Pointer)(unsafe.Pointer(&h.Ptr))
		}
		return b
	}
	h := (*sliceHeader)(unsafe.Pointer(&buf))
	d := dtypeOf(t.Elem())
	if h.len == 0 {
		return backend.Buffer{Type: d, Mem: backend.Host}
	}
	return backend.Buffer{Ptr: h.data, Count: int64(h.len), Type: d, Mem: backend.Host}
}

// dtypeOf returns the element code of one of the admitted element types.
func dtypeOf(t reflect.Type) backend.DType {
	// The common types first, without the map.
	switch t {
	case tFloat32:
		return backend.Float32
	case tFloat64:
		return backend.Float64
	case tUint8:
		return backend.Uint8
	}
	return elemTypes[t]
}

var (
	tFloat32 = reflect.TypeFor[float32]()
	tFloat64 = reflect.TypeFor[float64]()
	tUint8   = reflect.TypeFor[uint8]()
)

// Float16Of rounds f to the nearest Float16, ties to even: values beyond
// the largest finite half (65504) become infinities, NaN stays NaN.
func Float16Of(f float32) Float16 { return Float16(reduce.F32To16(f)) }

// Float32 is h as a float32 (exact).
func (h Float16) Float32() float32 { return reduce.F16To32(uint16(h)) }

// BFloat16Of rounds f to the nearest BFloat16, ties to even; NaN stays
// NaN.
func BFloat16Of(f float32) BFloat16 { return BFloat16(reduce.F32ToBF16(f)) }

// Float32 is h as a float32 (exact).
func (h BFloat16) Float32() float32 { return reduce.BF16To32(uint16(h)) }
