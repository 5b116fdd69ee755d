package engine

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
)

// Revoke of the world on rank 0, after it lost rank 3: rank 1's receive
// from rank 2 (both alive; rank 2 never sends) ends with ErrRevoked and
// ErrPeerLost naming rank 3, as do rank 0's own pending operations and
// rank 2's (the revoke is passed on); agreement messages (ShrinkTag) still
// go, a waiting user message is dropped, Lost lists rank 3, and a
// communicator derived from the revoked world works.
func TestRevokeWorld(t *testing.T) {
	es, _ := mesh(t, 4)
	dst := make([]int32, 1)
	early, err := waiterless(es[0].Isend(buf([]int32{5}, backend.Int32), 1, 9, 0))
	require.NoError(t, err)
	_, err = waiter(t)(early, nil)
	require.NoError(t, err)
	r1, err := es[1].Irecv(buf(dst, backend.Int32), 2, 1, 0)
	require.NoError(t, err)
	r2, err := es[2].Irecv(buf(make([]int32, 1), backend.Int32), 1, 4, 0)
	require.NoError(t, err)
	r0, err := es[0].Irecv(buf(make([]int32, 1), backend.Int32), 1, 2, 0)
	require.NoError(t, err)
	for _, e := range es[:3] {
		e.world.peer(3).Broken(io.EOF)
	}
	assert.Equal(t, []int{3}, es[0].Lost())
	es[0].Revoke(3)
	for i, r := range []backend.Request{r0, r1, r2} {
		_, err := r.Wait(5 * time.Second)
		r.Release()
		require.ErrorIs(t, err, backend.ErrRevoked, "rank %d", i)
		require.ErrorIs(t, err, backend.ErrPeerLost, "rank %d", i)
		le, ok := errors.AsType[*backend.LostError](err)
		require.True(t, ok, "rank %d: %v", i, err)
		assert.Equal(t, 3, le.Rank, "rank %d: %v", i, err)
	}
	require.Eventually(t, func() bool { return es[2].Revoked() != nil }, 5*time.Second, time.Millisecond)
	assert.ErrorContains(t, es[2].Revoked(), "began Shrink")
	// New user operations fail; the message that waited at rank 1 is gone.
	_, err = es[2].Isend(buf([]int32{1}, backend.Int32), 0, 1, 0)
	require.ErrorIs(t, err, backend.ErrRevoked)
	require.Eventually(t, func() bool { return es[1].Revoked() != nil }, 5*time.Second, time.Millisecond)
	_, err = es[1].Irecv(buf(dst, backend.Int32), 0, 9, 0)
	require.ErrorIs(t, err, backend.ErrRevoked)
	_, _, err = es[1].Iprobe(backend.AnySource, backend.AnyTag)
	require.ErrorIs(t, err, backend.ErrRevoked)
	es[1].mu.Lock()
	assert.Empty(t, es[1].world.unexpected)
	es[1].mu.Unlock()
	// The agreement's messages go; its first receive from AnySource
	// reports rank 3's loss, which no wildcard had, as any would.
	got := make([]int64, 2)
	_, err = es[1].Irecv(buf(got, backend.Int64), backend.AnySource, backend.ShrinkTag, 0)
	require.ErrorIs(t, err, backend.ErrPeerLost)
	require.NotErrorIs(t, err, backend.ErrRevoked)
	rq, err := es[1].Irecv(buf(got, backend.Int64), backend.AnySource, backend.ShrinkTag, 0)
	require.NoError(t, err)
	_, err = waiter(t)(es[2].Isend(buf([]int64{7, 8}, backend.Int64), 1, backend.ShrinkTag, 0))
	require.NoError(t, err)
	st, err := waiter(t)(rq, nil)
	require.NoError(t, err)
	assert.Equal(t, 2, st.Source)
	assert.Equal(t, []int64{7, 8}, got)
	// And the survivors' communicator, derived from the revoked world.
	s := derive(t, es[:3], 77, []int{0, 1, 2})
	r, err := s[2].Irecv(buf(dst, backend.Int32), 0, 1, 0)
	require.NoError(t, err)
	_, err = waiter(t)(s[0].Isend(buf([]int32{42}, backend.Int32), 2, 1, 0))
	require.NoError(t, err)
	_, err = waiter(t)(r, nil)
	require.NoError(t, err)
	assert.Equal(t, int32(42), dst[0])
}

// waiterless passes a request through, for a send waited on later.
func waiterless(r backend.Request, err error) (backend.Request, error) { return r, err }

// A revoke that reaches a rank before it has made the derived
// communicator is applied when it makes it; a revoke of one derived
// communicator leaves the world and another derived one alone.
func TestRevokeEarlyAndApart(t *testing.T) {
	es, _ := mesh(t, 3)
	members := []int{0, 1, 2}
	a0, err := es[0].Split(5, members)
	require.NoError(t, err)
	b := derive(t, es, 6, members)
	a0.(*Comm).Revoke(-1)
	time.Sleep(50 * time.Millisecond) // the LEAVE reaches ranks 1 and 2
	a1, err := es[1].Split(5, members)
	require.NoError(t, err)
	_, err = a1.Irecv(buf(make([]byte, 1), backend.Uint8), 0, 1, 0)
	require.ErrorIs(t, err, backend.ErrRevoked)
	assert.ErrorContains(t, err, "rank 0 began Shrink")
	_, err = a1.(*Comm).Irecv(buf(make([]byte, 1), backend.Uint8), 0, backend.ShrinkTag, 0)
	require.NoError(t, err) // the agreement's receive may wait
	assert.Nil(t, es[1].Revoked())
	r, err := b[1].Irecv(buf(make([]byte, 1), backend.Uint8), 0, 1, 0)
	require.NoError(t, err)
	_, err = waiter(t)(b[0].Isend(buf([]byte{1}, backend.Uint8), 1, 1, 0))
	require.NoError(t, err)
	_, err = waiter(t)(r, nil)
	require.NoError(t, err)
	assert.Empty(t, a0.(*Comm).Lost())
}
