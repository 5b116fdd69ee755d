//go:build cgo

package nccl_test

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/courier-mp/courier/backend/nccl"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/bench"
	"github.com/courier-mp/courier/internal/conformance"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/internal/testscope"
	"github.com/courier-mp/courier/mp"
)

// TestFakeGPUChildConformance runs the conformance suite with the real
// nccl driver on the fake GPU library (see TestFakeGPU, which starts this
// in a child process): with checks, every case on 2, 3 and 4 ranks (each
// with a fake GPU of its own; the light cases on 2 alone under the race
// detector); without,
// the cases that do not need them. The short form (see
// internal/testscope) runs the checked cases on 2 ranks alone.
func TestFakeGPUChildConformance(t *testing.T) {
	if os.Getenv("COURIER_TEST_FAKEGPU_CHILD") == "" {
		t.Skip("runs in the child process of TestFakeGPU")
	}
	runner := func(opts ...mp.Option) conformance.Runner {
		return func(t *testing.T, n int, f func(t conformance.T, c *mp.Comm)) {
			t.Helper()
			opts := append([]mp.Option{mp.WithEnv(os.Getenv)}, opts...)
			cfg := ranktest.Config{Backend: "nccl", Options: opts, Timeout: 10 * time.Second}
			ranktest.RunConfig(t, n, cfg, func(rt *ranktest.T, c *mp.Comm) { f(rt, c) })
		}
	}
	t.Run("checked", func(t *testing.T) {
		if !testscope.Full() {
			// 2 ranks; the heavy cases take the same connection's code
			// over the fake engine (TestConformanceFakeChecked).
			conformance.RunLight(t, 2, runner(mp.WithCheck(true)), "TestConformanceFakeChecked")
			return
		}
		if nccl.RaceEnabled {
			// Minutes under the race detector: 2 ranks, the light cases
			// (Coll/Thresholds, 10-14 s alone there, ran past its 25 s
			// bound in CI beside the other packages' race tests); every
			// case on 2, 3 and 4 ranks runs in CI's plain step.
			conformance.RunLight(t, 2, runner(mp.WithCheck(true)), "the full form without -race, and TestConformanceFakeChecked")
			return
		}
		counts := []int{2, 3, 4}
		for _, n := range counts {
			conformance.Run(t, n, runner(mp.WithCheck(true)))
		}
	})
	t.Run("unchecked", func(t *testing.T) {
		if !testscope.Full() {
			t.Skipf("the short form; %s=1 runs it", testscope.Env)
		}
		run := runner(mp.WithCheck(false))
		for _, cs := range conformance.Cases() {
			t.Run(cs.Name, func(t *testing.T) {
				if why, ok := needsChecks[cs.Name]; ok {
					t.Skip(why)
				}
				if cs.MinRanks > 2 {
					t.Skipf("needs %d ranks (the checked runs have them)", cs.MinRanks)
				}
				if cs.Heavy && nccl.RaceEnabled {
					t.Skip("a heavy case: under -race it runs in TestConformanceFakeChecked (Coll/Thresholds ran past its 25 s bound here in CI), and here without -race")
				}
				run(t, 2, cs.Run)
			})
		}
	})
}

// TestFakeGPUChildBench runs courier bench's patterns (internal/bench) on
// the nccl driver over the fake GPU library, with device and host memory:
// they must finish, and report every row. The measurements are cut short
// (100 ms of round trips per latency, 2 MiB per bandwidth figure; courier
// bench takes 2 s and 1 GiB): the patterns are what this tests.
func TestFakeGPUChildBench(t *testing.T) {
	if os.Getenv("COURIER_TEST_FAKEGPU_CHILD") == "" {
		t.Skip("runs in the child process of TestFakeGPU")
	}
	for _, pattern := range bench.Patterns {
		for _, device := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/device=%v", pattern, device), func(t *testing.T) {
				cfg := ranktest.Config{Backend: "nccl", Options: []mp.Option{mp.WithEnv(os.Getenv)}, Timeout: 20 * time.Second}
				ranktest.RunConfig(t, 2, cfg, func(rt *ranktest.T, c *mp.Comm) {
					bc := bench.Config{
						LatencySizes: []int{8, 128 << 10}, BandwidthSizes: []int{4 << 10, 2 << 20},
						Window: 8, Reps: 1, Budget: 2 << 20, LatencyTime: 20 * time.Millisecond, Pattern: pattern, Device: device,
					}
					rows, err := bench.Run(c, bc, nil)
					if err != nil {
						rt.Errorf("bench: %v", err)
						rt.FailNow()
					}
					if c.Rank() == 0 && len(rows) != 4 {
						rt.Errorf("%d rows, want 4", len(rows))
					}
				})
			})
		}
	}
}

// TestFakeGPUChildVCollectives: Gather, Scatter, their v-forms,
// Allgatherv, Alltoallv, Scan and Exscan of device buffers through mp on
// the nccl driver over the fake GPU library, on 2 and 3 ranks: NCCL has
// none of them, so the blocks move as point-to-point messages of device
// memory and Scan is staged through the host.
func TestFakeGPUChildVCollectives(t *testing.T) {
	if os.Getenv("COURIER_TEST_FAKEGPU_CHILD") == "" {
		t.Skip("runs in the child process of TestFakeGPU")
	}
	for _, n := range []int{2, 3} {
		cfg := ranktest.Config{Backend: "nccl", Options: []mp.Option{mp.WithEnv(os.Getenv)}, Timeout: 10 * time.Second}
		ranktest.RunConfig(t, n, cfg, func(rt *ranktest.T, c *mp.Comm) {
			if err := vcollOnDevice(c); err != nil {
				rt.Errorf("%d ranks: %v", n, err)
			}
		})
	}
}

// vcollOnDevice runs each collective once on device buffers and checks
// the results on the host.
func vcollOnDevice(c *mp.Comm) error {
	p, r := c.Size(), c.Rank()
	dev, err := c.Device()
	if err != nil {
		return err
	}
	var allocated []cuda.Slice[int64]
	defer func() {
		dev.Synchronize() // the collectives' copies are done
		for _, d := range allocated {
			d.Free()
		}
	}()
	dslice := func(v []int64) (cuda.Slice[int64], error) {
		d, err := cuda.Alloc[int64](dev, int64(len(v)))
		if err == nil {
			allocated = append(allocated, d)
		}
		if err == nil && len(v) > 0 {
			err = cuda.CopyToDevice(d, v)
		}
		return d, err
	}
	host := func(d cuda.Slice[int64]) []int64 {
		v := make([]int64, d.Len())
		if len(v) > 0 {
			cuda.CopyToHost(v, d)
		}
		return v
	}
	check := func(what string, got, want []int64) error {
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s: got %v, want %v", what, got, want)
		}
		return nil
	}
	// counts[k] = k+1 (rank k's block), blocks of value 100k+i.
	counts := make([]int, p)
	var all []int64
	for k := range p {
		counts[k] = k + 1
		for i := range k + 1 {
			all = append(all, int64(100*k+i))
		}
	}
	mine := all[r*(r+1)/2 : r*(r+1)/2+r+1]
	send, err := dslice(mine)
	if err != nil {
		return err
	}
	recv, err := dslice(make([]int64, len(all)))
	if err != nil {
		return err
	}
	if err := mp.Allgatherv(c, send, recv, counts); err != nil {
		return err
	}
	if err := check("Allgatherv", host(recv), all); err != nil {
		return err
	}
	root := p - 1
	zero, _ := dslice(make([]int64, len(all)))
	if err := mp.Gatherv(c, send, zero, counts, root); err != nil {
		return err
	}
	if r == root {
		if err := check("Gatherv", host(zero), all); err != nil {
			return err
		}
	}
	got, _ := dslice(make([]int64, r+1))
	if err := mp.Scatterv(c, recv, counts, got, 0); err != nil {
		return err
	}
	if err := check("Scatterv", host(got), mine); err != nil {
		return err
	}
	// Fixed blocks: Gather and Scatter of 2 elements, Alltoallv of one
	// element per pair.
	two, _ := dslice([]int64{int64(r), int64(10 * r)})
	g, _ := dslice(make([]int64, 2*p))
	if err := mp.Gather(c, two, g, 0); err != nil {
		return err
	}
	var want []int64
	for k := range p {
		want = append(want, int64(k), int64(10*k))
	}
	if r == 0 {
		if err := check("Gather", host(g), want); err != nil {
			return err
		}
	}
	back, _ := dslice(make([]int64, 2))
	if err := mp.Scatter(c, g, back, 0); err != nil {
		return err
	}
	if err := check("Scatter", host(back), []int64{int64(r), int64(10 * r)}); err != nil {
		return err
	}
	ones := slices.Repeat([]int{1}, p)
	a2a := make([]int64, p)
	for k := range a2a {
		a2a[k] = int64(100*r + k)
	}
	as, _ := dslice(a2a)
	ar, _ := dslice(make([]int64, p))
	if err := mp.Alltoallv(c, as, ones, ar, ones); err != nil {
		return err
	}
	for k := range a2a {
		a2a[k] = int64(100*k + r)
	}
	if err := check("Alltoallv", host(ar), a2a); err != nil {
		return err
	}
	// Scan and Exscan of r+1: prefix sums (r+1)(r+2)/2 and r(r+1)/2; rank
	// 0's Exscan buffer keeps its -1.
	sv, _ := dslice([]int64{int64(r + 1)})
	out, _ := dslice([]int64{-1})
	if err := mp.Scan(c, sv, out, mp.Sum); err != nil {
		return err
	}
	if err := check("Scan", host(out), []int64{int64((r + 1) * (r + 2) / 2)}); err != nil {
		return err
	}
	ex, _ := dslice([]int64{-1})
	if err := mp.Exscan(c, sv, ex, mp.Sum); err != nil {
		return err
	}
	wantEx := int64(r * (r + 1) / 2)
	if r == 0 {
		wantEx = -1
	}
	return check("Exscan", host(ex), []int64{wantEx})
}
