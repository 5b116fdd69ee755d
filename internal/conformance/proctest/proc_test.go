package proctest_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/courier-mp/courier/internal/conformance/proctest"
	"github.com/courier-mp/courier/internal/testscope"
)

var (
	casesFlag = flag.String("cases", "", "run only the conformance cases whose names match this regexp (default: $"+proctest.CasesEnv+", else all)")
	ranksFlag = flag.Int("ranks", 4, "number of rank processes TestConformanceProcesses starts when it is not itself a rank")
)

func TestMain(m *testing.M) {
	if !proctest.InJob() {
		if err := testscope.Announce("internal/conformance/proctest", "the suite's processes run over the host backend only, without the heavy cases, and not across network namespaces"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// rankTest is the test that the launched processes run.
const rankTest = "TestConformanceProcesses"

// TestConformanceProcesses runs the conformance suite with each rank a
// separate process. Started by a launcher (mpirun, courier run, srun,
// COURIER_RANK/SIZE/ADDR by hand), this process is one rank and runs its
// part; otherwise it starts -ranks copies of this test binary on loopback,
// once over the host backend (shared memory) and once over tcp, and
// reports each case as a subtest.
func TestConformanceProcesses(t *testing.T) {
	// The short form leaves the heavy cases to internal/conformance/inproc,
	// over the same host backend (ranks as goroutines).
	opts := proctest.Options{Cases: *casesFlag, Light: !testscope.Full()}
	if proctest.InJob() {
		proctest.RunRank(t, opts)
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	// "host": the ranks share this host, so they meet through shared
	// memory; "tcp": every pair over loopback TCP (in full only: see
	// internal/testscope).
	backends := []string{"host", "tcp"}
	if !testscope.Full() {
		backends = backends[:1]
	}
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			procs, err := proctest.Loopback(*ranksFlag)
			if err != nil {
				t.Fatal(err)
			}
			for i := range procs {
				// The segments' pages at their first touch: each case's
				// job lives for a moment (COURIER_SHM_PREFAULT).
				procs[i].Env = append(procs[i].Env, "COURIER_BACKEND="+backend, "COURIER_SHM_PREFAULT=0")
			}
			proctest.Launch(t, rankTest, procs, opts)
		})
	}
	// "nccl-ipc": the nccl backend on the fake GPU of backend/nccl's
	// tests, every rank on its GPU 0, so that every pair meets through the
	// CUDA IPC path between processes (the fake maps another process's
	// device memory through /proc/PID/fd), its DESC and DONE on shared
	// memory.
	t.Run("nccl-ipc", func(t *testing.T) {
		lib := buildFakeGPU(t)
		procs, err := proctest.Loopback(*ranksFlag)
		if err != nil {
			t.Fatal(err)
		}
		for i := range procs {
			procs[i].Env = append(procs[i].Env, "COURIER_BACKEND=nccl", "COURIER_SHM_PREFAULT=0", "COURIER_DEVICE=0",
				"COURIER_CUDA_LIBRARY="+lib, "COURIER_NCCL_LIBRARY="+lib, "COURIER_REQUIRE_GPU=")
		}
		proctest.Launch(t, rankTest, procs, opts)
	})
}

// buildFakeGPU compiles backend/nccl's fake CUDA and NCCL library into
// the test's directory and returns its path. Without cgo or a C compiler
// (as backend/nccl's fake GPU tests) the test skips: CI has both.
func buildFakeGPU(t *testing.T) string {
	t.Helper()
	if !cgoOn {
		t.Skip("built without cgo: the nccl backend cannot load the fake GPU")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip("no C compiler:", err)
	}
	dir := filepath.Join("..", "..", "..", "backend", "nccl")
	lib := filepath.Join(t.TempDir(), "libfakegpu.so")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", dir, "-o", lib, filepath.Join(dir, "testdata", "fakegpu.c"), "-lpthread").CombinedOutput()
	if err != nil {
		t.Fatalf("building the fake GPU library: %v\n%s", err, out)
	}
	return lib
}
