//go:build cgo

package nccl_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/bench"
	"github.com/courier-mp/courier/internal/conformance"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// TestFakeGPUChildConformance runs the conformance suite with the real
// nccl driver on the fake GPU library (see TestFakeGPU, which starts this
// in a child process): with checks, every case on 2, 3 and 4 ranks (each
// with a fake GPU of its own); without,
// the cases that do not need them.
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
		for _, n := range []int{2, 3, 4} {
			conformance.Run(t, n, runner(mp.WithCheck(true)))
		}
	})
	t.Run("unchecked", func(t *testing.T) {
		run := runner(mp.WithCheck(false))
		for _, cs := range conformance.Cases() {
			t.Run(cs.Name, func(t *testing.T) {
				if why, ok := needsChecks[cs.Name]; ok {
					t.Skip(why)
				}
				run(t, 2, cs.Run)
			})
		}
	})
}

// TestFakeGPUChildBench runs courier bench's patterns (internal/bench) on
// the nccl driver over the fake GPU library, with device and host memory:
// they must finish, and report every row.
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
						Window: 8, Reps: 1, Budget: 8 << 20, Pattern: pattern, Device: device,
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
