package nccl

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// Device-memory collectives on NCCL (the conformance suite, run by every
// backend, covers host memory and the API's checks): the same checks on
// the fake GPU (TestFakeGPUChildCollectives, ranks in one process) and on
// GPUs (TestGPUCollectives, one rank per process under mpirun).

// devFloats is device memory holding vals, as a buffer of count elements
// of type t (float32, or complex64 over pairs of them).
func devFloats(t *testing.T, c *conn, vals []float32, typ backend.DType) backend.Buffer {
	t.Helper()
	n := int64(len(vals)) * 4
	s := devBuf(t, c, max(n, 1))
	if n > 0 {
		toDevice(t, s, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(vals))), n))
	}
	b := devDesc(c, s)
	b.Type, b.Count = typ, n/int64(typ.Size())
	return b
}

// subDev is elements [off, off+n) of device buffer b.
func subDev(b backend.Buffer, off, n int64) backend.Buffer {
	b.Ptr = unsafe.Add(b.Ptr, off*int64(b.Type.Size()))
	b.Count = n
	return b
}

// readFloats copies device buffer b back as float32s.
func readFloats(t *testing.T, b backend.Buffer) []float32 {
	t.Helper()
	out := make([]float32, b.Len()/4)
	if len(out) > 0 {
		src := cuda.ByteView(uintptr(b.Ptr), b.Len(), cuda.Device(b.Device))
		if err := cuda.CopyToHost(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(out))), b.Len()), src); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// floatsOf is n float32s, element i being f(i).
func floatsOf(n int, f func(i int) float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// runColl runs one collective and waits for it.
func runColl(t *testing.T, c *conn, co backend.Coll) {
	t.Helper()
	r, err := c.Collective(co)
	if err != nil {
		t.Fatalf("rank %d: %v: %v", c.rank, co.Kind, err)
	}
	if _, err := r.Wait(testWait); err != nil {
		t.Fatalf("rank %d: %v: %v", c.rank, co.Kind, err)
	}
	r.Release()
}

// sameFloats reports the first element of got that differs from want.
func sameFloats(t *testing.T, c *conn, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("rank %d: %s: %d elements, want %d", c.rank, what, len(got), len(want))
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("rank %d: %s: element %d is %v, want %v", c.rank, what, i, got[i], want[i])
			return
		}
	}
}

// collChecks runs every collective on device buffers (and one on host
// buffers) on rank c of a job, and checks the results.
func collChecks(t *testing.T, c *conn) {
	p, r := c.size, c.rank
	fp, fr := float32(p), float32(r)
	for _, n := range []int{1, 1000, 3 << 18} {
		in := devFloats(t, c, floatsOf(n, func(i int) float32 { return fr + float32(i%7) }), backend.Float32)
		out := devFloats(t, c, make([]float32, n), backend.Float32)
		runColl(t, c, backend.Coll{Kind: backend.Allreduce, Send: in, Recv: out, Op: backend.Sum})
		sameFloats(t, c, "Allreduce Sum", readFloats(t, out),
			floatsOf(n, func(i int) float32 { return fp*float32(i%7) + fp*(fp-1)/2 }))
		runColl(t, c, backend.Coll{Kind: backend.Allreduce, Send: in, Recv: in, Op: backend.Max})
		sameFloats(t, c, "Allreduce Max in place", readFloats(t, in), floatsOf(n, func(i int) float32 { return fp - 1 + float32(i%7) }))
	}

	root := p - 1
	buf := devFloats(t, c, floatsOf(5000, func(i int) float32 {
		if r == root {
			return float32(2 * i)
		}
		return -1
	}), backend.Float32)
	runColl(t, c, backend.Coll{Kind: backend.Bcast, Send: buf, Recv: buf, Root: root})
	sameFloats(t, c, "Bcast", readFloats(t, buf), floatsOf(5000, func(i int) float32 { return float32(2 * i) }))

	in := devFloats(t, c, floatsOf(333, func(i int) float32 { return fr*10 + float32(i%5) }), backend.Float32)
	out := backend.Buffer{Type: backend.Float32, Mem: backend.Device, Device: c.dev}
	if r == 0 {
		out = devFloats(t, c, make([]float32, 333), backend.Float32)
	}
	runColl(t, c, backend.Coll{Kind: backend.Reduce, Send: in, Recv: out, Op: backend.Min, Root: 0})
	if r == 0 {
		sameFloats(t, c, "Reduce Min", readFloats(t, out), floatsOf(333, func(i int) float32 { return float32(i % 5) }))
	}

	const each = 257
	mine := devFloats(t, c, floatsOf(each, func(i int) float32 { return fr*1000 + float32(i) }), backend.Float32)
	all := devFloats(t, c, make([]float32, each*p), backend.Float32)
	runColl(t, c, backend.Coll{Kind: backend.Allgather, Send: mine, Recv: all})
	sameFloats(t, c, "Allgather", readFloats(t, all), floatsOf(each*p, func(i int) float32 { return float32(i/each)*1000 + float32(i%each) }))
	// In place: this rank's block of the receive buffer is the send buffer.
	all = devFloats(t, c, floatsOf(each*p, func(i int) float32 {
		if i/each == r {
			return fr*1000 + float32(i%each)
		}
		return -1
	}), backend.Float32)
	runColl(t, c, backend.Coll{Kind: backend.Allgather, Send: subDev(all, int64(r*each), each), Recv: all})
	sameFloats(t, c, "Allgather in place", readFloats(t, all), floatsOf(each*p, func(i int) float32 { return float32(i/each)*1000 + float32(i%each) }))

	const blk = 300
	send := devFloats(t, c, floatsOf(blk*p, func(i int) float32 { return fr + float32(i) }), backend.Float32)
	part := devFloats(t, c, make([]float32, blk), backend.Float32)
	runColl(t, c, backend.Coll{Kind: backend.ReduceScatter, Send: send, Recv: part, Op: backend.Sum})
	sameFloats(t, c, "ReduceScatter", readFloats(t, part), floatsOf(blk, func(i int) float32 { return fp*(fp-1)/2 + fp*float32(r*blk+i) }))

	const per = 100
	block := func(from, to, i int) float32 { return float32(from*1000 + to*10 + i%10) }
	a2a := devFloats(t, c, floatsOf(per*p, func(i int) float32 { return block(r, i/per, i) }), backend.Float32)
	got := devFloats(t, c, make([]float32, per*p), backend.Float32)
	want := floatsOf(per*p, func(i int) float32 { return block(i/per, r, i) })
	runColl(t, c, backend.Coll{Kind: backend.Alltoall, Send: a2a, Recv: got})
	sameFloats(t, c, "Alltoall", readFloats(t, got), want)
	runColl(t, c, backend.Coll{Kind: backend.Alltoall, Send: a2a, Recv: a2a})
	sameFloats(t, c, "Alltoall in place", readFloats(t, a2a), want)

	// A Sum of complex64 is one of float32 pairs.
	z := devFloats(t, c, floatsOf(20, func(i int) float32 { return fr * float32(i) }), backend.Complex64)
	runColl(t, c, backend.Coll{Kind: backend.Allreduce, Send: z, Recv: z, Op: backend.Sum})
	sameFloats(t, c, "Allreduce Sum of complex64", readFloats(t, z), floatsOf(20, func(i int) float32 { return fp * (fp - 1) / 2 * float32(i) }))

	// Host memory, staged.
	h := floatsOf(4097, func(i int) float32 { return fr * float32(i%3) })
	hb := bufOf(h, backend.Float32)
	runColl(t, c, backend.Coll{Kind: backend.Allreduce, Send: hb, Recv: hb, Op: backend.Sum})
	sameFloats(t, c, "Allreduce of host memory", h, floatsOf(4097, func(i int) float32 { return fp * (fp - 1) / 2 * float32(i%3) }))

	// What NCCL cannot run is left to mp.
	s16 := []int16{1, 2}
	if _, err := c.Collective(backend.Coll{Kind: backend.Allreduce, Send: bufOf(s16, backend.Int16), Recv: bufOf(s16, backend.Int16), Op: backend.Sum}); !errors.Is(err, backend.ErrSkip) {
		t.Errorf("rank %d: an Allreduce of int16: %v, want ErrSkip", r, err)
	}
	if _, err := c.Collective(backend.Coll{Kind: backend.Allreduce, Send: z, Recv: z, Op: backend.Prod}); !errors.Is(err, backend.ErrSkip) {
		t.Errorf("rank %d: a product of complex64: %v, want ErrSkip", r, err)
	}
	for _, k := range []backend.CollKind{backend.Gather, backend.Scatter, backend.Scan, backend.Exscan, backend.CollKind(200)} {
		if _, err := c.Collective(backend.Coll{Kind: k, Send: z, Recv: z, Op: backend.Sum}); !errors.Is(err, backend.ErrSkip) {
			t.Errorf("rank %d: %v, which NCCL does not have: %v, want ErrSkip", r, k, err)
		}
	}
}

// TestGPUCollectives: collChecks on GPUs, under mpirun.
func TestGPUCollectives(t *testing.T) {
	c := openGPU(t, false)
	if c.ipc != nil {
		// Ranks that share a GPU: NCCL cannot make their communicator of
		// every rank, so the backend hands every collective to package
		// mp, which runs it over point-to-point messages (its GPU tests,
		// TestGPUStreamCollectives here, check the results).
		in := devFloats(t, c, make([]float32, 4), backend.Float32)
		if _, err := c.Collective(backend.Coll{Kind: backend.Allreduce, Send: in, Recv: in, Op: backend.Sum}); !errors.Is(err, backend.ErrSkip) {
			t.Fatalf("rank %d: an Allreduce where ranks share a GPU: %v, want ErrSkip", c.rank, err)
		}
		return
	}
	collChecks(t, c)
}
