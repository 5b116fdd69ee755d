//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	shmem "github.com/courier-mp/courier/internal/shm"
	"github.com/courier-mp/courier/mp"
)

// Sentinel first arguments that make the test binary act as something else:
// the courier command itself, or a rank of a job (see helperMain).
const (
	asCourier = "__courier_main__"
	asRank    = "__courier_rank__"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case asCourier:
			os.Exit(run(append([]string{"courier"}, os.Args[2:]...), os.Stdout, os.Stderr))
		case asRank:
			os.Exit(helperMain(os.Args[2:]))
		}
	}
	// Under -race, a process sleeps 1 s before exiting (GORACE
	// atexit_sleep_ms); the ranks the tests start need not.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	selfCommand = func() ([]string, error) { return []string{os.Args[0], asCourier}, nil }
	os.Exit(m.Run())
}

// helperMain is a rank. Modes:
//
//	hello        print "rank R of S, key K chars, args A"
//	exit R CODE  rank R exits CODE at once; the others sleep for an hour
//	sleep        sleep for an hour
//	wait-signal  print "ready", then on SIGINT or SIGTERM print it and exit 0
//	hang         mp.Init, print "ready", then receive from the next rank
//	             with tag 5, as every rank does: none sends, so all wait
//	hang-timeout the same with a timeout of 1s
func helperMain(args []string) int {
	rank, size := os.Getenv("COURIER_RANK"), os.Getenv("COURIER_SIZE")
	switch args[0] {
	case "hello":
		fmt.Printf("rank %s of %s, key %d chars, args %q\n", rank, size, len(os.Getenv("COURIER_JOB_KEY")), args[1:])
		return 0
	case "exit":
		if rank == args[1] {
			var code int
			fmt.Sscan(args[2], &code)
			return code
		}
		time.Sleep(time.Hour)
	case "sleep":
		time.Sleep(time.Hour)
	case "wait-signal":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
		fmt.Println("ready")
		fmt.Printf("rank %s got %v\n", rank, <-ch)
		return 0
	case "hang", "hang-timeout":
		bound := time.Duration(0)
		if args[0] == "hang-timeout" {
			bound = time.Second
		}
		c, err := mp.Init(context.Background(), mp.WithTimeout(bound))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 98
		}
		defer c.Close()
		fmt.Println("ready")
		_, err = mp.Recv(c, make([]float64, 3), (c.Rank()+1)%c.Size(), 5)
		fmt.Fprintln(os.Stderr, "recv ended:", err)
		return 97
	}
	return 99
}

// courier runs the command line in-process.
func courier(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(append([]string{"courier"}, args...), &o, &e)
	t.Logf("courier %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, o.String(), e.String())
	return code, o.String(), e.String()
}

// rankArgs returns the program and arguments that make every rank run
// helperMain with mode and args.
func rankArgs(mode string, args ...string) []string {
	return append([]string{os.Args[0], asRank, mode}, args...)
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"nosuch"}, `courier: unknown command "nosuch"`},
		{[]string{"bench", "-reps", "0"}, "usage: courier bench"},
		{[]string{"bench", "-lat", "1,x"}, `bad size "x"`},
		{[]string{"bench", "extra"}, "usage: courier bench"},
		{[]string{"bench", "-nosuch"}, "flag provided but not defined: -nosuch"},
		{[]string{"bench", "-compare", "a.json"}, "courier bench: -compare draws runs beside this one: it needs -plot"},
		{[]string{"plot"}, "courier plot: want JSON files, and -o or -table"},
		{[]string{"plot", "a.json"}, "usage: courier plot"},
		{[]string{"info", "extra"}, "usage: courier info"},
		{[]string{"trace"}, "courier trace: want trace files, and -o or -svg"},
		{[]string{"trace", "a.json"}, "usage: courier trace"},
		{[]string{"run"}, "courier run: -np N is required"},
		{[]string{"run", "true"}, "courier run: -np N is required"},
		{[]string{"run", "-np", "0", "true"}, "courier run: -np N is required"},
		{[]string{"run", "-np", "-3", "true"}, "courier run: -np N is required"},
		{[]string{"run", "-n", "abc", "true"}, `invalid value "abc" for flag -n`},
		{[]string{"run", "-np", "2"}, "courier run: no program to run"},
		{[]string{"run", "-np", "2", "--"}, "courier run: no program to run"},
		{[]string{"run", "-np", "2", "-x", "true"}, "flag provided but not defined: -x"},
		{[]string{"run", "--timeout", "-1s", "-np", "1", "true"}, "courier run: --timeout must not be negative"},
		{[]string{"run", "--timeout", "soon", "-np", "1", "true"}, `invalid value "soon" for flag -timeout`},
		{[]string{"help", "nosuch"}, `courier help: unknown command "nosuch"`},
		{[]string{"version", "extra"}, "usage: courier version"},
	} {
		code, stdout, stderr := courier(t, c.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("courier %q: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
		if strings.HasPrefix(strings.Join(c.args, " "), "run") && !strings.Contains(stderr, "usage: courier run -np N") {
			t.Errorf("courier %q: no usage in %q", c.args, stderr)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "\trun      run a program as N ranks"},
		{[]string{"--help"}, "Usage:"},
		{[]string{"help", "run"}, "Exit status:"},
		{[]string{"help", "trace"}, "usage: courier trace"},
		{[]string{"run", "-h"}, "Exit status:"},
		{[]string{"help", "version"}, "usage: courier version"},
		{[]string{"version"}, "courier " + version + " go"},
		{[]string{"--version"}, "courier " + version},
	} {
		code, stdout, stderr := courier(t, c.args...)
		if code != 0 || !strings.Contains(stdout, c.want) || stderr != "" {
			t.Errorf("courier %q: exit %d, stdout %q; want exit 0 and %q", c.args, code, stdout, c.want)
		}
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	args := append([]string{"run", "-n", "3", "--"}, rankArgs("hello", "-np", "x y")...)
	code, stdout, stderr := courier(t, args...)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for r := range 3 {
		want := fmt.Sprintf("[%d] rank %d of 3, key 32 chars, args [\"-np\" \"x y\"]\n", r, r)
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
}

func TestRunNoPrefix(t *testing.T) {
	t.Parallel()
	code, stdout, _ := courier(t, append([]string{"run", "-np", "2", "--no-prefix"}, rankArgs("hello")...)...)
	if code != 0 || strings.Contains(stdout, "] rank") || strings.Count(stdout, "\n") != 2 {
		t.Fatalf("exit %d, stdout %q", code, stdout)
	}
}

func TestRunRankFails(t *testing.T) {
	t.Parallel()
	start := time.Now()
	code, _, stderr := courier(t, append([]string{"run", "-np", "4"}, rankArgs("exit", "2", "3")...)...)
	if code != 3 {
		t.Errorf("exit %d, want 3", code)
	}
	for _, want := range []string{"courier run: rank 2 failed: exit status 3\n", "courier run: stopped ranks 0, 1, 3\n"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v: the sleeping ranks were not stopped promptly", d)
	}
}

func TestRunTimeout(t *testing.T) {
	t.Parallel()
	code, _, stderr := courier(t, append([]string{"run", "-np", "2", "--timeout", "200ms"}, rankArgs("sleep")...)...)
	if code != 124 || !strings.Contains(stderr, "courier run: timed out after 200ms") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// hangLines are what the report of helperMain's hang says of each of two
// ranks.
func hangLines(t *testing.T, stderr string) {
	t.Helper()
	for r := range 2 {
		want := fmt.Sprintf("[%d] \trecv from rank %d, tag 5, 3 × float64 (called at ", r, 1-r)
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if !strings.Contains(stderr, "main_test.go:") {
		t.Errorf("stderr names no line of the program")
	}
	for _, want := range []string{
		"courier run: wait-for graph: 0→1, 1→0\n",
		"courier run: rank 0 (recv from rank 1, tag 5, 3 × float64 at main_test.go:",
		") waits for rank 1, which (recv from rank 0, tag 5, 3 × float64 at main_test.go:",
		") waits for rank 0: each receives before it sends: one must send first, or use Sendrecv\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
}

// A job that hangs: --timeout gets every rank's pending operations
// printed, together, before the ranks are stopped.
func TestRunTimeoutReports(t *testing.T) {
	t.Parallel()
	code, _, stderr := courier(t, append([]string{"run", "-np", "2", "--timeout", "2s"}, rankArgs("hang")...)...)
	if code != 124 || !strings.Contains(stderr, "courier run: what the ranks were waiting for (timed out after 2s):\n") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	hangLines(t, stderr)
	head := strings.Index(stderr, "what the ranks were waiting for")
	if i := strings.Index(stderr, "[1] \trecv"); head < 0 || i < head {
		t.Errorf("rank 1's report is not in the block")
	}
}

// A job whose waits pass their timeout: the first rank to time out has
// every rank's pending operations printed before it aborts.
func TestRankTimeoutReports(t *testing.T) {
	t.Parallel()
	code, _, stderr := courier(t, append([]string{"run", "-np", "2", "--timeout", "30s"}, rankArgs("hang-timeout")...)...)
	if code != 97 || !strings.Contains(stderr, "passed its timeout):\n") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	hangLines(t, stderr)
}

func TestRunNotFound(t *testing.T) {
	t.Parallel()
	code, _, stderr := courier(t, "run", "-np", "2", "courier-test-no-such-program")
	if code != 127 || !strings.Contains(stderr, "courier run: ") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestRunPackage builds ./hello, a package of a module in a temporary
// directory. It changes directory, so it does not run in parallel.
func TestRunPackage(t *testing.T) {
	dir := t.TempDir()
	pkg := filepath.Join(dir, "hello")
	os.Mkdir(pkg, 0o755)
	files := map[string]string{
		"go.mod": "module example.com/hello\n\ngo 1.26\n",
		"main.go": `package main

import (
	"fmt"
	"os"
)

func main() { fmt.Printf("hello %s/%s\n", os.Getenv("COURIER_RANK"), os.Getenv("COURIER_SIZE")) }
`,
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	code, stdout, _ := courier(t, "run", "-np", "2", "./hello")
	if code != 0 || !strings.Contains(stdout, "[0] hello 0/2\n") || !strings.Contains(stdout, "[1] hello 1/2\n") {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}

	os.WriteFile(filepath.Join(pkg, "main.go"), []byte("package main\n\nfunc main() { nope() }\n"), 0o644)
	code, _, stderr := courier(t, "run", "-np", "2", "./hello")
	if code != 1 || !strings.Contains(stderr, "undefined: nope") || !strings.Contains(stderr, "courier run: go build ./hello: exit status 1") {
		t.Errorf("broken package: exit %d, stderr %q", code, stderr)
	}
}

// startReady starts courier run of np ranks of this test binary in role
// (with env added to the environment), kills it after limit, and returns
// once every rank has printed "ready": the command, its standard output
// from there on, its standard error, and the lines it printed so far.
func startReady(t *testing.T, np int, role string, limit time.Duration, env ...string) (*exec.Cmd, *bufio.Scanner, *bytes.Buffer, []string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{asCourier, "run", "-np", strconv.Itoa(np)}, rankArgs(role)...)...)
	cmd.Env = append(os.Environ(), env...)
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(limit, func() { cmd.Process.Kill() })
	t.Cleanup(func() { timer.Stop() })
	var lines []string
	sc := bufio.NewScanner(out)
	for ready := 0; ready < np && sc.Scan(); {
		lines = append(lines, sc.Text())
		if strings.HasSuffix(sc.Text(), "] ready") {
			ready++
		}
	}
	return cmd, sc, stderr, lines
}

// TestSignalForwarded runs courier as a process, sends it a real signal,
// and checks that every rank received it.
func TestSignalForwarded(t *testing.T) {
	t.Parallel()
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			t.Parallel()
			cmd, sc, stderr, lines := startReady(t, 3, "wait-signal", 10*time.Second)
			cmd.Process.Signal(sig)
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
			err := cmd.Wait()
			t.Logf("lines %q, stderr %q, err %v", lines, stderr.String(), err)
			if err != nil {
				t.Errorf("courier: %v, want exit 0 after every rank handled %v", err, sig)
			}
			for r := range 3 {
				want := fmt.Sprintf("[%d] rank %d got %v", r, r, sig)
				if !strings.Contains(strings.Join(lines, "\n"), want) {
					t.Errorf("missing %q", want)
				}
			}
		})
	}
}

// TestSignalReports: Ctrl-C on a job that hangs prints every rank's
// pending operations before the signal reaches them.
func TestSignalReports(t *testing.T) {
	t.Parallel()
	cmd, sc, stderr, _ := startReady(t, 2, "hang", 20*time.Second)
	time.Sleep(200 * time.Millisecond) // into the receive
	cmd.Process.Signal(os.Interrupt)
	for sc.Scan() {
	}
	err := cmd.Wait()
	t.Logf("stderr %q, err %v", stderr.String(), err)
	if !strings.Contains(stderr.String(), "courier run: what the ranks were waiting for (interrupted by signal: interrupt):\n") {
		t.Errorf("no report block")
	}
	hangLines(t, stderr.String())
}

// TestBench runs courier bench for real: alone, it starts itself as two
// ranks, which measure and print the table, in both patterns.
func TestBench(t *testing.T) {
	t.Parallel()
	for _, pattern := range []string{"osu", "stream"} {
		code, stdout, stderr := courier(t, "bench", "-reps", "1", "-lat", "1,4k", "-bw", "64k,1m", "-window", "4", "-pattern", pattern)
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		for _, want := range []string{"host backend", pattern + " pattern", "init", "latency", "bandwidth", " 4096 ", " 1048576 ", "allocs/msg"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("output lacks %q:\n%s", want, stdout)
			}
		}
		if n := strings.Count(stdout, "\n"); n != 3+4 {
			t.Errorf("want a title, a header, the init row and 4 rows, got %d lines:\n%s", n, stdout)
		}
	}
	if code, _, stderr := courier(t, "bench", "-pattern", "nope"); code != 2 || !strings.Contains(stderr, `unknown pattern "nope"`) {
		t.Errorf("a bad pattern: exit %d, stderr %q", code, stderr)
	}
}

// TestInfo: courier info reports the launcher, every backend with whether
// it can run here, the backend auto picks, CUDA and NCCL (here: the
// reasons they are missing, or what they are).
func TestInfo(t *testing.T) {
	t.Setenv("COURIER_RANK", "")
	t.Setenv("COURIER_SIZE", "")
	t.Setenv("COURIER_BACKEND", "")
	code, stdout, _ := courier(t, "info")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"launcher: none", "backend tcp: available", "backend nccl: ", `COURIER_BACKEND="" picks `, "\ncuda: ", "\nnccl: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	t.Setenv("COURIER_RANK", "2")
	t.Setenv("COURIER_SIZE", "4")
	t.Setenv("COURIER_ADDR", "127.0.0.1:1")
	if _, stdout, _ := courier(t, "info"); !strings.Contains(stdout, "launcher: manual, rank 2 of 4") {
		t.Errorf("under a manual launch: %q", stdout)
	}
	if code, _, _ := courier(t, "info", "extra"); code != 2 {
		t.Errorf("info with an argument: exit %d, want 2", code)
	}
}

// TestCopyInInfo: courier info's shm line names how payloads go into the
// rings, and a bad COURIER_SHM_COPYIN says what it wants.
func TestCopyInInfo(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "COURIER_SHM_COPYIN" {
				return v
			}
			return ""
		}
	}
	streamWant := "non-temporal stores"
	if !shmem.CanStream() {
		streamWant = "no AVX2"
	}
	want := streamWant // unset: the stream, but on Intel processors
	if shmem.IntelCPU() {
		want = "the default on Intel processors"
	}
	for v, want := range map[string]string{"": want, "stream": streamWant, "cache": "COURIER_SHM_COPYIN=cache", "fast": "want stream or cache"} {
		if got := copyInInfo(env(v)); !strings.Contains(got, want) {
			t.Errorf("COURIER_SHM_COPYIN=%q: %q lacks %q", v, got, want)
		}
	}
}

// TestSplitInfo: courier info says whether large pulls are split with
// the sender (COURIER_SHM_SPLIT), and names a bad value's variable.
func TestSplitInfo(t *testing.T) {
	for v, want := range map[string]string{"": "both ranks at once", "1": "both ranks at once", "0": "COURIER_SHM_SPLIT=0", "maybe": "COURIER_SHM_SPLIT=\"maybe\""} {
		got := splitInfo(func(k string) string {
			if k == "COURIER_SHM_SPLIT" {
				return v
			}
			return ""
		})
		if !strings.Contains(got, want) {
			t.Errorf("COURIER_SHM_SPLIT=%q: %q lacks %q", v, got, want)
		}
	}
}

// TestGPUPairs: the table of courier info's pairs puts ranks on the GPUs
// in turn (or all on COURIER_DEVICE), and gives two ranks on one GPU the
// CUDA IPC path, two GPUs NCCL, and a shared GPU with COURIER_CUDA_IPC=0
// the refusal Open gives.
func TestGPUPairs(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	got := gpuPairs(2, 3, env())
	for _, want := range []string{
		"3 ranks on this host (the launcher's local ranks): GPUs [0 1 0] by local rank",
		"local ranks 0 and 1: nccl (GPUs 0 and 1)",
		"local ranks 0 and 2: cuda-ipc (both on GPU 0)",
		"local ranks 1 and 2: nccl (GPUs 1 and 0)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("3 ranks on 2 GPUs: no %q in\n%s", want, got)
		}
	}
	got = gpuPairs(1, -1, env("COURIER_CUDA_IPC", "0"))
	if !strings.Contains(got, "2 ranks on this host (a job of one rank per GPU") || !strings.Contains(got, "local ranks 0 and 1: refused (both on GPU 0, and COURIER_CUDA_IPC=0") {
		t.Errorf("one GPU, the path off:\n%s", got)
	}
	got = gpuPairs(4, 2, env("COURIER_DEVICE", "3"))
	if !strings.Contains(got, "GPUs [3 3]") || !strings.Contains(got, "cuda-ipc (both on GPU 3)") {
		t.Errorf("COURIER_DEVICE=3:\n%s", got)
	}
	if got = gpuPairs(2, 2, env("COURIER_DEVICE", "9")); !strings.Contains(got, "gpu pairs: ") || !strings.Contains(got, "COURIER_DEVICE") {
		t.Errorf("a bad COURIER_DEVICE:\n%s", got)
	}
	if got = gpuPairs(1, 10, env()); !strings.Contains(got, "and 17 pairs more") {
		t.Errorf("10 ranks: the list is not bounded:\n%s", got)
	}
}
