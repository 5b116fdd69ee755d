package shm_test

import (
	"testing"

	"github.com/courier-mp/courier/backend/shm"
	"github.com/courier-mp/courier/internal/conformance"
)

// TestCollThresholdsSwept: every size of the shared-memory collectives'
// tables lies where the conformance case Coll/Thresholds tries sizes under
// and over each power of two, so the suite runs both paths beside each.
func TestCollThresholdsSwept(t *testing.T) {
	for _, b := range shm.CollThresholds() {
		if b < conformance.SweepFrom || b > conformance.SweepTo {
			t.Errorf("a threshold of %d bytes is outside the conformance sweep [%d, %d]", b, conformance.SweepFrom, conformance.SweepTo)
		}
	}
}
