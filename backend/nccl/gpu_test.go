package nccl

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/cuda"
)

// The tests that need GPUs and libnccl. They skip elsewhere, and fail
// instead of skipping when COURIER_REQUIRE_GPU=N (a number of GPUs, 1 for
// one) asks for what they need, so that a run on the GPU machine cannot
// pass by skipping. The multi-rank tests run when this test binary is
// started as 2 or more ranks:
//
//	mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 -x COURIER_REQUIRE_GPU=2 ./nccl.test -test.v
//
// Every rank runs the same tests in the same order; each multi-rank test
// opens its own communicator through one bootstrap exchange that lives as
// long as the test binary.

// requiredGPUs reads COURIER_REQUIRE_GPU.
func requiredGPUs(t *testing.T) int {
	t.Helper()
	v := os.Getenv("COURIER_REQUIRE_GPU")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("COURIER_REQUIRE_GPU=%q: want the number of GPUs required (1 for one)", v)
	}
	return n
}

// requireGPU skips t unless the nccl backend can work here (CUDA, a GPU,
// libnccl). A backend that is present but fails otherwise than with
// ErrNotSupported fails t: a broken NCCL is not a missing one.
func requireGPU(t *testing.T) {
	t.Helper()
	err := Driver{}.Available()
	if err == nil {
		return
	}
	if !errors.Is(err, backend.ErrNotSupported) {
		t.Fatalf("CUDA or NCCL is present but fails: %v", err)
	}
	if requiredGPUs(t) >= 1 {
		t.Fatalf("COURIER_REQUIRE_GPU=%d, but the nccl backend is not available: %v", requiredGPUs(t), err)
	}
	t.Skipf("the nccl backend is not available here: %v", err)
}

// The job every multi-rank test shares.
var gpuJob struct {
	once sync.Once
	job  bootstrap.Job
	ex   bootstrap.Exchanger
	err  error
}

// closeGPUJob ends the shared bootstrap exchange (from TestMain).
func closeGPUJob() {
	if gpuJob.ex != nil {
		gpuJob.ex.Close()
	}
}

// requireRanks skips t unless this process is a rank of a job of at least
// n ranks with the nccl backend available (it fails instead when
// COURIER_REQUIRE_GPU >= n), and returns the job and its exchange.
func requireRanks(t *testing.T, n int) (bootstrap.Job, bootstrap.Exchanger) {
	t.Helper()
	requireGPU(t)
	gpuJob.once.Do(func() {
		job, err := bootstrap.Detect()
		if err != nil {
			gpuJob.err = err
			return
		}
		gpuJob.job = job
		if job.Size < 2 {
			gpuJob.err = fmt.Errorf("this process is rank %d of %d (launcher %s), not a rank of a multi-rank job: start the test binary with mpirun -np 2",
				job.Rank, job.Size, job.Launcher)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		gpuJob.ex, gpuJob.err = bootstrap.Connect(ctx, job)
	})
	if gpuJob.err == nil && gpuJob.job.Size < n {
		t.Skipf("needs %d ranks, the job has %d", n, gpuJob.job.Size)
	}
	if gpuJob.err != nil {
		if requiredGPUs(t) >= n {
			t.Fatalf("COURIER_REQUIRE_GPU=%d: %v", requiredGPUs(t), gpuJob.err)
		}
		t.Skip(gpuJob.err)
	}
	return gpuJob.job, gpuJob.ex
}

// jobOf is what the driver reads of a bootstrap job (package mp makes the
// same conversion; the test jobs give rank 0's address in Addr).
func jobOf(j bootstrap.Job) backend.Job {
	return backend.Job{Rank: j.Rank, Size: j.Size, LocalRank: j.LocalRank, Key: j.Key, Addr: j.Addr}
}

// openGPU opens a communicator of the shared job; Close runs at cleanup.
func openGPU(t *testing.T, check bool) *conn {
	t.Helper()
	job, ex := requireRanks(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	bc, err := Driver{}.Open(ctx, backend.Config{Job: jobOf(job), Exchange: ex, Check: check, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("rank %d: Open: %v", job.Rank, err)
	}
	t.Logf("rank %d: Open took %v", job.Rank, time.Since(start))
	c := bc.(*conn)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("rank %d: Close: %v", job.Rank, err)
		}
	})
	return c
}

// openSelf opens a communicator of one rank on this process's GPU.
func openSelf(t *testing.T) *conn {
	t.Helper()
	requireGPU(t)
	job, err := bootstrap.FromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := backend.Config{Job: backend.Job{Rank: 0, Size: 1, LocalRank: job.LocalRank}, Exchange: localExchange{}}
	if job.LocalRank < 0 {
		cfg.Job.LocalRank = 0
	}
	bc, err := Driver{}.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := bc.(*conn)
	t.Cleanup(func() { c.Close() })
	return c
}

// devBuf is n bytes of device memory on c's GPU, freed at cleanup.
func devBuf(t *testing.T, c *conn, n int64) cuda.Slice[byte] {
	t.Helper()
	s, err := cuda.Alloc[byte](cuda.Device(c.dev), n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Free() })
	return s
}

// devDesc describes device memory for the backend.
func devDesc(c *conn, s cuda.Slice[byte]) backend.Buffer {
	addr := s.Ptr()
	// A device address is not Go memory; converting it through memory
	// keeps vet's unsafeptr check quiet about a legitimate use.
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return backend.Buffer{Ptr: p, Count: s.Len(), Type: backend.Uint8, Mem: backend.Device, Device: c.dev}
}

// pattern returns n bytes that depend on seed.
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], seed*0x9e3779b97f4a7c15+uint64(i)*0xbf58476d1ce4e5b9)
	}
	return b[:n]
}

func toDevice(t *testing.T, s cuda.Slice[byte], b []byte) {
	t.Helper()
	if err := cuda.CopyToDevice(s, b); err != nil {
		t.Fatal(err)
	}
}

func fromDevice(t *testing.T, s cuda.Slice[byte]) []byte {
	t.Helper()
	b := make([]byte, s.Len())
	if err := cuda.CopyToHost(b, s); err != nil {
		t.Fatal(err)
	}
	return b
}

// barrier meets the peer over the host connection (a negative tag).
func barrier(t *testing.T, c *conn, peer int) {
	t.Helper()
	s := isend(t, c, bufOf([]byte{1}, backend.Uint8), peer, -3)
	q := irecv(t, c, bufOf([]byte{0}, backend.Uint8), peer, -3)
	waitAll(t, s, q)
}

func TestGPUAvailable(t *testing.T) {
	requireGPU(t)
	v, path, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	n, _ := cuda.DeviceCount()
	t.Logf("NCCL %s from %s, %d GPU(s)", v, path, n)
}

// TestGPUSelf: messages to oneself between host and device memory.
func TestGPUSelf(t *testing.T) {
	c := openSelf(t)
	const n = 1 << 20
	want := pattern(n, 1)
	a, b := devBuf(t, c, n), devBuf(t, c, n)
	toDevice(t, a, want)
	waitAll(t, isend(t, c, devDesc(c, a), 0, 1)) // device, unexpected
	waitAll(t, irecv(t, c, devDesc(c, b), 0, 1)) // into device
	host := make([]byte, n)
	q := irecv(t, c, bufOf(host, backend.Uint8), 0, 2) // posted first
	waitAll(t, isend(t, c, devDesc(c, b), 0, 2))
	waitAll(t, q)
	if !bytes.Equal(host, want) || !bytes.Equal(fromDevice(t, b), want) {
		t.Error("self messages through device memory changed the data")
	}
	q = irecv(t, c, devDesc(c, a), 0, 3)
	if err := WaitOn(q, mustStream(t, c)); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("WaitOn of a self receive: %v, want ErrNotSupported", err)
	}
	waitAll(t, isend(t, c, bufOf(host, backend.Uint8), 0, 3), q)
}

func mustStream(t *testing.T, c *conn) *cuda.Stream {
	t.Helper()
	s, err := cuda.NewStream(cuda.Device(c.dev))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Destroy() })
	return s
}

// TestGPUPingPong: messages both ways, host and device buffers, from 0
// bytes to 64 MiB, with and without checks.
func TestGPUPingPong(t *testing.T) {
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprint("check=", check), func(t *testing.T) {
			c := openGPU(t, check)
			peer := 1 - c.rank
			if c.rank > 1 {
				return
			}
			for _, n := range []int{0, 1, 8, 4 << 10, 1 << 20, 64 << 20} {
				for _, dev := range []bool{false, true} {
					want := pattern(n, uint64(n))
					var sb, rb backend.Buffer
					var ds cuda.Slice[byte]
					host := make([]byte, n)
					if dev {
						ds = devBuf(t, c, int64(n))
						sb, rb = devDesc(c, ds), devDesc(c, ds)
						if c.rank == 0 {
							toDevice(t, ds, want)
						}
					} else {
						copy(host, want)
						sb, rb = bufOf(host, backend.Uint8), bufOf(host, backend.Uint8)
						if c.rank == 1 {
							clear(host)
						}
					}
					if c.rank == 0 {
						waitAll(t, isend(t, c, sb, peer, n))
						if dev {
							toDevice(t, ds, make([]byte, n))
						} else {
							clear(host)
						}
						q := irecv(t, c, rb, peer, n)
						st, err := q.Wait(20 * time.Second)
						q.Release()
						if err != nil || st.Count != int64(n) {
							t.Fatalf("%d bytes, device %v: the echo: %v, %+v", n, dev, err, st)
						}
					} else {
						q := irecv(t, c, rb, peer, n)
						waitAll(t, q)
						waitAll(t, isend(t, c, sb, peer, n))
					}
					got := host
					if dev {
						got = fromDevice(t, ds)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("rank %d, %d bytes, device %v: wrong data", c.rank, n, dev)
					}
				}
			}
		})
	}
}

// TestGPUGroupings: the pairings of grouped and serial operations that
// hang NCCL as a pair's first traffic over one communicator (NCCL sets up
// each direction's connection inside the first call that needs it, and
// that setup needs the peer), first thing on a fresh communicator, small
// and large, device memory.
func TestGPUGroupings(t *testing.T) {
	for _, n := range []int64{8, 32 << 20} {
		t.Run(fmt.Sprint(n, "B"), func(t *testing.T) {
			c := openGPU(t, false)
			if c.rank > 1 {
				return
			}
			peer := 1 - c.rank
			a, b := devBuf(t, c, n), devBuf(t, c, n)
			toDevice(t, a, pattern(int(n), uint64(c.rank)))
			if c.rank == 0 {
				s := isend(t, c, devDesc(c, a), peer, 1)
				q := irecv(t, c, devDesc(c, b), peer, 1)
				waitAll(t, s, q)
			} else {
				waitAll(t, irecv(t, c, devDesc(c, b), peer, 1))
				waitAll(t, isend(t, c, devDesc(c, a), peer, 1))
			}
			if !bytes.Equal(fromDevice(t, b), pattern(int(n), uint64(peer))) {
				t.Errorf("rank %d: wrong data", c.rank)
			}
			// Two sends in one group, received one at a time, and back.
			if c.rank == 0 {
				waitAll(t, isend(t, c, devDesc(c, a), peer, 2), isend(t, c, devDesc(c, a), peer, 3))
				waitAll(t, irecv(t, c, devDesc(c, b), peer, 4), irecv(t, c, devDesc(c, b), peer, 5))
			} else {
				waitAll(t, irecv(t, c, devDesc(c, b), peer, 2))
				waitAll(t, irecv(t, c, devDesc(c, b), peer, 3))
				waitAll(t, isend(t, c, devDesc(c, a), peer, 4))
				waitAll(t, isend(t, c, devDesc(c, a), peer, 5))
			}
		})
	}
}

// TestGPUReceiveThenSend: a receive issued early (Test) must not hold back
// a later send its peer waits for.
func TestGPUReceiveThenSend(t *testing.T) {
	c := openGPU(t, false)
	if c.rank > 1 {
		return
	}
	peer := 1 - c.rank
	d := devBuf(t, c, 4)
	if c.rank == 0 {
		waitAll(t, irecv(t, c, devDesc(c, d), peer, 1))
		waitAll(t, isend(t, c, devDesc(c, d), peer, 2))
		return
	}
	q := irecv(t, c, devDesc(c, d), peer, 2)
	q.Test()
	waitAll(t, isend(t, c, devDesc(c, d), peer, 1), q)
}

// TestGPUWaitOn: a stream waits for a receive on the GPU, then copies the
// received data; the CPU only synchronizes the stream.
func TestGPUWaitOn(t *testing.T) {
	c := openGPU(t, false)
	if c.rank > 1 {
		return
	}
	peer := 1 - c.rank
	const n = 16 << 20
	src, dst, out := devBuf(t, c, n), devBuf(t, c, n), devBuf(t, c, n)
	want := pattern(n, 77)
	if c.rank == 0 {
		toDevice(t, src, want)
		barrier(t, c, peer)
		time.Sleep(50 * time.Millisecond) // the receiver's stream waits meanwhile
		waitAll(t, isend(t, c, devDesc(c, src), peer, 1))
		return
	}
	s := mustStream(t, c)
	q := irecv(t, c, devDesc(c, dst), peer, 1)
	if err := WaitOn(q, s); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyDeviceAsync(out, dst, s); err != nil {
		t.Fatal(err)
	}
	// While rank 0 is still in the barrier: a receive posted after it has
	// closed fails at once (ErrPeerLost) on the IPC path.
	host := make([]byte, 4)
	if err := WaitOn(irecv(t, c, bufOf(host, backend.Uint8), peer, 2), s); !errors.Is(err, backend.ErrNotSupported) {
		t.Errorf("WaitOn of a receive into host memory: %v", err)
	}
	barrier(t, c, peer)
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fromDevice(t, out), want) {
		t.Error("the stream ran before the receive had completed")
	}
	waitAll(t, q)
}

// TestGPUStreamOrdered: IsendOn and IrecvOn order a message on the
// caller's stream. Rank 0 queues slow copies on its stream, then the
// copy that fills the send buffer, then the send; rank 1 queues the
// receive, then a copy of what arrived. Neither CPU waits in between: if
// the send did not wait for the fill, or the copy for the receive, rank 1
// would see stale bytes.
func TestGPUStreamOrdered(t *testing.T) {
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprintf("check=%v", check), func(t *testing.T) {
			c := openGPU(t, check)
			if c.rank > 1 {
				return
			}
			peer := 1 - c.rank
			const n = 32 << 20
			s := mustStream(t, c)
			buf, out := devBuf(t, c, n), devBuf(t, c, n)
			want := pattern(n, 5)
			if _, err := c.IsendOn(bufOf(want, backend.Uint8), peer, 1, 0, s); !errors.Is(err, backend.ErrInvalid) {
				t.Errorf("IsendOn with host memory: %v, want ErrInvalid", err)
			}
			if _, err := c.IrecvOn(devDesc(c, buf), peer, 1, 0, new(cuda.Stream)); !errors.Is(err, backend.ErrInvalid) {
				t.Errorf("IrecvOn with no stream: %v, want ErrInvalid", err)
			}
			barrier(t, c, peer)
			start := time.Now()
			var r backend.Request
			var err error
			if c.rank == 0 {
				big1, big2 := devBuf(t, c, 1<<30), devBuf(t, c, 1<<30)
				for range 8 { // tens of milliseconds of work ahead of the send
					if err := cuda.CopyDeviceAsync(big2, big1, s); err != nil {
						t.Fatal(err)
					}
				}
				if err := cuda.CopyToDeviceAsync(buf, want, s); err != nil {
					t.Fatal(err)
				}
				r, err = c.IsendOn(devDesc(c, buf), peer, 1, 0, s)
			} else {
				if err := cuda.MemsetAsync(buf, 0, s); err != nil {
					t.Fatal(err)
				}
				r, err = c.IrecvOn(devDesc(c, buf), peer, 1, 0, s)
				if err == nil {
					err = cuda.CopyDeviceAsync(out, buf, s)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			posted := time.Since(start)
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			t.Logf("rank %d: posting took %v, the stream finished after %v", c.rank, posted, time.Since(start))
			waitAll(t, r)
			if c.rank == 1 && !bytes.Equal(fromDevice(t, out), want) {
				t.Error("the copy queued after IrecvOn did not see the message")
			}
			barrier(t, c, peer)
		})
	}
}

// TestGPUChecked: with checks, mismatches are errors naming both ranks
// that leave the buffer alone, and receives match by tag.
func TestGPUChecked(t *testing.T) {
	c := openGPU(t, true)
	if c.rank > 1 {
		return
	}
	peer := 1 - c.rank
	small, big := devBuf(t, c, 64), devBuf(t, c, 1<<20)
	if c.rank == 0 {
		toDevice(t, big, pattern(1<<20, 5))
		waitAll(t,
			isend(t, c, devDesc(c, big), peer, 1),   // 1 MiB into 64 B: truncated
			isend(t, c, devDesc(c, big), peer, 3),   // tag 3, received after tag 2
			isend(t, c, devDesc(c, small), peer, 2)) // tag 2
		return
	}
	toDevice(t, small, make([]byte, 64))
	q := irecv(t, c, devDesc(c, small), peer, 1)
	if _, err := q.Wait(20 * time.Second); !errors.Is(err, backend.ErrTruncate) {
		t.Errorf("1 MiB into 64 bytes: %v, want ErrTruncate", err)
	}
	q.Release()
	if !bytes.Equal(fromDevice(t, small), make([]byte, 64)) {
		t.Error("a refused message wrote into the buffer")
	}
	waitAll(t, irecv(t, c, devDesc(c, small), peer, 2))
	waitAll(t, irecv(t, c, devDesc(c, big), peer, 3))
	if !bytes.Equal(fromDevice(t, big), pattern(1<<20, 5)) {
		t.Error("the message taken early and copied: wrong data")
	}
}

// TestGPUPeerLost: a rank aborts while its peer has a receive from it on
// the GPU; the receive ends with ErrPeerLost within seconds, and the
// aborting rank's own pending receive ends with its error.
func TestGPUPeerLost(t *testing.T) {
	c := openGPU(t, false)
	if c.rank > 1 {
		return
	}
	peer := 1 - c.rank
	d := devBuf(t, c, 1<<20)
	q := irecv(t, c, devDesc(c, d), peer, 1) // never sent
	q.Test()
	barrier(t, c, peer)
	start := time.Now()
	if c.rank == 0 {
		stop := errors.New("test abort")
		c.Abort(stop)
		t.Logf("Abort with a receive on the GPU took %v", time.Since(start))
		if _, err := q.Wait(time.Minute); !errors.Is(err, stop) {
			t.Errorf("the aborting rank's receive: %v", err)
		}
		q.Release()
		return
	}
	_, err := q.Wait(time.Minute)
	q.Release()
	if !errors.Is(err, backend.ErrPeerLost) {
		t.Errorf("a receive from the aborted rank: %v, want ErrPeerLost", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("noticed after %v", d)
	} else {
		t.Logf("noticed after %v", d)
	}
}

// TestGPUTimeout: a wait for a message never sent times out; Abort then
// ends it (ncclCommAbort with a receive on the GPU).
func TestGPUTimeout(t *testing.T) {
	c := openGPU(t, false)
	if c.rank > 1 {
		return
	}
	peer := 1 - c.rank
	d := devBuf(t, c, 8)
	q := irecv(t, c, devDesc(c, d), peer, 1)
	if _, err := q.Wait(300 * time.Millisecond); !errors.Is(err, backend.ErrTimeout) {
		t.Errorf("Wait: %v, want ErrTimeout", err)
	}
	barrier(t, c, peer)
	start := time.Now()
	c.Abort(backend.ErrTimeout)
	// Both ranks abort at about the same time: the receive ends with this
	// rank's abort, or with the peer's, whichever this rank saw first.
	if _, err := q.Wait(time.Minute); !errors.Is(err, backend.ErrTimeout) && !errors.Is(err, backend.ErrPeerLost) {
		t.Errorf("after Abort: %v, want ErrTimeout or ErrPeerLost", err)
	}
	q.Release()
	t.Logf("Abort took %v", time.Since(start))
}

// BenchmarkGPUPrimitives measures what one poll of a waiting request is
// made of on this machine: reading the clock, yielding, a mutex, and the
// CUDA queries (each a cgo call that makes the device's context current
// around the driver's call). It skips where the backend cannot run.
func BenchmarkGPUPrimitives(b *testing.B) {
	if err := (Driver{}).Available(); err != nil {
		b.Skip(err)
	}
	dev := cuda.Device(0)
	s, err := cuda.NewStream(dev)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	ev, err := cuda.NewEventNoTiming(dev)
	if err != nil {
		b.Fatal(err)
	}
	defer ev.Destroy()
	if err := ev.Record(s); err != nil {
		b.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		b.Fatal(err)
	}
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
	b.Run("Gosched", func(b *testing.B) {
		for b.Loop() {
			runtime.Gosched()
		}
	})
	b.Run("Mutex", func(b *testing.B) {
		// An uncontended lock and unlock around the shortest section
		// there is: one counter the mutex guards.
		var guarded struct {
			sync.Mutex
			n int
		}
		for b.Loop() {
			guarded.Lock()
			guarded.n++
			guarded.Unlock()
		}
	})
	b.Run("EventQuery", func(b *testing.B) {
		for b.Loop() {
			if _, err := ev.Query(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("StreamQuery", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Query(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("EventRecord", func(b *testing.B) {
		for b.Loop() {
			if err := ev.Record(s); err != nil {
				b.Fatal(err)
			}
		}
		s.Synchronize()
	})
	// EventSynchronize of an event that has happened: the least a
	// blocking wait costs.
	b.Run("EventSynchronizeDone", func(b *testing.B) {
		for b.Loop() {
			if err := ev.Synchronize(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// WriteValue64: the seal of a group with completion words.
	b.Run("WriteValue64", func(b *testing.B) {
		word, err := cuda.HostAlloc[uint64](8)
		if err != nil {
			b.Fatal(err)
		}
		defer word.Free()
		addr, err := word.DevicePtr()
		if err != nil {
			b.Skip(err)
		}
		var v uint64
		for b.Loop() {
			v++
			if err := s.WriteValue64(addr, v); err != nil {
				b.Skip(err)
			}
		}
		s.Synchronize()
	})
}

// TestGPUStreamPingPong: a ping-pong of stream-ordered messages of device
// memory on one stream per rank (IsendOn, IrecvOn), each round's data
// copied to the host on the same stream, as examples/pingpong -stream
// does: into page-locked memory and, in its own subtest, into ordinary Go
// memory (whose copy the driver makes the calling thread wait for).
func TestGPUStreamPingPong(t *testing.T) {
	for _, pinned := range []bool{true, false} {
		t.Run(fmt.Sprintf("pinned=%v", pinned), func(t *testing.T) {
			c := openGPU(t, false)
			if c.rank > 1 {
				return
			}
			peer := 1 - c.rank
			s := mustStream(t, c)
			const n = 4096
			d := devBuf(t, c, n)
			host := make([]byte, n)
			if pinned {
				p, err := cuda.HostAlloc[byte](n)
				if err != nil {
					t.Fatal(err)
				}
				defer p.Free()
				host = p.Slice()
			}
			done := make(chan error, 1)
			go func() {
				var reqs []backend.Request
				post := func(recv bool, tag int) error {
					var r backend.Request
					var err error
					if recv {
						r, err = c.IrecvOn(devDesc(c, d), peer, tag, 0, s)
					} else {
						r, err = c.IsendOn(devDesc(c, d), peer, tag, 0, s)
					}
					reqs = append(reqs, r)
					return err
				}
				for i := range 20 {
					var err error
					if c.rank == 0 {
						if err = cuda.CopyToDeviceAsync(d, pattern(n, uint64(i)), s); err == nil {
							if err = post(false, 1); err == nil {
								err = post(true, 2)
							}
						}
					} else if err = post(true, 1); err == nil {
						err = post(false, 2)
					}
					if err == nil {
						err = cuda.CopyToHostAsync(host, d, s)
					}
					if err == nil {
						err = s.Synchronize()
					}
					for _, r := range reqs {
						if r != nil {
							if _, werr := r.Wait(testWait); werr != nil && err == nil {
								err = werr
							}
							r.Release()
						}
					}
					reqs = reqs[:0]
					if err == nil && !bytes.Equal(host, pattern(n, uint64(i))) {
						err = fmt.Errorf("round %d: wrong data", i)
					}
					if err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the ping-pong did not finish in 20 s")
			}
		})
	}
}

// testJobs describes the ranks of an n-rank job in this process: rank 0
// listens on a fresh loopback port, and all share a fresh key.
func testJobs(t *testing.T, n int) []bootstrap.Job {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var k [16]byte
	rand.Read(k[:])
	jobs := make([]bootstrap.Job, n)
	for r := range jobs {
		jobs[r] = bootstrap.Job{Rank: r, Size: n, LocalRank: r, LocalSize: n, Launcher: "test",
			Key: hex.EncodeToString(k[:]), Addr: ln.Addr().String()}
	}
	jobs[0].Listener = ln
	return jobs
}

// realJob opens the communicators of an n-rank job in this process with
// the real driver, through a real bootstrap exchange.
func realJob(t *testing.T, n int, check bool) []*conn {
	t.Helper()
	return driverJob(t, n, Driver{}, check)
}

// driverJob opens the communicators of an n-rank job in this process with
// driver d (Driver or fakeDriver), through a real bootstrap exchange, and
// closes them when the test ends.
func driverJob(t *testing.T, n int, d backend.Driver, check bool) []*conn {
	t.Helper()
	cs := make([]*conn, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r, job := range testJobs(t, n) {
		wg.Go(func() {
			ex, err := bootstrap.Connect(ctx, job)
			if err != nil {
				t.Errorf("rank %d: bootstrap: %v", r, err)
				return
			}
			defer ex.Close()
			bc, err := d.Open(ctx, backend.Config{Job: jobOf(job), Exchange: ex, Check: check, Timeout: 5 * time.Second, Env: os.Getenv})
			if err != nil {
				t.Errorf("rank %d: Open: %v", r, err)
				return
			}
			cs[r] = bc.(*conn)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for r, c := range cs {
			if c != nil {
				wg.Go(func() {
					if err := c.Close(); err != nil {
						t.Errorf("rank %d: Close: %v", r, err)
					}
				})
			}
		}
		wg.Wait()
	})
	if t.Failed() {
		t.FailNow()
	}
	return cs
}
