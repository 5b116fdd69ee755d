package conformance

import (
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// barrierCases: Barrier, the one collective point-to-point code leans on.
func barrierCases() []Case {
	return []Case{
		{Name: "Barrier/Repeat", MinRanks: 1, Run: barrierRepeat},
		{Name: "Barrier/Synchronizes", MinRanks: 2, Run: barrierSynchronizes},
		{Name: "Barrier/WildcardIsolation", MinRanks: 2, Run: barrierWildcardIsolation},
	}
}

// barrierRepeat: 100 barriers in a row, with point-to-point traffic
// between some of them.
func barrierRepeat(t T, c *mp.Comm) {
	next := (c.Rank() + 1) % c.Size()
	prev := (c.Rank() - 1 + c.Size()) % c.Size()
	for i := range 100 {
		require.NoError(t, mp.Barrier(c), "barrier %d", i)
		if i%10 == 0 {
			got := []int64{0}
			_, err := mp.Sendrecv(c, []int64{int64(c.Rank()*1000 + i)}, next, i, got, prev, i)
			require.NoError(t, err)
			require.Equal(t, []int64{int64(prev*1000 + i)}, got)
		}
	}
}

// barrierSynchronizes: no rank leaves a barrier before the last one enters
// it (rank 0 enters 200 ms late).
func barrierSynchronizes(t T, c *mp.Comm) {
	require.NoError(t, mp.Barrier(c))
	const late = 200 * time.Millisecond
	if c.Rank() == 0 {
		time.Sleep(late)
		require.NoError(t, mp.Barrier(c))
		return
	}
	start := time.Now()
	require.NoError(t, mp.Barrier(c))
	assert.GreaterOrEqual(t, time.Since(start), late/2, "left the barrier before rank 0 entered it")
}

// barrierWildcardIsolation: a receive with AnySource and AnyTag, pending
// across barriers, takes no barrier traffic: it gets the user message sent
// after them.
func barrierWildcardIsolation(t T, c *mp.Comm) {
	var q *mp.Request
	got := []int64{0}
	ok := false
	switch c.Rank() {
	case 0:
		q = mp.Irecv(c, got, mp.AnySource, mp.AnyTag)
		ok = wildcardOK(t, c, q)
		tell(t, c, ok, 1)
	case 1:
		ok = heard(t, c, 0)
	}
	for i := range 3 {
		require.NoError(t, mp.Barrier(c), "barrier %d", i)
	}
	if !ok {
		return
	}
	switch c.Rank() {
	case 0:
		st, err := q.Wait()
		require.NoError(t, err)
		assert.Equal(t, mp.Status{Source: 1, Tag: 5, Count: 1}, st)
		assert.Equal(t, []int64{42}, got)
	case 1:
		require.NoError(t, mp.Send(c, []int64{42}, 0, 5))
	}
}
