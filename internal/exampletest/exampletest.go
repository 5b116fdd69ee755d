// Package exampletest is what the examples' tests share: each test binary
// is its example's program too, started as the ranks of a job (by courier
// run, or by hand), and courier run itself is built once per binary.
//
//	func TestMain(m *testing.M) { exampletest.Main(m, "JACOBI_TEST_AS_RANK", main) }
//
// A test then runs exampletest.Courier(t) run -np N -- os.Args[0] with
// JACOBI_TEST_AS_RANK=1 in the environment; with exampletest.FakeGPU(t)
// in it too, the ranks' GPU is the fake one of backend/nccl's tests, so
// an example's GPU code runs where there is no GPU.
package exampletest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/courier-mp/courier/internal/leakcheck"
)

// Main is an example's TestMain: with asRank=1 in the environment the
// process is a rank of a job and runs the program (main); otherwise it
// runs the tests, removes the courier built for them and checks for
// leaks.
func Main(m *testing.M, asRank string, main func()) {
	if os.Getenv(asRank) == "1" {
		main()
		os.Exit(0)
	}
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(leakcheck.Check(code))
}

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
	out  []byte
}

// Courier returns the path of cmd/courier, built the first time a test
// of this binary asks (go build, so the test needs the Go toolchain); a
// failed build fails t.
func Courier(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "courier-example-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "courier")
		built.out, built.err = exec.Command("go", "build", "-o", built.path, "github.com/courier-mp/courier/cmd/courier").CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build cmd/courier: %v\n%s", built.err, built.out)
	}
	return built.path
}

// FakeGPU returns the environment (COURIER_CUDA_LIBRARY,
// COURIER_NCCL_LIBRARY) under which a rank's CUDA and NCCL are
// backend/nccl's fake GPU (testdata/fakegpu.c: device memory in host
// memory, streams that queue their work, CUDA IPC between processes, and
// the seed examples' sgemm kernel), built with the C compiler into t's
// temporary directory. Several ranks on its GPU 0 (COURIER_DEVICE=0)
// meet through the nccl backend's CUDA IPC path; its NCCL joins only
// ranks of one process, so ranks on GPUs of their own do not meet. It
// skips t when the binary is built without cgo (nothing could load the
// library) or no C compiler is found, as backend/nccl's fake GPU tests
// do.
func FakeGPU(t *testing.T) []string {
	t.Helper()
	if !cgoOn {
		t.Skip("built without cgo: the fake GPU cannot be loaded")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the fake GPU", cc)
	}
	src, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/courier-mp/courier/backend/nccl").Output()
	if err != nil {
		t.Fatalf("go list backend/nccl: %v", err)
	}
	dir := strings.TrimSpace(string(src))
	lib := filepath.Join(t.TempDir(), "libfakegpu.so")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I", dir, "-o", lib,
		filepath.Join(dir, "testdata", "fakegpu.c"), "-lpthread").CombinedOutput()
	if err != nil {
		t.Fatalf("building the fake GPU: %v\n%s", err, out)
	}
	return []string{"COURIER_CUDA_LIBRARY=" + lib, "COURIER_NCCL_LIBRARY=" + lib, "COURIER_REQUIRE_GPU="}
}
