package work

import (
	"errors"
	"fmt"

	"github.com/courier-mp/courier/cuda"
)

// PTX is the GPU's matrix multiply, sgemm(c, a, b, n): c = a×b for n×n
// row-major float32 matrices in device memory. It is the plain form, one
// thread per element of c: the thread of column j (x) and row i (y) walks
// row i of a and column j of b, adding a[i][k]·b[k][j] with fused
// multiply-adds, and stores the sum; threads outside the matrix do
// nothing. Written for .target sm_70, which the driver compiles for any
// GPU of compute capability 7.0 or above (an H200 is 9.0).
const PTX = `
.version 7.0
.target sm_70
.address_size 64

.visible .entry sgemm(
	.param .u64 sgemm_c,
	.param .u64 sgemm_a,
	.param .u64 sgemm_b,
	.param .u32 sgemm_n
)
{
	.reg .pred %p<4>;
	.reg .b32 %r<12>;
	.reg .f32 %f<4>;
	.reg .b64 %rd<16>;

	ld.param.u64 %rd1, [sgemm_c];
	ld.param.u64 %rd2, [sgemm_a];
	ld.param.u64 %rd3, [sgemm_b];
	ld.param.u32 %r1, [sgemm_n];

	// j = ctaid.x*ntid.x + tid.x, i = ctaid.y*ntid.y + tid.y
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	mov.u32 %r6, %ctaid.y;
	mov.u32 %r7, %ntid.y;
	mov.u32 %r8, %tid.y;
	mad.lo.u32 %r9, %r6, %r7, %r8;
	setp.ge.u32 %p1, %r5, %r1;
	setp.ge.u32 %p2, %r9, %r1;
	or.pred %p3, %p1, %p2;
	@%p3 bra DONE;

	cvta.to.global.u64 %rd1, %rd1;
	cvta.to.global.u64 %rd2, %rd2;
	cvta.to.global.u64 %rd3, %rd3;
	mul.wide.u32 %rd4, %r9, %r1;     // i*n
	shl.b64 %rd4, %rd4, 2;           // its offset in bytes: the start of row i
	mul.wide.u32 %rd5, %r5, 4;       // j*4
	mul.wide.u32 %rd6, %r1, 4;       // n*4: from b[k][j] to b[k+1][j]
	add.s64 %rd7, %rd2, %rd4;        // &a[i][0]
	add.s64 %rd8, %rd3, %rd5;        // &b[0][j]
	mov.f32 %f1, 0f00000000;
	mov.u32 %r10, 0;                 // k
LOOP:
	ld.global.f32 %f2, [%rd7];
	ld.global.f32 %f3, [%rd8];
	fma.rn.f32 %f1, %f2, %f3, %f1;
	add.s64 %rd7, %rd7, 4;
	add.s64 %rd8, %rd8, %rd6;
	add.u32 %r10, %r10, 1;
	setp.lt.u32 %p1, %r10, %r1;
	@%p1 bra LOOP;

	add.s64 %rd9, %rd1, %rd4;
	add.s64 %rd9, %rd9, %rd5;        // &c[i][j]
	st.global.f32 [%rd9], %f1;
DONE:
	ret;
}
`

// kernelName is the .entry of PTX.
const kernelName = "sgemm"

// blockSide is the side of a block of threads: 16×16 = 256 threads.
const blockSide = 16

// Kernel is PTX loaded on one GPU.
type Kernel struct {
	m *cuda.Module
	f *cuda.Function
}

// LoadKernel compiles PTX for device d and loads it. Unload it when done.
func LoadKernel(d cuda.Device) (*Kernel, error) {
	m, err := cuda.LoadPTX(d, PTX)
	if err != nil {
		return nil, fmt.Errorf("loading the sgemm kernel: %w", err)
	}
	f, err := m.Function(kernelName)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("the sgemm kernel: %w", err), m.Unload())
	}
	return &Kernel{m: m, f: f}, nil
}

// Multiply queues c = a×b (n×n, row-major; each slice holds at least n×n
// elements) on stream s and returns at once: the GPU runs it after the
// work queued on s before, and c holds the product for the work queued
// on s after (or once s.Synchronize returns).
func (k *Kernel) Multiply(c, a, b cuda.Slice[float32], n int, s *cuda.Stream) error {
	if n < 1 || int64(n)*int64(n) > int64(^uint32(0)) {
		return fmt.Errorf("matrix order %d: the kernel takes 1 to 65535", n)
	}
	for _, m := range []struct {
		name string
		len  int64
	}{{"c", c.Len()}, {"a", a.Len()}, {"b", b.Len()}} {
		if m.len < int64(n)*int64(n) {
			return fmt.Errorf("matrix %s holds %d elements, fewer than %d×%d", m.name, m.len, n, n)
		}
	}
	blocks := uint32((n + blockSide - 1) / blockSide)
	return k.f.Launch([3]uint32{blocks, blocks, 1}, [3]uint32{blockSide, blockSide, 1}, 0, s, launchArgs(c, a, b, n)...)
}

// launchArgs are the kernel's parameters in PTX's order, of the types
// cuda.Function.Launch maps to them (a Slice to .u64, uint32 to .u32).
func launchArgs(c, a, b cuda.Slice[float32], n int) []any {
	return []any{c, a, b, uint32(n)}
}

// Unload unloads the kernel's module; kernels already queued still run.
func (k *Kernel) Unload() error {
	if k == nil {
		return nil
	}
	return k.m.Unload()
}
