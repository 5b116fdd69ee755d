package inproc_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/courier-mp/courier/internal/conformance"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/internal/testscope"
	"github.com/courier-mp/courier/mp"
)

// tcpRunner runs a case on n in-process ranks over loopback TCP, with
// extra Init options.
func tcpRunner(opts ...mp.Option) conformance.Runner { return hostRunner("tcp", opts...) }

// hostRunner runs a case on n in-process ranks over the named host
// backend ("tcp", or "host": the ranks share this host, so they meet
// through shared memory).
func hostRunner(backend string, opts ...mp.Option) conformance.Runner {
	return func(t *testing.T, n int, f func(t conformance.T, c *mp.Comm)) {
		t.Helper()
		cfg := ranktest.Config{Backend: backend, Options: opts}
		ranktest.RunConfig(t, n, cfg, func(rt *ranktest.T, c *mp.Comm) {
			f(rt, c)
		})
	}
}

// TestConformanceTCP runs the point-to-point conformance suite over the
// TCP backend with 4 ranks, and with 2 and 3 (an odd count, where pairings
// leave a rank out) and 1 (only the cases that need one rank).
func TestConformanceTCP(t *testing.T) {
	counts := []int{4, 2, 3, 1}
	if !testscope.Full() {
		counts = []int{4, 1} // the short form: 2 and 3 ranks run on shared memory (TestConformanceSHM)
	}
	for _, n := range counts {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			conformance.Run(t, n, tcpRunner())
		})
	}
}

// TestConformanceTCPChecked runs the suite with envelope checks on
// (COURIER_CHECK=1), where a receive must match the message's count
// exactly.
func TestConformanceTCPChecked(t *testing.T) {
	if !testscope.Full() {
		// The heavy cases run checked over the nccl backend's fake
		// engine (backend/nccl, TestConformanceFakeChecked).
		conformance.RunLight(t, 2, tcpRunner(mp.WithCheck(true)), "backend/nccl's TestConformanceFakeChecked")
		return
	}
	conformance.Run(t, 2, tcpRunner(mp.WithCheck(true)))
}

// TestConformanceSHM runs the suite over the host backend, whose ranks on
// one host meet through shared memory, with 4, 3 and 2 ranks, and checked
// (under the race detector, 4 and 2 ranks; in the short form, 3 and 2,
// the heavy cases on 3 only).
func TestConformanceSHM(t *testing.T) {
	counts := []int{4, 3, 2}
	if !testscope.Full() {
		counts = []int{3, 2} // 4 ranks run over tcp (TestConformanceTCP)
	}
	if raceOn {
		// The ranks spin, which the race detector makes slow: 4 and 2
		// ranks there, 3 and the checked run in the plain step.
		counts = []int{4, 2}
	}
	for _, n := range counts {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			if n == 2 && !testscope.Full() {
				conformance.RunLight(t, n, hostRunner("host"), "ranks=3")
				return
			}
			conformance.Run(t, n, hostRunner("host"))
		})
	}
	if raceOn || !testscope.Full() {
		return // checked over tcp (TestConformanceTCPChecked)
	}
	t.Run("checked", func(t *testing.T) {
		conformance.Run(t, 2, hostRunner("host", mp.WithCheck(true)))
	})
}

// TestConformanceTCPCollectives runs the conformance cases of the
// collectives and Barrier over the TCP backend on 5, 6 and 7 ranks
// (TestConformanceTCP runs every case on 1 to 4): the point-to-point
// algorithms fold, skip or wrap ranks differently on every count that is
// not a power of two.
func TestConformanceTCPCollectives(t *testing.T) {
	if testing.Short() {
		t.Skip("5 to 7 ranks: not in -short")
	}
	if raceOn {
		t.Skip("5 to 7 ranks: too slow under the race detector (the collectives run on 1 to 4 there)")
	}
	if !testscope.Full() {
		t.Skipf("5 to 7 ranks: the short form (the collectives run on 1 to 4 ranks in the other suites); %s=1 runs it", testscope.Env)
	}
	for _, n := range []int{5, 6, 7} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			for _, cs := range conformance.Cases() {
				if !strings.HasPrefix(cs.Name, "Coll/") && !strings.HasPrefix(cs.Name, "Barrier/") {
					continue
				}
				t.Run(cs.Name, func(t *testing.T) { tcpRunner()(t, n, cs.Run) })
			}
		})
	}
}
