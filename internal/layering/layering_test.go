package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/courier-mp/courier"

// allowed is the layering: for each package of the module (its path inside
// the module; "dir/..." stands for every package below dir), the packages
// of the module that its non-test files may import. A package that is not
// here fails the test until it is placed.
var allowed = map[string][]string{
	// The leaves: nothing of courier (courier run's launcher: the graph's
	// leaf).
	"internal/errs":      nil, // the sentinels, re-exported by backend, cuda and mp
	"internal/auth":      nil,
	"internal/netaddr":   nil,
	"internal/launch":    {"internal/waitgraph"},
	"internal/shm":       nil, // shared memory, rings, doorbells, single copy: the OS shim of backend/shm
	"internal/waitgraph": nil, // the wait-for graph of a hung job, for courier run and mp's timeout
	"internal/trace":     nil, // the timeline's file format: mp writes it, courier trace reads it

	// The bottom of the house: the CUDA loader and the backend contract
	// import only the sentinels' leaf.
	"cuda":    {"internal/errs"},
	"backend": {"internal/errs"},

	// The bootstrap (rank, size, rendezvous) knows no backend.
	"bootstrap": {"internal/auth", "internal/errs", "internal/netaddr"},

	// The host transports' matching engine sits on the contract.
	"internal/engine": {"backend", "cuda"},

	// The reduction kernels, over the contract's element types and
	// operators: mp's collectives and the shared-memory ones combine with
	// the same code.
	"internal/reduce": {"backend"},
	// Their twins for device memory: PTX written here, loaded and
	// launched through the CUDA loader (mp's collectives of device
	// buffers on the device).
	"internal/devreduce": {"backend", "cuda"},

	// The transports: the contract, the CUDA loader and the internal
	// leaves; the host ones over the matching engine, tcp's Open joining
	// the ranks of a host through backend/shm; nccl's host control channel
	// is a tcp connection.
	"backend/shm":  {"backend", "internal/engine", "internal/reduce", "internal/shm"},
	"backend/tcp":  {"backend", "backend/shm", "cuda", "internal/auth", "internal/engine", "internal/errs", "internal/netaddr", "internal/shm"},
	"backend/nccl": {"backend", "backend/tcp", "cuda", "internal/auth", "internal/errs", "internal/netaddr"},

	// What users import.
	"mp": {"backend", "backend/nccl", "backend/tcp", "bootstrap", "cuda", "internal/devreduce", "internal/errs", "internal/reduce", "internal/trace", "internal/waitgraph"},

	// On top: the test harnesses, the benchmarks, the command, the
	// examples, and the test helpers.
	"mp/mptest":                     {"bootstrap", "mp"}, // the public test harness
	"internal/ranktest":             {"bootstrap", "mp"},
	"internal/conformance":          {"mp"},
	"internal/conformance/proctest": {"bootstrap", "internal/conformance", "internal/ranktest", "mp"},
	"internal/conformance/inproc":   nil, // tests only
	"internal/bench":                {"cuda", "mp"},
	"internal/bench/chart":          {"internal/bench"},
	"cmd/courier":                   {"backend", "backend/nccl", "backend/shm", "bootstrap", "cuda", "internal/bench", "internal/bench/chart", "internal/launch", "internal/shm", "internal/trace", "mp"}, // the transports' settings, for courier info
	"examples/...":                  {"cuda", "mp"},
	"internal/campaign":             {"internal/conformance/proctest", "mp"}, // the kill campaign
	"internal/faultproxy":           {"internal/engine"},                     // a relay for tests that alters courier's frames
	"internal/leakcheck":            {"cuda"},                                // WarmCUDA: the driver's descriptors go into the baseline
	"internal/exampletest":          {"internal/leakcheck"},                  // the examples' tests: the binary as a rank, courier run built once
	"internal/testscope":            nil,
	"internal/layering":             nil,

	// The seed's examples (overlap, strategy) share their compute: a CPU
	// and a GPU matrix multiply.
	"examples/seed/...": {"cuda", "examples/seed/internal/work", "mp"},
}

// testOnly is what a package's tests (its _test.go files, in the package
// and in package x_test) may import besides the package itself and what
// the package may import.
var testOnly = map[string][]string{
	"cuda":            {"backend"}, // the tests match backend's sentinels
	"bootstrap":       {"internal/leakcheck"},
	"backend/tcp":     {"internal/faultproxy", "internal/leakcheck"},
	"internal/engine": {"internal/leakcheck"},
	"backend/shm":     {"internal/conformance", "internal/leakcheck"}, // the thresholds lie in the suite's sweep
	"internal/shm":    {"internal/leakcheck"},
	"internal/launch": {"internal/leakcheck"},
	"backend/nccl": {
		"bootstrap", // the GPU tests' job (bootstrap.Detect)
		"internal/bench", "internal/conformance", "internal/leakcheck", "internal/ranktest", "internal/testscope", "internal/trace", "mp",
		"internal/devreduce", "internal/reduce", // the device kernels against the host's, on the fake GPU and on GPUs
	},
	"mp":                            {"internal/conformance", "internal/leakcheck", "internal/ranktest", "internal/testscope", "mp/mptest"},
	"mp/mptest":                     {"internal/leakcheck"},
	"internal/bench":                {"internal/leakcheck", "internal/ranktest"}, // its ping-pong on a job of two ranks
	"internal/conformance/proctest": {"internal/testscope"},
	"internal/conformance/inproc":   {"internal/conformance", "internal/leakcheck", "internal/ranktest", "internal/testscope", "mp"},
	"examples/...":                  {"internal/exampletest"},
	"examples/seed/...":             {"internal/exampletest"},
	"internal/faultproxy":           {"internal/leakcheck"},
	"internal/campaign":             {"internal/leakcheck", "mp/mptest"},
	"cmd/courier":                   {"internal/leakcheck", "mp/mptest"}, // what a killed job leaves (LeftByJob); the ranks whose traces courier trace merges
}

// external is what outside the standard library and the module a
// package's non-test files may import (a module path stands for its
// packages). Tests may import testify besides.
var external = map[string][]string{
	"bootstrap":            {"github.com/emer/empi"}, // with -tags mpi
	"internal/conformance": {"github.com/stretchr/testify"},
	"internal/leakcheck":   {"go.uber.org/goleak"},
	"internal/shm":         {"golang.org/x/sys"},
	"internal/engine":      {"golang.org/x/sys"}, // sched_yield
	"backend/shm":          {"golang.org/x/sys"}, // the socket's peer credentials
	"backend/tcp":          {"golang.org/x/sys"}, // waiters read the socket without blocking
	"internal/launch":      {"golang.org/x/sys"}, // pidfds: the order in which ranks die
	"internal/reduce":      {"golang.org/x/sys"}, // cpu: whether the AVX2 kernels may run
	"internal/bench/chart": {"gonum.org/v1/plot"},
	"cmd/courier":          {"golang.org/x/sys"}, // is standard error a terminal
}

var externalInTests = []string{"github.com/stretchr/testify"}

// cgoFiles are the only Go files that may import "C" (Go itself refuses
// cgo in _test.go files): one place per C library.
var cgoFiles = []string{
	"cuda/driver_cgo.go",       // the CUDA driver, with driver.c and driver.h
	"backend/nccl/nccl_cgo.go", // NCCL
	"bootstrap/mpi.go",         // MPI, with -tags mpi
}

// cDirs are the only folders that may hold C (or any other source that cgo
// compiles): beside the cgo files, the fake libraries the tests build, and
// the C programs the benchmarks compare with ("dir/..." for every folder
// below dir).
var cDirs = []string{
	"cuda",
	"cuda/testdata",
	"backend/nccl",
	"backend/nccl/testdata",
	"bench/...",
}

// cExts are the file name extensions of what cgo compiles.
var cExts = []string{".c", ".h", ".cc", ".cpp", ".cxx", ".hh", ".hpp", ".hxx", ".m", ".S", ".sx", ".f", ".F", ".for", ".f90"}

// configs are the builds whose imports are checked: the files of a
// package, and so its imports, differ between them.
var configs = []struct {
	name string
	env  []string
	args []string
}{
	{"cgo", []string{"CGO_ENABLED=1"}, nil},
	{"CGO_ENABLED=0", []string{"CGO_ENABLED=0"}, nil},
	{"-tags mpi", []string{"CGO_ENABLED=1"}, []string{"-tags", "mpi"}},
}

// listed is what the test reads of go list's output.
type listed struct {
	ImportPath   string
	Standard     bool
	ForTest      string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
}

// edge is an import the table does not allow, and in which builds it was
// seen.
type edge struct {
	from, to string
	test     bool
}

func TestImports(t *testing.T) {
	root := moduleRoot(t)
	bad := map[edge][]string{}
	seen := map[string]bool{}     // the module's packages
	unplaced := map[string]bool{} // those the table does not place
	for _, cfg := range configs {
		pkgs, std := list(t, root, cfg.env, cfg.args)
		for _, p := range pkgs {
			from := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
			seen[from] = true
			if p.Error != nil {
				t.Errorf("go list (%s): %s: %s", cfg.name, from, p.Error.Err)
			}
			key, ok := rule(from)
			if !ok {
				if !unplaced[from] {
					unplaced[from] = true
					t.Errorf("%s is not in the table of allowed imports (internal/layering/layering_test.go): place it in the layering", from)
				}
				continue
			}
			may := allowed[key]
			check := func(imports []string, test bool) {
				for _, imp := range imports {
					if !permitted(imp, from, may, test, std) {
						e := edge{from, strings.TrimPrefix(imp, module+"/"), test}
						if !slices.Contains(bad[e], cfg.name) {
							bad[e] = append(bad[e], cfg.name)
						}
					}
				}
			}
			check(p.Imports, false)
			check(append(slices.Clone(p.TestImports), p.XTestImports...), true)
		}
	}
	edges := make([]edge, 0, len(bad))
	for e := range bad {
		edges = append(edges, e)
	}
	slices.SortFunc(edges, func(a, b edge) int {
		return strings.Compare(fmt.Sprint(a.from, a.test, a.to), fmt.Sprint(b.from, b.test, b.to))
	})
	for _, e := range edges {
		key, _ := rule(e.from)
		who, verb, may := e.from, "imports", allowed[key]
		if e.test {
			who, verb = e.from+"'s tests", "import"
			may = append(slices.Clone(may), testOnly[key]...)
		}
		t.Errorf("%s %s %s (%s): not allowed; %s may import %s", who, verb, e.to, strings.Join(bad[e], ", "), who, names(may))
	}
	for key := range allowed {
		if !strings.HasSuffix(key, "/...") && !seen[key] {
			t.Logf("the table places %s, which the module does not hold (yet)", key)
		}
	}
}

// permitted reports whether package from (a path inside the module) may
// import imp, given the module's packages it may import.
func permitted(imp, from string, may []string, test bool, std map[string]bool) bool {
	if std[imp] || imp == "C" {
		return true // cgo files are TestCgo's
	}
	key, _ := rule(from)
	if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
		if slices.Contains(may, rest) {
			return true
		}
		return test && (rest == from || slices.Contains(testOnly[key], rest))
	}
	outside := external[key]
	if test {
		outside = append(slices.Clone(outside), externalInTests...)
	}
	return slices.ContainsFunc(outside, func(m string) bool { return imp == m || strings.HasPrefix(imp, m+"/") })
}

// rule returns the key of allowed that places package p.
func rule(p string) (string, bool) {
	if _, ok := allowed[p]; ok {
		return p, true
	}
	for dir := path.Dir(p); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if _, ok := allowed[dir+"/..."]; ok {
			return dir + "/...", true
		}
	}
	return "", false
}

func names(ps []string) string {
	if len(ps) == 0 {
		return "nothing of courier"
	}
	ps = slices.Clone(ps)
	slices.Sort(ps)
	return strings.Join(slices.Compact(ps), ", ")
}

// list runs go list over the module's packages and their tests, with env
// and args, and returns the module's packages (not their test variants)
// and the standard library's package paths.
func list(t *testing.T, root string, env, args []string) ([]listed, map[string]bool) {
	t.Helper()
	cmdArgs := append([]string{"list", "-e", "-deps", "-test", "-json"}, args...)
	cmd := exec.Command("go", append(cmdArgs, "./...")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s ./... (%s): %v\n%s", strings.Join(cmdArgs, " "), strings.Join(env, " "), err, stderr.Bytes())
	}
	var pkgs []listed
	std := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("reading go list's output: %v", err)
		}
		switch {
		case p.Standard:
			std[p.ImportPath] = true
		case p.ForTest == "" && !strings.HasSuffix(p.ImportPath, ".test") &&
			(p.ImportPath == module || strings.HasPrefix(p.ImportPath, module+"/")):
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list (%s) found no package of %s", strings.Join(env, " "), module)
	}
	return pkgs, std
}

func TestCgo(t *testing.T) {
	root := moduleRoot(t)
	found := map[string]bool{}
	for _, f := range files(t, root) {
		switch {
		case strings.HasSuffix(f, ".go"):
			imports, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, f), nil, parser.ImportsOnly)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			if !slices.ContainsFunc(imports.Imports, func(s *ast.ImportSpec) bool { return s.Path.Value == strconv.Quote("C") }) {
				continue
			}
			found[f] = true
			if !slices.Contains(cgoFiles, f) {
				t.Errorf("%s imports \"C\": cgo belongs only in %s", f, strings.Join(cgoFiles, ", "))
			}
		case slices.Contains(cExts, path.Ext(f)):
			if !inDirs(path.Dir(f), cDirs) {
				t.Errorf("%s: C belongs only in %s", f, strings.Join(cDirs, ", "))
			}
		}
	}
	for _, f := range cgoFiles {
		if !found[f] {
			t.Logf("%s, in the table of cgo files, does not import \"C\" (or is gone)", f)
		}
	}
}

// inDirs reports whether folder dir is one of dirs ("d/..." standing for d
// and every folder below it).
func inDirs(dir string, dirs []string) bool {
	for _, d := range dirs {
		if base, ok := strings.CutSuffix(d, "/..."); ok {
			if dir == base || strings.HasPrefix(dir, base+"/") {
				return true
			}
		} else if dir == d {
			return true
		}
	}
	return false
}

// files lists the module's files, slash-separated and relative to root:
// those git tracks and those it would (untracked but not ignored), or,
// without git, every file outside folders whose names start with a dot.
func files(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	if out, err := cmd.Output(); err == nil {
		var listed []string
		for f := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
			if _, err := os.Lstat(filepath.Join(root, f)); err == nil { // not deleted in the work tree
				listed = append(listed, f)
			}
		}
		return listed
	}
	var all []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(root, p)
			all = append(all, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// moduleRoot is the folder of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("go env GOMOD: not in a module")
	}
	return filepath.Dir(gomod)
}
