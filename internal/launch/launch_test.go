//go:build unix

package launch

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testEnv is the parent environment of the tests' jobs: the test process's
// own, plus variables of other launchers that must not reach the ranks,
// plus one that must.
func testEnv() []string {
	return append(os.Environ(),
		"COURIER_RANK=99", "COURIER_SIZE=100", "COURIER_JOB_KEY=stale",
		"COURIER_RENDEZVOUS_FD=7",
		"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8",
		"PMI_RANK=1", "PMIX_RANK=1",
		"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=3",
		"COURIER_TEST_KEEP=kept",
	)
}

// syncBuffer is a bytes.Buffer safe for concurrent use that can wait for a
// substring to appear a number of times.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{changed: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until s occurs n times, failing the test after 10 s.
func (b *syncBuffer) waitFor(t *testing.T, s string, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for strings.Count(b.String(), s) < n {
		select {
		case <-b.changed:
		case <-timeout:
			t.Fatalf("timed out waiting for %d × %q; have:\n%s", n, s, b.String())
		}
	}
}

type jobRun struct {
	res            Result
	stdout, stderr string
	elapsed        time.Duration
}

func runJob(t *testing.T, ctx context.Context, cfg Config) jobRun {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if cfg.Stdout == nil {
		cfg.Stdout = &stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = &stderr
	}
	if cfg.Env == nil {
		cfg.Env = testEnv()
	}
	start := time.Now()
	res := Run(ctx, cfg)
	j := jobRun{res: res, stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	if sb, ok := cfg.Stderr.(*syncBuffer); ok {
		j.stderr = sb.String()
	}
	if sb, ok := cfg.Stdout.(*syncBuffer); ok {
		j.stdout = sb.String()
	}
	t.Logf("result %+v after %v\nstdout:\n%s\nstderr:\n%s", res, j.elapsed, j.stdout, j.stderr)
	return j
}

func helperConfig(np int, mode string, args ...string) Config {
	prog, a := helperCmd(mode, args...)
	return Config{NP: np, Program: prog, Args: a}
}

var (
	stdoutLine = regexp.MustCompile(`^\[(\d+)\] rank (\d+) (?:of 4 env ok|line \d+ x{100}|end)$`)
	stderrLine = regexp.MustCompile(`^\[(\d+)\] rank (\d+) stderr (?:\d+|end)$`)
)

func TestFourRanksSucceed(t *testing.T) {
	t.Parallel()
	j := runJob(t, t.Context(), helperConfig(4, "check"))
	if j.res.Outcome != Succeeded || j.res.ExitCode != 0 || j.res.Failed != -1 || !stderrOnlyRanks(j.stderr) {
		t.Fatalf("result %+v", j.res)
	}
	checkLines := func(name, out string, re *regexp.Regexp, want int) {
		t.Helper()
		if !strings.HasSuffix(out, "\n") {
			t.Errorf("%s does not end with a newline", name)
		}
		count := map[string]int{}
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			m := re.FindStringSubmatch(line)
			if m == nil || m[1] != m[2] {
				t.Errorf("%s: broken or misattributed line %q", name, line)
				continue
			}
			count[m[1]]++
		}
		for r := range 4 {
			if c := count[fmt.Sprint(r)]; c != want {
				t.Errorf("%s: rank %d has %d lines, want %d", name, r, c, want)
			}
		}
	}
	checkLines("stdout", j.stdout, stdoutLine, linesPerRank+2)
	checkLines("stderr", j.stderr, stderrLine, 21)
	for r := range 4 {
		if !strings.Contains(j.stdout, fmt.Sprintf("[%d] rank %d end\n", r, r)) {
			t.Errorf("rank %d's last line (no newline) is missing", r)
		}
	}
}

// stderrOnlyRanks reports whether every line of s came from a rank.
func stderrOnlyRanks(s string) bool {
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		if !strings.HasPrefix(line, "[") {
			return false
		}
	}
	return true
}

func TestNoPrefix(t *testing.T) {
	t.Parallel()
	cfg := helperConfig(2, "check")
	cfg.NoPrefix = true
	j := runJob(t, t.Context(), cfg)
	if j.res.ExitCode != 0 {
		t.Fatalf("result %+v", j.res)
	}
	if strings.Contains(j.stdout, "[0]") || strings.Contains(j.stdout, "[1]") {
		t.Errorf("output is prefixed")
	}
	if n := strings.Count(j.stdout, " line "); n != 2*linesPerRank {
		t.Errorf("%d lines, want %d", n, 2*linesPerRank)
	}
}

func TestRankFails(t *testing.T) {
	t.Parallel()
	j := runJob(t, t.Context(), helperConfig(4, "fail", "2", "3"))
	r := j.res
	if r.Outcome != Failed || r.Failed != 2 || r.ExitCode != 3 || !slices.Equal(r.Stopped, []int{0, 1, 3}) {
		t.Fatalf("result %+v, want rank 2 failed with 3, 0, 1, 3 stopped", r)
	}
	for _, want := range []string{
		"[2] rank 2 failing\n",
		"courier run: rank 2 failed: exit status 3\n",
		"courier run: stopped ranks 0, 1, 3\n",
	} {
		if !strings.Contains(j.stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if strings.Contains(j.stderr, "rank 0 failed") || strings.Contains(j.stderr, "rank 1 failed") {
		t.Errorf("a stopped rank is reported as failed")
	}
	// The others sleep for an hour; SIGTERM ends them at once, well before
	// the grace period would escalate to SIGKILL.
	if j.elapsed > DefaultGrace+3*time.Second {
		t.Errorf("took %v to stop the job", j.elapsed)
	}
}

func TestRankKilledBySignal(t *testing.T) {
	t.Parallel()
	j := runJob(t, t.Context(), helperConfig(3, "kill", "1", "0"))
	r := j.res
	if r.Outcome != Failed || r.Failed != 1 || r.ExitCode != 128+9 || !slices.Equal(r.Stopped, []int{0, 2}) {
		t.Fatalf("result %+v", r)
	}
	if want := "courier run: rank 1 failed: killed by signal: killed\n"; !strings.Contains(j.stderr, want) {
		t.Errorf("stderr lacks %q", want)
	}
}

// TestFirstFailureNamed kills rank 1 while a process it started keeps its
// output open, and the other ranks exit with status 3 as soon as they see
// it dead, so they are reaped first: the launcher still names rank 1,
// which died first, and exits 137, as a shell reports SIGKILL.
func TestFirstFailureNamed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the ranks watch /proc")
	}
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	j := runJob(t, t.Context(), helperConfig(4, "cascade", "1", pidFile))
	r := j.res
	if r.Outcome != Failed || r.Failed != 1 || r.ExitCode != 128+9 || !slices.Equal(r.Stopped, []int{0, 2, 3}) {
		t.Fatalf("result %+v, want rank 1 failed, killed by SIGKILL (137), 0, 2, 3 stopped; stderr:\n%s", r, j.stderr)
	}
	if want := "courier run: rank 1 failed: killed by signal: killed\n"; !strings.Contains(j.stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, j.stderr)
	}
}

func TestStoppedRanksKilledAfterGrace(t *testing.T) {
	t.Parallel()
	cfg := helperConfig(3, "ignore-term", "0", "5")
	cfg.Grace = 300 * time.Millisecond
	j := runJob(t, t.Context(), cfg)
	r := j.res
	if r.Outcome != Failed || r.Failed != 0 || r.ExitCode != 5 || !slices.Equal(r.Stopped, []int{1, 2}) {
		t.Fatalf("result %+v", r)
	}
	if j.elapsed < cfg.Grace {
		t.Errorf("ranks ignoring SIGTERM ended after %v, before the grace period", j.elapsed)
	}
	if j.elapsed > 5*time.Second {
		t.Errorf("took %v", j.elapsed)
	}
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	cfg := helperConfig(2, "sleep")
	cfg.Timeout = 300 * time.Millisecond
	j := runJob(t, t.Context(), cfg)
	r := j.res
	if r.Outcome != TimedOut || r.ExitCode != 124 || !slices.Equal(r.Stopped, []int{0, 1}) {
		t.Fatalf("result %+v", r)
	}
	if want := "courier run: timed out after 300ms\n"; !strings.Contains(j.stderr, want) {
		t.Errorf("stderr lacks %q", want)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	j := runJob(t, ctx, helperConfig(2, "sleep"))
	if r := j.res; r.Outcome != Canceled || r.ExitCode != 1 || len(r.Stopped) != 2 {
		t.Fatalf("result %+v", r)
	}
}

func TestSignalForwarded(t *testing.T) {
	t.Parallel()
	sigs := make(chan os.Signal, 1)
	out := newSyncBuffer()
	cfg := helperConfig(3, "wait-int")
	cfg.Signals, cfg.Stdout = sigs, out
	done := make(chan jobRun)
	go func() { done <- runJob(t, t.Context(), cfg) }()
	out.waitFor(t, "ready\n", 3)
	sigs <- os.Interrupt
	j := <-done
	if r := j.res; r.Outcome != Interrupted || r.ExitCode != 0 || r.Signal != os.Interrupt || len(r.Stopped) != 0 {
		t.Fatalf("result %+v", r)
	}
	for r := range 3 {
		if want := fmt.Sprintf("[%d] rank %d got interrupt\n", r, r); !strings.Contains(j.stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
}

func TestSecondSignalKills(t *testing.T) {
	t.Parallel()
	sigs := make(chan os.Signal, 2)
	out := newSyncBuffer()
	cfg := helperConfig(2, "ignore-int")
	cfg.Signals, cfg.Stdout = sigs, out
	done := make(chan jobRun)
	go func() { done <- runJob(t, t.Context(), cfg) }()
	out.waitFor(t, "ready\n", 2)
	sigs <- os.Interrupt // ignored by the ranks
	sigs <- os.Interrupt // SIGKILL
	j := <-done
	if r := j.res; r.Outcome != Interrupted || r.ExitCode != 130 || !slices.Equal(r.Stopped, []int{0, 1}) {
		t.Fatalf("result %+v", r)
	}
	if want := "courier run: interrupted by signal: interrupt"; !strings.Contains(j.stderr, want) {
		t.Errorf("stderr lacks %q", want)
	}
}

func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{NP: 0, Program: "true"}, {NP: -1, Program: "true"}, {NP: 2}} {
		j := runJob(t, t.Context(), cfg)
		if j.res.Outcome != Invalid || j.res.ExitCode != 2 || !strings.HasPrefix(j.stderr, MessagePrefix) {
			t.Errorf("%+v: result %+v, stderr %q", cfg, j.res, j.stderr)
		}
	}
}

func TestProgramCannotStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "data")
	if err := os.WriteFile(notExec, []byte("not a program"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prog string
		code int
	}{
		{"courier-test-no-such-program", 127},
		{filepath.Join(dir, "missing"), 127},
		{notExec, 126},
	} {
		j := runJob(t, t.Context(), Config{NP: 2, Program: c.prog})
		if j.res.Outcome != StartFailed || j.res.ExitCode != c.code || !strings.Contains(j.stderr, MessagePrefix) {
			t.Errorf("%s: result %+v, want exit %d", c.prog, j.res, c.code)
		}
	}
}

// writeModule writes a one-package module into dir/name and returns the
// package directory.
func writeModule(t *testing.T, dir, name, src string) string {
	t.Helper()
	pkg := filepath.Join(dir, name)
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"go.mod": "module example.com/" + name + "\n\ngo 1.26\n", "main.go": src}
	for f, s := range files {
		if err := os.WriteFile(filepath.Join(pkg, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return pkg
}

const helloSrc = `package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("hello from %s of %s, key %d chars, args %q, binary %s\n",
		os.Getenv("COURIER_RANK"), os.Getenv("COURIER_SIZE"), len(os.Getenv("COURIER_JOB_KEY")), os.Args[1:], os.Args[0])
}
`

func TestBuildPackage(t *testing.T) {
	t.Parallel()
	pkg := writeModule(t, t.TempDir(), "hello", helloSrc)
	j := runJob(t, t.Context(), Config{NP: 2, Program: pkg, Args: []string{"a b", "c"}})
	if j.res.ExitCode != 0 {
		t.Fatalf("result %+v", j.res)
	}
	re := regexp.MustCompile(`(?m)^\[(\d)\] hello from (\d) of 2, key 32 chars, args \["a b" "c"\], binary (\S+)$`)
	ms := re.FindAllStringSubmatch(j.stdout, -1)
	if len(ms) != 2 {
		t.Fatalf("want 2 hello lines")
	}
	for _, m := range ms {
		if m[1] != m[2] {
			t.Errorf("line of rank %s says %s", m[1], m[2])
		}
		if filepath.Base(m[3]) != "hello" {
			t.Errorf("binary named %s, want hello", m[3])
		}
		if _, err := os.Stat(filepath.Dir(m[3])); !os.IsNotExist(err) {
			t.Errorf("build directory %s left behind (%v)", filepath.Dir(m[3]), err)
		}
	}
}

func TestBuildFailure(t *testing.T) {
	t.Parallel()
	pkg := writeModule(t, t.TempDir(), "broken", "package main\n\nfunc main() { undefinedThing() }\n")
	j := runJob(t, t.Context(), Config{NP: 2, Program: pkg})
	if j.res.Outcome != BuildFailed || j.res.ExitCode != 1 {
		t.Fatalf("result %+v", j.res)
	}
	for _, want := range []string{"undefined: undefinedThing", "courier run: go build " + pkg + ": exit status 1"} {
		if !strings.Contains(j.stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
}

// TestRelativePackage changes directory, so it cannot run in parallel.
func TestRelativePackage(t *testing.T) {
	dir := t.TempDir()
	writeModule(t, dir, "hello", helloSrc)
	if err := os.WriteFile(filepath.Join(dir, "one.go"), []byte(helloSrc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for arg, want := range map[string]bool{
		"./hello": true, "hello": true, "hello/": true, ".": true, "one.go": true, "./one.go": true,
		"./empty": true, "empty": false, "true": false, "./missing": false, "missing.go": false,
	} {
		if got := IsPackage(arg); got != want {
			t.Errorf("IsPackage(%q) = %v, want %v", arg, got, want)
		}
	}
	for _, arg := range []string{"./hello", "one.go"} {
		j := runJob(t, t.Context(), Config{NP: 1, Program: arg})
		if j.res.ExitCode != 0 || !strings.HasPrefix(j.stdout, "[0] hello from 0 of 1") {
			t.Errorf("%s: result %+v", arg, j.res)
		}
	}
}
