//go:build cgo

package nccl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/testscope"
)

// The real engine (the C layer, the device engine, staging, events,
// channels of NCCL communicators) on testdata/fakegpu.c: a fake CUDA
// driver and NCCL in one library, built here with the C compiler and
// loaded through the real loaders. The cuda package loads its driver once
// per process, so the tests run in a child process of this test binary
// with COURIER_CUDA_LIBRARY and COURIER_NCCL_LIBRARY naming the fake; the
// child runs the tests named TestFakeGPUChild*, in-process ranks sharing
// the fake's "GPUs".

// fakeGPUChildEnv marks the child process.
const fakeGPUChildEnv = "COURIER_TEST_FAKEGPU_CHILD"

func init() {
	if os.Getenv(fakeGPUChildEnv) != "" {
		shortForm = ""
		return
	}
	shortForm += "; the fake GPU's, checked on 2 ranks, in its first configuration only"
}

func TestFakeGPU(t *testing.T) {
	if os.Getenv(fakeGPUChildEnv) != "" {
		t.Skip("in the child")
	}
	if testing.Short() {
		t.Skip("builds a C library and runs a child process")
	}
	t.Parallel() // child processes, beside the in-process suites
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler:", err)
	}
	lib := filepath.Join(t.TempDir(), "libfakegpu.so")
	// -I .: the fake includes nccl_types.h, NCCL's types as the loader
	// (nccl_wrap.c) sees them.
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", ".", "-o", lib, "testdata/fakegpu.c", "-lpthread").CombinedOutput()
	if err != nil {
		t.Fatalf("building the fake: %v\n%s", err, out)
	}
	// Every child test with blocking communicators, completion words and
	// shared streams (the defaults), and again with non-blocking ones
	// (whose groups the fake leaves in progress now and then), a driver
	// without stream memory operations (so completion falls back to
	// events) and a stream per direction.
	// The conformance suite runs in the first configuration only in the
	// short form (see TestFakeGPUChildConformance) and under the race
	// detector (about 3 minutes in each there; every configuration runs it
	// in CI's plain test step).
	//
	// The children wait more than they compute (connections, rendezvous,
	// the fake's streams), so they run side by side, the conformance suite
	// in children of its own; each child still runs its tests one at a
	// time, as they set the fake's variables.
	type config struct{ blocking, noMemOps, events, shared, device string }
	first := config{}
	second := config{blocking: "0", noMemOps: "1", shared: "0"}
	// Blocking communicators with events (the seal recorded in the
	// launch's C call).
	third := config{events: "1"}
	// Every rank on fake GPU 0: the IPC path (ipc_fakegpu_test.go), and
	// the conformance suite over it.
	shared := config{device: "0"}
	const conformance = "^TestFakeGPUChildConformance$"
	// Its two halves, in children of their own.
	const checked, unchecked = conformance + "/^checked$", conformance + "/^unchecked$"
	type child struct {
		tests, skip string
		config
	}
	children := []child{
		{checked, "", first},
		{"^TestFakeGPUChild", conformance, first},
		{"^TestFakeGPUChild", conformance, second},
		{"^TestFakeGPUChild(Device|Allocs)$", "", third},
		{"^TestFakeGPUChildIPC", "", shared},
		// The IPC path's marks as events: a driver without stream memory
		// operations (the stream-ordered operations need them).
		{"^TestFakeGPUChildIPC", "Streams|PendingCopy", config{device: "0", noMemOps: "1"}},
	}
	if testscope.Full() {
		// The short form has the suite over the IPC path on the fake
		// engine (TestConformanceFakeIPC).
		children = append(children, child{checked, "", shared})
		children = append(children, child{unchecked, "", first})
		if !raceEnabled {
			children = append(children, child{checked, "", second}, child{unchecked, "", second})
		}
	}
	outs := make([][]byte, len(children))
	errs := make([]error, len(children))
	slots := make(chan struct{}, fakeGPUChildren)
	var wg sync.WaitGroup
	for i, run := range children {
		args := []string{"-test.run=" + run.tests, "-test.skip=" + run.skip, "-test.count=1", "-test.timeout=10m"}
		if testing.Verbose() {
			args = append(args, "-test.v")
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), fakeGPUChildEnv+"=1", "COURIER_CUDA_LIBRARY="+lib, LibraryEnv+"="+lib, "COURIER_REQUIRE_GPU=",
			BlockingEnv+"="+run.blocking, "FAKEGPU_NO_MEMOPS="+run.noMemOps, EventsEnv+"="+run.events, SharedStreamEnv+"="+run.shared,
			DeviceEnv+"="+run.device)
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			outs[i], errs[i] = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	for i, run := range children {
		what := fmt.Sprintf("the child (-test.run=%s -test.skip=%s, %s=%q, FAKEGPU_NO_MEMOPS=%q, %s=%q, %s=%q, %s=%q)",
			run.tests, run.skip, BlockingEnv, run.blocking, run.noMemOps, EventsEnv, run.events, SharedStreamEnv, run.shared, DeviceEnv, run.device)
		if errs[i] != nil {
			t.Errorf("%s: %v\n%s", what, errs[i], outs[i])
		} else if testing.Verbose() {
			t.Logf("%s:\n%s", what, outs[i])
		}
	}
}

// fakeGPUChildren bounds the child processes TestFakeGPU runs at once.
const fakeGPUChildren = 3

// fakeGPUChild skips t unless this is the child, and checks that the
// fake is what got loaded.
func fakeGPUChild(t *testing.T) {
	t.Helper()
	if os.Getenv(fakeGPUChildEnv) == "" {
		t.Skip("runs in the child process of TestFakeGPU")
	}
	if err := (Driver{}).Available(); err != nil {
		t.Fatalf("the fake GPU is not available: %v", err)
	}
	if name, _ := cuda.Device(0).Name(); name != "Fake GPU 0" {
		t.Fatalf("device 0 is %q, not the fake", name)
	}
}

// TestFakeGPUChildDevice: device and host buffers, both ways, with and
// without checks; WaitOn; a mismatch refused with device memory; a message
// to oneself through device memory; Abort with a receive on the "GPU".
func TestFakeGPUChildDevice(t *testing.T) {
	fakeGPUChild(t)
	for _, check := range []bool{false, true} {
		cs := realJob(t, 2, check)
		// Completion words where the driver can write them, events where
		// it cannot (FAKEGPU_NO_MEMOPS=1).
		wantFlags := os.Getenv("FAKEGPU_NO_MEMOPS") != "1" && os.Getenv(EventsEnv) != "1"
		for _, c := range cs {
			if got := c.eng.(*device).flags != nil; got != wantFlags {
				t.Errorf("rank %d: completion words in use: %v, want %v", c.rank, got, wantFlags)
			}
		}
		for _, n := range []int{0, 1, 1000, 3 << 20} {
			for _, dev := range []bool{false, true} {
				want := pattern(n, uint64(n))
				ranks(cs, func(r int, c *conn) {
					peer := 1 - r
					host := make([]byte, n)
					var ds cuda.Slice[byte]
					b := bufOf(host, backend.Uint8)
					if dev {
						ds = devBuf(t, c, int64(n))
						b = devDesc(c, ds)
					}
					if r == 0 {
						if dev {
							toDevice(t, ds, want)
						} else {
							copy(host, want)
						}
						waitAll(t, isend(t, c, b, peer, 1))
						return
					}
					q := irecv(t, c, b, peer, 1)
					st, err := q.Wait(testWait)
					q.Release()
					if err != nil || st != (backend.Status{Source: peer, Tag: 1, Count: int64(n)}) {
						t.Errorf("check=%v, %d bytes, device %v: %v, %+v", check, n, dev, err, st)
						return
					}
					got := host
					if dev {
						got = fromDevice(t, ds)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("check=%v, %d bytes, device %v: wrong data", check, n, dev)
					}
				})
			}
		}

		// WaitOn: a stream waits for a device receive.
		ranks(cs, func(r int, c *conn) {
			d := devBuf(t, c, 4096)
			if r == 0 {
				toDevice(t, d, pattern(4096, 9))
				waitAll(t, isend(t, c, devDesc(c, d), 1, 2))
				return
			}
			s := mustStream(t, c)
			out := devBuf(t, c, 4096)
			q := irecv(t, c, devDesc(c, d), 0, 2)
			if err := WaitOn(q, s); err != nil {
				t.Errorf("WaitOn: %v", err)
			}
			if err := cuda.CopyDeviceAsync(out, d, s); err != nil {
				t.Error(err)
			}
			waitAll(t, q)
			if err := s.Synchronize(); err != nil {
				t.Error(err)
			}
			if !bytes.Equal(fromDevice(t, out), pattern(4096, 9)) {
				t.Error("WaitOn: wrong data")
			}
		})

		// Self, device to device and to host.
		for _, c := range cs {
			a, b := devBuf(t, c, 64), devBuf(t, c, 64)
			toDevice(t, a, pattern(64, 3))
			waitAll(t, isend(t, c, devDesc(c, a), c.rank, 3), irecv(t, c, devDesc(c, b), c.rank, 3))
			if !bytes.Equal(fromDevice(t, b), pattern(64, 3)) {
				t.Error("self through device memory: wrong data")
			}
		}
	}

	// Checked: a truncated device message leaves the buffer alone, and a
	// later tag is taken first.
	cs := realJob(t, 2, true)
	ranks(cs, func(r int, c *conn) {
		big, small := devBuf(t, c, 1<<20), devBuf(t, c, 16)
		if r == 0 {
			toDevice(t, big, pattern(1<<20, 4))
			waitAll(t, isend(t, c, devDesc(c, big), 1, 1), isend(t, c, devDesc(c, big), 1, 3), isend(t, c, devDesc(c, small), 1, 2))
			return
		}
		q := irecv(t, c, devDesc(c, small), 0, 1)
		if _, err := q.Wait(testWait); !errors.Is(err, backend.ErrTruncate) {
			t.Errorf("1 MiB into 16 bytes: %v", err)
		}
		q.Release()
		if !bytes.Equal(fromDevice(t, small), make([]byte, 16)) {
			t.Error("a refused message wrote into the buffer")
		}
		waitAll(t, irecv(t, c, devDesc(c, small), 0, 2), irecv(t, c, devDesc(c, big), 0, 3))
		if !bytes.Equal(fromDevice(t, big), pattern(1<<20, 4)) {
			t.Error("the message taken early: wrong data")
		}
	})

	// Abort with a receive on the "GPU"; the peer sees the rank lost.
	cs = realJob(t, 2, false)
	ranks(cs, func(r int, c *conn) {
		d := devBuf(t, c, 8)
		q := irecv(t, c, devDesc(c, d), 1-r, 9) // never sent
		q.Test()
		barrier(t, c, 1-r)
		if r == 0 {
			c.Abort(backend.ErrAborted)
			if _, err := q.Wait(testWait); !errors.Is(err, backend.ErrAborted) {
				t.Errorf("after Abort: %v", err)
			}
		} else if _, err := q.Wait(testWait); !errors.Is(err, backend.ErrPeerLost) {
			t.Errorf("a receive from the aborted rank: %v", err)
		}
		q.Release()
	})
}

// TestFakeGPUChildAllocs: a message costs no allocation in steady state
// (without checks), host or device memory: requests, groups, staging and
// events are reused, and the C calls return their results by value.
func TestFakeGPUChildAllocs(t *testing.T) {
	fakeGPUChild(t)
	noAllocs(t, realJob(t, 2, false))
}

// TestFakeGPUChildIPCAllocs: the same over the CUDA IPC path (both ranks
// on fake GPU 0). Before, a device message allocated 1.5 times: the
// queues of sends and of copies gave up their arrays' fronts, and the
// allocation lookup's results escaped through a cgo call.
func TestFakeGPUChildIPCAllocs(t *testing.T) {
	fakeGPUChild(t)
	noAllocs(t, realJob(t, 2, false))
}

// noAllocs fails t if a round trip between ranks 0 and 1 of cs, of 4 KiB
// in host and in device memory, allocates in steady state.
func noAllocs(t *testing.T, cs []*conn) {
	t.Helper()
	for _, dev := range []bool{false, true} {
		bufs := make([]backend.Buffer, 2)
		for r, c := range cs {
			bufs[r] = bufOf(make([]byte, 4096), backend.Uint8)
			if dev {
				bufs[r] = devDesc(c, devBuf(t, c, 4096))
			}
		}
		// Rank 1 echoes exactly as many messages as rank 0 sends: 20 to
		// warm the pools, then AllocsPerRun's warm-up run and its 200.
		const warmup, runs = 20, 200
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range warmup + 1 + runs {
				q, err := cs[1].Irecv(bufs[1], 0, 1, 0)
				if err != nil {
					t.Errorf("rank 1: Irecv: %v", err)
					return
				}
				if _, err := q.Wait(testWait); err != nil {
					t.Errorf("rank 1: receive: %v", err)
					return
				}
				q.Release()
				s, err := cs[1].Isend(bufs[1], 0, 1, 0)
				if err != nil {
					t.Errorf("rank 1: Isend: %v", err)
					return
				}
				if _, err := s.Wait(testWait); err != nil {
					t.Errorf("rank 1: send: %v", err)
					return
				}
				s.Release()
			}
		}()
		var failed atomic.Bool
		roundTrip := func() {
			if failed.Load() {
				return
			}
			s, err := cs[0].Isend(bufs[0], 1, 1, 0)
			if err == nil {
				_, err = s.Wait(testWait)
				s.Release()
			}
			if err != nil {
				failed.Store(true)
				t.Errorf("rank 0: send: %v", err)
				return
			}
			q, err := cs[0].Irecv(bufs[0], 1, 1, 0)
			if err == nil {
				_, err = q.Wait(testWait)
				q.Release()
			}
			if err != nil {
				failed.Store(true)
				t.Errorf("rank 0: receive: %v", err)
			}
		}
		for range warmup {
			roundTrip()
		}
		start := time.Now()
		allocs := testing.AllocsPerRun(runs, roundTrip)
		t.Logf("device %v: %v per round trip on the fake", dev, time.Since(start)/(runs+1))
		<-done
		if failed.Load() {
			return
		}
		t.Logf("device %v: %.2f allocations per round trip (both ranks)", dev, allocs)
		if allocs > 0 && !raceEnabled {
			t.Errorf("device %v: %.2f allocations per round trip, want 0", dev, allocs)
		}
	}
}

// TestFakeGPUChildOpenBounded: when NCCL's (blocking) communicator
// creation never returns, Open still returns, with an error that says
// what did not finish, once its context ends.
func TestFakeGPUChildOpenBounded(t *testing.T) {
	fakeGPUChild(t)
	if os.Getenv(BlockingEnv) == "0" {
		t.Skip("non-blocking communicators: their creation is polled and aborted (TestFakeGPUChildDevice covers them)")
	}
	t.Setenv("FAKEGPU_INIT_NEVER", "1")
	const bound = 2 * time.Second
	var wg sync.WaitGroup
	for r, job := range testJobs(t, 2) {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			ex, err := bootstrap.Connect(ctx, job)
			if err != nil {
				t.Errorf("rank %d: bootstrap: %v", r, err)
				return
			}
			defer ex.Close()
			start := time.Now()
			bc, err := Driver{}.Open(ctx, backend.Config{Job: jobOf(job), Exchange: ex, Env: os.Getenv})
			took := time.Since(start)
			if err == nil {
				bc.Close()
				t.Errorf("rank %d: Open succeeded with a communicator that never finished", r)
				return
			}
			t.Logf("rank %d: Open after %v: %v", r, took.Round(time.Millisecond), err)
			if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not finish") {
				t.Errorf("rank %d: Open: %v, want an error saying what did not finish, matching context.DeadlineExceeded", r, err)
			}
			if took > bound+5*time.Second {
				t.Errorf("rank %d: Open returned %v after its context's end", r, took-bound)
			}
		})
	}
	wg.Wait()
}

// TestFakeGPUChildFault: a fault on the GPU while a receive waits (the
// stream stops; with completion words, the word is never written) ends the
// wait with the driver's error, not never.
func TestFakeGPUChildFault(t *testing.T) {
	fakeGPUChild(t)
	cs := realJob(t, 2, false)
	t.Setenv("FAKEGPU_FAULT", "1")
	got := make([]byte, 8)
	q := irecv(t, cs[1], bufOf(got, backend.Uint8), 0, 1) // rank 0 never sends
	awaitFault(t, q, "a receive on a faulted GPU")
}

// awaitFault waits for q, which a fault on the fake GPU must end with the
// driver's error (700), not a timeout, within 5 s; what names the wait.
func awaitFault(t *testing.T, q backend.Request, what string) {
	t.Helper()
	start := time.Now()
	_, err := q.Wait(10 * time.Second)
	took := time.Since(start)
	t.Logf("after %v: %v", took.Round(time.Millisecond), err)
	if err == nil || errors.Is(err, backend.ErrTimeout) || !strings.Contains(err.Error(), "700") {
		t.Fatalf("%s: %v, want the driver's error (700)", what, err)
	}
	if took > 5*time.Second {
		t.Errorf("the fault was noticed after %v", took)
	}
}

// TestFakeGPUChildCollectives: collChecks on the fake GPU, 2 and 3 ranks;
// and with CollectivesEnv=0, no communicator of every rank and ErrSkip.
func TestFakeGPUChildCollectives(t *testing.T) {
	fakeGPUChild(t)
	for _, n := range []int{2, 3} {
		cs := realJob(t, n, false)
		ranks(cs, func(r int, c *conn) {
			if !c.world {
				t.Errorf("rank %d: no communicator of every rank", r)
				return
			}
			collChecks(t, c)
			if n == 2 {
				collOnRefusals(t, c)
			}
		})
	}
	t.Setenv(CollectivesEnv, "0")
	cs := realJob(t, 2, false)
	ranks(cs, func(r int, c *conn) {
		x := []float32{1}
		if c.world || c.eng.(*device).comms[worldChan(2)] != 0 {
			t.Errorf("rank %d: %s=0, and the communicator of every rank was made", r, CollectivesEnv)
		}
		if _, err := c.Collective(backend.Coll{Kind: backend.Allreduce, Send: bufOf(x, backend.Float32), Recv: bufOf(x, backend.Float32), Op: backend.Sum}); !errors.Is(err, backend.ErrSkip) {
			t.Errorf("rank %d: %s=0: Collective: %v, want ErrSkip", r, CollectivesEnv, err)
		}
	})
}

// otherStream is a backend.Stream that is not a *cuda.Stream.
type otherStream struct{}

func (otherStream) Handle() uintptr { return 1 }

// collOnRefusals: CollectiveOn refuses what it cannot order on the
// caller's stream (ErrInvalid: host buffers, a stream of another device
// or of another kind, none) and hands back what NCCL does not run
// (ErrSkip), before anything is queued: a collective after them runs.
func collOnRefusals(t *testing.T, c *conn) {
	s := mustStream(t, c)
	d := devDesc(c, devBuf(t, c, 8))
	d.Type, d.Count = backend.Int32, 2
	other, err := cuda.NewStream(cuda.Device(1 - c.dev))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Destroy()
	h := bufOf([]int32{1, 2}, backend.Int32)
	for name, tc := range map[string]struct {
		co   backend.Coll
		s    backend.Stream
		want error
	}{
		"host buffers":         {backend.Coll{Kind: backend.Allreduce, Send: h, Recv: h, Op: backend.Sum}, s, backend.ErrInvalid},
		"another GPU's stream": {backend.Coll{Kind: backend.Allreduce, Send: d, Recv: d, Op: backend.Sum}, other, backend.ErrInvalid},
		"not a cuda.Stream":    {backend.Coll{Kind: backend.Allreduce, Send: d, Recv: d, Op: backend.Sum}, otherStream{}, backend.ErrInvalid},
		"no stream":            {backend.Coll{Kind: backend.Allreduce, Send: d, Recv: d, Op: backend.Sum}, new(cuda.Stream), backend.ErrInvalid},
		"a Barrier":            {backend.Coll{Kind: backend.Barrier}, s, backend.ErrSkip},
		"a product of int16":   {backend.Coll{Kind: backend.Allreduce, Send: withType(d, backend.Int16), Recv: withType(d, backend.Int16), Op: backend.Prod}, s, backend.ErrSkip},
	} {
		if r, err := c.CollectiveOn(tc.co, tc.s); !errors.Is(err, tc.want) {
			if r != nil {
				r.Release()
			}
			t.Errorf("rank %d: CollectiveOn with %s: %v, want %v", c.rank, name, err, tc.want)
		}
	}
	x := []int32{int32(c.rank), 1}
	r, err := c.Collective(backend.Coll{Kind: backend.Allreduce, Send: bufOf(x, backend.Int32), Recv: bufOf(x, backend.Int32), Op: backend.Sum})
	if err == nil {
		_, err = r.Wait(testWait)
		r.Release()
	}
	if err != nil || x[0] != 1 || x[1] != 2 {
		t.Errorf("rank %d: an Allreduce after the refusals: %v, %v", c.rank, x, err)
	}
}

// withType is b holding elements of type dt (as many bytes or fewer).
func withType(b backend.Buffer, dt backend.DType) backend.Buffer {
	b.Count = b.Len() / int64(dt.Size())
	b.Type = dt
	return b
}
