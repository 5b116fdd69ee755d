package cuda

import (
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The fake driver: testdata/fakecuda.c, built with the C compiler into a
// shared library and loaded through the package's own loader, so that the
// Go and C layers run end to end without a GPU. The source and the header
// it shares with the loader (driver.h) are embedded, so a test binary
// carried to another machine can still build it there when that machine
// has a C compiler (and skips the fake subtests when not).

//go:embed testdata/fakecuda.c
var fakeSource string

//go:embed driver.h
var fakeHeader string

var fakeBuilds struct {
	mu    sync.Mutex
	dir   string
	built map[string]string // variant → library path
}

// fakeActive is set while a test has a fake driver in place of the real
// one; requireGPUs refuses to run then.
var fakeActive bool

// buildFake compiles the fake driver with extra C flags (one library per
// set of flags) and returns its path. It skips t when the package is built
// without cgo (nothing could load the library) or no C compiler exists.
func buildFake(t *testing.T, flags ...string) string {
	t.Helper()
	if !cgoEnabled {
		t.Skip("built without cgo: the fake driver cannot be loaded")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the fake driver", cc)
	}
	fakeBuilds.mu.Lock()
	defer fakeBuilds.mu.Unlock()
	key := strings.Join(flags, " ")
	if p, ok := fakeBuilds.built[key]; ok {
		return p
	}
	if fakeBuilds.dir == "" {
		dir, err := os.MkdirTemp("", "courier-fakecuda-")
		if err != nil {
			t.Fatal(err)
		}
		fakeBuilds.dir = dir
		fakeBuilds.built = map[string]string{}
	}
	src := filepath.Join(fakeBuilds.dir, "fakecuda.c")
	if err := os.WriteFile(src, []byte(fakeSource), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fakeBuilds.dir, "driver.h"), []byte(fakeHeader), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(fakeBuilds.dir, "libfakecuda"+string(rune('a'+len(fakeBuilds.built)))+".so")
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", out}, flags...)
	args = append(args, src, "-lpthread")
	cmd := exec.Command(cc, args...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the fake driver: %v\n%s", err, msg)
	}
	fakeBuilds.built[key] = out
	return out
}

// removeFakes deletes the built fake drivers (from TestMain).
func removeFakes() {
	fakeBuilds.mu.Lock()
	defer fakeBuilds.mu.Unlock()
	if fakeBuilds.dir != "" {
		os.RemoveAll(fakeBuilds.dir)
	}
}

// useLib makes l (or err) the package's driver until t ends.
func useLib(t *testing.T, l *lib, err error) {
	t.Helper()
	prev := current.Swap(&libState{l: l, err: err})
	t.Cleanup(func() { current.Store(prev) })
}

// useFake loads a fresh copy of the fake driver as the package's driver
// until t ends, and fails t if it leaves device or page-locked memory
// allocated.
func useFake(t *testing.T) *lib {
	t.Helper()
	path := buildFake(t)
	l, err := open(path)
	if err != nil {
		t.Fatalf("loading the fake driver: %v", err)
	}
	useLib(t, l, nil)
	fakeActive = true
	t.Cleanup(func() {
		fakeActive = false
		if dev, host := l.mem.live(); dev != 0 || host != 0 {
			t.Errorf("leaked %d device and %d page-locked allocations", dev, host)
		}
		l.drv.close()
	})
	return l
}
