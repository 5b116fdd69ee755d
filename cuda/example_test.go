package cuda_test

import (
	"fmt"

	"github.com/courier-mp/courier/cuda"
)

// Device memory, a blocking round trip, and an overlapped one through
// pinned memory on a stream. (Compiled, not run: it needs a GPU.)
func Example() {
	if err := cuda.Init(); err != nil {
		fmt.Println(err) // matches mp.ErrNotSupported without a GPU
		return
	}
	const n = 1 << 20
	d, err := cuda.Alloc[float32](0, n)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Free()

	host := make([]float32, n)
	if err := cuda.CopyToDevice(d, host); err != nil { // returns when the copy is done
		fmt.Println(err)
		return
	}

	s, err := cuda.NewStream(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Destroy()
	pinned, err := cuda.HostAlloc[float32](n)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pinned.Free()
	// Returns at once; pinned.Slice() holds the data after Synchronize.
	if err := cuda.CopyToHostAsync(pinned.Slice(), d, s); err != nil {
		fmt.Println(err)
		return
	}
	// ... CPU work overlaps the copy here ...
	if err := s.Synchronize(); err != nil {
		fmt.Println(err)
	}
}

// Loading a PTX kernel and launching it on a stream.
func ExampleFunction_Launch() {
	const ptx = `.version 7.0
.target sm_70
.address_size 64
.visible .entry scale(.param .u64 data, .param .f32 by, .param .u64 n)
{
	.reg .pred %p<2>;
	.reg .b32 %r<4>;
	.reg .f32 %f<3>;
	.reg .b64 %rd<7>;
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mul.wide.u32 %rd1, %r1, %r2;
	cvt.u64.u32 %rd2, %r3;
	add.s64 %rd3, %rd1, %rd2;
	ld.param.u64 %rd4, [n];
	setp.ge.u64 %p1, %rd3, %rd4;
	@%p1 bra END;
	ld.param.u64 %rd5, [data];
	cvta.to.global.u64 %rd5, %rd5;
	shl.b64 %rd6, %rd3, 2;
	add.s64 %rd5, %rd5, %rd6;
	ld.param.f32 %f1, [by];
	ld.global.f32 %f2, [%rd5];
	mul.f32 %f2, %f2, %f1;
	st.global.f32 [%rd5], %f2;
END:
	ret;
}`
	m, err := cuda.LoadPTX(0, ptx)
	if err != nil {
		fmt.Println(err) // a compilation error carries the JIT log
		return
	}
	defer m.Unload()
	scale, err := m.Function("scale")
	if err != nil {
		fmt.Println(err)
		return
	}
	const n = 1000
	d, err := cuda.Alloc[float32](0, n)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Free()
	s, err := cuda.NewStream(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Destroy()
	grid := [3]uint32{(n + 255) / 256, 1, 1}
	block := [3]uint32{256, 1, 1}
	// Typed arguments: the Slice is passed as its device pointer.
	if err := scale.Launch(grid, block, 0, s, d, float32(2), uint64(n)); err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Synchronize(); err != nil {
		fmt.Println(err)
	}
}

// Checking that a program freed what it allocated. (Compiled, not run:
// it needs a GPU.)
func ExampleLive() {
	d, err := cuda.Alloc[float64](0, 1024)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cuda.Live()) // 1 0
	d.Free()
	if dev, host := cuda.Live(); dev != 0 || host != 0 {
		fmt.Printf("%d device and %d page-locked allocations still live\n", dev, host)
	}
}
