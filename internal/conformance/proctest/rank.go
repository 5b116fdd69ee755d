package proctest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/internal/conformance"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// DefaultTimeout is the timeout of each case's communicator when neither
// Options.Timeout nor COURIER_TIMEOUT gives one.
const DefaultTimeout = 20 * time.Second

// CasesEnv names the environment variable that selects cases by a regular
// expression matched against their names (unanchored, as go test -run).
const CasesEnv = "COURIER_CASES"

// Options adjusts a run. Every rank of a job must be given the same.
type Options struct {
	// Cases selects the cases whose names match this regular expression;
	// "" means the value of COURIER_CASES, and all cases when that is unset.
	Cases string
	// Timeout is the timeout of each case's communicator. Zero means
	// COURIER_TIMEOUT when it is set, else DefaultTimeout.
	Timeout time.Duration
	// Light leaves out the heavy cases (conformance.Case.Heavy), for a
	// short-form run whose heavy cases another suite takes; false means
	// the value of LightEnv.
	Light bool
}

// LightEnv names the environment variable that leaves out the heavy
// cases ("1"), as Options.Light does; Launch sets it for the ranks.
const LightEnv = "COURIER_CASES_LIGHT"

// light reports whether the heavy cases are left out.
func (o Options) light() bool { return o.Light || os.Getenv(LightEnv) == "1" }

// pattern is the case selection in force.
func (o Options) pattern() string {
	if o.Cases != "" {
		return o.Cases
	}
	return os.Getenv(CasesEnv)
}

// Selected returns the cases that o selects, in the suite's order.
func (o Options) Selected() ([]conformance.Case, error) {
	all := conformance.Cases()
	if o.light() {
		all = slices.DeleteFunc(all, func(cs conformance.Case) bool { return cs.Heavy })
	}
	p := o.pattern()
	if p == "" {
		return all, nil
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, fmt.Errorf("proctest: bad case pattern %q: %w", p, err)
	}
	var sel []conformance.Case
	for _, cs := range all {
		if re.MatchString(cs.Name) {
			sel = append(sel, cs)
		}
	}
	if len(sel) == 0 {
		return nil, fmt.Errorf("proctest: no case matches %q", p)
	}
	return sel, nil
}

// timeouts returns the case communicators' timeout, and whether Init
// should be given it (false when COURIER_TIMEOUT is to decide).
func (o Options) timeouts() (d time.Duration, set bool) {
	if o.Timeout > 0 {
		return o.Timeout, true
	}
	if s := strings.TrimSpace(os.Getenv("COURIER_TIMEOUT")); s != "" {
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			return d, false
		}
		if secs, err := strconv.ParseFloat(s, 64); err == nil && secs > 0 {
			return time.Duration(secs * float64(time.Second)), false
		}
		// Zero (no bound) or a bad value, which Init reports: the
		// harness's own bounds still use the default.
		return DefaultTimeout, false
	}
	return DefaultTimeout, true
}

// InJob reports whether this process was started as a rank of a job: its
// environment names a launcher (COURIER_RANK/SIZE from courier run or by
// hand, Open MPI, MPICH, PMIx, Slurm), or one that bootstrap cannot read,
// which RunRank then reports.
func InJob() bool {
	job, err := bootstrap.FromEnv(os.Getenv)
	return err != nil || job.Launcher != "single"
}

// The control communicator's tags: three per case, in the case's order.
func setupTag(i int) int   { return 3*i + 1 }
func verdictTag(i int) int { return 3*i + 2 }
func jointTag(i int) int   { return 3*i + 3 }

const (
	// maxText bounds one rank's verdict text; control receives use
	// buffers of maxMsg bytes.
	maxText = 16 << 10
	maxMsg  = 64 << 10

	// initLimit bounds the control communicator's Init: the ranks of a job
	// start within seconds of each other.
	initLimit = 60 * time.Second
)

// rankRun is one rank's state through the suite.
type rankRun struct {
	env      bootstrap.Job // what the launcher said
	ctrl     *mp.Comm
	timeout  time.Duration // the case communicators' timeout
	give     bool          // whether Init is given timeout (else COURIER_TIMEOUT decides)
	host     string        // where rank 0 listens for each case
	caseWait time.Duration // how long a case body may run before the watchdog aborts it
}

// RunRank runs this process's part of the suite, as a rank of the job its
// environment describes: every selected case is the subtest t.Run(name),
// which fails on every rank when the case failed on any. Rank 0 prints the
// report lines. Call it from the test that the launcher runs, when InJob.
func RunRank(t *testing.T, o Options) {
	t.Helper()
	cases, err := o.Selected()
	if err != nil {
		t.Fatal(err)
	}
	env, err := bootstrap.FromEnv(os.Getenv)
	if err != nil {
		t.Fatalf("proctest: this rank's environment: %v", err)
	}
	r := &rankRun{env: env, host: caseHost()}
	r.timeout, r.give = o.timeouts()
	r.caseWait = 2*r.timeout + 30*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), initLimit)
	defer cancel()
	r.ctrl, err = mp.Init(ctx, mp.WithBackend("tcp"), mp.WithCheck(false),
		mp.WithTimeout(r.caseWait+30*time.Second))
	if err != nil {
		t.Fatalf("proctest: control communicator (rank %d of %d, launcher %s): %v",
			env.Rank, env.Size, env.Launcher, err)
	}
	defer r.ctrl.Close()
	if r.ctrl.Rank() == 0 {
		fmt.Printf("proctest: %d ranks (launcher %s), %d cases, case timeout %v\n",
			r.ctrl.Size(), env.Launcher, len(cases), r.timeout)
	}
	for i, cs := range cases {
		var lost error
		t.Run(cs.Name, func(t *testing.T) {
			if lost = r.runCase(t, i, cs); lost != nil {
				t.Errorf("control communicator: %v", lost)
			}
		})
		if lost != nil {
			r.say("FAIL %s: rank %d: control communicator: %v", cs.Name, r.ctrl.Rank(), lost)
			t.Fatalf("proctest: the control communicator failed during %s, %d cases not run: %v",
				cs.Name, len(cases)-i-1, lost)
		}
	}
}

// caseHost is where rank 0 listens for the cases' rendezvous: the host of
// COURIER_ADDR, which the other ranks reach, or loopback when that is unset
// or unspecified (every rank on one host).
func caseHost() string {
	host, _, err := net.SplitHostPort(os.Getenv("COURIER_ADDR"))
	if err != nil || host == "" {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return "127.0.0.1"
	}
	return host
}

// say prints a report line on rank 0.
func (r *rankRun) say(format string, args ...any) {
	if r.ctrl.Rank() == 0 {
		fmt.Printf(format+"\n", args...)
	}
}

// runCase runs case i on this rank and agrees on its verdict. It returns
// an error only when the control communicator failed, which ends the
// suite.
func (r *rankRun) runCase(t *testing.T, i int, cs conformance.Case) error {
	size := r.ctrl.Size()
	if cs.MinRanks > size {
		r.say("SKIP %s: needs %d ranks, the job has %d", cs.Name, cs.MinRanks, size)
		t.Skipf("needs %d ranks, the job has %d", cs.MinRanks, size)
	}
	job, setupErr, err := r.setup(i)
	if err != nil {
		return err
	}
	rec := ranktest.NewT(r.ctrl.Rank())
	if setupErr != nil {
		rec.Errorf("%v", setupErr)
	} else {
		r.run(rec, job, cs)
	}
	failed, report, err := r.agree(i, rec)
	if err != nil {
		return err
	}
	if len(failed) == 0 {
		r.say("PASS %s", cs.Name)
		return nil
	}
	switch {
	case r.ctrl.Rank() == 0:
		var b strings.Builder
		for _, f := range report {
			first, rest, _ := strings.Cut(f.text, "\n")
			fmt.Fprintf(&b, "FAIL %s: rank %d: %s\n", cs.Name, f.rank, first)
			for line := range strings.Lines(rest) {
				fmt.Fprintf(&b, "\t%s", line)
			}
			if rest != "" && !strings.HasSuffix(rest, "\n") {
				b.WriteString("\n")
			}
		}
		fmt.Print(b.String())
		t.Errorf("failed on rank(s) %v:\n%s", failed, b.String())
	case rec.Failed():
		t.Errorf("failed on rank(s) %v (rank 0 reports them all); here:\n%s", failed, rec.Text())
	default:
		t.Errorf("failed on rank(s) %v (rank 0 reports them)", failed)
	}
	return nil
}

// setup gives this rank case i's job: rank 0 listens and sends the address
// and a fresh key to the others. setupErr is a failure of the case (rank 0
// could not listen); err a failure of the control communicator.
func (r *rankRun) setup(i int) (job bootstrap.Job, setupErr, err error) {
	job = r.env
	job.Rank, job.Size = r.ctrl.Rank(), r.ctrl.Size()
	job.Listener = nil
	if r.ctrl.Rank() == 0 {
		var msg string
		ln, lerr := net.Listen("tcp", net.JoinHostPort(r.host, "0"))
		if lerr != nil {
			setupErr = fmt.Errorf("rank 0 cannot listen for the case's rendezvous on %s: %w", r.host, lerr)
			msg = "ERR " + setupErr.Error()
		} else {
			job.Addr, job.Key, job.Listener = ln.Addr().String(), NewKey(), ln
			msg = "OK " + job.Addr + " " + job.Key
		}
		for p := 1; p < r.ctrl.Size(); p++ {
			if err := mp.Send(r.ctrl, []byte(msg), p, setupTag(i)); err != nil {
				if ln != nil {
					ln.Close()
				}
				return job, nil, fmt.Errorf("sending the case's address to rank %d: %w", p, err)
			}
		}
		return job, setupErr, nil
	}
	buf := make([]byte, maxMsg)
	st, err := mp.Recv(r.ctrl, buf, 0, setupTag(i))
	if err != nil {
		return job, nil, fmt.Errorf("receiving the case's address from rank 0: %w", err)
	}
	msg := string(buf[:st.Count])
	if rest, ok := strings.CutPrefix(msg, "ERR "); ok {
		return job, errors.New(rest), nil
	}
	f := strings.Fields(msg)
	if len(f) != 3 || f[0] != "OK" {
		return job, nil, fmt.Errorf("rank 0 sent %q for the case's address", msg)
	}
	job.Addr, job.Key = f[1], f[2]
	return job, nil, nil
}

// run makes the case's communicator, runs the body on it under a watchdog
// and closes it, recording every failure in rec.
func (r *rankRun) run(rec *ranktest.T, job bootstrap.Job, cs conformance.Case) {
	opts := []mp.Option{mp.WithJob(job)}
	if r.give {
		opts = append(opts, mp.WithTimeout(r.timeout))
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	c, err := mp.Init(ctx, opts...)
	cancel()
	if err != nil {
		rec.Errorf("Init: %v", err)
		return
	}
	rec.SetComm(c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			// A runtime.Goexit from FailNow is not a panic: recover is nil.
			if p := recover(); p != nil {
				rec.Errorf("panic: %v\n%s", p, stack(false))
				c.Abort(fmt.Errorf("rank %d panicked", rec.Rank()))
			}
		}()
		cs.Run(rec, c)
	}()
	select {
	case <-done:
	case <-time.After(r.caseWait):
		rec.Errorf("the case was still running after %v; aborting its communicator. Goroutines:\n%s",
			r.caseWait, stack(true))
		c.Abort(errors.New("proctest: the case ran too long"))
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			rec.Errorf("the case did not end within 10s of Abort; left running")
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil && !rec.Failed() {
			rec.Errorf("Close: %v", err)
		}
	case <-time.After(r.timeout):
		rec.Errorf("Close did not return within %v", r.timeout)
	}
}

// failure is one rank's failure of a case, as rank 0 learns it.
type failure struct {
	rank int
	text string
}

// agree sends this rank's verdict to rank 0, which joins them and sends
// the joint verdict back. failed lists the ranks that failed the case;
// report, on rank 0, holds their failures; err is a failure of the control
// communicator.
func (r *rankRun) agree(i int, rec *ranktest.T) (failed []int, report []failure, err error) {
	mine := verdict(rec)
	if r.ctrl.Rank() != 0 {
		if err := mp.Send(r.ctrl, mine, 0, verdictTag(i)); err != nil {
			return nil, nil, fmt.Errorf("sending this rank's verdict to rank 0: %w", err)
		}
		buf := make([]byte, maxMsg)
		st, err := mp.Recv(r.ctrl, buf, 0, jointTag(i))
		if err != nil {
			return nil, nil, fmt.Errorf("receiving the joint verdict from rank 0: %w", err)
		}
		for f := range strings.FieldsSeq(string(buf[:st.Count])) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, nil, fmt.Errorf("rank 0 sent a bad joint verdict %q", buf[:st.Count])
			}
			failed = append(failed, n)
		}
		return failed, nil, nil
	}
	add := func(rank int, v []byte) {
		if len(v) > 0 && v[0] == 1 {
			failed = append(failed, rank)
			report = append(report, failure{rank, string(v[1:])})
		}
	}
	add(0, mine)
	buf := make([]byte, maxMsg)
	for p := 1; p < r.ctrl.Size(); p++ {
		st, err := mp.Recv(r.ctrl, buf, p, verdictTag(i))
		if err != nil {
			return nil, nil, fmt.Errorf("receiving rank %d's verdict: %w", p, err)
		}
		add(p, buf[:st.Count])
	}
	joint := strings.Trim(fmt.Sprint(failed), "[]")
	for p := 1; p < r.ctrl.Size(); p++ {
		if err := mp.Send(r.ctrl, []byte(joint), p, jointTag(i)); err != nil {
			return nil, nil, fmt.Errorf("sending the joint verdict to rank %d: %w", p, err)
		}
	}
	return failed, report, nil
}

// verdict encodes a rank's outcome: 0 for a pass, or 1 and the failures.
func verdict(rec *ranktest.T) []byte {
	if !rec.Failed() {
		return []byte{0}
	}
	return append([]byte{1}, clip(rec.Text(), maxText)...)
}

// clip shortens s to at most n bytes, saying so.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const cut = "\n... (cut)"
	return s[:n-len(cut)] + cut
}

// stack returns this goroutine's stack, or every goroutine's, clipped.
func stack(all bool) string {
	buf := make([]byte, 256<<10)
	return clip(string(buf[:runtime.Stack(buf, all)]), maxText/2)
}
