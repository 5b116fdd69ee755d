package nccl_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/internal/trace"
	"github.com/courier-mp/courier/mp"
)

// The timeline's GPU times (mp's COURIER_TRACE, tracegpu.go) on the nccl
// backend: the stream-ordered calls and a span of the program's own on a
// stream are timed by CUDA events, on the fake GPU (TestFakeGPUChild…)
// and on real GPUs (TestGPU…), with one step and one check.

// tracedStep queues on c what a training step's communication does on
// its streams: a span of the program's own around a fill of x on s (the
// kernel's part), x sent to the next rank on s and received from the
// previous one on r (another stream, so that the two ranks' receives do
// not hold up their sends), and an all-reduce of x on s; then waits.
func tracedStep(c *mp.Comm) error {
	dev, err := c.Device()
	if err != nil {
		return err
	}
	var s, r *cuda.Stream
	if s, err = cuda.NewStream(dev); err != nil {
		return err
	}
	defer s.Destroy()
	if r, err = cuda.NewStream(dev); err != nil {
		return err
	}
	defer r.Destroy()
	const n = 1 << 16
	x, err := cuda.Alloc[float32](dev, n)
	if err != nil {
		return err
	}
	defer x.Free()
	y, err := cuda.Alloc[float32](dev, n)
	if err != nil {
		return err
	}
	defer y.Free()
	next, prev := (c.Rank()+1)%c.Size(), (c.Rank()+c.Size()-1)%c.Size()
	span := c.TraceOnStream("fill", s)
	if err := cuda.MemsetAsync(x, 0, s); err != nil {
		return err
	}
	span.End()
	in := mp.IrecvOnStream(c, y, prev, 3, r)
	out := mp.IsendOnStream(c, x, next, 3, s)
	sum, err := mp.IallreduceOnStream(c, x, x, mp.Sum, s)
	if err != nil {
		return err
	}
	if err := mp.WaitAll(in, out, sum); err != nil {
		return err
	}
	return errors.Join(s.Synchronize(), r.Synchronize())
}

// checkTracedStep checks the file of one rank that ran tracedStep: each
// span on its stream's track, timed on the GPU, in the stream's order.
func checkTracedStep(path string) error {
	f, err := trace.ReadFile(path)
	if err != nil {
		return err
	}
	got := map[string]trace.Event{}
	for _, e := range f.TraceEvents {
		if e.Ph == "X" {
			got[e.Name] = e
		}
	}
	for name, track := range map[string]string{"fill": "stream 1", "IsendOnStream": "stream 1", "IallreduceOnStream": "stream 1", "IrecvOnStream": "stream 2"} {
		e, ok := got[name]
		switch {
		case !ok:
			return fmt.Errorf("%s: no %s span", path, name)
		case e.Args.Track != track:
			return fmt.Errorf("%s: %s on track %q, want %q", path, name, e.Args.Track, track)
		case e.Args.Clock != "gpu" || e.Args.PostedUs == nil || e.Args.Stream == "":
			return fmt.Errorf("%s: %s not timed on the GPU: %+v", path, name, *e.Args)
		case e.Args.Pending || e.Args.Error != "":
			return fmt.Errorf("%s: %s pending or failed: %+v", path, name, *e.Args)
		}
	}
	// On stream 1 the fill, the send and the all-reduce ran in turn.
	fill, send, sum := got["fill"], got["IsendOnStream"], got["IallreduceOnStream"]
	const slack = 1 // µs: the GPU's times are in float32 milliseconds
	if fill.Ts > send.Ts+slack || send.Ts > sum.Ts+slack || fill.Ts+*fill.Dur > send.Ts+*send.Dur+slack {
		return fmt.Errorf("%s: the GPU times of stream 1 are out of its order: fill at %v (%v), send at %v (%v), all-reduce at %v",
			path, fill.Ts, *fill.Dur, send.Ts, *send.Dur, sum.Ts)
	}
	return nil
}

// TestFakeGPUChildTrace: the GPU times of the timeline on the fake GPU,
// on 2 ranks.
func TestFakeGPUChildTrace(t *testing.T) {
	if os.Getenv("COURIER_TEST_FAKEGPU_CHILD") == "" {
		t.Skip("runs in the child process of TestFakeGPU")
	}
	dir := t.TempDir()
	cfg := ranktest.Config{Backend: "nccl", Timeout: 20 * time.Second,
		Options: []mp.Option{mp.WithEnv(os.Getenv), mp.WithTrace(filepath.Join(dir, "step.json"))}}
	ranktest.RunConfig(t, 2, cfg, func(rt *ranktest.T, c *mp.Comm) {
		if err := tracedStep(c); err != nil {
			rt.Errorf("rank %d: %v", c.Rank(), err)
		}
	})
	for r := range 2 {
		if err := checkTracedStep(filepath.Join(dir, "step.rank"+strconv.Itoa(r)+".json")); err != nil {
			t.Error(err)
		}
	}
}

// TestGPUTrace: the GPU times of the timeline on real GPUs, on one GPU
// as one rank (the messages to itself are copies, the all-reduce a copy
// on the stream) or as every rank of a launch:
//
//	COURIER_REQUIRE_GPU=1 ./nccl.test -test.run '^TestGPUTrace$' -test.v
//	mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 -x COURIER_REQUIRE_GPU=2 ./nccl.test -test.run '^TestGPUTrace$' -test.v
func TestGPUTrace(t *testing.T) {
	job := gpuJob(t)
	job.Generation = 61                                // a rendezvous of its own, as TestGPUStreamCollectives's
	spec := filepath.Join(t.TempDir(), "step-%r.json") // each rank's process checks its own
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := mp.Init(ctx, mp.WithJob(job), mp.WithBackend("nccl"), mp.WithTimeout(30*time.Second), mp.WithTrace(spec))
	if err != nil {
		t.Fatal(err)
	}
	stepErr := tracedStep(c)
	if err := errors.Join(stepErr, c.Close()); err != nil {
		t.Fatalf("rank %d: %v", job.Rank, err)
	}
	path := strings.ReplaceAll(spec, "%r", strconv.Itoa(job.Rank))
	if err := checkTracedStep(path); err != nil {
		t.Fatal(err)
	}
	f, _ := trace.ReadFile(path)
	for _, e := range f.TraceEvents {
		if e.Ph == "X" {
			t.Logf("rank %d: %-18s %-8s GPU %9.3f µs for %7.3f µs; called at %9.3f µs", job.Rank, e.Name, e.Args.Track, e.Ts, *e.Dur, *e.Args.PostedUs)
		}
	}
}
