// Package leakcheck fails a package's tests when they leave goroutines,
// file descriptors, shared-memory mappings or segments, or address files
// behind (resources.go says what it compares, and how). A package's
// TestMain ends with
//
//	os.Exit(leakcheck.Check(m.Run()))
//
// or, where TestMain tears something down after m.Run, with
// code = leakcheck.Check(code) after the teardown. The goroutines are found
// by go.uber.org/goleak, which leaves out those of the runtime and the
// testing package on its own; a package names the functions of the
// goroutines that may outlive its tests, and why, in its call.
package leakcheck

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/goleak"
)

// patience is how long Check gives goroutines that are winding down.
const patience = 5 * time.Second

// Check returns code, or 1 when code is 0 (the tests passed) and
// goroutines other than the caller's are still running after a few
// seconds, or descriptors, shared memory or address files that the
// process did not hold when it started are still held; it then lists
// them (the goroutines' stacks) on stderr. A goroutine with one of the
// functions named in stays on its stack (as the runtime names them:
// "example.com/pkg.(*T).run.func1") may stay. While fuzzing (-test.fuzz)
// it checks nothing: the fuzzing engine's workers come and go on their
// own. It removes the temporary directory the package made for the tests
// (TMPDIR) either way.
func Check(code int, stays ...string) int {
	defer removeTmpDir()
	if code != 0 || fuzzing() {
		return code
	}
	if err := Remaining(patience, stays...); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the tests %v\n", err)
		return 1
	}
	return code
}

// CheckGoroutines is Check of the goroutines alone: for a test binary
// whose process holds descriptors and shared memory that are not the
// tests' to release (a library such as MPI keeps them from its start to
// the process's end).
func CheckGoroutines(code int, stays ...string) int {
	defer removeTmpDir()
	if code != 0 || fuzzing() {
		return code
	}
	var ignore []goleak.Option
	for _, f := range stays {
		ignore = append(ignore, goleak.IgnoreAnyFunction(f))
	}
	if err := find(patience, ignore...); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the tests leaked goroutines: %v\n", err)
		return 1
	}
	return code
}

// Remaining waits up to patience for the goroutines other than the
// caller's to end and for what the process opened since it started to be
// closed, and returns an error that lists what is left, or nil. A process
// a test starts (a rank of a job) calls it to check itself after Close;
// stays is as for Check.
func Remaining(patience time.Duration, stays ...string) error {
	var ignore []goleak.Option
	for _, f := range stays {
		ignore = append(ignore, goleak.IgnoreAnyFunction(f))
	}
	if err := find(patience, ignore...); err != nil {
		return fmt.Errorf("leaked goroutines: %w", err)
	}
	if left := findResources(patience); len(left) > 0 {
		return fmt.Errorf("left behind:\n\t%s", strings.Join(left, "\n\t"))
	}
	return nil
}

// find waits up to patience for the goroutines other than the caller's
// to end, and returns goleak's report on those that did not.
func find(patience time.Duration, ignore ...goleak.Option) error {
	deadline := time.Now().Add(patience)
	for {
		// Find itself retries for about half a second.
		err := goleak.Find(ignore...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// fuzzing reports whether the test binary runs a fuzz target.
func fuzzing() bool {
	f := flag.Lookup("test.fuzz")
	return f != nil && f.Value.String() != ""
}
