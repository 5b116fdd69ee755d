package nccl

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/devreduce"
	"github.com/courier-mp/courier/internal/reduce"
)

// The combining kernels of internal/devreduce (package mp's collectives
// of device buffers on the device combine with them) against the host's,
// internal/reduce: every element type and operator, on a GPU
// (TestGPUCombineKernels) and on the fake GPU, whose C twins of the
// kernels run the same check (TestFakeGPUChildCombineKernels).

// splitmix is a step of the SplitMix64 generator: the operands' bits.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	z := (x ^ x>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// The values every float operand pair is made of at its start (each
// with each): zeros of both signs, ones, infinities, NaNs with payloads
// (quiet of both signs, and a signaling one), the smallest subnormal,
// the largest finite value, the smallest normal.
var (
	special32 = []uint32{0, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000, 0x7fc00001, 0xffc00002, 0x7f800003, 1, 0x7f7fffff, 0x00800000}
	special64 = []uint64{0, 1 << 63, 0x3ff0000000000000, 0xbff0000000000000, 0x7ff0000000000000, 0xfff0000000000000,
		0x7ff8000000000001, 0xfff8000000000002, 0x7ff0000000000003, 1, 0x7fefffffffffffff, 0x0010000000000000}
)

// operand is n elements of type t for operand k (1 or 2) of the check of
// (t, op): random bits, and for float32 and float64 (complex numbers'
// parts too) two words in three in [1, 2) or (−2, −1], so that sums and
// products round, after the special pairs. Float16 and BFloat16 are
// random bits: every kind of value among them.
func operand(t backend.DType, op backend.ReduceOp, k, n int) []byte {
	seed := uint64(((int(t)-1)*16+int(op)-1)*4 + k)
	out := make([]byte, n*t.Size())
	word := func(j int) uint64 { return splitmix(seed<<32 + uint64(j)) }
	pick := func(j, s int) int {
		if k == 1 {
			return j / s
		}
		return j % s
	}
	switch t {
	case backend.Float32, backend.Complex64:
		s := len(special32)
		for j := range len(out) / 4 {
			v := uint32(word(j))
			if j%3 != 0 {
				v = v&0x807fffff | 0x3f800000
			}
			if j < s*s {
				v = special32[pick(j, s)]
			}
			binary.LittleEndian.PutUint32(out[4*j:], v)
		}
	case backend.Float64, backend.Complex128:
		s := len(special64)
		for j := range len(out) / 8 {
			v := word(j)
			if j%3 != 0 {
				v = v&0x800fffffffffffff | 0x3ff0000000000000
			}
			if j < s*s {
				v = special64[pick(j, s)]
			}
			binary.LittleEndian.PutUint64(out[8*j:], v)
		}
	default:
		var b [8]byte
		for i := range n {
			binary.LittleEndian.PutUint64(b[:], word(i))
			copy(out[i*t.Size():], b[:t.Size()])
		}
	}
	return out
}

// elemBuf describes host bytes b as elements of type t.
func elemBuf(b []byte, t backend.DType) backend.Buffer {
	return backend.Buffer{Ptr: unsafe.Pointer(unsafe.SliceData(b)), Count: int64(len(b) / t.Size()), Type: t, Mem: backend.Host}
}

// sliceBuf describes device memory s as elements of type t.
func sliceBuf(s cuda.Slice[byte], t backend.DType) backend.Buffer {
	b := backend.Buffer{Count: s.Len() / int64(t.Size()), Type: t, Mem: backend.Device, Device: int(s.Device())}
	p := s.Ptr()
	b.Ptr = *(*unsafe.Pointer)(unsafe.Pointer(&p)) // the device address in Ptr's bits
	return b
}

// isNaN reports whether the element b of type t is (or, for a complex
// number, has a part that is) a NaN.
func isNaN(t backend.DType, b []byte) bool {
	switch t {
	case backend.Float16:
		v := binary.LittleEndian.Uint16(b)
		return v&0x7c00 == 0x7c00 && v&0x3ff != 0
	case backend.BFloat16:
		v := binary.LittleEndian.Uint16(b)
		return v&0x7f80 == 0x7f80 && v&0x7f != 0
	case backend.Float32:
		return math.IsNaN(float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
	case backend.Float64:
		return math.IsNaN(math.Float64frombits(binary.LittleEndian.Uint64(b)))
	case backend.Complex64:
		return isNaN(backend.Float32, b[:4]) || isNaN(backend.Float32, b[4:])
	case backend.Complex128:
		return isNaN(backend.Float64, b[:8]) || isNaN(backend.Float64, b[8:])
	}
	return false
}

// hostFuses reports whether this build's host arithmetic may differ from
// the kernels' in ways the check allows (devreduce's doc): Go on arm64,
// or on amd64 from GOAMD64=v3, fuses a multiply and an add (the last bit
// of a complex product), and min and max pick NaNs otherwise off amd64.
func hostFuses() bool {
	if runtime.GOARCH != "amd64" {
		return true
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "GOAMD64" {
				return s.Value != "v1" && s.Value != "v2"
			}
		}
	}
	return false
}

// checkCombineKernels runs every kernel on device d over n elements, out
// of place and in place (dst = a), and compares each result with
// internal/reduce's, element by element: the same bits, but where the
// host's is a NaN that Sum or Prod made, where any NaN will do (a GPU
// makes its own). It also launches one kernel over more elements than
// Combine's largest grid has threads, so that its loop runs.
func checkCombineKernels(t *testing.T, d cuda.Device, n int) {
	s, err := cuda.NewStream(d)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	relaxed := hostFuses()
	for ty := backend.Int8; ty <= backend.Complex128; ty++ {
		for _, op := range []backend.ReduceOp{backend.Sum, backend.Prod, backend.Min, backend.Max} {
			if !op.AppliesTo(ty) {
				if err := devreduce.Combine(backend.Buffer{Type: ty, Mem: backend.Device}, backend.Buffer{Type: ty}, backend.Buffer{Type: ty}, op, s); !isInvalid(err) {
					t.Errorf("%v %v: %v, want ErrInvalid", ty, op, err)
				}
				continue
			}
			a, b := operand(ty, op, 1, n), operand(ty, op, 2, n)
			want := make([]byte, len(a))
			reduce.Combine(elemBuf(want, ty), elemBuf(a, ty), elemBuf(b, ty), op)
			got, inPlace := runKernel(t, s, ty, op, a, b)
			for name, g := range map[string][]byte{"out of place": got, "in place": inPlace} {
				bad := 0
				for i := range n {
					w, x := want[i*ty.Size():(i+1)*ty.Size()], g[i*ty.Size():(i+1)*ty.Size()]
					if bytes.Equal(w, x) {
						continue
					}
					arith := op == backend.Sum || op == backend.Prod
					if isNaN(ty, w) && isNaN(ty, x) && (arith || relaxed) {
						continue
					}
					if relaxed && op == backend.Prod && (ty == backend.Complex64 || ty == backend.Complex128) {
						continue
					}
					if bad++; bad <= 3 {
						t.Errorf("%v %v %s, element %d: %x op %x = %x, the host's is %x", ty, op, name, i,
							a[i*ty.Size():(i+1)*ty.Size()], b[i*ty.Size():(i+1)*ty.Size()], x, w)
					}
				}
				if bad > 3 {
					t.Errorf("%v %v %s: %d elements differ", ty, op, name, bad)
				}
			}
		}
	}
	// The loop: more elements than 8192 blocks of 256 threads.
	const big = 1<<21 + 1001
	a, b := operand(backend.Float32, backend.Sum, 1, big), operand(backend.Float32, backend.Sum, 2, big)
	want := make([]byte, len(a))
	reduce.Combine(elemBuf(want, backend.Float32), elemBuf(a, backend.Float32), elemBuf(b, backend.Float32), backend.Sum)
	got, _ := runKernel(t, s, backend.Float32, backend.Sum, a, b)
	for i := 0; i < big; i++ {
		w, x := want[4*i:4*i+4], got[4*i:4*i+4]
		if !bytes.Equal(w, x) && !(isNaN(backend.Float32, w) && isNaN(backend.Float32, x)) {
			t.Errorf("float32 sum of %d elements: element %d is %x, the host's %x", big, i, x, w)
			break
		}
	}
}

// isInvalid reports whether err matches backend.ErrInvalid.
func isInvalid(err error) bool { return errors.Is(err, backend.ErrInvalid) }

// runKernel combines a and b (elements of type ty) with op on the device
// of s, into a third buffer and in place into a copy of a, and returns
// both results.
func runKernel(t *testing.T, s *cuda.Stream, ty backend.DType, op backend.ReduceOp, a, b []byte) (out, inPlace []byte) {
	t.Helper()
	n := int64(len(a))
	var bufs [4]cuda.Slice[byte]
	for i := range bufs {
		var err error
		if bufs[i], err = cuda.Alloc[byte](s.Device(), n); err != nil {
			t.Fatal(err)
		}
		defer bufs[i].Free()
	}
	da, db, dd, di := bufs[0], bufs[1], bufs[2], bufs[3]
	for _, c := range []struct {
		dst cuda.Slice[byte]
		src []byte
	}{{da, a}, {db, b}, {di, a}} {
		if err := cuda.CopyToDevice(c.dst, c.src); err != nil {
			t.Fatal(err)
		}
	}
	if err := devreduce.Combine(sliceBuf(dd, ty), sliceBuf(da, ty), sliceBuf(db, ty), op, s); err != nil {
		t.Fatalf("%v %v: %v", ty, op, err)
	}
	if err := devreduce.Combine(sliceBuf(di, ty), sliceBuf(di, ty), sliceBuf(db, ty), op, s); err != nil {
		t.Fatalf("%v %v in place: %v", ty, op, err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("%v %v: %v", ty, op, err)
	}
	out, inPlace = make([]byte, n), make([]byte, n)
	if err := cuda.CopyToHost(out, dd); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyToHost(inPlace, di); err != nil {
		t.Fatal(err)
	}
	return out, inPlace
}

// TestGPUCombineKernels runs every kernel of internal/devreduce on GPU 0
// against internal/reduce (one process; COURIER_REQUIRE_GPU=1 makes it
// fail where it cannot run).
func TestGPUCombineKernels(t *testing.T) {
	requireGPU(t)
	checkCombineKernels(t, 0, 20000)
}
