package conformance

import (
	"errors"
	"strconv"
	"strings"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

func splitCases() []Case {
	return []Case{
		{Name: "Split/Grid", MinRanks: 4, Run: splitGrid},
		{Name: "Split/Undefined", MinRanks: 2, Run: splitUndefined},
		{Name: "Split/KeyOrder", MinRanks: 3, Run: splitKeyOrder},
		{Name: "Split/SamePairOppositeOrder", MinRanks: 2, Run: splitOppositeOrder},
		{Name: "Split/WildcardsStayInTheirComm", MinRanks: 2, Run: splitWildcards},
		{Name: "Split/CollectivesApart", MinRanks: 2, Run: splitCollectivesApart},
		{Name: "Split/OfSplit", MinRanks: 4, Run: splitOfSplit},
		{Name: "Split/CloseChild", MinRanks: 2, Run: splitCloseChild},
		{Name: "Split/PeerClosesChild", MinRanks: 2, Run: splitPeerClosesChild},
		{Name: "Split/CloseWorldEndsChildren", MinRanks: 2, Run: splitCloseWorld},
		{Name: "Split/PeerLost", MinRanks: 2, Run: splitPeerLost},
	}
}

// split calls c.Split and reports whether the case goes on: a backend
// without sub-communicators must say so with ErrNotSupported (on every
// rank alike), and the case then ends; any other error fails it.
func split(t T, c *mp.Comm, color, key int) (*mp.Comm, bool) {
	t.Helper()
	d, err := c.Split(color, key)
	return d, derived(t, c, err)
}

// dup is split's Dup.
func dup(t T, c *mp.Comm) (*mp.Comm, bool) {
	t.Helper()
	d, err := c.Dup()
	return d, derived(t, c, err)
}

func derived(t T, c *mp.Comm, err error) bool {
	t.Helper()
	if err == nil {
		return true
	}
	if !hostBackend(c) && errors.Is(err, mp.ErrNotSupported) {
		t.Logf("backend %s has no sub-communicators: %v", c.Backend(), err)
		return false
	}
	t.Errorf("Split/Dup: %v", err)
	return false
}

// closeComm closes a derived communicator and checks that it closed.
func closeComm(t T, d *mp.Comm) {
	t.Helper()
	if d != nil {
		assert.NoError(t, d.Close(), "Close of %s", d.Name())
	}
}

// splitGrid: ranks 0–3 as a 2 × 2 grid split into rows and columns (the
// other ranks pass Undefined), an Allreduce on each checked, then one on
// each at the same time (non-blocking, in opposite orders on the two
// columns), and the world still reduces over every rank.
func splitGrid(t T, c *mp.Comm) {
	me := c.Rank()
	row, col := me/2, me%2
	rowColor, colColor := row, col
	if me >= 4 {
		rowColor, colColor = mp.Undefined, mp.Undefined
	}
	rows, ok := split(t, c, rowColor, me)
	if !ok {
		return
	}
	defer closeComm(t, rows)
	cols, ok := split(t, c, colColor, me)
	require.True(t, ok)
	defer closeComm(t, cols)
	if me >= 4 {
		assert.Nil(t, rows, "Split with Undefined")
		assert.Nil(t, cols, "Split with Undefined")
	} else {
		require.NotNil(t, rows)
		require.NotNil(t, cols)
		assert.Equal(t, 2, rows.Size(), "row size")
		assert.Equal(t, col, rows.Rank(), "rank in the row")
		assert.Equal(t, 2, cols.Size(), "column size")
		assert.Equal(t, row, cols.Rank(), "rank in the column")

		v := []int64{int64(me + 1), int64(100 * (me + 1))}
		got := make([]int64, 2)
		require.NoError(t, mp.Allreduce(rows, v, got, mp.Sum))
		rowSum := int64(2*(2*row) + 1 + 2) // (2row+1) + (2row+2)
		assert.Equal(t, []int64{rowSum, 100 * rowSum}, got, "row %d sum", row)
		require.NoError(t, mp.Allreduce(cols, v, got, mp.Sum))
		colSum := int64(col+1) + int64(col+3)
		assert.Equal(t, []int64{colSum, 100 * colSum}, got, "column %d sum", col)

		// Both at once, started in opposite orders on the two columns.
		rg, cg := make([]int64, 2), make([]int64, 2)
		var rq, cq *mp.Request
		var err error
		if col == 0 {
			rq, err = mp.Iallreduce(rows, v, rg, mp.Max)
			require.NoError(t, err)
			cq, err = mp.Iallreduce(cols, v, cg, mp.Max)
			require.NoError(t, err)
		} else {
			cq, err = mp.Iallreduce(cols, v, cg, mp.Max)
			require.NoError(t, err)
			rq, err = mp.Iallreduce(rows, v, rg, mp.Max)
			require.NoError(t, err)
		}
		require.NoError(t, mp.WaitAll(rq, cq))
		rowMax, colMax := int64(2*row+2), int64(col+3)
		assert.Equal(t, []int64{rowMax, 100 * rowMax}, rg, "row %d max", row)
		assert.Equal(t, []int64{colMax, 100 * colMax}, cg, "column %d max", col)
	}
	all := []int64{0}
	require.NoError(t, mp.Allreduce(c, []int64{int64(me + 1)}, all, mp.Sum))
	n := int64(c.Size())
	assert.Equal(t, n*(n+1)/2, all[0], "the world's sum after the split")
}

// splitUndefined: rank 0 passes Undefined (and rank 1 another negative
// color) and gets nil, nil; the others get one communicator of the rest.
func splitUndefined(t T, c *mp.Comm) {
	me := c.Rank()
	color := 7
	switch me {
	case 0:
		color = mp.Undefined
	case 1:
		color = -5
	}
	d, ok := split(t, c, color, 0)
	if !ok {
		return
	}
	defer closeComm(t, d)
	if me < 2 {
		assert.Nil(t, d, "Split with a negative color")
		assert.Equal(t, -1, d.Rank(), "Rank of a nil *Comm")
		return
	}
	require.NotNil(t, d)
	assert.Equal(t, c.Size()-2, d.Size())
	assert.Equal(t, me-2, d.Rank())
	require.NoError(t, mp.Barrier(d))
}

// splitKeyOrder: ranks ordered by key (reversed), ties by their old rank
// (every key equal; keys of two values), checked by Rank and by an
// Allgather of the old ranks.
func splitKeyOrder(t T, c *mp.Comm) {
	me, n := c.Rank(), c.Size()
	check := func(d *mp.Comm, want []int, what string) {
		t.Helper()
		defer closeComm(t, d)
		require.NotNil(t, d)
		require.Equal(t, n, d.Size(), what)
		old := make([]int64, n)
		require.NoError(t, mp.Allgather(d, []int64{int64(me)}, old), what)
		for k, w := range want {
			assert.Equal(t, int64(w), old[k], "%s: rank %d of the new communicator is old rank %d", what, k, old[k])
			if w == me {
				assert.Equal(t, k, d.Rank(), "%s: my rank", what)
			}
		}
	}
	d, ok := split(t, c, 0, -me)
	if !ok {
		return
	}
	reversed := make([]int, n)
	for k := range reversed {
		reversed[k] = n - 1 - k
	}
	check(d, reversed, "keys reversed")
	d, ok = split(t, c, 0, 42)
	require.True(t, ok)
	same := make([]int, n)
	for k := range same {
		same[k] = k
	}
	check(d, same, "keys equal")
	d, ok = split(t, c, 0, 1-me%2) // odd ranks first, each group in old order
	require.True(t, ok)
	var mixed []int
	for _, parity := range []int{1, 0} {
		for r := range n {
			if r%2 == parity {
				mixed = append(mixed, r)
			}
		}
	}
	check(d, mixed, "keys of two values")
}

// splitOppositeOrder: two duplicates of the world over the same pair of
// ranks, the same tag on both; rank 0 sends on a then on b, small and
// large, and rank 1 receives on b first: each receive gets its own
// communicator's message, and nothing waits for the other communicator.
func splitOppositeOrder(t T, c *mp.Comm) {
	a, ok := dup(t, c)
	if !ok {
		return
	}
	defer closeComm(t, a)
	b, ok := dup(t, c)
	require.True(t, ok)
	defer closeComm(t, b)
	peer, ok := pair(c)
	if !ok {
		return
	}
	for _, n := range []int{3, eagerBytes/8 + 1, 1 << 18} {
		if c.Rank() == 0 {
			qa := mp.Isend(a, words(n, 1), peer, 5)
			qb := mp.Isend(b, words(n, 2), peer, 5)
			require.NoError(t, mp.WaitAll(qa, qb), "%d words", n)
			continue
		}
		gb, ga := make([]uint64, n), make([]uint64, n)
		st, err := mp.Recv(b, gb, peer, 5)
		require.NoError(t, err, "%d words on b", n)
		assert.Equal(t, 0, st.Source)
		checkWords(t, "b's message", gb, 2)
		_, err = mp.Recv(a, ga, peer, 5)
		require.NoError(t, err, "%d words on a", n)
		checkWords(t, "a's message", ga, 1)
	}
}

// splitWildcards: a message on the world and one on a duplicate, both
// with tag 7; an AnySource/AnyTag receive (and probe) on the duplicate
// takes the duplicate's, though the world's arrived first, and the
// world's wildcard receive takes the world's. A backend without
// wildcards (nccl) runs the same with the source and tag named
// (splitNamed).
func splitWildcards(t T, c *mp.Comm) {
	color := mp.Undefined
	if c.Rank() < 2 {
		color = 0
	}
	d, ok := split(t, c, color, 0)
	if !ok {
		return
	}
	defer closeComm(t, d)
	peer, ok := pair(c)
	if !ok {
		return
	}
	if !hostBackend(c) {
		splitNamed(t, c, d, peer)
		return
	}
	if c.Rank() == 0 {
		require.NoError(t, mp.Send(c, []int32{111}, peer, 7))
		require.NoError(t, mp.Send(d, []int32{222}, peer, 7))
		require.NoError(t, mp.Barrier(d))
		// Stay until the peer has looked: once no rank that could send
		// is left, a wildcard probe fails instead of finding nothing.
		require.NoError(t, mp.Barrier(d))
		return
	}
	require.NoError(t, mp.Barrier(d)) // both messages have been sent
	st, err := mp.Probe(d, mp.AnySource, mp.AnyTag)
	require.NoError(t, err)
	assert.Equal(t, 0, st.Source)
	got := []int32{0}
	_, err = mp.Recv(d, got, mp.AnySource, mp.AnyTag)
	require.NoError(t, err)
	assert.Equal(t, int32(222), got[0], "the duplicate's wildcard receive")
	found, _, err := mp.Iprobe(d, mp.AnySource, mp.AnyTag)
	require.NoError(t, err)
	assert.False(t, found, "the duplicate holds the world's message")
	_, err = mp.Recv(c, got, mp.AnySource, mp.AnyTag)
	require.NoError(t, err)
	assert.Equal(t, int32(111), got[0], "the world's wildcard receive")
	require.NoError(t, mp.Barrier(d))
}

// splitNamed is splitWildcards without wildcards: rank 0 starts the
// world's send first and makes sure it has left (Test), then sends on the
// duplicate; rank 1 receives from rank 0 with tag 7 on the duplicate
// first, and gets the duplicate's message, then the world's. Nothing needs
// buffering: the world's send completes once its receive is posted.
func splitNamed(t T, c, d *mp.Comm, peer int) {
	if c.Rank() == 0 {
		qw := mp.Isend(c, []int32{111}, peer, 7)
		done, _, err := qw.Test()
		require.NoError(t, err)
		require.NoError(t, mp.Send(d, []int32{222}, peer, 7))
		if !done {
			_, err = qw.Wait()
			require.NoError(t, err)
		}
		return
	}
	got := []int32{0}
	st, err := mp.Recv(d, got, peer, 7)
	require.NoError(t, err)
	assert.Equal(t, 0, st.Source)
	assert.Equal(t, int32(222), got[0], "the duplicate's receive")
	_, err = mp.Recv(c, got, peer, 7)
	require.NoError(t, err)
	assert.Equal(t, int32(111), got[0], "the world's receive")
}

// splitCollectivesApart: collectives on a duplicate and on the world in
// different orders on different ranks (rank 0 starts the duplicate's
// first, the others the world's): valid MPI, so neither waits for the
// other, and both give their sums.
func splitCollectivesApart(t T, c *mp.Comm) {
	d, ok := dup(t, c)
	if !ok {
		return
	}
	defer closeComm(t, d)
	n := int64(c.Size())
	me := int64(c.Rank())
	world, dd := []int64{0}, []int64{0}
	if me == 0 {
		q, err := mp.Iallreduce(d, []int64{10 * (me + 1)}, dd, mp.Sum)
		require.NoError(t, err)
		require.NoError(t, mp.Allreduce(c, []int64{me + 1}, world, mp.Sum))
		_, err = q.Wait()
		require.NoError(t, err)
	} else {
		require.NoError(t, mp.Allreduce(c, []int64{me + 1}, world, mp.Sum))
		require.NoError(t, mp.Allreduce(d, []int64{10 * (me + 1)}, dd, mp.Sum))
	}
	assert.Equal(t, n*(n+1)/2, world[0])
	assert.Equal(t, 10*n*(n+1)/2, dd[0])
}

// splitOfSplit: the world split in halves, each half split again (its
// ranks reversed) and duplicated; collectives on all three levels, and
// the names say where each came from.
func splitOfSplit(t T, c *mp.Comm) {
	me := c.Rank()
	half, ok := split(t, c, me%2, me)
	if !ok {
		return
	}
	defer closeComm(t, half)
	rev, err := half.Split(0, -half.Rank())
	require.NoError(t, err)
	defer closeComm(t, rev)
	twin, err := rev.Dup()
	require.NoError(t, err)
	defer closeComm(t, twin)
	assert.Equal(t, half.Size(), rev.Size())
	assert.Equal(t, half.Size()-1-half.Rank(), rev.Rank())
	assert.Equal(t, rev.Rank(), twin.Rank())
	assert.True(t, strings.HasSuffix(twin.Name(), "of split 1 of split 1 of world"), "name %q", twin.Name())
	// Rank k of rev is old rank: gather them on every level.
	old := make([]int64, rev.Size())
	require.NoError(t, mp.Allgather(twin, []int64{int64(me)}, old))
	for k := range old {
		// rev's rank k is half's rank size-1-k, which is world rank
		// 2·(size-1-k) + parity.
		want := int64(2*(rev.Size()-1-k) + me%2)
		assert.Equal(t, want, old[k], "rank %d of the split of the split", k)
	}
	sum := []int64{0}
	require.NoError(t, mp.Allreduce(half, []int64{int64(me)}, sum, mp.Sum))
	var want int64
	for r := me % 2; r < c.Size(); r += 2 {
		want += int64(r)
	}
	assert.Equal(t, want, sum[0])
}

// splitCloseChild: a duplicate is closed on every rank; the world goes on
// (an exchange and a collective), and the closed duplicate fails with
// ErrClosed; closing a middle communicator leaves the one derived from it
// working.
func splitCloseChild(t T, c *mp.Comm) {
	d, ok := dup(t, c)
	if !ok {
		return
	}
	mid, err := c.Dup()
	require.NoError(t, err)
	leaf, err := mid.Dup()
	require.NoError(t, err)
	defer closeComm(t, leaf)
	require.NoError(t, mp.Barrier(d))
	require.NoError(t, d.Close())
	assert.NoError(t, d.Close(), "second Close")
	require.NoError(t, mid.Close())
	me, n := c.Rank(), c.Size()
	next, prev := (me+1)%n, (me+n-1)%n
	got := []int32{0}
	_, err = mp.Sendrecv(c, []int32{int32(me)}, next, 3, got, prev, 3)
	require.NoError(t, err, "the world after its duplicate's Close")
	assert.Equal(t, int32(prev), got[0])
	require.NoError(t, mp.Barrier(c))
	isErr(t, mp.Send(d, []int32{1}, next, 1), mp.ErrClosed, "Send on a closed duplicate")
	_, err = mp.Recv(d, got, prev, 1)
	isErr(t, err, mp.ErrClosed, "Recv on a closed duplicate")
	isErr(t, mp.Barrier(d), mp.ErrClosed, "Barrier on a closed duplicate")
	_, err = d.Dup()
	isErr(t, err, mp.ErrClosed, "Dup of a closed duplicate")
	sum := []int32{0}
	require.NoError(t, mp.Allreduce(leaf, []int32{1}, sum, mp.Sum), "a duplicate of a closed duplicate")
	assert.Equal(t, int32(n), sum[0])
}

// splitPeerClosesChild: the world split with its ranks reversed; world
// rank 0 closes it while world rank 1 has a receive pending from it
// there: the receive ends with ErrPeerLost and ErrPeerClosed, naming the
// closed rank by its rank in the split, and a new one fails at once. The
// world goes on.
func splitPeerClosesChild(t T, c *mp.Comm) {
	d, ok := split(t, c, 0, -c.Rank())
	if !ok {
		return
	}
	me, n := c.Rank(), c.Size()
	zero := n - 1 // world rank 0's rank in d
	switch me {
	case 0:
		require.NoError(t, mp.Barrier(c))
		require.NoError(t, d.Close())
		require.NoError(t, mp.Barrier(c))
	case 1:
		q := mp.Irecv(d, []int32{0}, zero, 9) // never sent
		require.NoError(t, mp.Barrier(c))
		_, err := q.Wait()
		isErr(t, err, mp.ErrPeerLost, "receive from a rank that closed the communicator")
		isErr(t, err, mp.ErrPeerClosed, "receive from a rank that closed the communicator")
		checkOpError(t, err, "recv", d.Rank(), zero, 9, c.Backend())
		var oe *mp.OpError
		if errors.As(err, &oe) {
			assert.Equal(t, d.Name(), oe.Comm)
		}
		_, err = mp.Recv(d, []int32{0}, zero, 9)
		isErr(t, err, mp.ErrPeerLost, "new receive from a rank that closed the communicator")
		require.NoError(t, mp.Barrier(c))
		closeComm(t, d)
	default:
		require.NoError(t, mp.Barrier(c))
		require.NoError(t, mp.Barrier(c))
		closeComm(t, d)
	}
	all := []int32{0}
	require.NoError(t, mp.Allreduce(c, []int32{1}, all, mp.Sum))
	assert.Equal(t, int32(n), all[0])
}

// splitCloseWorld: closing the world while a duplicate has a receive
// pending ends it with ErrClosed; the duplicate's operations fail with
// ErrClosed afterwards, and its Close returns.
func splitCloseWorld(t T, c *mp.Comm) {
	d, ok := dup(t, c)
	if !ok {
		return
	}
	me := c.Rank()
	q := mp.Irecv(d, []int32{0}, me, 4) // never sent
	require.NoError(t, mp.Barrier(c))
	require.NoError(t, c.Close())
	_, err := q.Wait()
	isErr(t, err, mp.ErrClosed, "a duplicate's receive when the world closed")
	isErr(t, mp.Send(d, []int32{1}, me, 1), mp.ErrClosed, "Send on a duplicate of a closed world")
	isErr(t, mp.Barrier(d), mp.ErrClosed, "Barrier on a duplicate of a closed world")
	assert.NoError(t, d.Close())
}

// splitPeerLost: world rank 1 aborts the world while world rank 0 has a
// receive pending from it on a split that reverses the ranks: the receive
// ends with ErrPeerLost, and the error names rank 1 by its rank in the
// split.
func splitPeerLost(t T, c *mp.Comm) {
	d, ok := split(t, c, 0, -c.Rank())
	if !ok {
		return
	}
	defer closeComm(t, d)
	me, n := c.Rank(), c.Size()
	one := n - 2 // world rank 1's rank in d
	switch me {
	case 1:
		require.NoError(t, mp.Barrier(c))
		c.Abort(errStop)
	case 0:
		q := mp.Irecv(d, []int32{0}, one, 8) // never sent
		require.NoError(t, mp.Barrier(c))
		_, err := q.Wait()
		isErr(t, err, mp.ErrPeerLost, "receive on the split from a rank that aborted")
		checkOpError(t, err, "recv", d.Rank(), one, 8, c.Backend())
		if one != 1 {
			assert.ErrorContains(t, err, "rank "+strconv.Itoa(one)+" of this communicator (rank 1 of the job)")
		}
	default:
		require.NoError(t, mp.Barrier(c))
	}
}
