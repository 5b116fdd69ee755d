// Package exampletest is what the examples' tests share: each test binary
// is its example's program too, started as the ranks of a job (by courier
// run, or by hand), and courier run itself is built once per binary.
//
//	func TestMain(m *testing.M) { exampletest.Main(m, "JACOBI_TEST_AS_RANK", main) }
//
// A test then runs exampletest.Courier(t) run -np N -- os.Args[0] with
// JACOBI_TEST_AS_RANK=1 in the environment.
package exampletest

import (
	"os"
	"os/exec"
	"path/filepath"
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
