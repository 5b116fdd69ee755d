package mp_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// Misuse of Cancel, TestAny and WaitSome is an error or a no-op, never a
// panic: a nil request, a request that failed before it reached the
// transport, lists of nil requests.
func TestCancelMisuse(t *testing.T) {
	err := (*mp.Request)(nil).Cancel()
	assert.ErrorIs(t, err, mp.ErrInvalid)
	i, done, st, err := mp.TestAny(nil, nil)
	assert.Equal(t, -1, i)
	assert.True(t, done, "TestAny of nil requests has nothing active")
	assert.Equal(t, mp.Status{}, st)
	assert.NoError(t, err)
	idx, err := mp.WaitSome(nil, nil)
	assert.Nil(t, idx)
	assert.NoError(t, err)
	ranktest.Run(t, 1, func(t *ranktest.T, c *mp.Comm) {
		q := mp.Irecv(c, make([]byte, 1), 5, 0) // no rank 5: failed at once
		assert.NoError(t, q.Cancel(), "Cancel of a failed receive")
		_, err := q.Wait()
		assert.ErrorIs(t, err, mp.ErrInvalid, "a failed receive keeps its error after Cancel")
		assert.NotErrorIs(t, err, mp.ErrCanceled)
	})
}

// A canceled request's transport request is released and recycled: many
// rounds of post, cancel, wait, then a message to self, never mix one
// round's receive with another's.
func TestCancelReleasesRequests(t *testing.T) {
	for _, backend := range []string{"tcp", "host"} {
		t.Run(backend, func(t *testing.T) {
			ranktest.RunConfig(t, 1, ranktest.Config{Backend: backend}, func(t *ranktest.T, c *mp.Comm) {
				for i := range 200 {
					stale := []int64{-1}
					q := mp.Irecv(c, stale, 0, i%3)
					require.NoError(t, q.Cancel())
					_, err := q.Wait()
					require.ErrorIs(t, err, mp.ErrCanceled, "round %d", i)
					s := mp.Isend(c, []int64{int64(i)}, 0, i%3)
					got := []int64{-1}
					_, err = mp.Recv(c, got, 0, i%3)
					require.NoError(t, err, "round %d", i)
					require.Equal(t, []int64{int64(i)}, got, "round %d", i)
					require.Equal(t, []int64{-1}, stale, "round %d: the canceled receive's buffer", i)
					_, err = s.Wait()
					require.NoError(t, err)
				}
			})
		})
	}
}
