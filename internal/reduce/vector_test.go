package reduce

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/stretchr/testify/require"
)

// TestVectorMatchesScalar: with the vector kernels and without, every
// operator on every type gives the same bits, for lengths around the
// kernels' 32 and 128 bytes, at addresses off alignment, into a third
// buffer and in place on either operand; the operands hold random bits
// (NaNs among them) and pairs of NaNs with different payloads, where the
// result keeps the first operand's.
func TestVectorMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lengths := []int{1, 7, 31, 32, 33, 100, 127, 128, 129, 1000, 4099}
	for typ := backend.Int8; typ <= backend.Complex128; typ++ {
		size := typ.Size()
		for op := backend.Sum; op <= backend.Max; op++ {
			if !op.AppliesTo(typ) {
				continue
			}
			for _, n := range lengths {
				for _, skew := range []int{0, size} { // off the 32-byte alignment
					a := randomBytes(rng, n*size+skew)[skew:]
					b := randomBytes(rng, n*size+skew)[skew:]
					nanPairs(a, b, typ)
					for _, in := range []string{"apart", "a", "b"} {
						want := run(a, b, typ, op, in, false)
						got := run(a, b, typ, op, in, true)
						if !bytes.Equal(got, want) {
							t.Fatalf("%v %v, %d elements, %d bytes off, dst %s: the vector kernels' bits differ from the scalar code's", typ, op, n, skew, in)
						}
					}
				}
			}
		}
	}
}

// TestVectorRuns: on a machine with the vector kernels, a float32 Sum
// uses them, up to the tail under 32 bytes (so the test above compares
// two different codes).
func TestVectorRuns(t *testing.T) {
	if !vectors {
		t.Skipf("no vector kernels on %s here", runtime.GOARCH)
	}
	a, b, d := make([]float32, 19), make([]float32, 19), make([]float32, 19)
	require.Equal(t, int64(16), vector(buf(d, backend.Float32), buf(a, backend.Float32), buf(b, backend.Float32), backend.Sum))
	require.Zero(t, vector(buf(d, backend.Float32), buf(a, backend.Float32), buf(b, backend.Float32), backend.Min), "float Min stays scalar")
	require.Zero(t, vector(buf(d[:7], backend.Float32), buf(a, backend.Float32), buf(b, backend.Float32), backend.Sum), "under 32 bytes")
}

// run combines copies of a and b (into a third buffer, or in place into
// a copy of a or of b), with or without the vector kernels, and returns
// the result's bytes.
func run(a, b []byte, typ backend.DType, op backend.ReduceOp, in string, vec bool) []byte {
	defer func(v bool) { vectors = v }(vectors)
	vectors = vectors && vec
	ac, bc := append([]byte(nil), a...), append([]byte(nil), b...)
	n := int64(len(a) / typ.Size())
	bufOf := func(p []byte) backend.Buffer {
		return backend.Buffer{Ptr: unsafe.Pointer(unsafe.SliceData(p)), Count: n, Type: typ, Mem: backend.Host}
	}
	dst := make([]byte, len(a))
	switch in {
	case "a":
		dst = ac
	case "b":
		dst = bc
	}
	Combine(bufOf(dst), bufOf(ac), bufOf(bc), op)
	return dst
}

// randomBytes is n random bytes, in memory of their own.
func randomBytes(rng *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	return p
}

// nanPairs puts, for the float types, NaNs with different payloads in
// both operands at every fifth element.
func nanPairs(a, b []byte, typ backend.DType) {
	switch typ {
	case backend.Float32:
		for i := 0; i+4 <= len(a); i += 20 {
			binary.LittleEndian.PutUint32(a[i:], math.Float32bits(float32(math.NaN()))|1)
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(math.NaN()))|2)
		}
	case backend.Float64:
		for i := 0; i+8 <= len(a); i += 40 {
			binary.LittleEndian.PutUint64(a[i:], math.Float64bits(math.NaN())|1)
			binary.LittleEndian.PutUint64(b[i:], math.Float64bits(math.NaN())|2)
		}
	}
}

// BenchmarkCombine: a 4 MiB float32 Sum into a third buffer, with the
// vector kernels and without.
func BenchmarkCombine(b *testing.B) {
	const n = 1 << 20
	x, y, d := make([]float32, n), make([]float32, n), make([]float32, n)
	for _, vec := range []bool{true, false} {
		name := "scalar"
		if vec {
			name = "vector"
		}
		b.Run(name, func(b *testing.B) {
			defer func(v bool) { vectors = v }(vectors)
			vectors = vectors && vec
			b.SetBytes(4 * n)
			for b.Loop() {
				Combine(buf(d, backend.Float32), buf(x, backend.Float32), buf(y, backend.Float32), backend.Sum)
			}
		})
	}
}
