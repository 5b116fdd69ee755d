package shm

import (
	"os"
	"testing"

	"github.com/courier-mp/courier/internal/leakcheck"
)

// TestMain fails the run if the tests leave goroutines, descriptors or
// mappings of the rings behind.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Check(m.Run()))
}
