package nccl_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/courier-mp/courier/internal/conformance"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/internal/testscope"
	"github.com/courier-mp/courier/mp"

	"github.com/courier-mp/courier/backend/nccl"
)

// The conformance suite on the nccl backend's communicator logic, with
// the fake engine of this package's tests ("nccl-fake": NCCL modelled in
// software, real host connections) and the ranks as goroutines. The real
// backend runs the same suite on GPUs through proctest (docs/gpu.md).

// fakeRunner runs a case on n in-process ranks of the fake backend.
func fakeRunner(opts ...mp.Option) conformance.Runner {
	return func(t *testing.T, n int, f func(t conformance.T, c *mp.Comm)) {
		t.Helper()
		// 30 s a wait, and 45 s a case: the heaviest case (Coll/Thresholds)
		// takes 13-14 s alone under -race on 3 ranks, and in CI, beside
		// the other packages' race tests on 2 cores, it ran past the 25 s
		// that 10 s gave and the 35 s that 20 s gave.
		cfg := ranktest.Config{Backend: "nccl-fake", Options: opts, Timeout: 30 * time.Second}
		ranktest.RunConfig(t, n, cfg, func(rt *ranktest.T, c *mp.Comm) { f(rt, c) })
	}
}

// needsChecks lists the cases that need what the backend cannot know
// without checks (COURIER_CHECK=1), with the reason: NCCL carries no
// envelope, so a receive takes the next message from its source whatever
// its tag, size or type. Without checks these end in wrong data, a
// truncated message or a timeout, by design.
var needsChecks = map[string]string{
	"Empty/IntoLargerBuffer": "a receive larger than its message never completes",
	"Status/LargerBuffer":    "a receive larger than its message never completes",
	"Truncate/Eager":         "NCCL cuts a longer message short, silently",
	"Truncate/Rendezvous":    "NCCL cuts a longer message short, silently",
	"Mismatch/Eager":         "element types are not carried",
	"Mismatch/Rendezvous":    "element types are not carried",
	"Order/TagSelection":     "receives by tag out of sending order",
	"Order/ManyTags":         "receives by tag out of sending order",
	"Unexpected/Large":       "receives by tag out of sending order",
	"Unexpected/ManySmall":   "receives by tag out of sending order",
	"Requests/WaitAny":       "receives by tag out of sending order",
	"Requests/WaitTwice":     "a truncated message is not detected",
	"Requests/WaitAllErrors": "a truncated message is not detected",
	"Concurrent/TagStreams":  "goroutines with their own tags interleave on one channel",
	"Tags/MaxTag":            "receives by tag out of sending order, of blocking sends",
	"Errors/OpError":         "a truncated message is not detected",
}

// TestConformanceFake runs the suite without checks, on 2 ranks, skipping
// the cases of needsChecks.
func TestConformanceFake(t *testing.T) {
	t.Parallel() // beside the other suites
	run := fakeRunner()
	for _, cs := range conformance.Cases() {
		t.Run(cs.Name, func(t *testing.T) {
			if why, ok := needsChecks[cs.Name]; ok {
				t.Skipf("needs checks (COURIER_CHECK=1) on nccl: %s", why)
			}
			if cs.MinRanks > 2 {
				t.Skipf("needs %d ranks (TestConformanceFakeChecked runs it)", cs.MinRanks)
			}
			if cs.Heavy && !testscope.Full() {
				t.Skip("a heavy case, left to TestConformanceFakeChecked in the short form")
			}
			run(t, 2, cs.Run)
		})
	}
}

// TestConformanceFakeChecked runs the whole suite with checks, on 2, 3, 4
// and 1 ranks (3 alone in the short form: see internal/testscope).
func TestConformanceFakeChecked(t *testing.T) {
	t.Parallel() // beside the other suites
	counts := []int{2, 3, 4, 1}
	if !testscope.Full() {
		counts = []int{3}
	}
	for _, n := range counts {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			if n == 4 && nccl.RaceEnabled {
				// Under the race detector, in CI beside every other
				// package's race tests on 2 cores, Coll/Thresholds on 4
				// ranks ran past its 35 s (it takes 6 s alone): the heavy
				// cases run on 2 and 3 ranks there.
				conformance.RunLight(t, n, fakeRunner(mp.WithCheck(true)), "ranks=2 and 3 under -race")
				return
			}
			conformance.Run(t, n, fakeRunner(mp.WithCheck(true)))
		})
	}
}

// TestNeedsChecksNames keeps needsChecks in step with the suite.
func TestNeedsChecksNames(t *testing.T) {
	names := map[string]bool{}
	for _, cs := range conformance.Cases() {
		names[cs.Name] = true
	}
	for name := range needsChecks {
		if !names[name] {
			t.Errorf("needsChecks names %q, which is not a conformance case", name)
		}
	}
}

// TestConformanceFakeIPC runs the whole suite on the IPC path (every pair
// of ranks sharing a GPU, over host memory), without checks on 2 ranks and
// with them on 3 (the heavy cases too in the full form, without -race):
// with the envelope in every descriptor, the cases of needsChecks pass
// there without checks too.
func TestConformanceFakeIPC(t *testing.T) {
	t.Parallel() // beside the other suites
	runner := func(opts ...mp.Option) conformance.Runner {
		return func(t *testing.T, n int, f func(t conformance.T, c *mp.Comm)) {
			t.Helper()
			cfg := ranktest.Config{Backend: "nccl-fake-ipc", Options: opts, Timeout: 10 * time.Second}
			ranktest.RunConfig(t, n, cfg, func(rt *ranktest.T, c *mp.Comm) { f(rt, c) })
		}
	}
	if testscope.Full() && !nccl.RaceEnabled {
		t.Run("unchecked", func(t *testing.T) { conformance.Run(t, 2, runner()) })
		// 3 ranks, not 4: on CI's 2 cores, beside
		// TestConformanceFakeChecked's 4-rank run, one of its heavy cases
		// once passed its 25 s bound (it takes under a second alone).
		t.Run("checked", func(t *testing.T) { conformance.Run(t, 3, runner(mp.WithCheck(true))) })
		return
	}
	by := "the full form of TestConformanceFakeIPC"
	if testscope.Full() {
		// Under -race the heavy cases run in TestConformanceFakeChecked
		// alone: Coll/Thresholds takes 10-12 s alone on the IPC path
		// there (the race detector's shadow of every large copy), and in
		// CI, beside the other packages' race tests on 2 cores, it ran
		// past its 25 s bound on 2 ranks and on 3.
		by += " without -race"
	}
	t.Run("unchecked", func(t *testing.T) { conformance.RunLight(t, 2, runner(), by) })
	t.Run("checked", func(t *testing.T) { conformance.RunLight(t, 3, runner(mp.WithCheck(true)), by) })
}
