package nccl

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
)

// TestFakeShrinkPieces: what Shrink needs of the backend, on the fake
// GPU. Rank 0 revokes the communicator of three: rank 1's receive from
// rank 2 (both alive; rank 2 never sends) ends with ErrRevoked, as does
// rank 0's own; new messages fail on every rank; no rank counts another
// lost; the agreement's messages (ShrinkTag, AnySource included) go over
// the host connection; and a communicator derived from the revoked one,
// with new NCCL communicators, carries messages.
func TestFakeShrinkPieces(t *testing.T) {
	cs, _ := fakeJob(t, 3, false)
	var _ backend.Shrinker = cs[0]
	r1 := irecv(t, cs[1], i32s(make([]int32, 1)), 2, 3)
	r0 := irecv(t, cs[0], i32s(make([]int32, 1)), 1, 3)
	r2 := irecv(t, cs[2], i32s(make([]int32, 1)), 1, 3)
	cs[0].Revoke(-1)
	for i, r := range []backend.Request{r0, r1, r2} {
		_, err := r.Wait(testWait)
		r.Release()
		require.ErrorIs(t, err, backend.ErrRevoked, "rank %d", i)
		require.ErrorIs(t, err, backend.ErrPeerLost, "rank %d", i)
	}
	for r, c := range cs {
		assert.Empty(t, c.Lost(), "rank %d", r)
	}
	_, err := cs[0].Isend(i32s([]int32{1}), 1, 3, 0)
	require.ErrorIs(t, err, backend.ErrRevoked)
	_, err = cs[2].Isend(i32s([]int32{1}), 1, 3, 0)
	require.ErrorIs(t, err, backend.ErrRevoked, "rank 2's channel to rank 1, after the revoke came")
	got := make([]int64, 2)
	rq, err := cs[1].Irecv(bufOf(got, backend.Int64), backend.AnySource, backend.ShrinkTag, 0)
	require.NoError(t, err)
	waitAll(t, isend(t, cs[2], bufOf([]int64{4, 5}, backend.Int64), 1, backend.ShrinkTag))
	st, err := rq.Wait(testWait)
	rq.Release()
	require.NoError(t, err)
	assert.Equal(t, 2, st.Source)
	assert.Equal(t, []int64{4, 5}, got)
	d := splitAll(t, cs, 41, []int{0, 1, 2})
	ranks(cs, func(r int, _ *conn) {
		c := d[r]
		in := make([]int32, 1)
		waitAll(t, isend(t, c, i32s([]int32{int32(10 + r)}), (r+1)%3, 7), irecv(t, c, i32s(in), (r+2)%3, 7))
		assert.Equal(t, int32(10+(r+2)%3), in[0], "rank %d", r)
	})
}
