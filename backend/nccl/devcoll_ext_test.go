//go:build cgo

package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend/nccl"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// The collectives of device buffers that package mp runs itself, on
// ranks that share the fake GPU (the child of TestFakeGPU with every rank
// on GPU 0, so every pair meets on the CUDA IPC path and NCCL makes no
// communicator of every rank): by default they run on the device, their
// messages device to device, their combining in the fake's kernels, and
// not one copy touches host memory; with COURIER_DEVICE_COLL=staged they
// go through host memory. Either way every rank gets the bits the same
// collective gives on host buffers.

// fakeCounts reads the fake GPU's counters (testdata/fakegpu.c,
// fakegpu_counts): copies to or from host memory, their bytes, kernels
// launched, by every rank of this process.
func fakeCounts() ([3]uint64, error) {
	p, err := cuda.Symbol("fakegpu_counts")
	if err != nil {
		return [3]uint64{}, fmt.Errorf("the fake GPU's counters: %w", err)
	}
	// C memory of the loaded library: its address in a pointer's bits.
	c := (*[3]uint64)(*(*unsafe.Pointer)(unsafe.Pointer(&p)))
	return [3]uint64{atomic.LoadUint64(&c[0]), atomic.LoadUint64(&c[1]), atomic.LoadUint64(&c[2])}, nil
}

// bits is a value of rank r's inputs: SplitMix64 of (seed, r, i).
func bits(seed, r, i int) uint64 {
	x := uint64(seed)<<40 + uint64(r)<<32 + uint64(i) + 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// unit is a float in [−1, 1) made of bits.
func unit(b uint64) float64 { return float64(int64(b>>11)-1<<52) / (1 << 52) }

// fill makes n values of rank r with f.
func fill[T any](n, seed, r int, f func(uint64) T) []T {
	v := make([]T, n)
	for i := range v {
		v[i] = f(bits(seed, r, i))
	}
	return v
}

// bufs are a case's send and receive buffers: host slices, or device
// memory holding the same values.
type bufs[T cuda.Elem] struct {
	send, recv   []T
	dsend, drecv cuda.Slice[T]
	dev          bool
}

// newBufs makes the buffers: send's values and a receive buffer of recvLen
// elements set to recvInit (what a rank that receives nothing keeps).
func newBufs[T cuda.Elem](d cuda.Device, dev bool, send []T, recvLen int, recvInit T) (*bufs[T], error) {
	b := &bufs[T]{send: send, recv: make([]T, recvLen), dev: dev}
	for i := range b.recv {
		b.recv[i] = recvInit
	}
	if !dev {
		return b, nil
	}
	var err error
	if b.dsend, err = cuda.Alloc[T](d, int64(len(send))); err != nil {
		return b, err
	}
	if b.drecv, err = cuda.Alloc[T](d, int64(recvLen)); err != nil {
		return b, err
	}
	if err = cuda.CopyToDevice(b.dsend, send); err == nil {
		err = cuda.CopyToDevice(b.drecv, b.recv)
	}
	return b, err
}

// result is the receive buffer's bytes (copied back from the device).
func (b *bufs[T]) result() ([]byte, error) {
	if b.dev {
		if err := cuda.CopyToHost(b.recv, b.drecv); err != nil {
			return nil, err
		}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(b.recv))), len(b.recv)*int(unsafe.Sizeof(b.recv[0]))), nil
}

func (b *bufs[T]) free() {
	b.dsend.Free()
	b.drecv.Free()
}

// buffers is what every bufs[T] is to the cases' runner.
type buffers interface {
	result() ([]byte, error)
	free()
}

// devCase is one collective of the check: prep makes this rank's buffers
// for n elements (per block, for the collectives of blocks), in device
// memory when dev, and returns the call.
type devCase struct {
	name string
	// combines is the fewest ranks on which the collective combines (the
	// kernels run, on the device), 0 for one that never does: Exscan on
	// 2 ranks only passes rank 0's buffer on.
	combines int
	sizes    []int
	prep     func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error)
}

// The cases. The sizes take each algorithm the sizes pick (colltune.go)
// on 2 and 3 ranks: recursive doubling and Bruck's for the small, Reduce
// and Bcast trees, rings for the large, a Scan chain of several pieces.
var devCases = []devCase{
	{"Allreduce/float32/sum", 2, []int{2, 5, 3000, 70000, 200000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n, 1, c.Rank(), func(x uint64) float32 { return float32(unit(x)) }), n, 0)
		return func() error {
			if dev {
				return mp.Allreduce(c, b.dsend, b.drecv, mp.Sum)
			}
			return mp.Allreduce(c, b.send, b.recv, mp.Sum)
		}, b, err
	}},
	{"Allreduce/float64/sum/in-place", 2, []int{7, 100000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		v := fill(n, 2, c.Rank(), unit)
		b, err := newBufs(d, dev, v, n, 0)
		if err == nil && dev {
			err = cuda.CopyToDevice(b.drecv, v)
		}
		copy(b.recv, v)
		return func() error {
			if dev {
				return mp.Allreduce(c, b.drecv, b.drecv, mp.Sum)
			}
			return mp.Allreduce(c, b.recv, b.recv, mp.Sum)
		}, b, err
	}},
	{"Allreduce/float16/sum", 2, []int{3000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n, 3, c.Rank(), func(x uint64) mp.Float16 { return mp.Float16(f32To16(float32(unit(x) * 8))) }), n, 0)
		return func() error {
			if dev {
				return mp.Allreduce(c, b.dsend, b.drecv, mp.Sum)
			}
			return mp.Allreduce(c, b.send, b.recv, mp.Sum)
		}, b, err
	}},
	{"Allreduce/bfloat16/max", 2, []int{3000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n, 4, c.Rank(), func(x uint64) mp.BFloat16 { return mp.BFloat16(x) }), n, 0)
		return func() error {
			if dev {
				return mp.Allreduce(c, b.dsend, b.drecv, mp.Max)
			}
			return mp.Allreduce(c, b.send, b.recv, mp.Max)
		}, b, err
	}},
	{"Allreduce/int32/prod", 2, []int{3000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n, 5, c.Rank(), func(x uint64) int32 { return int32(x) }), n, 0)
		return func() error {
			if dev {
				return mp.Allreduce(c, b.dsend, b.drecv, mp.Prod)
			}
			return mp.Allreduce(c, b.send, b.recv, mp.Prod)
		}, b, err
	}},
	{"Allreduce/uint8/min", 2, []int{3000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n, 6, c.Rank(), func(x uint64) uint8 { return uint8(x) }), n, 0)
		return func() error {
			if dev {
				return mp.Allreduce(c, b.dsend, b.drecv, mp.Min)
			}
			return mp.Allreduce(c, b.send, b.recv, mp.Min)
		}, b, err
	}},
	{"Allreduce/complex64/prod", 2, []int{3000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n, 7, c.Rank(), func(x uint64) complex64 {
			return complex(float32(1+unit(x)/4), float32(unit(x<<20)/4))
		}), n, 0)
		return func() error {
			if dev {
				return mp.Allreduce(c, b.dsend, b.drecv, mp.Prod)
			}
			return mp.Allreduce(c, b.send, b.recv, mp.Prod)
		}, b, err
	}},
	{"Allgather/int32", 0, []int{3, 40000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n, 8, c.Rank(), func(x uint64) int32 { return int32(x) }), n*c.Size(), -1)
		return func() error {
			if dev {
				return mp.Allgather(c, b.dsend, b.drecv)
			}
			return mp.Allgather(c, b.send, b.recv)
		}, b, err
	}},
	{"Bcast/float64", 0, []int{7, 100000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		v := fill(n, 9, c.Rank(), unit)
		b, err := newBufs(d, dev, v, n, 0)
		if err == nil && dev {
			err = cuda.CopyToDevice(b.drecv, v)
		}
		copy(b.recv, v)
		return func() error {
			if dev {
				return mp.Bcast(c, b.drecv, c.Size()-1)
			}
			return mp.Bcast(c, b.recv, c.Size()-1)
		}, b, err
	}},
	{"ReduceScatter/float32/sum", 2, []int{4, 3000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n*c.Size(), 10, c.Rank(), func(x uint64) float32 { return float32(unit(x)) }), n, 0)
		return func() error {
			if dev {
				return mp.ReduceScatter(c, b.dsend, b.drecv, mp.Sum)
			}
			return mp.ReduceScatter(c, b.send, b.recv, mp.Sum)
		}, b, err
	}},
	{"Reduce/float32/sum", 2, []int{5, 50000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		recvLen := 0
		if c.Rank() == 1 {
			recvLen = n
		}
		b, err := newBufs(d, dev, fill(n, 11, c.Rank(), func(x uint64) float32 { return float32(unit(x)) }), recvLen, 0)
		return func() error {
			if dev {
				return mp.Reduce(c, b.dsend, b.drecv, mp.Sum, 1)
			}
			return mp.Reduce(c, b.send, b.recv, mp.Sum, 1)
		}, b, err
	}},
	{"Alltoall/int64", 0, []int{2, 10000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n*c.Size(), 12, c.Rank(), func(x uint64) int64 { return int64(x) }), n*c.Size(), 0)
		return func() error {
			if dev {
				return mp.Alltoall(c, b.dsend, b.drecv)
			}
			return mp.Alltoall(c, b.send, b.recv)
		}, b, err
	}},
	{"Alltoall/uint16/in-place", 0, []int{3}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		v := fill(n*c.Size(), 13, c.Rank(), func(x uint64) uint16 { return uint16(x) })
		b, err := newBufs(d, dev, v, n*c.Size(), 0)
		if err == nil && dev {
			err = cuda.CopyToDevice(b.drecv, v)
		}
		copy(b.recv, v)
		return func() error {
			if dev {
				return mp.Alltoall(c, b.drecv, b.drecv)
			}
			return mp.Alltoall(c, b.recv, b.recv)
		}, b, err
	}},
	{"Scan/float32/sum", 2, []int{5, 40000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n, 14, c.Rank(), func(x uint64) float32 { return float32(unit(x)) }), n, 0)
		return func() error {
			if dev {
				return mp.Scan(c, b.dsend, b.drecv, mp.Sum)
			}
			return mp.Scan(c, b.send, b.recv, mp.Sum)
		}, b, err
	}},
	{"Exscan/int32/max", 3, []int{5, 40000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		b, err := newBufs(d, dev, fill(n, 15, c.Rank(), func(x uint64) int32 { return int32(x) }), n, -7)
		return func() error {
			if dev {
				return mp.Exscan(c, b.dsend, b.drecv, mp.Max)
			}
			return mp.Exscan(c, b.send, b.recv, mp.Max)
		}, b, err
	}},
	{"Gather/int16", 0, []int{3, 20000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		recvLen := 0
		if c.Rank() == 0 {
			recvLen = n * c.Size()
		}
		b, err := newBufs(d, dev, fill(n, 16, c.Rank(), func(x uint64) int16 { return int16(x) }), recvLen, 0)
		return func() error {
			if dev {
				return mp.Gather(c, b.dsend, b.drecv, 0)
			}
			return mp.Gather(c, b.send, b.recv, 0)
		}, b, err
	}},
	{"Scatter/uint32", 0, []int{3, 20000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		sendLen := 0
		if c.Rank() == c.Size()-1 {
			sendLen = n * c.Size()
		}
		b, err := newBufs(d, dev, fill(sendLen, 17, c.Rank(), func(x uint64) uint32 { return uint32(x) }), n, 0)
		return func() error {
			if dev {
				return mp.Scatter(c, b.dsend, b.drecv, c.Size()-1)
			}
			return mp.Scatter(c, b.send, b.recv, c.Size()-1)
		}, b, err
	}},
	{"Allgatherv/int64", 0, []int{1, 30000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		counts, total := vcounts(c.Size(), n)
		b, err := newBufs(d, dev, fill(counts[c.Rank()], 18, c.Rank(), func(x uint64) int64 { return int64(x) }), total, 0)
		return func() error {
			if dev {
				return mp.Allgatherv(c, b.dsend, b.drecv, counts)
			}
			return mp.Allgatherv(c, b.send, b.recv, counts)
		}, b, err
	}},
	{"Gatherv/float32", 0, []int{1, 30000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		counts, total := vcounts(c.Size(), n)
		if c.Rank() != 1 {
			total = 0
		}
		b, err := newBufs(d, dev, fill(counts[c.Rank()], 19, c.Rank(), func(x uint64) float32 { return float32(unit(x)) }), total, 0)
		return func() error {
			if dev {
				return mp.Gatherv(c, b.dsend, b.drecv, counts, 1)
			}
			return mp.Gatherv(c, b.send, b.recv, counts, 1)
		}, b, err
	}},
	{"Scatterv/int8", 0, []int{1, 30000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		counts, total := vcounts(c.Size(), n)
		if c.Rank() != 0 {
			total = 0
		}
		b, err := newBufs(d, dev, fill(total, 20, c.Rank(), func(x uint64) int8 { return int8(x) }), counts[c.Rank()], 0)
		return func() error {
			if dev {
				return mp.Scatterv(c, b.dsend, counts, b.drecv, 0)
			}
			return mp.Scatterv(c, b.send, counts, b.recv, 0)
		}, b, err
	}},
	{"Alltoallv/complex128", 0, []int{1, 5000}, func(c *mp.Comm, d cuda.Device, dev bool, n int) (func() error, buffers, error) {
		// Rank r sends (r+k+1)·n elements to rank k.
		p, r := c.Size(), c.Rank()
		sc, rc := make([]int, p), make([]int, p)
		var st, rt int
		for k := range p {
			sc[k], rc[k] = (r+k+1)*n, (k+r+1)*n
			st, rt = st+sc[k], rt+rc[k]
		}
		b, err := newBufs(d, dev, fill(st, 21, r, func(x uint64) complex128 { return complex(unit(x), unit(x>>7)) }), rt, 0)
		return func() error {
			if dev {
				return mp.Alltoallv(c, b.dsend, sc, b.drecv, rc)
			}
			return mp.Alltoallv(c, b.send, sc, b.recv, rc)
		}, b, err
	}},
}

// vcounts is the counts of a v-collective of p ranks: rank k's block has
// (k+1)·n elements; and their sum.
func vcounts(p, n int) ([]int, int) {
	counts := make([]int, p)
	total := 0
	for k := range counts {
		counts[k] = (k + 1) * n
		total += counts[k]
	}
	return counts, total
}

// f32To16 rounds a float32 to a float16 (nearest, ties to even) for the
// inputs; the kernels' own rounding is checked against internal/reduce
// elsewhere (TestFakeGPUChildCombineKernels).
func f32To16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	e := int32(b>>23&0xff) - 127 + 15
	if e <= 0 {
		return sign // the inputs have no subnormals
	}
	man := b & 0x7fffff
	h := uint32(e)<<10 | man>>13
	if rem := man & 0x1fff; rem > 0x1000 || rem == 0x1000 && h&1 == 1 {
		h++
	}
	return sign | uint16(h)
}

// TestGPUIPCCollectives runs the same collectives on GPUs, on ranks that
// all share one (started as 2 or more ranks with COURIER_DEVICE=0), on
// the device and staged: every result must be the host buffers' bits. (A
// GPU counts no copies: that check is the fake's.)
func TestGPUIPCCollectives(t *testing.T) {
	job := gpuJob(t)
	if job.Size < 2 {
		t.Skipf("needs 2 or more ranks sharing a GPU (mpirun -np 2 -x %s=0), this is a job of %d", nccl.DeviceEnv, job.Size)
	}
	job.Generation = 61 // a rendezvous of its own (the other tests' use others)
	for _, mode := range []string{"direct", "staged", ""} {
		t.Run(fmt.Sprintf("mode=%q", mode), func(t *testing.T) {
			job.Generation++
			env := func(k string) string {
				if k == "COURIER_DEVICE_COLL" {
					return mode
				}
				return os.Getenv(k)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := mp.Init(ctx, mp.WithJob(job), mp.WithBackend("nccl"), mp.WithEnv(env), mp.WithTimeout(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for p := range c.Size() {
				if p != c.Rank() && c.Transport(p) != "cuda-ipc" {
					t.Skipf("rank %d is reached over %q: the ranks do not share a GPU (start them with %s=0)", p, c.Transport(p), nccl.DeviceEnv)
				}
			}
			if err := deviceCollectives(c, mode == "staged", false); err != nil { // auto: by size
				t.Error(err)
			}
		})
	}
}

func TestFakeGPUChildIPCCollectives(t *testing.T) {
	if os.Getenv("COURIER_TEST_FAKEGPU_CHILD") == "" {
		t.Skip("runs in the child process of TestFakeGPU")
	}
	if os.Getenv(nccl.DeviceEnv) != "0" {
		t.Skipf("runs in the child of TestFakeGPU with %s=0 (every rank on one GPU)", nccl.DeviceEnv)
	}
	for _, n := range []int{2, 3} {
		for _, run := range []struct {
			mode  string
			check bool
		}{{"direct", false}, {"direct", true}, {"staged", false}, {"", false}} {
			env := func(k string) string {
				if k == "COURIER_DEVICE_COLL" {
					return run.mode
				}
				return os.Getenv(k)
			}
			cfg := ranktest.Config{Backend: "nccl", Options: []mp.Option{mp.WithEnv(env), mp.WithCheck(run.check)}, Timeout: 20 * time.Second}
			t.Run(fmt.Sprintf("%d-ranks/mode=%q/check=%v", n, run.mode, run.check), func(t *testing.T) {
				ranktest.RunConfig(t, n, cfg, func(rt *ranktest.T, c *mp.Comm) {
					// Auto mixes the two by size: its results are
					// checked, and its choice by autoChoice.
					if err := deviceCollectives(c, run.mode == "staged", run.mode != ""); err != nil {
						rt.Errorf("%v", err)
					}
					if run.mode == "" {
						if err := autoChoice(c); err != nil {
							rt.Errorf("%v", err)
						}
					}
				})
			})
		}
	}
}

// TestFakeGPUChildIPCCollectivesMixed: where a collective runs on the
// device, a rank that passes host buffers while the others pass device
// buffers would wait for messages that never come; with checks every
// rank fails at once with ErrMismatch, naming the difference.
func TestFakeGPUChildIPCCollectivesMixed(t *testing.T) {
	if os.Getenv("COURIER_TEST_FAKEGPU_CHILD") == "" {
		t.Skip("runs in the child process of TestFakeGPU")
	}
	if os.Getenv(nccl.DeviceEnv) != "0" {
		t.Skipf("runs in the child of TestFakeGPU with %s=0 (every rank on one GPU)", nccl.DeviceEnv)
	}
	env := func(k string) string {
		if k == "COURIER_DEVICE_COLL" {
			return "direct" // a small collective is staged in auto mode
		}
		return os.Getenv(k)
	}
	cfg := ranktest.Config{Backend: "nccl", Options: []mp.Option{mp.WithEnv(env), mp.WithCheck(true)}, Timeout: 10 * time.Second}
	ranktest.RunConfig(t, 2, cfg, func(rt *ranktest.T, c *mp.Comm) {
		d, err := c.Device()
		if err != nil {
			rt.Errorf("%v", err)
			return
		}
		b, err := newBufs(d, c.Rank() == 0, []float32{1, 2, 3}, 3, 0)
		defer b.free()
		if err != nil {
			rt.Errorf("%v", err)
			return
		}
		if c.Rank() == 0 {
			err = mp.Allreduce(c, b.dsend, b.drecv, mp.Sum)
		} else {
			err = mp.Allreduce(c, b.send, b.recv, mp.Sum)
		}
		if !errors.Is(err, mp.ErrMismatch) || !strings.Contains(err.Error(), "on the device") {
			rt.Errorf("rank %d: %v, want ErrMismatch naming the device", c.Rank(), err)
		}
	})
}

// autoChoice checks COURIER_DEVICE_COLL=auto's choice on the fake GPU: an
// Allreduce of 32 bytes of device buffers is staged through host memory
// (copies to and from it, no kernel), one of 1 MiB runs on the device (no
// such copy, kernels), and a Bcast of 32 bytes on the device.
func autoChoice(c *mp.Comm) error {
	d, err := c.Device()
	if err != nil {
		return err
	}
	for _, k := range []struct {
		name   string
		n      int
		device bool
	}{{"Allreduce", 8, false}, {"Allreduce", 1 << 18, true}, {"Bcast", 8, true}} {
		send := make([]float32, k.n)
		for i := range send {
			send[i] = float32(i%7 + c.Rank())
		}
		b, err := newBufs(d, true, send, k.n, 0)
		if err != nil {
			b.free()
			return err
		}
		if err := mp.Barrier(c); err != nil {
			return err
		}
		before, err := fakeCounts()
		if err != nil {
			return err
		}
		// The ranks are goroutines of this process, which the counters
		// count together: between barriers, no rank makes its buffers.
		if err := mp.Barrier(c); err != nil {
			return err
		}
		if k.name == "Bcast" {
			err = mp.Bcast(c, b.dsend, 0)
		} else {
			err = mp.Allreduce(c, b.dsend, b.drecv, mp.Sum)
		}
		if err != nil {
			b.free()
			return fmt.Errorf("auto: %s of %d floats: %w", k.name, k.n, err)
		}
		if err := mp.Barrier(c); err != nil {
			return err
		}
		after, err := fakeCounts()
		if err == nil {
			err = mp.Barrier(c)
		}
		b.free()
		if err != nil {
			return err
		}
		host, kernels := after[0]-before[0], after[2]-before[2]
		switch {
		case k.device && host != 0:
			return fmt.Errorf("auto: %s of %d floats: %d copies through host memory, want it on the device", k.name, k.n, host)
		case k.device && k.name == "Allreduce" && kernels == 0:
			return fmt.Errorf("auto: %s of %d floats on the device: no kernel ran", k.name, k.n)
		case !k.device && (host == 0 || kernels != 0):
			return fmt.Errorf("auto: %s of %d floats: %d copies through host memory and %d kernels, want it staged", k.name, k.n, host, kernels)
		}
	}
	return nil
}

// deviceCollectives runs every case at each of its sizes on host
// buffers, then on device buffers, and compares the results' bits. When
// counted (the fake GPU), around the device call (between barriers, once
// every rank has made its buffers and before any copies a result out) it
// reads the fake's counters: on the device, no copy to or from host
// memory, and kernels exactly where the collective combines; staged,
// copies to and from host memory, and no kernel.
func deviceCollectives(c *mp.Comm, staged, counted bool) error {
	d, err := c.Device()
	if err != nil {
		return err
	}
	for p := range c.Size() {
		if p != c.Rank() && c.Transport(p) != "cuda-ipc" {
			return fmt.Errorf("rank %d is reached over %q, not the IPC path", p, c.Transport(p))
		}
	}
	for _, cs := range devCases {
		for _, n := range cs.sizes {
			what := fmt.Sprintf("%s of %d", cs.name, n)
			var results [2][]byte
			var delta [3]uint64
			for i, dev := range []bool{false, true} {
				call, b, err := cs.prep(c, d, dev, n)
				if err != nil {
					return fmt.Errorf("%s: the buffers: %w", what, err)
				}
				var before, after [3]uint64
				if dev && counted {
					if err := mp.Barrier(c); err != nil {
						return err
					}
					if before, err = fakeCounts(); err != nil {
						return err
					}
					if err := mp.Barrier(c); err != nil {
						return err
					}
				}
				if err := call(); err != nil {
					return fmt.Errorf("%s (device %v): %w", what, dev, err)
				}
				if dev && counted {
					if err := mp.Barrier(c); err != nil {
						return err
					}
					if after, err = fakeCounts(); err != nil {
						return err
					}
					if err := mp.Barrier(c); err != nil {
						return err
					}
					for k := range delta {
						delta[k] = after[k] - before[k]
					}
				}
				if results[i], err = b.result(); err != nil {
					return fmt.Errorf("%s: the result: %w", what, err)
				}
				b.free()
			}
			combines := cs.combines > 0 && c.Size() >= cs.combines
			if len(results[0]) > 0 && !slices.ContainsFunc(results[0], func(x byte) bool { return x != 0 }) {
				return fmt.Errorf("%s: the result on host buffers is all zeros: the check would check nothing", what)
			}
			if !slices.Equal(results[0], results[1]) {
				return fmt.Errorf("%s: the result on device buffers differs from the one on host buffers", what)
			}
			switch {
			case !counted:
			case !staged && delta[0] != 0:
				return fmt.Errorf("%s on the device: %d copies (%d bytes) to or from host memory", what, delta[0], delta[1])
			case !staged && combines && delta[2] == 0:
				return fmt.Errorf("%s on the device: no kernel ran", what)
			case !staged && !combines && delta[2] != 0:
				return fmt.Errorf("%s on the device: %d kernels ran, but it combines nothing", what, delta[2])
			case staged && delta[0] == 0:
				return fmt.Errorf("%s staged: no copy to or from host memory", what)
			case staged && delta[2] != 0:
				return fmt.Errorf("%s staged: %d kernels ran", what, delta[2])
			}
		}
	}
	return nil
}
