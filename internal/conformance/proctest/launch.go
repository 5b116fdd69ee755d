package proctest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proc describes one rank for Launch: how to start a copy of the test
// binary as that rank.
type Proc struct {
	// Rank is the rank the process will be; Launch reads rank 0's report.
	Rank int
	// Prefix comes before the binary on the command line (for example
	// "ip", "netns", "exec", NAME), or is empty.
	Prefix []string
	// Env is added to the process's environment (NAME=value; an empty
	// value unsets a variable for courier, which treats it as unset). It
	// must make the process a rank (COURIER_RANK, COURIER_SIZE, ...).
	Env []string
	// Files are inherited as file descriptors 3, 4, ...; Launch closes
	// them once the processes have started.
	Files []*os.File
}

// DefaultLimit bounds a launched job when the test has no deadline
// sooner: the suite takes seconds when it passes.
const DefaultLimit = 5 * time.Minute

// failGrace is how long Launch lets the other ranks finish after one
// failed before it stops them: they notice on their own within seconds.
const failGrace = 30 * time.Second

// Loopback describes a job of n ranks on loopback, started as courier run
// starts one: COURIER_RANK/SIZE/ADDR/JOB_KEY, and rank 0 inheriting the
// rendezvous socket, already listening (COURIER_RENDEZVOUS_FD=3), so that
// no port is chosen, released and bound again.
func Loopback(n int) ([]Proc, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close() // f is a copy, which keeps the socket open
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return nil, err
	}
	env := JobEnv(n, ln.Addr().String(), NewKey())
	procs := make([]Proc, n)
	for i := range procs {
		procs[i] = Proc{Rank: i, Env: append(env(i), "COURIER_IFACE=", "COURIER_RENDEZVOUS_FD=")}
	}
	procs[0].Env = append(procs[0].Env, "COURIER_RENDEZVOUS_FD=3")
	procs[0].Files = []*os.File{f}
	return procs, nil
}

// NewKey returns a fresh job key.
func NewKey() string {
	var k [16]byte
	rand.Read(k[:])
	return hex.EncodeToString(k[:])
}

// JobEnv returns the function that gives rank i of a job of n ranks,
// whose rank 0 serves the rendezvous at addr, its launch variables.
func JobEnv(n int, addr, key string) func(i int) []string {
	return func(i int) []string {
		return []string{
			"COURIER_RANK=" + strconv.Itoa(i), "COURIER_SIZE=" + strconv.Itoa(n),
			"COURIER_ADDR=" + addr, "COURIER_JOB_KEY=" + key,
		}
	}
}

// result is rank 0's report of one case.
type result struct {
	verdict string // "PASS", "FAIL" or "SKIP"
	detail  string
}

// Launch starts procs, each a copy of this test binary that runs only the
// test named test (which must call RunRank when InJob), waits for them,
// and reports each selected case as the subtest t.Run(name): passed,
// failed with rank 0's report, or skipped as it was on the ranks. A case
// rank 0 did not report, or a rank that did not exit cleanly, fails the
// test with every rank's output.
func Launch(t *testing.T, test string, procs []Proc, o Options) {
	t.Helper()
	cases, err := o.Selected()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("proctest: finding the test binary: %v", err)
	}
	limit := DefaultLimit
	if dl, ok := t.Deadline(); ok && time.Until(dl)-30*time.Second < limit {
		limit = max(time.Until(dl)-30*time.Second, 10*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()

	closeFiles := func() {
		for _, p := range procs {
			for _, f := range p.Files {
				f.Close()
			}
		}
	}
	outs := make([]*bytes.Buffer, len(procs))
	cmds := make([]*exec.Cmd, len(procs))
	start := time.Now()
	for i, p := range procs {
		args := append(append([]string{}, p.Prefix...), exe,
			"-test.run=^"+test+"$", "-test.timeout="+(limit+time.Minute).String())
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		// SIGQUIT first: a Go rank prints every goroutine's stack.
		cmd.Cancel = func() error { return cmd.Process.Signal(stopSignal) }
		cmd.WaitDelay = 10 * time.Second
		cmd.Env = append(os.Environ(), CasesEnv+"="+o.pattern())
		if o.light() {
			cmd.Env = append(cmd.Env, LightEnv+"=1")
		}
		if o.Timeout > 0 {
			cmd.Env = append(cmd.Env, "COURIER_TIMEOUT="+o.Timeout.String())
		}
		cmd.Env = append(cmd.Env, p.Env...)
		cmd.ExtraFiles = p.Files
		outs[i] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			cancel()
			closeFiles()
			for _, c := range cmds[:i] {
				c.Wait()
			}
			t.Fatalf("proctest: starting rank %d (%s): %v", p.Rank, strings.Join(args, " "), err)
		}
		cmds[i] = cmd
	}
	closeFiles()
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	var once sync.Once
	for i, cmd := range cmds {
		wg.Go(func() {
			errs[i] = cmd.Wait()
			if errs[i] != nil {
				once.Do(func() { time.AfterFunc(failGrace, cancel) })
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	var report string
	for i, p := range procs {
		if p.Rank == 0 {
			report = outs[i].String()
		}
	}
	results := parseReport(report)
	for _, cs := range cases {
		t.Run(cs.Name, func(t *testing.T) {
			r, ok := results[cs.Name]
			switch {
			case !ok:
				t.Errorf("not run: rank 0 reported nothing for this case (the job ended before it; see the ranks' output)")
			case r.verdict == "SKIP":
				t.Skip(r.detail)
			case r.verdict == "FAIL":
				t.Errorf("%s", r.detail)
			}
		})
	}
	bad := ctx.Err() != nil
	for _, err := range errs {
		bad = bad || err != nil
	}
	if !bad && !t.Failed() {
		t.Logf("%d ranks, %d cases in %v", len(procs), len(cases), elapsed.Round(time.Millisecond))
		return
	}
	if ctx.Err() != nil {
		t.Errorf("proctest: the job was stopped after %v", elapsed.Round(time.Millisecond))
	}
	for i, p := range procs {
		t.Errorf("rank %d: %s; output:\n%s", p.Rank, exitText(errs[i]), tail(outs[i].String(), 24<<10))
	}
}

// parseReport reads rank 0's report lines from its output: "PASS name",
// "SKIP name: reason", and "FAIL name: rank r: detail" followed by lines
// indented by a tab. A case with a FAIL line failed, whatever else it has.
func parseReport(out string) map[string]result {
	res := make(map[string]result)
	var cur string // the case whose FAIL lines are being read
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if cur != "" && strings.HasPrefix(line, "\t") {
			r := res[cur]
			r.detail += "\n" + line
			res[cur] = r
			continue
		}
		cur = ""
		verdict, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		switch verdict {
		case "PASS":
			if _, seen := res[rest]; !seen {
				res[rest] = result{verdict: "PASS"}
			}
		case "SKIP":
			name, why, _ := strings.Cut(rest, ": ")
			res[name] = result{verdict: "SKIP", detail: why}
		case "FAIL":
			name, why, _ := strings.Cut(rest, ": ")
			r := res[name]
			if r.verdict == "FAIL" {
				r.detail += "\n" + why
			} else {
				r = result{verdict: "FAIL", detail: why}
			}
			res[name] = r
			cur = name
		}
	}
	return res
}

// exitText describes how a rank ended.
func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	return err.Error()
}

// tail returns the last n bytes of s, from a line start.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "...\n" + s
}
