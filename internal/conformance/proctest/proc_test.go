package proctest_test

import (
	"flag"
	"testing"

	"github.com/courier-mp/courier/internal/conformance/proctest"
)

var (
	casesFlag = flag.String("cases", "", "run only the conformance cases whose names match this regexp (default: $"+proctest.CasesEnv+", else all)")
	ranksFlag = flag.Int("ranks", 4, "number of rank processes TestConformanceProcesses starts when it is not itself a rank")
)

// rankTest is the test that the launched processes run.
const rankTest = "TestConformanceProcesses"

// TestConformanceProcesses runs the conformance suite with each rank a
// separate process. Started by a launcher (mpirun, courier run, srun,
// COURIER_RANK/SIZE/ADDR by hand), this process is one rank and runs its
// part; otherwise it starts -ranks copies of this test binary on loopback,
// once over the host backend (shared memory) and once over tcp, and
// reports each case as a subtest.
func TestConformanceProcesses(t *testing.T) {
	opts := proctest.Options{Cases: *casesFlag}
	if proctest.InJob() {
		proctest.RunRank(t, opts)
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	// "host": the ranks share this host, so they meet through shared
	// memory; "tcp": every pair over loopback TCP.
	for _, backend := range []string{"host", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			procs, err := proctest.Loopback(*ranksFlag)
			if err != nil {
				t.Fatal(err)
			}
			for i := range procs {
				procs[i].Env = append(procs[i].Env, "COURIER_BACKEND="+backend)
			}
			proctest.Launch(t, rankTest, procs, opts)
		})
	}
}
