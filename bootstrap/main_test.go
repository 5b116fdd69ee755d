package bootstrap

import (
	"os"
	"testing"

	"github.com/courier-mp/courier/internal/leakcheck"
)

// TestMain fails the run if the tests leave goroutines, descriptors,
// shared memory or address files behind; in a build with -tags mpi,
// goroutines only, since MPI, once started, keeps its own descriptors and
// shared memory until the process ends.
func TestMain(m *testing.M) {
	if mpiBuild {
		os.Exit(leakcheck.CheckGoroutines(m.Run()))
	}
	os.Exit(leakcheck.Check(m.Run()))
}
