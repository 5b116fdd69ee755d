package reduce

import (
	"math"
	"testing"
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

func buf[T any](v []T, t backend.DType) backend.Buffer {
	return backend.Buffer{Ptr: unsafe.Pointer(unsafe.SliceData(v)), Count: int64(len(v)), Type: t, Mem: backend.Host}
}

// TestCombine: each operator on integers (wrapping), floats (NaN), complex
// numbers and the 16-bit floats (combined in float32, rounded to nearest
// even), into a third buffer and in place.
func TestCombine(t *testing.T) {
	a, b := []int8{127, -3, 5}, []int8{1, 4, -6}
	d := make([]int8, 3)
	Combine(buf(d, backend.Int8), buf(a, backend.Int8), buf(b, backend.Int8), backend.Sum)
	if d[0] != -128 || d[1] != 1 || d[2] != -1 {
		t.Errorf("int8 sum: %v", d)
	}
	Combine(buf(a, backend.Int8), buf(a, backend.Int8), buf(b, backend.Int8), backend.Min)
	if a[0] != 1 || a[1] != -3 || a[2] != -6 {
		t.Errorf("int8 min in place: %v", a)
	}
	nan := float32(math.NaN())
	x, y := []float32{1, nan}, []float32{2, 3}
	f := make([]float32, 2)
	Combine(buf(f, backend.Float32), buf(x, backend.Float32), buf(y, backend.Float32), backend.Max)
	if f[0] != 2 || !math.IsNaN(float64(f[1])) {
		t.Errorf("float32 max: %v", f)
	}
	c1, c2 := []complex128{1 + 2i}, []complex128{3 - 1i}
	c := make([]complex128, 1)
	Combine(buf(c, backend.Complex128), buf(c1, backend.Complex128), buf(c2, backend.Complex128), backend.Prod)
	if c[0] != 5+5i {
		t.Errorf("complex128 prod: %v", c)
	}
	// 2049 is not a half: 2048 + 1 rounds to even (2048), 2048 + 3 to 2052.
	h1 := []uint16{F32To16(2048), F32To16(2048)}
	h2 := []uint16{F32To16(1), F32To16(3)}
	h := make([]uint16, 2)
	Combine(buf(h, backend.Float16), buf(h1, backend.Float16), buf(h2, backend.Float16), backend.Sum)
	if F16To32(h[0]) != 2048 || F16To32(h[1]) != 2052 {
		t.Errorf("Float16 sum: %v %v", F16To32(h[0]), F16To32(h[1]))
	}
	bf := []uint16{F32ToBF16(1.5)}
	Combine(buf(bf, backend.BFloat16), buf(bf, backend.BFloat16), buf(bf, backend.BFloat16), backend.Prod)
	if BF16To32(bf[0]) != 2.25 {
		t.Errorf("BFloat16 prod in place: %v", BF16To32(bf[0]))
	}
	// An empty destination, and an operator that does not apply, leave
	// everything as it was.
	Combine(backend.Buffer{Type: backend.Float64}, backend.Buffer{}, backend.Buffer{}, backend.Sum)
	Combine(buf(c, backend.Complex128), buf(c1, backend.Complex128), buf(c2, backend.Complex128), backend.Min)
	if c[0] != 5+5i {
		t.Errorf("complex128 min changed the destination: %v", c)
	}
}

// TestCombineAllocs: combining allocates nothing.
func TestCombineAllocs(t *testing.T) {
	a, d := make([]uint16, 64), make([]uint16, 64)
	if n := testing.AllocsPerRun(100, func() {
		Combine(buf(d, backend.BFloat16), buf(a, backend.BFloat16), buf(a, backend.BFloat16), backend.Sum)
	}); n != 0 {
		t.Errorf("%v allocations per call", n)
	}
}
