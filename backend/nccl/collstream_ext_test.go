package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-mp/courier/backend/nccl"
	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// The stream-ordered collectives (mp's IallreduceOnStream and the other
// …OnStream forms), through mp, on the fake GPU (TestFakeGPUChild…) and on
// real GPUs (TestGPU…), with one check: streamCollectives.

// streamCase is one stream-ordered collective of the checks: its buffers'
// lengths in blocks of n elements, the call, and the element i a rank
// must get in recv (ok false where it gets nothing: a non-root's Reduce).
type streamCase struct {
	name               string
	sendBlocks, recvBy func(p int) int
	inPlace            bool
	call               func(c *mp.Comm, send, recv cuda.Slice[int32], s *cuda.Stream) (*mp.Request, error)
	want               func(r, p, n, i int) (v int32, ok bool)
}

func one(int) int        { return 1 }
func perRank(p int) int  { return p }
func src(r, i int) int32 { return int32(r*1000 + i + 1) } // element i of rank r's send

var streamCases = []streamCase{
	{"IallreduceOnStream in place", one, one, true,
		func(c *mp.Comm, send, recv cuda.Slice[int32], s *cuda.Stream) (*mp.Request, error) {
			return mp.IallreduceOnStream(c, send, recv, mp.Sum, s)
		},
		func(r, p, n, i int) (int32, bool) { return int32(1000*p*(p-1)/2 + p*(i+1)), true }},
	{"IbcastOnStream", one, one, true,
		func(c *mp.Comm, send, recv cuda.Slice[int32], s *cuda.Stream) (*mp.Request, error) {
			return mp.IbcastOnStream(c, recv, c.Size()-1, s)
		},
		func(r, p, n, i int) (int32, bool) { return src(p-1, i), true }},
	{"IreduceOnStream", one, one, false,
		func(c *mp.Comm, send, recv cuda.Slice[int32], s *cuda.Stream) (*mp.Request, error) {
			return mp.IreduceOnStream(c, send, recv, mp.Max, 0, s)
		},
		func(r, p, n, i int) (int32, bool) { return src(p-1, i), r == 0 }},
	{"IallgatherOnStream", one, perRank, false,
		func(c *mp.Comm, send, recv cuda.Slice[int32], s *cuda.Stream) (*mp.Request, error) {
			return mp.IallgatherOnStream(c, send, recv, s)
		},
		func(r, p, n, i int) (int32, bool) { return src(i/n, i%n), true }},
	{"IreduceScatterOnStream", perRank, one, false,
		func(c *mp.Comm, send, recv cuda.Slice[int32], s *cuda.Stream) (*mp.Request, error) {
			return mp.IreduceScatterOnStream(c, send, recv, mp.Sum, s)
		},
		func(r, p, n, i int) (int32, bool) {
			var v int32
			for k := range p {
				v += src(k, r*n+i)
			}
			return v, true
		}},
	{"IalltoallOnStream", perRank, perRank, false,
		func(c *mp.Comm, send, recv cuda.Slice[int32], s *cuda.Stream) (*mp.Request, error) {
			return mp.IalltoallOnStream(c, send, recv, s)
		},
		func(r, p, n, i int) (int32, bool) { return src(i/n, r*n+i%n), true }},
}

// streamCollectives runs each stream-ordered collective on c with blocks
// of n elements, as a program's step would: on one stream s, a copy that
// fills the send buffer (a kernel's part), the collective, and a copy of
// the result out (the next kernel), then one synchronize of s. With gate,
// s first waits on the GPU for a word of host memory that the CPU sets
// only after the calls: so the calls return while s cannot move (a call
// that synchronized s would never return, or fail on the fake), and before
// the word is set, the collective must not have run (the request is not
// done; recv still holds what it held) and once it is set, the copy queued
// after it sees its result.
//
// After a failure the memory, the stream and the host word are left as
// they are (the gate opened): the other ranks' collectives may still use
// them (on the fake GPU, whose NCCL writes every rank's memory).
func streamCollectives(c *mp.Comm, n int, gate bool) (err error) {
	p, r := c.Size(), c.Rank()
	dev, err := c.Device()
	if err != nil {
		return err
	}
	s, err := cuda.NewStream(dev)
	if err != nil {
		return err
	}
	var word cuda.Pinned[uint64]
	var wordAt uintptr
	var bufs []cuda.Slice[int32]
	defer func() {
		if err != nil {
			if gate {
				atomic.StoreUint64(&word.Slice()[0], uint64(len(streamCases)))
			}
			return
		}
		for _, b := range bufs {
			b.Free()
		}
		word.Free()
		s.Destroy()
	}()
	if gate {
		if word, err = cuda.HostAlloc[uint64](1); err != nil {
			return err
		}
		if wordAt, err = word.DevicePtr(); err != nil {
			return err
		}
		word.Slice()[0] = 0 // step k waits for k+1
	}
	alloc := func(len int, fill func(i int) int32) (cuda.Slice[int32], error) {
		v := make([]int32, len)
		for i := range v {
			v[i] = fill(i)
		}
		d, err := cuda.Alloc[int32](dev, int64(len))
		if err == nil && len > 0 {
			err = cuda.CopyToDevice(d, v)
		}
		bufs = append(bufs, d)
		return d, err
	}
	for step, cs := range streamCases {
		sendLen, recvLen := cs.sendBlocks(p)*n, cs.recvBy(p)*n
		if cs.inPlace {
			sendLen = recvLen
		}
		in, err := alloc(sendLen, func(i int) int32 { return src(r, i) }) // what the "kernel" writes
		if err != nil {
			return err
		}
		recv, err := alloc(recvLen, func(int) int32 { return -1 })
		if err != nil {
			return err
		}
		send := recv
		if !cs.inPlace {
			if send, err = alloc(sendLen, func(int) int32 { return -2 }); err != nil {
				return err
			}
		}
		out, err := alloc(recvLen, func(int) int32 { return -3 })
		if err != nil {
			return err
		}

		if gate {
			if err := s.WaitValue64(wordAt, uint64(step+1)); err != nil {
				return fmt.Errorf("closing the gate: %w", err)
			}
		}
		if err := cuda.CopyDeviceAsync(send, in, s); err != nil {
			return err
		}
		type posted struct {
			q   *mp.Request
			err error
		}
		done := make(chan posted, 1)
		go func() {
			q, err := cs.call(c, send, recv, s)
			if err == nil {
				err = cuda.CopyDeviceAsync(out, recv, s)
			}
			done <- posted{q, err}
		}()
		var got posted
		var waited bool
		select {
		case got = <-done:
		case <-time.After(10 * time.Second):
			waited = true
			atomic.StoreUint64(&word.Slice()[0], uint64(step+1)) // let it finish
			got = <-done
		}
		if got.err != nil {
			return fmt.Errorf("%s: %w", cs.name, got.err)
		}
		if waited {
			return fmt.Errorf("%s: the call waited for the stream (its gate was closed)", cs.name)
		}
		if gate {
			// Every rank has posted its part: only the gates hold the
			// collective back now.
			if err := mp.Barrier(c); err != nil {
				return err
			}
			if done, _, err := got.q.Test(); done && (p > 1 || err != nil) {
				return fmt.Errorf("%s: the collective completed before the work queued ahead of it on the stream had run (with error %v)", cs.name, err)
			}
			if v := hostOf(recv); recvLen > 0 && v[0] != -1 {
				return fmt.Errorf("%s: the receive buffer was written before the work queued ahead of the collective ran", cs.name)
			}
			atomic.StoreUint64(&word.Slice()[0], uint64(step+1))
		}
		if err := finish(s); err != nil {
			return fmt.Errorf("%s: %w", cs.name, err)
		}
		if _, err := got.q.Wait(); err != nil {
			return err
		}
		res := hostOf(out)
		for i := range res {
			want, ok := cs.want(r, p, n, i)
			if !ok {
				break
			}
			if res[i] != want {
				return fmt.Errorf("%s on %d ranks: rank %d: element %d is %d, want %d (-3: the copy after the collective did not run; -1: it ran before the collective, or the collective wrote nothing)",
					cs.name, p, r, i, res[i], want)
			}
		}
	}
	return nil
}

// finish waits until the work queued on s has run. It polls, where a
// program would call s.Synchronize: the fake GPU's synchronize fails at
// once when the stream cannot finish yet (here: another rank has not
// posted its part, or not opened its gate), where a GPU's would wait.
func finish(s *cuda.Stream) error {
	deadline := time.Now().Add(20 * time.Second)
	for delay := time.Microsecond; ; delay = min(2*delay, time.Millisecond) {
		done, err := s.Query()
		if done || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("the stream did not finish in 20 s")
		}
		time.Sleep(delay)
	}
}

// hostOf copies a device buffer to the host.
func hostOf(d cuda.Slice[int32]) []int32 {
	v := make([]int32, d.Len())
	if len(v) > 0 {
		cuda.CopyToHost(v, d)
	}
	return v
}

// streamCollectiveErrors checks the refusals and the fallback of the
// stream-ordered collectives on c (checks on): a mismatch between the
// ranks is ErrMismatch on every rank's request, before NCCL sees it; a
// collective NCCL lacks (a product of int16) runs through the host with
// the same result; argument errors come back at once.
func streamCollectiveErrors(c *mp.Comm) error {
	p, r := c.Size(), c.Rank()
	dev, err := c.Device()
	if err != nil {
		return err
	}
	s, err := cuda.NewStream(dev)
	if err != nil {
		return err
	}
	defer s.Destroy()
	x, err := cuda.Alloc[int32](dev, 4)
	if err != nil {
		return err
	}
	defer x.Free()
	op := mp.Sum
	if r == p-1 {
		op = mp.Max
	}
	q, err := mp.IallreduceOnStream(c, x, x, op, s)
	if err != nil {
		return err
	}
	if _, err := q.Wait(); !errors.Is(err, mp.ErrMismatch) {
		return fmt.Errorf("a Sum against a Max: %v, want ErrMismatch", err)
	}
	if _, err := mp.IallgatherOnStream(c, x, x, s); !errors.Is(err, mp.ErrInvalid) {
		return fmt.Errorf("an Allgather into a buffer of one block: %v, want ErrInvalid", err)
	}
	if _, err := mp.IallreduceOnStream(c, x, x, mp.Sum, nil); !errors.Is(err, mp.ErrInvalid) {
		return fmt.Errorf("no stream: %v, want ErrInvalid", err)
	}

	v := make([]int16, 5)
	for i := range v {
		v[i] = int16(r + 2)
	}
	d, err := cuda.Alloc[int16](dev, 5)
	if err != nil {
		return err
	}
	defer d.Free()
	if err := cuda.CopyToDeviceAsync(d, v, s); err != nil {
		return err
	}
	if q, err = mp.IallreduceOnStream(c, d, d, mp.Prod, s); err == nil {
		_, err = q.Wait()
	}
	if err != nil {
		return fmt.Errorf("a product of int16: %w", err)
	}
	out := make([]int16, 5)
	if err := cuda.CopyToHostAsync(out, d, s); err != nil {
		return err
	}
	want := int16(1)
	for k := range p {
		want *= int16(k + 2)
	}
	for i := range out {
		if out[i] != want {
			return fmt.Errorf("a product of int16 on %d ranks: element %d is %d, want %d", p, i, out[i], want)
		}
	}
	return nil
}

// TestFakeGPUChildStreamCollectives: the stream-ordered collectives on the
// fake GPU: results and ordering (with the gate where the driver has
// stream memory operations, as the first configuration's has) on 3 ranks
// with checks, on the halves of a Split of them (2 ranks through NCCL, 1
// through a copy on the stream), and on 2 ranks without checks; refusals
// and the fallback with checks; and on tcp, which synchronizes the stream.
func TestFakeGPUChildStreamCollectives(t *testing.T) {
	if os.Getenv("COURIER_TEST_FAKEGPU_CHILD") == "" {
		t.Skip("runs in the child process of TestFakeGPU")
	}
	gate := os.Getenv("FAKEGPU_NO_MEMOPS") != "1"
	for _, check := range []bool{true, false} {
		n := 3
		if !check {
			n = 2
		}
		cfg := ranktest.Config{Backend: "nccl", Options: []mp.Option{mp.WithEnv(os.Getenv), mp.WithCheck(check)}, Timeout: 20 * time.Second}
		ranktest.RunConfig(t, n, cfg, func(rt *ranktest.T, c *mp.Comm) {
			if err := streamCollectives(c, 300, gate); err != nil {
				rt.Errorf("check=%v, %d ranks: %v", check, n, err)
				return
			}
			if !check {
				return
			}
			half, err := c.Split(c.Rank()%2, 0)
			if err != nil {
				rt.Errorf("Split: %v", err)
				return
			}
			defer half.Close()
			if err := streamCollectives(half, 100, gate); err != nil {
				rt.Errorf("on %s (%d ranks): %v", half.Name(), half.Size(), err)
			}
			if err := streamCollectiveErrors(c); err != nil {
				rt.Errorf("%v", err)
			}
		})
	}
	// On tcp the call synchronizes the stream and stages the buffers
	// through the host: the same results, in the same order on the stream
	// (no gate: the call waits for the stream there).
	cfg := ranktest.Config{Backend: "tcp", Options: []mp.Option{mp.WithEnv(os.Getenv)}, Timeout: 20 * time.Second}
	ranktest.RunConfig(t, 2, cfg, func(rt *ranktest.T, c *mp.Comm) {
		if err := streamCollectives(c, 100, false); err != nil {
			rt.Errorf("tcp: %v", err)
		}
	})
}

// TestGPUStreamCollectives: the stream-ordered collectives on real GPUs,
// through mp on the nccl backend, with the gate: on one GPU as one rank
// (NCCL takes one rank per GPU; the collective is then a copy on the
// stream), and as every rank of a launch on more:
//
//	COURIER_REQUIRE_GPU=1 ./nccl.test -test.run '^TestGPUStreamCollectives$' -test.v
//	mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 -x COURIER_REQUIRE_GPU=2 ./nccl.test -test.run '^TestGPUStreamCollectives$' -test.v
//
// Then the same on a Dup of the communicator (new NCCL communicators),
// and, with more than one rank, the refusals and the fallback with checks.
func TestGPUStreamCollectives(t *testing.T) {
	need := 1
	if v, err := strconv.Atoi(os.Getenv("COURIER_REQUIRE_GPU")); err == nil && v > 0 {
		need = v
	}
	job := gpuJob(t)
	if os.Getenv("COURIER_REQUIRE_GPU") != "" && job.Size < need {
		t.Fatalf("COURIER_REQUIRE_GPU=%d, but this is a job of %d rank(s): start it as %d ranks", need, job.Size, need)
	}
	// A rendezvous of its own: the other GPU tests' exchange uses the
	// launch's first generation.
	job.Generation = 41
	// Where ranks share a GPU (more ranks on this host than GPUs), NCCL
	// runs no collective: package mp runs them over point-to-point
	// messages once the stream has reached them, so the stream cannot be
	// held at a gate until they are all posted.
	gate := true
	if n, err := cuda.DeviceCount(); err == nil && job.LocalSize > n {
		gate = false
		t.Logf("%d ranks on %d GPU(s): the collectives wait for the stream on the CPU (no gate)", job.LocalSize, n)
	}
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprintf("check=%v", check), func(t *testing.T) {
			job.Generation++
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := mp.Init(ctx, mp.WithJob(job), mp.WithBackend("nccl"), mp.WithCheck(check), mp.WithTimeout(30*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			if err := streamCollectives(c, 1<<20, gate); err != nil {
				t.Fatalf("rank %d of %d: %v", c.Rank(), c.Size(), err)
			}
			t.Logf("rank %d of %d: the six collectives of 4 MiB blocks in %v", c.Rank(), c.Size(), time.Since(start))
			d, err := c.Dup()
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if err := streamCollectives(d, 1000, gate); err != nil {
				t.Fatalf("on a Dup: rank %d of %d: %v", c.Rank(), c.Size(), err)
			}
			if check && c.Size() > 1 {
				if err := streamCollectiveErrors(c); err != nil {
					t.Fatalf("rank %d: %v", c.Rank(), err)
				}
			}
		})
	}
}

// gpuJob is the launch a GPU test of the nccl backend runs in: it skips
// where the backend is not available (no GPU, no NCCL), but fails there
// when COURIER_REQUIRE_GPU is set, so that a run on a GPU machine cannot
// pass by skipping.
func gpuJob(t *testing.T) bootstrap.Job {
	t.Helper()
	if err := (nccl.Driver{}).Available(); err != nil {
		if os.Getenv("COURIER_REQUIRE_GPU") != "" || !errors.Is(err, mp.ErrNotSupported) {
			t.Fatalf("COURIER_REQUIRE_GPU=%q: the nccl backend is not available: %v", os.Getenv("COURIER_REQUIRE_GPU"), err)
		}
		t.Skipf("the nccl backend is not available here: %v", err)
	}
	job, err := bootstrap.Detect()
	if err != nil {
		t.Fatal(err)
	}
	return job
}
