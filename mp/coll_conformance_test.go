package mp_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/courier-mp/courier/internal/conformance"
	"github.com/courier-mp/courier/internal/testscope"
	"github.com/courier-mp/courier/mp"
)

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

// TestCollThresholdsSwept: every threshold of the point-to-point
// collectives lies where the conformance case Coll/Thresholds tries sizes
// under and over each power of two; one outside needs the sweep widened.
func TestCollThresholdsSwept(t *testing.T) {
	for _, b := range mp.CollThresholds() {
		if b != 0 && (b < conformance.SweepFrom || b > conformance.SweepTo) {
			t.Errorf("a threshold of %d bytes is outside the conformance sweep [%d, %d]", b, conformance.SweepFrom, conformance.SweepTo)
		}
	}
}
