package mptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/mp"
)

// Run runs f on n ranks of one job, each a goroutine of this test with
// its own communicator, and returns when every rank has returned and
// closed it. Each rank is the subtest "rankI" of t, and f gets that
// subtest's *testing.T: t.Error, t.Fatal, t.Log and testify's require
// and assert work in it as in any test, and name the rank. A rank must
// not call t.Parallel (it would wait for the others, which wait for it).
//
// A rank that fails with t.Fatal (or FailNow, or require) or that panics
// aborts its communicator, so the ranks waiting for it fail with
// ErrAborted or ErrPeerLost instead of hanging; a panic is reported with
// the rank and its stack and does not crash the test binary. A rank that
// returns closes its communicator: a rank still waiting for it fails with
// ErrPeerLost. When the run outlasts its bound (WithTimeout), Run fails t
// with the operations every running rank waits for (Comm.PendingReport),
// aborts their communicators, and gives them a few seconds to return;
// ranks blocked outside courier are then reported with the goroutines'
// stacks and left behind.
//
// Every rank's subtest must run: a -run or -skip pattern that selects
// some ranks of the test and not others fails it at once.
func Run(t *testing.T, n int, f func(t *testing.T, c *mp.Comm), opts ...Option) {
	t.Helper()
	if f == nil {
		t.Fatal("mptest.Run: nil function")
	}
	deadline, _ := t.Deadline()
	j, err := newJob(n, opts, deadline)
	if err != nil {
		t.Fatalf("mptest.Run: %v", err)
	}
	defer j.cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var started atomic.Bool
			t.Run(rankName(i), func(t *testing.T) {
				started.Store(true)
				j.testRank(t, i, f)
			})
			if !started.Load() {
				j.skipped(i)
			}
		})
	}
	if msg, _ := j.wait(&wg); msg != "" {
		t.Error(msg)
	}
	if msg := j.notRun(); msg != "" {
		t.Error(msg)
	}
}

// Go runs f on n ranks of one job in this process, as Run does, without a
// test: for Examples, benchmarks and programs. It returns the ranks'
// errors joined, each prefixed with its rank ("rank 1: …"): those f
// returned, a failed Init or Close, a panic (with its stack), and, when
// the run outlasts its bound, a report of what each running rank waits
// for. A rank whose f returns an error aborts its communicator, so the
// ranks waiting for it fail too.
func Go(n int, f func(c *mp.Comm) error, opts ...Option) error {
	if f == nil {
		return errors.New("mptest.Go: nil function")
	}
	j, err := newJob(n, opts, time.Time{})
	if err != nil {
		return fmt.Errorf("mptest.Go: %w", err)
	}
	defer j.cancel()
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i+1] = j.goRank(i, f) })
	}
	msg, all := j.wait(&wg)
	if msg != "" {
		errs[0] = errors.New(msg)
	}
	if !all { // the ranks still running may yet write their errors
		return errs[0]
	}
	return errors.Join(errs...)
}

// rankName is the subtest of rank i.
func rankName(i int) string { return fmt.Sprintf("rank%d", i) }

// The phases of a rank, for the report of a run that outlasts its bound.
const (
	notStarted = iota
	initializing
	running
	returned
)

// job is one run of Run or Go: the ranks' launch, their communicators and
// phases, and the bound.
type job struct {
	n       int
	opts    []mp.Option // every rank's Init options, before its job
	boot    []bootstrap.Job
	timeout time.Duration // the run's bound
	grace   time.Duration // how long aborted ranks get to return
	ctx     context.Context
	cancel  context.CancelFunc

	mu      sync.Mutex
	comms   []*mp.Comm
	phase   []int
	failed  bool  // a rank failed: Close errors that follow are noise
	skips   []int // ranks whose subtest did not run
	stopErr error // why the harness aborted the ranks, once it has
}

// newJob prepares n ranks: a rendezvous listener for rank 0 on loopback,
// a fresh key, and the bound, cut to the time left before deadline.
func newJob(n int, opts []Option, deadline time.Time) (*job, error) {
	if n < 1 {
		return nil, fmt.Errorf("%d ranks: want at least 1", n)
	}
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	j := &job{n: n, comms: make([]*mp.Comm, n), phase: make([]int, n)}
	j.timeout, j.grace = bounds(cfg.timeout, deadline)
	// The shared-memory segments' pages come at their first touch: a
	// test's job lives for a moment (COURIER_SHM_PREFAULT in the README).
	env := map[string]string{"COURIER_SHM_PREFAULT": "0"}
	name := cfg.backend
	switch name {
	case "", "host":
		name = "host"
	case "shm":
		name = "host"
		env["COURIER_TRANSPORTS"] = "shm"
	}
	j.opts = []mp.Option{
		mp.WithBackend(name),
		mp.WithEnv(func(k string) string { return env[k] }),
		mp.WithTimeout(0),
	}
	if cfg.check != nil {
		j.opts = append(j.opts, mp.WithCheck(*cfg.check))
	}
	j.opts = append(j.opts, cfg.init...)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var k [16]byte
	rand.Read(k[:])
	key := hex.EncodeToString(k[:])
	j.boot = make([]bootstrap.Job, n)
	for i := range j.boot {
		j.boot[i] = bootstrap.Job{Rank: i, Size: n, LocalRank: i, LocalSize: n,
			Launcher: "mptest", Key: key, Addr: ln.Addr().String()}
	}
	j.boot[0].Listener = ln
	j.ctx, j.cancel = context.WithTimeout(context.Background(), j.timeout)
	return j, nil
}

// bounds returns the run's bound (want, else DefaultTimeout, cut to nine
// tenths of the time left before deadline) and the grace the ranks get
// after it.
func bounds(want time.Duration, deadline time.Time) (timeout, grace time.Duration) {
	timeout = want
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	grace = 10 * time.Second
	if !deadline.IsZero() {
		left := time.Until(deadline)
		timeout = max(min(timeout, left*9/10), time.Millisecond)
		grace = min(grace, max((left-timeout)/2, 100*time.Millisecond))
	}
	return timeout, grace
}

// initRank joins rank i to the job.
func (j *job) initRank(i int) (*mp.Comm, error) {
	j.setPhase(i, initializing, nil)
	opts := append([]mp.Option{mp.WithJob(j.boot[i])}, j.opts...)
	c, err := mp.Init(j.ctx, opts...)
	if err != nil {
		if i == 0 {
			j.boot[0].Listener.Close() // Init may have failed before the rendezvous took it over
		}
		err = fmt.Errorf("rank %d: Init: %w", i, err)
		if stop := j.stopped(); stop != nil {
			err = fmt.Errorf("%w (%v)", err, stop)
		}
		// The others would wait for this rank until the bound.
		j.stop(fmt.Errorf("mptest: rank %d failed to join the job", i))
		return nil, err
	}
	j.setPhase(i, running, c)
	return c, nil
}

// closeRank closes rank i's communicator (if it has one) and reports its
// error unless a rank failed or the harness stopped the job: then Close's
// errors tell nothing new.
func (j *job) closeRank(i int, c *mp.Comm) error {
	var err error
	if c != nil {
		err = c.Close()
	}
	j.setPhase(i, returned, nil)
	j.mu.Lock()
	defer j.mu.Unlock()
	if err == nil || j.failed || j.stopErr != nil {
		return nil
	}
	return fmt.Errorf("rank %d: Close: %w", i, err)
}

// fail records that rank i failed, and aborts its communicator so that
// the ranks waiting for it stop waiting.
func (j *job) fail(i int, c *mp.Comm, why string) {
	j.mu.Lock()
	j.failed = true
	j.mu.Unlock()
	if c != nil {
		c.Abort(fmt.Errorf("mptest: rank %d %s", i, why))
	}
}

// testRank is rank i's subtest.
func (j *job) testRank(t *testing.T, i int, f func(*testing.T, *mp.Comm)) {
	var c *mp.Comm
	finished := false
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("rank %d panicked: %v\n%s", i, r, debug.Stack())
		}
		switch {
		case !finished: // t.FailNow or a panic
			j.fail(i, c, "failed")
		case t.Failed():
			j.fail(i, nil, "failed")
		}
		if err := j.closeRank(i, c); err != nil {
			t.Error(err)
		}
	}()
	var err error
	if c, err = j.initRank(i); err != nil {
		t.Fatal(err)
	}
	f(t, c)
	finished = true
}

// goRank is rank i of Go.
func (j *job) goRank(i int, f func(*mp.Comm) error) (err error) {
	var c *mp.Comm
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rank %d panicked: %v\n%s", i, r, debug.Stack())
			j.fail(i, c, "panicked")
		}
		err = errors.Join(err, j.closeRank(i, c))
	}()
	if c, err = j.initRank(i); err != nil {
		return err
	}
	if err = f(c); err != nil {
		j.fail(i, c, "returned an error")
		return fmt.Errorf("rank %d: %w", i, err)
	}
	return nil
}

func (j *job) setPhase(i, phase int, c *mp.Comm) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.phase[i] = phase
	if c != nil {
		j.comms[i] = c
	}
}

// skipped records that rank i's subtest did not run, and stops the
// others, which would wait for it.
func (j *job) skipped(i int) {
	j.mu.Lock()
	j.skips = append(j.skips, i)
	j.mu.Unlock()
	if i == 0 {
		j.boot[0].Listener.Close()
	}
	j.stop(fmt.Errorf("mptest: rank %d's subtest did not run", i))
}

// notRun describes the ranks whose subtests did not run ("" if none).
func (j *job) notRun() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.skips) == 0 {
		return ""
	}
	return fmt.Sprintf("mptest: the subtests of ranks %v did not run (filtered out by -run or -skip?): "+
		"every rank of the job must run, so select the whole test or all of its rankN subtests", j.skips)
}

// stopped is why the harness stopped the job, or nil.
func (j *job) stopped() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stopErr
}

// stop ends the job: Inits still waiting give up, and every communicator
// is aborted with err. Only the first call counts.
func (j *job) stop(err error) {
	j.mu.Lock()
	if j.stopErr != nil {
		j.mu.Unlock()
		return
	}
	j.stopErr = err
	comms := append([]*mp.Comm(nil), j.comms...)
	j.mu.Unlock()
	j.cancel()
	for _, c := range comms {
		if c != nil {
			c.Abort(err)
		}
	}
}

// wait waits for the ranks. When they outlast the bound, it stops the job
// and returns the report of what each running rank waited for (and,
// should some not return within the grace, their stacks); otherwise "".
// all reports whether every rank has returned.
func (j *job) wait(wg *sync.WaitGroup) (report string, all bool) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(j.timeout)
	defer t.Stop()
	select {
	case <-done:
		return "", true
	case <-t.C:
	}
	report = j.report()
	j.stop(fmt.Errorf("%w: mptest: the run passed its bound of %v", mp.ErrTimeout, j.timeout))
	g := time.NewTimer(j.grace)
	defer g.Stop()
	select {
	case <-done:
		return report, true
	case <-g.C:
	}
	var stuck []int
	j.mu.Lock()
	for i, p := range j.phase {
		if p != returned {
			stuck = append(stuck, i)
		}
	}
	j.mu.Unlock()
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return fmt.Sprintf("%s\nmptest: ranks %v had not returned %v after they were aborted "+
		"(blocked outside courier, on a channel or a lock?); left running; goroutines:\n%s", report, stuck, j.grace, buf), false
}

// report describes, for a run past its bound, every rank that has not
// returned and what it waits for.
func (j *job) report() string {
	j.mu.Lock()
	phase := append([]int(nil), j.phase...)
	comms := append([]*mp.Comm(nil), j.comms...)
	j.mu.Unlock()
	var b strings.Builder
	var running []string
	for i, p := range phase {
		if p != returned {
			running = append(running, fmt.Sprint(i))
		}
	}
	fmt.Fprintf(&b, "mptest: the run of %d ranks passed its bound of %v; ranks %s have not returned:",
		j.n, j.timeout, strings.Join(running, ", "))
	for i, p := range phase {
		switch p {
		case returned:
			continue
		case notStarted:
			fmt.Fprintf(&b, "\n  rank %d: not started", i)
		case initializing:
			fmt.Fprintf(&b, "\n  rank %d: in mp.Init, waiting for the other ranks to join", i)
		default:
			pending := comms[i].PendingReport()
			if pending == "" {
				fmt.Fprintf(&b, "\n  rank %d: no message operation pending (blocked outside courier?)", i)
				continue
			}
			fmt.Fprintf(&b, "\n  rank %d waits for:\n\t%s", i, strings.ReplaceAll(pending, "\n", "\n\t"))
		}
	}
	return b.String()
}
