package mp_test

import (
	"testing"

	"github.com/courier-mp/courier/internal/conformance"
	"github.com/courier-mp/courier/mp"
)

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
