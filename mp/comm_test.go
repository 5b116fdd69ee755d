package mp_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/bootstrap"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

func noEnv(string) string { return "" }

func single() mp.Option {
	return mp.WithJob(bootstrap.Job{Rank: 0, Size: 1, LocalRank: 0, LocalSize: 1, Launcher: "single"})
}

func TestInitUnknownBackendSaysForgottenImport(t *testing.T) {
	_, err := mp.Init(context.Background(), single(), mp.WithEnv(noEnv), mp.WithBackend("carrier-pigeon"))
	require.ErrorIs(t, err, mp.ErrNotSupported)
	assert.Contains(t, err.Error(), `unknown backend "carrier-pigeon" (forgotten import?)`)
	assert.Contains(t, err.Error(), "tcp")
	var oe *mp.OpError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "init", oe.Op)
}

func TestInitBadEnvironment(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"COURIER_TIMEOUT", "soon", `COURIER_TIMEOUT="soon"`},
		{"COURIER_TIMEOUT", "-3s", `COURIER_TIMEOUT="-3s"`},
		{"COURIER_CHECK", "maybe", `COURIER_CHECK="maybe"`},
	} {
		env := func(k string) string {
			if k == tc.name {
				return tc.value
			}
			return ""
		}
		_, err := mp.Init(context.Background(), single(), mp.WithEnv(env))
		require.ErrorIs(t, err, mp.ErrInvalid, "%s=%s", tc.name, tc.value)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestInitReadsEnvironment(t *testing.T) {
	env := map[string]string{"COURIER_BACKEND": "tcp", "COURIER_TIMEOUT": "1.5", "COURIER_CHECK": "1"}
	c, err := mp.Init(context.Background(), single(), mp.WithEnv(func(k string) string { return env[k] }))
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, "tcp", c.Backend())
	assert.Equal(t, 1500*time.Millisecond, c.Timeout())
	assert.True(t, c.Checked())
	assert.Equal(t, 0, c.Rank())
	assert.Equal(t, 1, c.Size())
}

func TestSingleRankSelfMessages(t *testing.T) {
	c, err := mp.Init(context.Background(), single(), mp.WithEnv(noEnv))
	require.NoError(t, err)
	defer c.Close()
	big := make([]float64, 1<<20)
	for i := range big {
		big[i] = float64(i)
	}
	require.NoError(t, mp.Send(c, big, 0, 1)) // does not wait for the receive
	got := make([]float64, len(big))
	st, err := mp.Recv(c, got, 0, 1)
	require.NoError(t, err)
	assert.Equal(t, mp.Status{Source: 0, Tag: 1, Count: int64(len(big))}, st)
	assert.Equal(t, big, got)
	require.NoError(t, mp.Barrier(c))
}

func TestTimeoutReportsPendingOperations(t *testing.T) {
	t.Parallel() // waits more than it computes
	zeroDone := make(chan struct{})
	ranktest.RunConfig(t, 2, ranktest.Config{Timeout: 300 * time.Millisecond}, func(t *ranktest.T, c *mp.Comm) {
		if c.Rank() == 1 {
			<-zeroDone // posts nothing, sends nothing, until rank 0 has seen all it must
			return
		}
		defer close(zeroDone)
		buf := make([]int32, 10)
		req, irecvLine := mp.Irecv(c, buf, 1, 5), line()
		start := time.Now()
		_, err := mp.Recv(c, buf, 1, 6) // never sent: deadlock
		recvLine := line() - 1
		require.ErrorIs(t, err, mp.ErrTimeout)
		assert.Less(t, time.Since(start), 3*time.Second)
		msg := err.Error()
		assert.Contains(t, msg, "2 operation(s) pending on rank 0")
		// Each with the line that posted it.
		assert.Contains(t, msg, fmt.Sprintf("recv from rank 1, tag 5, 10 × int32 (called at %s:%d in", thisFile(), irecvLine))
		assert.Contains(t, msg, fmt.Sprintf("recv from rank 1, tag 6, 10 × int32 (called at %s:%d in", thisFile(), recvLine))
		// Every pending request ends with the same error.
		_, err = req.Wait()
		require.ErrorIs(t, err, mp.ErrTimeout)
		// The communicator is unusable afterwards.
		require.ErrorIs(t, mp.Send(c, buf, 1, 0), mp.ErrTimeout)
	})
}

func TestAbortFromAnotherGoroutine(t *testing.T) {
	ranktest.Run(t, 2, func(t *ranktest.T, c *mp.Comm) {
		if c.Rank() == 1 {
			_, err := mp.Recv(c, make([]byte, 1), 0, 0)
			require.ErrorIs(t, err, mp.ErrPeerLost)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		req := mp.Irecv(c, make([]byte, 4), 1, 3)
		select {
		case <-req.Done():
			t.Errorf("request completed with nothing sent")
		case <-ctx.Done():
			c.Abort(ctx.Err())
		}
		_, err := req.Wait()
		require.ErrorIs(t, err, mp.ErrAborted)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var oe *mp.OpError
		require.True(t, errors.As(err, &oe))
		assert.Equal(t, mp.OpError{Op: "recv", Rank: 0, Peer: 1, Tag: 3, Backend: "tcp", Err: oe.Err}, *oe)
	})
}

func TestNilArguments(t *testing.T) {
	var c *mp.Comm
	require.ErrorIs(t, mp.Send(c, []byte{1}, 0, 0), mp.ErrInvalid)
	_, err := mp.Isend(c, []byte{1}, 0, 0).Wait()
	require.ErrorIs(t, err, mp.ErrInvalid)
	require.ErrorIs(t, mp.Barrier(c), mp.ErrInvalid)
	require.NoError(t, c.Close())
	var q *mp.Request
	_, err = q.Wait()
	require.ErrorIs(t, err, mp.ErrInvalid)
	i, _, err := mp.WaitAny(q, nil)
	assert.Equal(t, -1, i)
	require.NoError(t, err)
	require.NoError(t, mp.WaitAll())
}

// line returns the line it is called from.
func line() int {
	_, _, l, _ := runtime.Caller(1)
	return l
}

// thisFile returns the path of this file.
func thisFile() string {
	_, f, _, _ := runtime.Caller(0)
	return f
}

// TestCloseReportsUnreceived: with checks on, a message that arrived and
// that no receive took makes Close fail with ErrMismatch naming it (Close
// still closes); without checks Close says nothing.
func TestCloseReportsUnreceived(t *testing.T) {
	for _, check := range []bool{true, false} {
		t.Run(fmt.Sprintf("check=%v", check), func(t *testing.T) {
			comms := openRanks(t, 2, "tcp", mp.WithCheck(check))
			require.NoError(t, mp.Send(comms[0], []int32{1, 2, 3}, 1, 7))
			// The message is in rank 1's queue once a probe finds it.
			_, err := mp.Probe(comms[1], 0, 7)
			require.NoError(t, err)
			errs := onAll(comms, (*mp.Comm).Close) // at once: neither waits for the other's goodbye
			require.NoError(t, errs[0])
			err = errs[1]
			if !check {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, mp.ErrMismatch)
			require.ErrorContains(t, err, "from rank 0, tag 7, 3 × int32")
			require.ErrorIs(t, comms[1].Close(), mp.ErrMismatch, "Close returns the same error again")
			require.ErrorIs(t, mp.Send(comms[1], []int32{1}, 0, 0), mp.ErrClosed)
		})
	}
}
