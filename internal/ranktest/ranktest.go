// Package ranktest runs several ranks of a courier job as goroutines of one
// test process, each with its own *mp.Comm over real loopback TCP (or
// another backend), so tests of message passing need no launcher.
//
// It is courier's own: its T is what the conformance suite takes, on
// goroutines here and on processes in internal/conformance/proctest. A
// program's tests use the public harness, mp/mptest, which runs each rank
// as a subtest.
package ranktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/mp"
)

// T is one rank's view of the test. It satisfies testify's
// require.TestingT, so require and assert work inside a rank; FailNow ends
// only that rank (and aborts its communicator, so its peers stop waiting
// for it instead of hanging). Run makes one per rank; a harness that
// starts its ranks otherwise (internal/conformance/proctest, one rank per
// process) makes its own with NewT.
type T struct {
	rank int

	mu     sync.Mutex
	comm   *mp.Comm
	lines  []string // failures and notes
	failed bool
}

// NewT returns the T of rank, recording failures and notes until
// SetComm names the communicator FailNow aborts.
func NewT(rank int) *T { return &T{rank: rank} }

// SetComm makes c the communicator FailNow aborts.
func (t *T) SetComm(c *mp.Comm) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.comm = c
}

// Rank is the rank this T belongs to.
func (t *T) Rank() int { return t.rank }

// Errorf records a failure of this rank and goes on.
func (t *T) Errorf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
	t.lines = append(t.lines, fmt.Sprintf(format, args...))
}

// Logf records a note shown with the rank's failures.
func (t *T) Logf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, "log: "+fmt.Sprintf(format, args...))
}

// Helper is a no-op, for helpers shared with *testing.T.
func (t *T) Helper() {}

// FailNow marks the rank failed, aborts its communicator and ends the
// calling goroutine.
func (t *T) FailNow() {
	t.mu.Lock()
	t.failed = true
	c := t.comm
	t.mu.Unlock()
	if c != nil {
		c.Abort(fmt.Errorf("rank %d failed its test", t.rank))
	}
	runtime.Goexit()
}

// Failed reports whether the rank has failed.
func (t *T) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

// Text is the rank's failures and notes, one per line.
func (t *T) Text() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}

// Config adjusts Run.
type Config struct {
	// Backend is the backend name (default "tcp").
	Backend string
	// Timeout bounds every wait of every rank (default 30 s), and the whole
	// run (Timeout + 15 s): a stuck test fails with the ranks' stacks
	// instead of hanging.
	Timeout time.Duration
	// Options are extra options for mp.Init.
	Options []mp.Option
}

// Jobs returns n launch descriptions for ranks of one job in this process:
// rank 0 gets a listening socket on loopback, every rank its address and a
// fresh key. The caller closes jobs[0].Listener if it does not use them.
func Jobs(n int) ([]bootstrap.Job, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var k [16]byte
	rand.Read(k[:])
	key := hex.EncodeToString(k[:])
	jobs := make([]bootstrap.Job, n)
	for i := range jobs {
		jobs[i] = bootstrap.Job{
			Rank: i, Size: n, LocalRank: i, LocalSize: n,
			Launcher: "ranktest", Key: key, Addr: ln.Addr().String(),
		}
	}
	jobs[0].Listener = ln
	return jobs, nil
}

// Run starts n ranks, calls f on each with its communicator, closes the
// communicators and reports every rank's failures on tb.
func Run(tb testing.TB, n int, f func(t *T, c *mp.Comm)) {
	tb.Helper()
	RunConfig(tb, n, Config{}, f)
}

// RunConfig is Run with a configuration.
func RunConfig(tb testing.TB, n int, cfg Config, f func(t *T, c *mp.Comm)) {
	tb.Helper()
	if cfg.Backend == "" {
		cfg.Backend = "tcp"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	jobs, err := Jobs(n)
	if err != nil {
		tb.Fatalf("ranktest: %v", err)
	}
	ts := make([]*T, n)
	var wg sync.WaitGroup
	for i := range n {
		t := NewT(i)
		ts[i] = t
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
			defer cancel()
			opts := append([]mp.Option{
				mp.WithJob(jobs[i]),
				mp.WithBackend(cfg.Backend),
				mp.WithTimeout(cfg.Timeout),
				mp.WithEnv(jobEnv),
			}, cfg.Options...)
			c, err := mp.Init(ctx, opts...)
			if err != nil {
				t.Errorf("Init: %v", err)
				return
			}
			t.SetComm(c)
			defer func() {
				if err := c.Close(); err != nil && !t.Failed() {
					t.Errorf("Close: %v", err)
				}
			}()
			f(t, c)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.Timeout + 15*time.Second):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		tb.Fatalf("ranktest: ranks still running after %v; goroutines:\n%s", cfg.Timeout+15*time.Second, buf)
	}
	for _, t := range ts {
		if t.Failed() {
			tb.Errorf("rank %d failed:\n\t%s", t.rank, strings.Join(t.lines, "\n\t"))
		}
	}
}

// Go runs f on n ranks of a job in this process, over loopback TCP, and
// returns the ranks' errors joined. It is the harness without a test, for
// examples and benchmarks; opts are passed to mp.Init.
func Go(n int, f func(c *mp.Comm) error, opts ...mp.Option) error {
	jobs, err := Jobs(n)
	if err != nil {
		return err
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			all := append([]mp.Option{mp.WithJob(jobs[i]), mp.WithBackend("tcp"),
				mp.WithEnv(jobEnv)}, opts...)
			c, err := mp.Init(ctx, all...)
			if err != nil {
				errs[i] = err
				return
			}
			if err := f(c); err != nil {
				errs[i] = fmt.Errorf("rank %d: %w", i, err)
				c.Abort(err)
			}
			if err := c.Close(); err != nil && errs[i] == nil {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// jobEnv is the environment of a test's job: none of the process's, but
// the shared-memory segments' pages at their first touch
// (COURIER_SHM_PREFAULT=0): a test's job lives for a moment, and filling
// every page of every segment ahead was most of a short job's time.
func jobEnv(k string) string {
	if k == "COURIER_SHM_PREFAULT" {
		return "0"
	}
	return ""
}
