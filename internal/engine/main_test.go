package engine

import (
	"os"
	"testing"

	"github.com/courier-mp/courier/internal/leakcheck"
)

// TestMain fails the run if the tests leave goroutines behind.
func TestMain(m *testing.M) {
	os.Exit(leakcheck.Check(m.Run()))
}
