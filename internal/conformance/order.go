package conformance

import (
	"fmt"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// orderCases check matching: messages from one sender with one tag are
// never overtaken, a receive picks its tag out of the queue, and receives
// match in the order they were posted.
func orderCases() []Case {
	return []Case{
		{Name: "Order/SameTag", MinRanks: 2, Run: orderSameTag},
		{Name: "Order/MixedSizes", MinRanks: 2, Run: orderMixedSizes},
		{Name: "Order/TagSelection", MinRanks: 2, Run: orderTagSelection},
		{Name: "Order/ManyTags", MinRanks: 2, Run: orderManyTags},
		{Name: "Order/PostedReceives", MinRanks: 2, Run: orderPostedReceives},
	}
}

// orderSameTag: 300 blocking sends with one tag arrive in order.
func orderSameTag(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const n = 300
	if c.Rank() == 0 {
		for i := range n {
			require.NoError(t, mp.Send(c, []int64{int64(i), -int64(i)}, peer, 1))
		}
		return
	}
	got := []int64{0, 0}
	for i := range n {
		_, err := mp.Recv(c, got, peer, 1)
		require.NoError(t, err)
		require.Equal(t, []int64{int64(i), -int64(i)}, got, "message %d", i)
	}
}

// orderMixedSizes: 1 KiB and 1 MiB messages interleaved on one tag, all
// sent at once, arrive in the order sent: a small message never overtakes
// a large one sent before it.
func orderMixedSizes(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const msgs = 16
	size := func(i int) int { // words
		if i%2 == 0 {
			return 1 << 17 // 1 MiB
		}
		return 128 // 1 KiB
	}
	reqs := make([]*mp.Request, msgs)
	bufs := make([][]uint64, msgs)
	for i := range msgs {
		if c.Rank() == 0 {
			bufs[i] = words(size(i), uint64(i))
			reqs[i] = mp.Isend(c, bufs[i], peer, 7)
		} else {
			// Exact sizes: a message that overtook another would not fit
			// (or would fit with the wrong content).
			bufs[i] = make([]uint64, size(i))
			reqs[i] = mp.Irecv(c, bufs[i], peer, 7)
		}
	}
	require.NoError(t, mp.WaitAll(reqs...))
	if c.Rank() == 0 {
		return
	}
	for i, q := range reqs {
		st, err := q.Wait()
		require.NoError(t, err)
		assert.Equal(t, int64(size(i)), st.Count, "message %d", i)
		checkWords(t, fmt.Sprintf("message %d", i), bufs[i], uint64(i))
	}
}

// orderTagSelection: the receiver takes tag 2 before tag 1 although tag 1
// was sent first, for small and large messages and a mix.
func orderTagSelection(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for _, sizes := range [][2]int{{4, 4}, {1 << 17, 1 << 17}, {4, 1 << 17}, {1 << 17, 4}} {
		if c.Rank() == 0 {
			a := mp.Isend(c, words(sizes[0], 1), peer, 1)
			b := mp.Isend(c, words(sizes[1], 2), peer, 2)
			require.NoError(t, mp.WaitAll(a, b), "sizes %v", sizes)
			continue
		}
		second := make([]uint64, sizes[1])
		st, err := mp.Recv(c, second, peer, 2)
		require.NoError(t, err, "sizes %v: tag 2", sizes)
		assert.Equal(t, mp.Status{Source: peer, Tag: 2, Count: int64(sizes[1])}, st)
		checkWords(t, "tag 2", second, 2)
		first := make([]uint64, sizes[0])
		st, err = mp.Recv(c, first, peer, 1)
		require.NoError(t, err, "sizes %v: tag 1", sizes)
		assert.Equal(t, mp.Status{Source: peer, Tag: 1, Count: int64(sizes[0])}, st)
		checkWords(t, "tag 1", first, 1)
	}
}

// orderManyTags: 200 messages over 5 tags, interleaved; the receiver
// drains one tag after another, from the last, and finds each tag's
// messages in the order they were sent.
func orderManyTags(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const n, tags = 200, 5
	if c.Rank() == 0 {
		reqs := make([]*mp.Request, n)
		for i := range n {
			reqs[i] = mp.Isend(c, []int64{int64(i)}, peer, i%tags)
		}
		require.NoError(t, mp.WaitAll(reqs...))
		return
	}
	got := []int64{0}
	for tag := tags - 1; tag >= 0; tag-- {
		for i := tag; i < n; i += tags {
			st, err := mp.Recv(c, got, peer, tag)
			require.NoError(t, err)
			require.Equal(t, int64(i), got[0], "tag %d", tag)
			require.Equal(t, tag, st.Tag)
		}
	}
}

// orderPostedReceives: receives posted for the same source and tag take
// the messages in the order the receives were posted.
func orderPostedReceives(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for round, n := range []int{3, 1 << 17} {
		tag := 4 + round
		if c.Rank() == 0 {
			if !heard(t, c, peer) {
				return
			}
			for k := range 3 {
				require.NoError(t, mp.Send(c, words(n, uint64(k)), peer, tag))
			}
			continue
		}
		bufs := [][]uint64{make([]uint64, n), make([]uint64, n), make([]uint64, n)}
		reqs := []*mp.Request{
			mp.Irecv(c, bufs[0], peer, tag),
			mp.Irecv(c, bufs[1], peer, tag),
			mp.Irecv(c, bufs[2], peer, tag),
		}
		tell(t, c, true, peer)
		// Complete them out of order: the matching was decided on arrival.
		for _, k := range []int{2, 0, 1} {
			_, err := reqs[k].Wait()
			require.NoError(t, err)
			checkWords(t, fmt.Sprintf("%d words, receive posted %d", n, k), bufs[k], uint64(k))
		}
	}
}
