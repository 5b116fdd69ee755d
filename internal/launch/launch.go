// Package launch runs a courier job on the local machine; it is the engine
// of courier run. Run builds the program first if it is a Go package,
// starts N ranks of it with the environment courier's bootstrap reads
// (see ChildEnv), hands rank 0 an already-listening rendezvous socket as
// file descriptor 3, prefixes each line the ranks print with "[rank] ",
// forwards the signals it is given, and stops the whole job when one rank
// fails, times out, or is canceled. On the timeout and on the first
// signal it first asks the ranks for their pending operations over their
// control channels (EnvControlFD, control.go) and prints them together.
//
// The rank named as failed is the one that failed first: on Linux, the
// first to die in the kernel's order of deaths (pidfds), though the ranks
// that exited because they saw it die may be reaped before it (a process
// it started holding its output open, say); elsewhere, the first reaped.
//
// Run never exits the process and never touches os.Stdout, os.Stderr or
// signal handlers itself: the caller passes writers and a signal channel.
//
// # Exit codes
//
// Result.ExitCode is what courier run exits with:
//
//	0        every rank exited with status 0 (also after a forwarded
//	         signal, if every rank then exited 0)
//	n        the first rank to fail exited with status n
//	128+n    the first rank to fail was killed by signal n; or the launcher
//	         was sent signal n, forwarded it, and some rank did not exit 0
//	         (130 for SIGINT, 143 for SIGTERM)
//	124      the job ran longer than Config.Timeout
//	126, 127 the program cannot be executed, or was not found
//	2        the configuration is invalid (as for a usage error)
//	1        anything else: go build failed, the context was canceled, the
//	         rendezvous socket could not be opened
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultGrace is how long ranks being stopped get to exit after SIGTERM
// before they are sent SIGKILL.
const DefaultGrace = 2 * time.Second

// MessagePrefix begins every message Run writes to Config.Stderr.
const MessagePrefix = "courier run: "

// Config describes a job for Run.
type Config struct {
	// NP is the number of ranks to start; it must be at least 1.
	NP int
	// Program is what each rank runs: a Go package or .go file, which is
	// built once first (see IsPackage and Build), or an executable; a name
	// without a path separator is looked up on PATH.
	Program string
	// Args are the arguments every rank gets after the program name.
	Args []string
	// Env is the environment the job starts from; nil means os.Environ().
	// Each rank gets ChildEnv of it. go build gets it unchanged.
	Env []string
	// Stdout receives the ranks' standard output, Stderr their standard
	// error, go build's output and Run's own messages. Nil discards.
	Stdout, Stderr io.Writer
	// NoPrefix turns off the "[rank] " prefix. The ranks then write straight
	// to Stdout and Stderr when those are *os.File (so a rank sees its
	// terminal), and otherwise in whatever pieces they write.
	NoPrefix bool
	// Timeout, when positive, bounds how long the ranks may run (counted
	// from the start of rank 0, so not counting a build). When it expires
	// the ranks' pending operations are printed (collectReports) and the
	// job is stopped like after a failure; Run reports TimedOut.
	Timeout time.Duration
	// Grace is how long ranks being stopped get between SIGTERM and SIGKILL;
	// zero or less means DefaultGrace.
	Grace time.Duration
	// Signals carries signals for the job, typically from signal.Notify for
	// os.Interrupt and SIGTERM. The first one has the ranks' pending
	// operations printed, is then forwarded to every running rank, and Run
	// waits for them; any later one (or one arriving while
	// the job is already being stopped) kills every rank with SIGKILL. A
	// signal during the build interrupts it. Nil: no signals.
	Signals <-chan os.Signal
}

// Outcome says how a job ended.
type Outcome int

// The outcomes of Run.
const (
	// Succeeded: every rank exited with status 0.
	Succeeded Outcome = iota
	// Failed: a rank exited with a non-zero status or was killed by a
	// signal; Result.Failed names the first, and the others were stopped.
	Failed
	// Interrupted: a signal arrived on Config.Signals and was forwarded.
	Interrupted
	// TimedOut: Config.Timeout expired and the job was stopped.
	TimedOut
	// Canceled: the context passed to Run was canceled and the job stopped.
	Canceled
	// BuildFailed: the program was a Go package and go build failed.
	BuildFailed
	// StartFailed: the program (or the rendezvous socket) could not be
	// set up; no rank ran, or Result.Failed names the rank that did not
	// start and the others were stopped.
	StartFailed
	// Invalid: the Config is invalid; nothing was started.
	Invalid
)

var outcomeNames = [...]string{"succeeded", "failed", "interrupted", "timed out", "canceled", "build failed", "start failed", "invalid"}

// String returns the outcome in words, e.g. "timed out".
func (o Outcome) String() string {
	if o >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Result is what Run reports about a job. Run has also written a message
// about it to Config.Stderr, unless it succeeded.
type Result struct {
	// Outcome says how the job ended; it is decided by the first thing that
	// went wrong (a rank failing, a signal, the timeout, cancellation).
	Outcome Outcome
	// ExitCode is what the courier run command exits with (see the package
	// documentation).
	ExitCode int
	// Failed is the rank that failed first (Failed), or that could not be
	// started (StartFailed); -1 otherwise.
	Failed int
	// Err is the error behind the outcome: the failed rank's
	// (*exec.ExitError when it ran), go build's, the invalid setting's. Nil
	// for Succeeded, Interrupted and TimedOut.
	Err error
	// Signal is the signal forwarded, for Interrupted.
	Signal os.Signal
	// Stopped lists, in increasing order, the ranks that ended without
	// success after the job began to end (after the first failure, the
	// signal, the timeout): the ranks the launcher stopped, not failures of
	// their own.
	Stopped []int
}

// Run runs the job cfg describes and waits until every rank has ended.
// ctx bounds the job: when it is canceled the ranks are stopped (SIGTERM,
// then SIGKILL after the grace period). Run does not return before every
// rank it started has been reaped and its output written.
func Run(ctx context.Context, cfg Config) Result {
	j := &job{cfg: cfg, grace: cfg.Grace, env: cfg.Env}
	j.out.stdout, j.out.stderr = cfg.Stdout, cfg.Stderr
	if j.grace <= 0 {
		j.grace = DefaultGrace
	}
	if j.env == nil {
		j.env = os.Environ()
	}
	if err := cfg.check(); err != nil {
		j.logf("%v", err)
		return Result{Outcome: Invalid, ExitCode: 2, Failed: -1, Err: err}
	}
	argv0, path := cfg.Program, cfg.Program
	if IsPackage(cfg.Program) {
		bin, cleanup, res := j.build(ctx)
		if res != nil {
			return *res
		}
		defer cleanup()
		argv0, path = bin, bin
	}
	path, err := exec.LookPath(path)
	if err != nil {
		j.logf("%v", err)
		return Result{Outcome: StartFailed, ExitCode: startExitCode(err), Failed: -1, Err: err}
	}
	return j.run(ctx, argv0, path)
}

func (c *Config) check() error {
	if c.NP < 1 {
		return fmt.Errorf("the number of ranks must be at least 1, not %d", c.NP)
	}
	if c.Program == "" {
		return errors.New("no program to run")
	}
	return nil
}

// job is the state of one Run.
type job struct {
	cfg   Config
	grace time.Duration
	env   []string
	out   output
}

// logf writes one of Run's messages to Stderr.
func (j *job) logf(format string, args ...any) {
	if j.out.stderr == nil {
		return
	}
	j.out.write(j.out.stderr, []byte(MessagePrefix+fmt.Sprintf(format, args...)+"\n"))
}

// build builds cfg.Program, interrupting go build if a signal arrives. It
// returns a non-nil Result when the job must end there.
func (j *job) build(ctx context.Context) (string, func(), *Result) {
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		sig  os.Signal
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	wg.Go(func() {
		select {
		case s, ok := <-j.cfg.Signals:
			if ok {
				sig = s
				cancel()
			}
		case <-done:
		}
	})
	var log io.Writer
	if j.out.stderr != nil {
		log = &lockedWriter{o: &j.out, dst: j.out.stderr}
		if f, ok := j.out.stderr.(*os.File); ok {
			log = f
		}
	}
	bin, cleanup, err := Build(bctx, j.cfg.Program, j.env, log)
	close(done)
	wg.Wait()
	switch {
	case sig != nil:
		if err == nil {
			cleanup()
		}
		j.logf("interrupted by signal: %v, while building %s", sig, j.cfg.Program)
		return "", nil, &Result{Outcome: Interrupted, ExitCode: signalExitCode(sig), Failed: -1, Signal: sig}
	case err != nil && ctx.Err() != nil:
		j.logf("%v", err)
		return "", nil, &Result{Outcome: Canceled, ExitCode: 1, Failed: -1, Err: err}
	case err != nil:
		j.logf("%v", err)
		return "", nil, &Result{Outcome: BuildFailed, ExitCode: 1, Failed: -1, Err: err}
	}
	return bin, cleanup, nil
}

// rank is one started process.
type rank struct {
	cmd            *exec.Cmd
	stdout, stderr *lineWriter // nil when not prefixing
	running        bool
	ctl            *control // nil when the system has no control channels
}

// flush writes the ends of unterminated last lines; call it after Wait.
func (r *rank) flush() {
	if r.stdout != nil {
		r.stdout.Flush()
	}
	if r.stderr != nil {
		r.stderr.Flush()
	}
}

// exitEvent reports that a rank ended; err is what exec.Cmd.Wait returned.
type exitEvent struct {
	rank int
	err  error
}

// run starts the ranks and supervises them until all have ended.
func (j *job) run(ctx context.Context, argv0, path string) Result {
	res := Result{Failed: -1}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return j.setupFailed(fmt.Errorf("rendezvous socket: %w", err))
	}
	addr := ln.Addr().String()
	lf, err := ln.(*net.TCPListener).File() // a duplicate: the socket outlives ln
	ln.Close()
	if err != nil {
		return j.setupFailed(fmt.Errorf("rendezvous socket: %w", err))
	}
	key := NewJobKey()

	n := j.cfg.NP
	ranks := make([]*rank, n)
	exits := make(chan exitEvent, n)
	reports := make(chan rankReport, n)
	stuck := make(chan int, n)
	collected := false // a rank's timeout has had the ranks' reports printed
	running := 0
	dw := newDeaths()
	defer dw.close()
	var startErr error
	for i := range n {
		var extra *os.File
		if i == 0 {
			extra = lf
		}
		ctl, ctlFile := newControl(i, reports, stuck)
		r := j.newRank(i, argv0, path, addr, key, extra, ctlFile)
		err := r.cmd.Start()
		if i == 0 {
			lf.Close() // rank 0 holds the socket now; other ranks must not inherit it
		}
		if ctlFile != nil {
			ctlFile.Close() // the rank's end is the rank's
		}
		if ctl != nil {
			if err != nil {
				ctl.conn.Close()
			} else {
				r.ctl = ctl
				go ctl.serve()
				defer ctl.close()
			}
		}
		if err != nil {
			startErr = err
			res.Outcome, res.Failed, res.Err = StartFailed, i, err
			res.ExitCode = startExitCode(err)
			break
		}
		ranks[i], r.running = r, true
		running++
		dw.add(i, r.cmd.Process.Pid)
		go func() {
			err := r.cmd.Wait()
			r.flush()
			exits <- exitEvent{i, err}
		}()
	}

	var (
		ended    = startErr != nil // the outcome is decided; later endings are "stopped"
		stopping bool              // SIGTERM has been sent
		killed   bool              // SIGKILL has been sent
		grace    *time.Timer
		graceC   <-chan time.Time
		timeoutC <-chan time.Time
		done     = ctx.Done()
		sigs     = j.cfg.Signals
	)
	signalAll := func(sig os.Signal) {
		for _, r := range ranks {
			if r != nil && r.running {
				signalRank(r.cmd.Process, sig)
			}
		}
	}
	stop := func() {
		if stopping {
			return
		}
		stopping = true
		signalAll(sigTerm)
		grace = time.NewTimer(j.grace)
		graceC = grace.C
	}
	kill := func() {
		killed = true
		graceC = nil
		signalAll(os.Kill)
	}
	if startErr != nil {
		stop()
	}
	// After the first failure the launcher settles which rank failed
	// first before it says so: the one that died first, by the kernel's
	// order of deaths (deaths), whose end may be reaped after the ends of
	// the survivors that exited because they saw it die. It waits for
	// the ends of the ranks that died before the first failure it saw,
	// for the grace period and a second at most.
	var (
		settling bool        // a rank failed; which one first is not decided yet
		failures []exitEvent // the failures seen while settling
		exited   = make([]bool, n)
		settleC  <-chan time.Time
		expired  bool
	)
	decide := func() {
		if !settling {
			return
		}
		best, bestSeq := -1, 0
		for k, f := range failures {
			seq, ok := dw.order(f.rank)
			if !ok {
				if dw.watching(f.rank) && !expired {
					return // its death is being recorded
				}
				seq = n + k // unknown: after the known ones, in the order reaped
			}
			if best < 0 || seq < bestSeq {
				best, bestSeq = k, seq
			}
		}
		if !expired {
			for r := range n {
				if seq, ok := dw.order(r); ok && seq < bestSeq && !exited[r] {
					return // died before it; its end is not reaped yet
				}
			}
		}
		settling, settleC = false, nil
		first := failures[best]
		res.Outcome, res.Failed, res.Err = Failed, first.rank, first.err
		res.ExitCode = exitCode(first.err)
		for k, f := range failures {
			if k != best {
				res.Stopped = append(res.Stopped, f.rank)
			}
		}
	}
	if j.cfg.Timeout > 0 {
		t := time.NewTimer(j.cfg.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	for running > 0 {
		select {
		case e := <-exits:
			running--
			ranks[e.rank].running = false
			exited[e.rank] = true
			if errors.Is(e.err, exec.ErrWaitDelay) {
				// It exited 0, but something it started kept its output open.
				j.logf("rank %d exited, but a process it started still holds its output; stopped reading it", e.rank)
				e.err = nil
			}
			if e.err == nil {
				decide()
				continue
			}
			if settling {
				failures = append(failures, e)
				decide()
				continue
			}
			if ended {
				res.Stopped = append(res.Stopped, e.rank)
				continue
			}
			ended, settling = true, true
			failures = append(failures, e)
			t := time.NewTimer(j.grace + time.Second)
			defer t.Stop()
			settleC = t.C
			stop()
			decide()
		case <-dw.notified():
			decide()
		case <-settleC:
			expired = true
			decide()
		case sig, ok := <-sigs:
			if !ok {
				sigs = nil // closed: no more signals
				continue
			}
			if ended || stopping || killed {
				kill()
				continue
			}
			ended = true
			res.Outcome, res.Signal = Interrupted, sig
			j.collectReports(ranks, reports, fmt.Sprintf("interrupted by signal: %v", sig))
			signalAll(sig)
		case <-timeoutC:
			timeoutC = nil
			if !ended {
				ended = true
				res.Outcome, res.ExitCode = TimedOut, 124
				j.collectReports(ranks, reports, fmt.Sprintf("timed out after %v", j.cfg.Timeout))
			}
			stop()
		case <-done:
			done = nil
			if !ended {
				ended = true
				res.Outcome, res.ExitCode, res.Err = Canceled, 1, ctx.Err()
			}
			stop()
		case <-graceC:
			kill()
		case r := <-stuck:
			if !collected && !ended {
				collected = true
				j.collectReports(ranks, reports, fmt.Sprintf("a wait on rank %d passed its timeout", r))
			}
			if c := ranks[r].ctl; c != nil {
				c.conn.Write([]byte("reported\n"))
			}
		}
	}
	expired = true
	decide()
	if grace != nil {
		grace.Stop()
	}
	slices.Sort(res.Stopped)
	j.report(&res)
	return res
}

// newRank prepares (but does not start) rank i.
func (j *job) newRank(i int, argv0, path, addr, key string, rendezvous, ctl *os.File) *rank {
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{argv0}, j.cfg.Args...),
		Env:         ChildEnv(j.env, i, j.cfg.NP, addr, key, rendezvous != nil),
		SysProcAttr: sysProcAttr(),
		// Bounds how long Wait keeps reading output after the rank exits,
		// when a process it started still holds its stdout or stderr.
		WaitDelay: j.grace,
	}
	if rendezvous != nil {
		cmd.ExtraFiles = []*os.File{rendezvous} // fd 3 == RendezvousFD
	}
	if ctl != nil {
		cmd.Env = append(cmd.Env, EnvControlFD+"="+strconv.Itoa(3+len(cmd.ExtraFiles)))
		cmd.ExtraFiles = append(cmd.ExtraFiles, ctl)
	}
	r := &rank{cmd: cmd}
	if j.cfg.NoPrefix {
		cmd.Stdout = j.passthrough(j.out.stdout)
		cmd.Stderr = j.passthrough(j.out.stderr)
		return r
	}
	prefix := "[" + strconv.Itoa(i) + "] "
	if j.out.stdout != nil {
		r.stdout = newLineWriter(&j.out, j.out.stdout, prefix)
		cmd.Stdout = r.stdout
	}
	if j.out.stderr != nil {
		r.stderr = newLineWriter(&j.out, j.out.stderr, prefix)
		cmd.Stderr = r.stderr
	}
	return r
}

// passthrough is what a rank writes to when prefixing is off.
func (j *job) passthrough(w io.Writer) io.Writer {
	switch w := w.(type) {
	case nil:
		return nil
	case *os.File:
		return w
	}
	return &lockedWriter{o: &j.out, dst: w}
}

func (j *job) setupFailed(err error) Result {
	j.logf("%v", err)
	return Result{Outcome: StartFailed, ExitCode: 1, Failed: -1, Err: err}
}

// report writes the message for the job's outcome.
func (j *job) report(res *Result) {
	switch res.Outcome {
	case Succeeded:
		return
	case Failed:
		j.logf("rank %d failed: %s", res.Failed, describe(res.Err))
	case StartFailed:
		j.logf("rank %d failed to start: %v", res.Failed, res.Err)
	case TimedOut:
		j.logf("timed out after %v", j.cfg.Timeout)
	case Canceled:
		j.logf("canceled: %v", res.Err)
	case Interrupted:
		if len(res.Stopped) == 0 {
			res.ExitCode = 0 // every rank handled the signal and exited 0
			return
		}
		res.ExitCode = signalExitCode(res.Signal)
		j.logf("interrupted by signal: %v; %s did not exit cleanly", res.Signal, rankList(res.Stopped))
		return
	}
	if len(res.Stopped) > 0 {
		j.logf("stopped %s", rankList(res.Stopped))
	}
}

// rankList says "rank 3" or "ranks 0, 1, 3".
func rankList(rs []int) string {
	if len(rs) == 1 {
		return "rank " + strconv.Itoa(rs[0])
	}
	return "ranks " + ranges(rs)
}

// describe says how a rank ended: "exit status 3", "killed by signal:
// killed", or the error.
func describe(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		d, _ := describeState(ee.ProcessState)
		return d
	}
	return err.Error()
}

// exitCode is the launcher's exit code for a rank that ended with err.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if _, c := describeState(ee.ProcessState); c > 0 {
			return c
		}
	}
	return 1
}

// startExitCode is the launcher's exit code when the program cannot be
// started: 127 when it does not exist, 126 when it cannot be executed, as
// shells do.
func startExitCode(err error) int {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return 127
	case errors.Is(err, fs.ErrPermission), errors.Is(err, exec.ErrDot):
		return 126
	}
	return 1
}

// ranges formats sorted ranks compactly: "0-2, 5, 7, 8".
func ranges(rs []int) string {
	var b strings.Builder
	for i := 0; i < len(rs); {
		k := i
		for k+1 < len(rs) && rs[k+1] == rs[k]+1 {
			k++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if k-i < 2 { // a run of one or two: "3" or "3, 4"
			k = i
		}
		b.WriteString(strconv.Itoa(rs[i]))
		if k > i {
			b.WriteString("-")
			b.WriteString(strconv.Itoa(rs[k]))
		}
		i = k + 1
	}
	return b.String()
}
