package tcp

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
)

// mesh connects n ranks with net.Pipe and returns their communicators.
func mesh(t *testing.T, n int, check bool) []backend.Conn {
	t.Helper()
	conns := make([][]net.Conn, n)
	for i := range conns {
		conns[i] = make([]net.Conn, n)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a, b := net.Pipe()
			conns[i][j], conns[j][i] = a, b
		}
	}
	out := make([]backend.Conn, n)
	for i := range out {
		c, err := New(context.Background(), Options{Rank: i, Size: n, Check: check, Conns: conns[i], Linger: time.Second})
		require.NoError(t, err)
		out[i] = c
	}
	closeAtCleanup(t, out)
	return out
}

func bufOf[E any](s []E, d backend.DType) backend.Buffer {
	if len(s) == 0 {
		return backend.Buffer{Type: d}
	}
	return backend.Buffer{Ptr: unsafePointer(s), Count: int64(len(s)), Type: d}
}

// waiter returns a function that waits for a request straight from
// Isend or Irecv: waiter(t)(c.Isend(…)).
func waiter(t *testing.T) func(backend.Request, error) (backend.Status, error) {
	return func(r backend.Request, err error) (backend.Status, error) { return wait(t, r, err) }
}

func wait(t *testing.T, r backend.Request, err error) (backend.Status, error) {
	t.Helper()
	require.NoError(t, err)
	st, err := r.Wait(10 * time.Second)
	r.Release()
	return st, err
}

func TestPipeEagerAndRendezvous(t *testing.T) {
	cs := mesh(t, 2, false)
	for _, n := range []int{0, 1, 1000, engine.EagerLimit / 4, engine.EagerLimit/4 + 1, 3 << 20} {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(i)
		}
		dst := make([]float32, n)
		rr, rerr := cs[1].Irecv(bufOf(dst, backend.Float32), 0, 7, 0)
		sr, serr := cs[0].Isend(bufOf(src, backend.Float32), 1, 7, 0)
		_, err := wait(t, sr, serr)
		require.NoError(t, err, "send of %d", n)
		st, err := wait(t, rr, rerr)
		require.NoError(t, err, "recv of %d", n)
		assert.Equal(t, backend.Status{Source: 0, Tag: 7, Count: int64(n)}, st)
		assert.Equal(t, src, dst)
	}
}

func TestPipeUnexpectedThenPosted(t *testing.T) {
	cs := mesh(t, 2, false)
	small := []int64{1, 2, 3}
	large := make([]int64, 1<<17) // 1 MiB: rendezvous
	for i := range large {
		large[i] = int64(i) * 3
	}
	s1, e1 := cs[0].Isend(bufOf(small, backend.Int64), 1, 1, 0)
	s2, e2 := cs[0].Isend(bufOf(large, backend.Int64), 1, 1, 0)
	require.NoError(t, e1)
	require.NoError(t, e2)
	time.Sleep(20 * time.Millisecond) // let both arrive unexpected
	got1 := make([]int64, 3)
	got2 := make([]int64, len(large))
	_, err := waiter(t)(cs[1].Irecv(bufOf(got1, backend.Int64), 0, 1, 0))
	require.NoError(t, err)
	_, err = waiter(t)(cs[1].Irecv(bufOf(got2, backend.Int64), 0, 1, 0))
	require.NoError(t, err)
	_, err = wait(t, s1, nil)
	require.NoError(t, err)
	_, err = wait(t, s2, nil)
	require.NoError(t, err)
	assert.Equal(t, small, got1)
	assert.Equal(t, large, got2)
}

func TestPipeTruncateLargeTellsSender(t *testing.T) {
	cs := mesh(t, 2, false)
	src := make([]byte, 1<<20)
	dst := make([]byte, 1<<10)
	rr, rerr := cs[1].Irecv(bufOf(dst, backend.Uint8), 0, 0, 0)
	sr, serr := cs[0].Isend(bufOf(src, backend.Uint8), 1, 0, 0)
	_, err := wait(t, rr, rerr)
	assert.ErrorIs(t, err, backend.ErrTruncate)
	_, err = wait(t, sr, serr)
	assert.ErrorIs(t, err, backend.ErrTruncate)
	// The pair still works.
	one := []byte{42}
	got := []byte{0}
	rr, rerr = cs[1].Irecv(bufOf(got, backend.Uint8), 0, 0, 0)
	_, err = waiter(t)(cs[0].Isend(bufOf(one, backend.Uint8), 1, 0, 0))
	require.NoError(t, err)
	_, err = wait(t, rr, rerr)
	require.NoError(t, err)
	assert.Equal(t, one, got)
}

func TestPipeCheckedCountMismatch(t *testing.T) {
	cs := mesh(t, 2, true)
	src := make([]int32, 10)
	dst := make([]int32, 20)
	rr, rerr := cs[1].Irecv(bufOf(dst, backend.Int32), 0, 3, 0)
	_, err := waiter(t)(cs[0].Isend(bufOf(src, backend.Int32), 1, 3, 0))
	require.NoError(t, err)
	_, err = wait(t, rr, rerr)
	require.ErrorIs(t, err, backend.ErrMismatch)
	assert.Contains(t, err.Error(), "rank 0 sent 10 × int32")
	assert.Contains(t, err.Error(), "rank 1 receives 20")
}

func TestPipePeerLostEndsPending(t *testing.T) {
	cs := mesh(t, 3, false)
	dst := make([]byte, 8)
	big := make([]byte, 4<<20)
	rr, rerr := cs[0].Irecv(bufOf(dst, backend.Uint8), 2, 0, 0)
	require.NoError(t, rerr)
	any, aerr := cs[0].Irecv(bufOf(dst, backend.Uint8), backend.AnySource, 5, 0)
	require.NoError(t, aerr)
	sr, serr := cs[0].Isend(bufOf(big, backend.Uint8), 2, 0, 0) // waits for a CTS that never comes
	require.NoError(t, serr)
	cs[2].Abort(errors.New("test kills rank 2"))
	start := time.Now()
	_, err := rr.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.NotErrorIs(t, err, backend.ErrPeerClosed, "an aborted peer did not close in order")
	assert.Contains(t, err.Error(), "rank 2")
	_, err = sr.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.Less(t, time.Since(start), 2*time.Second)
	// The wildcard receive pending when rank 2 was lost ends too, naming
	// it (MPI's fault-tolerance proposal: MPI_ERR_PROC_FAILED_PENDING);
	// one posted again is matched by rank 1, which lives.
	_, err = any.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.Contains(t, err.Error(), "rank 2")
	lost, ok := errors.AsType[*backend.LostError](err)
	require.True(t, ok, "%v carries no LostError", err)
	assert.Equal(t, 2, lost.Rank)
	any.Release()
	any, aerr = cs[0].Irecv(bufOf(dst, backend.Uint8), backend.AnySource, 5, 0)
	require.NoError(t, aerr)
	_, err = waiter(t)(cs[1].Isend(bufOf([]byte{9}, backend.Uint8), 0, 5, 0))
	require.NoError(t, err)
	st, err := any.Wait(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Source)
	// New operations with the lost rank fail at once.
	_, err = cs[0].Irecv(bufOf(dst, backend.Uint8), 2, 0, 0)
	assert.ErrorIs(t, err, backend.ErrPeerLost)
	rr.Release()
	sr.Release()
	any.Release()
}

func TestPipeCloseEndsPendingAndTellsPeer(t *testing.T) {
	cs := mesh(t, 2, false)
	dst := make([]byte, 8)
	mine, err := cs[0].Irecv(bufOf(dst, backend.Uint8), 1, 0, 0)
	require.NoError(t, err)
	theirs, err := cs[1].Irecv(bufOf(dst, backend.Uint8), 0, 0, 0)
	require.NoError(t, err)
	closed := make(chan error, 1)
	go func() { closed <- cs[0].Close() }()
	_, err = mine.Wait(5 * time.Second)
	assert.ErrorIs(t, err, backend.ErrClosed)
	_, err = theirs.Wait(5 * time.Second)
	assert.ErrorIs(t, err, backend.ErrPeerLost)
	assert.ErrorIs(t, err, backend.ErrPeerClosed)
	assert.Contains(t, err.Error(), "rank 0 closed its communicator")
	require.NoError(t, cs[1].Close())
	require.NoError(t, <-closed)
	_, err = cs[0].Isend(bufOf(dst, backend.Uint8), 1, 0, 0)
	assert.ErrorIs(t, err, backend.ErrClosed)
}

func TestPipeTimeoutLeavesRequestPending(t *testing.T) {
	cs := mesh(t, 2, false)
	dst := make([]byte, 8)
	r, err := cs[0].Irecv(bufOf(dst, backend.Uint8), 1, 0, 0)
	require.NoError(t, err)
	_, err = r.Wait(30 * time.Millisecond)
	require.ErrorIs(t, err, backend.ErrTimeout)
	p := cs[0].Pending()
	require.Len(t, p, 1)
	assert.Equal(t, backend.OpInfo{Op: "recv", Peer: 1, Tag: 0, Count: 8, Type: backend.Uint8}, p[0])
	_, err = waiter(t)(cs[1].Isend(bufOf([]byte("12345678"), backend.Uint8), 0, 0, 0))
	require.NoError(t, err)
	_, err = r.Wait(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, "12345678", string(dst))
	r.Release()
}

func TestDoneChannel(t *testing.T) {
	cs := mesh(t, 2, false)
	dst := make([]byte, 1)
	r, err := cs[0].Irecv(bufOf(dst, backend.Uint8), 1, 0, 0)
	require.NoError(t, err)
	ch := r.Done()
	select {
	case <-ch:
		t.Fatal("done before the message")
	default:
	}
	_, err = waiter(t)(cs[1].Isend(bufOf([]byte{1}, backend.Uint8), 0, 0, 0))
	require.NoError(t, err)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Done never closed")
	}
	assert.Equal(t, ch, r.Done())
	r.Release()
}

func TestNewValidates(t *testing.T) {
	_, err := New(context.Background(), Options{Rank: 2, Size: 2})
	assert.ErrorIs(t, err, backend.ErrInvalid)
	_, err = New(context.Background(), Options{Rank: 0, Size: 2, Conns: make([]net.Conn, 2)})
	assert.ErrorIs(t, err, backend.ErrInvalid)
}

// TestPipeWildcardNoSenderLeft: a wildcard receive waits while a rank that
// could send lives, even after others closed in order; once none is left,
// the pending one ends and a new one fails at once.
func TestPipeWildcardNoSenderLeft(t *testing.T) {
	t.Parallel() // waits more than it computes
	cs := mesh(t, 3, false)
	dst := make([]byte, 8)
	any, err := cs[0].Irecv(bufOf(dst, backend.Uint8), backend.AnySource, 5, 0)
	require.NoError(t, err)
	require.NoError(t, cs[1].Close())
	time.Sleep(100 * time.Millisecond)
	done, _, _ := any.Test()
	assert.False(t, done, "a rank that closed in order ended a wildcard receive rank 2 can still satisfy")
	cs[2].Abort(errors.New("test kills rank 2"))
	_, err = any.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.Contains(t, err.Error(), "rank 2")
	any.Release()
	start := time.Now()
	again, err := cs[0].Irecv(bufOf(dst, backend.Uint8), backend.AnySource, 5, 0)
	if err == nil {
		_, err = again.Wait(5 * time.Second)
		again.Release()
	}
	require.ErrorIs(t, err, backend.ErrPeerLost, "no rank is left that could send")
	assert.Less(t, time.Since(start), time.Second)
	// A message that arrived before is still taken.
	_, err = waiter(t)(cs[0].Isend(bufOf([]byte{4}, backend.Uint8), 0, 6, 0))
	require.NoError(t, err)
	st, err := waiter(t)(cs[0].Irecv(bufOf(dst, backend.Uint8), backend.AnySource, 6, 0))
	require.NoError(t, err)
	assert.Equal(t, 0, st.Source)
}

// TestPipeCascadeNamesTheDead: rank 2's process vanishes (its connections
// end without BYE); rank 1, which lost it, closes its communicator; rank
// 0, waiting on rank 1, is told that rank 2 is the rank lost, and that
// rank 1 closed after it.
func TestPipeCascadeNamesTheDead(t *testing.T) {
	t.Parallel() // waits more than it computes
	const n = 3
	pipes := make([][]net.Conn, n)
	for i := range pipes {
		pipes[i] = make([]net.Conn, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			pipes[i][j], pipes[j][i] = net.Pipe()
		}
	}
	cs := make([]backend.Conn, n)
	for i := range cs {
		c, err := New(context.Background(), Options{Rank: i, Size: n, Conns: pipes[i], Linger: time.Second})
		require.NoError(t, err)
		cs[i] = c
	}
	defer cs[0].Close()
	dst := make([]byte, 8)
	fromOne, err := cs[0].Irecv(bufOf(dst, backend.Uint8), 1, 0, 0)
	require.NoError(t, err)
	oneWaits, err := cs[1].Irecv(bufOf(dst, backend.Uint8), 2, 0, 0)
	require.NoError(t, err)

	// Rank 2 dies: its ends of the connections close, with no BYE.
	pipes[2][0].Close()
	pipes[2][1].Close()
	_, err = oneWaits.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	oneWaits.Release()
	require.NoError(t, cs[1].Close())

	_, err = fromOne.Wait(5 * time.Second)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.ErrorIs(t, err, backend.ErrPeerClosed, "rank 1 closed in order")
	lost, ok := errors.AsType[*backend.LostError](err)
	require.True(t, ok, "%v carries no LostError", err)
	assert.Equal(t, 2, lost.Rank, "%v", err)
	assert.Contains(t, err.Error(), "rank 1 closed its communicator after it lost rank 2")
	fromOne.Release()
	cs[2].Close()
}

// TestPipeWildcardReportsLossOnce: rank 2 fails while no receive from
// AnySource is pending; the next one that finds no message reports the
// loss, once, and the one after waits for rank 1 as usual.
func TestPipeWildcardReportsLossOnce(t *testing.T) {
	cs := mesh(t, 3, false)
	dst := make([]byte, 8)
	cs[2].Abort(errors.New("test kills rank 2"))
	require.Eventually(t, func() bool {
		_, err := cs[0].Irecv(bufOf(dst, backend.Uint8), 2, 0, 0)
		return errors.Is(err, backend.ErrPeerLost)
	}, 5*time.Second, 10*time.Millisecond)
	first, err := cs[0].Irecv(bufOf(dst, backend.Uint8), backend.AnySource, 5, 0)
	if err == nil {
		_, err = first.Wait(5 * time.Second)
		first.Release()
	}
	require.ErrorIs(t, err, backend.ErrPeerLost)
	assert.Contains(t, err.Error(), "rank 2")
	second, err := cs[0].Irecv(bufOf(dst, backend.Uint8), backend.AnySource, 5, 0)
	require.NoError(t, err)
	_, err = waiter(t)(cs[1].Isend(bufOf([]byte{9}, backend.Uint8), 0, 5, 0))
	require.NoError(t, err)
	st, err := second.Wait(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Source)
	second.Release()
}

// closeAtCleanup closes the ranks' communicators at the test's end, all
// at once (each Close waits for the others' goodbyes).
func closeAtCleanup(t testing.TB, out []backend.Conn) {
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, c := range out {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
		wg.Wait()
	})
}
