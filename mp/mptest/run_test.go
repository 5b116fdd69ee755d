package mptest_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

// TestRun runs 4 ranks over every host transport: a ring shift, an
// Allreduce and a Barrier, checked on every rank.
func TestRun(t *testing.T) {
	for _, backend := range []string{"host", "shm", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			mptest.Run(t, 4, func(t *testing.T, c *mp.Comm) {
				require.Equal(t, 4, c.Size())
				want := map[string]string{"host": "shm", "shm": "shm", "tcp": "tcp"}[backend]
				assert.Equal(t, want, c.Transport((c.Rank()+1)%4), "transport to the next rank")
				left, right := (c.Rank()+3)%4, (c.Rank()+1)%4
				got := make([]int64, 1)
				st, err := mp.Sendrecv(c, []int64{int64(c.Rank())}, right, 3, got, left, 3)
				require.NoError(t, err)
				assert.Equal(t, int64(left), got[0])
				assert.Equal(t, mp.Status{Source: left, Tag: 3, Count: 1}, st)
				sum := []float64{float64(c.Rank())}
				require.NoError(t, mp.Allreduce(c, sum, sum, mp.Sum))
				assert.Equal(t, 6.0, sum[0])
				require.NoError(t, mp.Barrier(c))
			}, mptest.WithBackend(backend))
		})
	}
}

// TestRunOneRank: a job of one rank needs no rendezvous.
func TestRunOneRank(t *testing.T) {
	mptest.Run(t, 1, func(t *testing.T, c *mp.Comm) {
		require.Equal(t, 1, c.Size())
		require.NoError(t, mp.Send(c, []byte("self"), 0, 1))
		buf := make([]byte, 4)
		_, err := mp.Recv(c, buf, 0, 1)
		require.NoError(t, err)
		assert.Equal(t, "self", string(buf))
	})
}

// TestRunReleasesDescriptors: after Run, the process holds as many open
// descriptors as before (the goroutines are checked by TestMain).
func TestRunReleasesDescriptors(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts /proc/self/fd")
	}
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(ents)
	}
	run := func() {
		mptest.Run(t, 3, func(t *testing.T, c *mp.Comm) {
			require.NoError(t, mp.Barrier(c))
		})
	}
	run() // the first run may open what the process keeps (the netpoller)
	before := count()
	run()
	assert.Equal(t, before, count(), "open descriptors after a second run")
}

// TestGoErrors: each rank's error comes back with its rank, and a rank
// whose function fails aborts its communicator, so the rank waiting for
// it fails too instead of hanging.
func TestGoErrors(t *testing.T) {
	boom := errors.New("boom")
	start := time.Now()
	err := mptest.Go(3, func(c *mp.Comm) error {
		switch c.Rank() {
		case 1:
			return boom
		case 0:
			_, err := mp.Recv(c, make([]byte, 1), 1, 0)
			return err
		}
		return nil
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "rank 1: boom")
	assert.Contains(t, err.Error(), "rank 0: courier: recv")
	assert.NotContains(t, err.Error(), "rank 2")
	assert.Less(t, time.Since(start), 10*time.Second)
}

// TestGoPanic: a panicking rank is reported with its rank and stack, and
// the others stop waiting for it.
func TestGoPanic(t *testing.T) {
	err := mptest.Go(3, func(c *mp.Comm) error {
		if c.Rank() == 2 {
			panic("kaboom")
		}
		return mp.Barrier(c)
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank 2 panicked: kaboom")
	assert.Contains(t, err.Error(), "run_test.go", "the panic's stack")
	assert.Contains(t, err.Error(), "rank 0: courier: barrier")
}

// TestGoTimeout: two ranks that wait for each other are stopped at the
// bound, and the error lists what each waited for and where it was
// called.
func TestGoTimeout(t *testing.T) {
	start := time.Now()
	err := mptest.Go(2, func(c *mp.Comm) error {
		_, err := mp.Recv(c, make([]float32, 4), 1-c.Rank(), 5)
		return err
	}, mptest.WithTimeout(300*time.Millisecond))
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, "passed its bound of 300ms")
	for r := range 2 {
		assert.Contains(t, msg, fmt.Sprintf("rank %d waits for:\n\trecv from rank %d, tag 5, 4 × float32 (called at ", r, 1-r))
	}
	assert.Contains(t, msg, "run_test.go")
	assert.ErrorIs(t, err, mp.ErrTimeout, "the ranks' own errors, joined")
	assert.Less(t, time.Since(start), 5*time.Second)
}

// TestGoBadBackend: a misnamed backend fails every rank's Init at once.
func TestGoBadBackend(t *testing.T) {
	err := mptest.Go(2, func(c *mp.Comm) error { return nil }, mptest.WithBackend("nope"))
	require.Error(t, err)
	assert.ErrorIs(t, err, mp.ErrNotSupported)
	assert.Contains(t, err.Error(), "rank 0: Init")
	assert.Contains(t, err.Error(), "rank 1: Init")
}

// childEnv selects the failing case TestChild plays in a child process.
const childEnv = "MPTEST_CHILD"

// TestChild is the failing test TestFailureReport runs in a child
// process, one case at a time; run directly, it does nothing.
func TestChild(t *testing.T) {
	switch os.Getenv(childEnv) {
	case "":
		t.Skip("a child of TestFailureReport")
	case "error":
		mptest.Run(t, 2, func(t *testing.T, c *mp.Comm) {
			if c.Rank() == 1 {
				t.Errorf("rank one is unhappy")
			}
			require.NoError(t, mp.Barrier(c))
		})
	case "fatal":
		mptest.Run(t, 2, func(t *testing.T, c *mp.Comm) {
			if c.Rank() == 1 {
				t.Fatal("rank one stops here")
			}
			_, err := mp.Recv(c, make([]byte, 1), 1, 0)
			require.NoError(t, err)
		})
	case "panic":
		mptest.Run(t, 3, func(t *testing.T, c *mp.Comm) {
			if c.Rank() == 1 {
				panic("rank one panics")
			}
			require.NoError(t, mp.Barrier(c))
		})
	case "early":
		mptest.Run(t, 2, func(t *testing.T, c *mp.Comm) {
			if c.Rank() == 1 {
				return // leaves rank 0 waiting for its message
			}
			_, err := mp.Recv(c, make([]byte, 1), 1, 0)
			require.NoError(t, err)
		})
	case "hang":
		mptest.Run(t, 2, func(t *testing.T, c *mp.Comm) {
			_, err := mp.Recv(c, make([]int32, 2), 1-c.Rank(), 9)
			require.NoError(t, err)
		}, mptest.WithTimeout(500*time.Millisecond))
	case "filtered":
		mptest.Run(t, 2, func(t *testing.T, c *mp.Comm) {
			require.NoError(t, mp.Barrier(c))
		})
	}
}

// TestFailureReport runs each failing case of TestChild in a child
// process and checks what go test shows: the test fails, each rank's
// failure under its own name with its text, the ranks that waited for a
// failed one are unblocked, and nothing hangs.
func TestFailureReport(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"error", nil, []string{"--- FAIL: TestChild/rank1", "rank one is unhappy", "--- PASS: TestChild/rank0"}},
		{"fatal", nil, []string{"--- FAIL: TestChild/rank1", "rank one stops here",
			"--- FAIL: TestChild/rank0", "courier: recv", "with rank 1"}},
		{"panic", nil, []string{"--- FAIL: TestChild/rank1", "rank 1 panicked: rank one panics", "run_test.go",
			"--- FAIL: TestChild/rank0", "--- FAIL: TestChild/rank2", "courier: barrier"}},
		{"early", nil, []string{"--- PASS: TestChild/rank1", "--- FAIL: TestChild/rank0", "courier: recv", "with rank 1", "peer"}},
		{"hang", nil, []string{"passed its bound of 500ms", "rank 0 waits for:", "recv from rank 1, tag 9, 2 × int32 (called at ",
			"rank 1 waits for:", "recv from rank 0, tag 9", "--- FAIL: TestChild/rank0", "--- FAIL: TestChild/rank1"}},
		{"filtered", []string{"-test.run=^TestChild$/^rank0$"}, []string{"did not run", "ranks [1]", "--- FAIL: TestChild"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"-test.run=^TestChild$", "-test.v", "-test.timeout=60s"}, tc.args...)
			cmd := exec.Command(os.Args[0], args...)
			cmd.Env = append(os.Environ(), childEnv+"="+tc.name)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "the child test passed:\n%s", out)
			assert.Equal(t, 1, exit.ExitCode(), "a test failure, not a crash:\n%s", out)
			for _, w := range tc.want {
				assert.Contains(t, string(out), w)
			}
			assert.NotContains(t, string(out), "panic: ", "the child crashed")
			assert.NotContains(t, string(out), "leaked goroutines")
			assert.Less(t, time.Since(start), 20*time.Second)
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			}
		})
	}
}
