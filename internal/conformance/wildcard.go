package conformance

import (
	"fmt"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// wildcardCases check AnySource and AnyTag. Each first posts one wildcard
// receive and asks the backend about it (wildcardOK); the senders wait for
// the verdict, so a backend that refuses wildcards ends the case on every
// rank at once.
func wildcardCases() []Case {
	return []Case{
		{Name: "Wildcard/AnySource", MinRanks: 2, Run: wildcardAnySource},
		{Name: "Wildcard/AnyTag", MinRanks: 2, Run: wildcardAnyTag},
		{Name: "Wildcard/AnySourceAnyTag", MinRanks: 2, Run: wildcardBoth},
		{Name: "Wildcard/PostedOrder", MinRanks: 2, Run: wildcardPostedOrder},
	}
}

// wildcardAnySource: rank 0 receives every other rank's messages with
// AnySource, small ones (20 per rank, per-sender order kept) and then one
// large one per rank, and sees each source the right number of times with
// Status.Source right.
func wildcardAnySource(t T, c *mp.Comm) {
	const k, small, large = 20, 3, 4
	const big = 1 << 16 // words: 512 KiB
	if c.Rank() != 0 {
		if !heard(t, c, 0) {
			return
		}
		for i := range k {
			require.NoError(t, mp.Send(c, []int64{int64(c.Rank()), int64(i)}, 0, small))
		}
		require.NoError(t, mp.Send(c, words(big, uint64(c.Rank())), 0, large))
		return
	}
	msg := []int64{0, 0}
	first := mp.Irecv(c, msg, mp.AnySource, small)
	ok := wildcardOK(t, c, first)
	tell(t, c, ok, others(c)...)
	if !ok {
		return
	}
	next := make([]int, c.Size())
	for i := range k * (c.Size() - 1) {
		var st mp.Status
		var err error
		if i == 0 {
			st, err = first.Wait()
		} else {
			st, err = mp.Recv(c, msg, mp.AnySource, small)
		}
		require.NoError(t, err)
		require.True(t, st.Source > 0 && st.Source < c.Size(), "Status.Source = %d", st.Source)
		require.Equal(t, int64(st.Source), msg[0], "Status.Source does not name the sender")
		require.Equal(t, small, st.Tag)
		require.Equal(t, int64(next[st.Source]), msg[1], "from rank %d: overtaken", st.Source)
		next[st.Source]++
	}
	for r := 1; r < c.Size(); r++ {
		assert.Equal(t, k, next[r], "small messages from rank %d", r)
	}
	seen := make([]int, c.Size())
	buf := make([]uint64, big)
	for range c.Size() - 1 {
		st, err := mp.Recv(c, buf, mp.AnySource, large)
		require.NoError(t, err)
		require.True(t, st.Source > 0 && st.Source < c.Size(), "Status.Source = %d", st.Source)
		assert.Equal(t, mp.Status{Source: st.Source, Tag: large, Count: big}, st)
		checkWords(t, fmt.Sprintf("large message said to be from rank %d", st.Source), buf, uint64(st.Source))
		seen[st.Source]++
	}
	for r := 1; r < c.Size(); r++ {
		assert.Equal(t, 1, seen[r], "large messages from rank %d", r)
	}
}

// wildcardAnyTag: rank 0 receives rank 1's messages with AnyTag, in the
// order sent, with Status.Tag right, MaxTag and a large message included.
func wildcardAnyTag(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	tags := []int{7, 2, 9, 0, mp.MaxTag, 5, 2}
	size := func(i int) int {
		if i == 5 {
			return 1 << 17 // 1 MiB
		}
		return 1 + i
	}
	if c.Rank() == 1 {
		if !heard(t, c, peer) {
			return
		}
		for i, tag := range tags {
			require.NoError(t, mp.Send(c, words(size(i), uint64(i)), peer, tag), "tag %d", tag)
		}
		return
	}
	bufs := make([][]uint64, len(tags))
	for i := range tags {
		bufs[i] = make([]uint64, size(i))
	}
	first := mp.Irecv(c, bufs[0], peer, mp.AnyTag)
	ok = wildcardOK(t, c, first)
	tell(t, c, ok, peer)
	if !ok {
		return
	}
	for i, tag := range tags {
		var st mp.Status
		var err error
		if i == 0 {
			st, err = first.Wait()
		} else {
			st, err = mp.Recv(c, bufs[i], peer, mp.AnyTag)
		}
		require.NoError(t, err, "message %d", i)
		require.Equal(t, mp.Status{Source: peer, Tag: tag, Count: int64(size(i))}, st, "message %d", i)
		checkWords(t, fmt.Sprintf("message %d (tag %d)", i, tag), bufs[i], uint64(i))
	}
}

// wildcardBoth: rank 0 receives with AnySource and AnyTag; each sender
// uses its own tags; Status names the message and each sender's order is
// kept.
func wildcardBoth(t T, c *mp.Comm) {
	const k = 10
	tagOf := func(rank, i int) int { return 100*rank + i%3 }
	if c.Rank() != 0 {
		if !heard(t, c, 0) {
			return
		}
		for i := range k {
			require.NoError(t, mp.Send(c, []int32{int32(c.Rank()), int32(i)}, 0, tagOf(c.Rank(), i)))
		}
		return
	}
	msg := []int32{0, 0}
	first := mp.Irecv(c, msg, mp.AnySource, mp.AnyTag)
	ok := wildcardOK(t, c, first)
	tell(t, c, ok, others(c)...)
	if !ok {
		return
	}
	next := make([]int, c.Size())
	for i := range k * (c.Size() - 1) {
		var st mp.Status
		var err error
		if i == 0 {
			st, err = first.Wait()
		} else {
			st, err = mp.Recv(c, msg, mp.AnySource, mp.AnyTag)
		}
		require.NoError(t, err)
		require.Equal(t, int32(st.Source), msg[0], "Status.Source")
		require.Equal(t, int32(next[st.Source]), msg[1], "from rank %d: overtaken", st.Source)
		require.Equal(t, tagOf(st.Source, int(msg[1])), st.Tag, "Status.Tag")
		require.Equal(t, int64(2), st.Count)
		next[st.Source]++
	}
	for r := 1; r < c.Size(); r++ {
		assert.Equal(t, k, next[r], "messages from rank %d", r)
	}
}

// wildcardPostedOrder: a message goes to the earliest posted receive that
// matches it, whether that receive names its source and tag or not.
func wildcardPostedOrder(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	if c.Rank() == 1 {
		if !heard(t, c, peer) {
			return
		}
		for v := int64(1); v <= 4; v++ {
			require.NoError(t, mp.Send(c, []int64{v}, peer, 5))
		}
		if !heard(t, c, peer) {
			return
		}
		require.NoError(t, mp.Send(c, []int64{10}, peer, 6))
		require.NoError(t, mp.Send(c, []int64{11}, peer, 8))
		require.NoError(t, mp.Send(c, []int64{12}, peer, 6))
		return
	}
	bufs := make([][]int64, 4)
	for i := range bufs {
		bufs[i] = []int64{0}
	}
	reqs := []*mp.Request{
		mp.Irecv(c, bufs[0], mp.AnySource, 5),
		mp.Irecv(c, bufs[1], peer, 5),
		mp.Irecv(c, bufs[2], peer, mp.AnyTag),
		mp.Irecv(c, bufs[3], mp.AnySource, mp.AnyTag),
	}
	ok = wildcardOK(t, c, reqs[0])
	for _, q := range reqs[1:] {
		if !ok {
			break
		}
		ok = wildcardOK(t, c, q)
	}
	if !ok {
		// Nothing will match them: rank 1 is told not to send. Close ends
		// them.
		tell(t, c, false, peer)
		return
	}
	tell(t, c, true, peer)
	require.NoError(t, mp.WaitAll(reqs...))
	for i, q := range reqs {
		st, _ := q.Wait()
		assert.Equal(t, mp.Status{Source: peer, Tag: 5, Count: 1}, st, "receive %d", i)
		assert.Equal(t, []int64{int64(i + 1)}, bufs[i], "receive %d took the wrong message", i)
	}

	any6, only6 := []int64{0}, []int64{0}
	e := mp.Irecv(c, any6, peer, mp.AnyTag)
	f := mp.Irecv(c, only6, peer, 6)
	tell(t, c, true, peer)
	st, err := e.Wait()
	require.NoError(t, err)
	assert.Equal(t, mp.Status{Source: peer, Tag: 6, Count: 1}, st)
	assert.Equal(t, []int64{10}, any6, "AnyTag receive")
	_, err = f.Wait()
	require.NoError(t, err)
	assert.Equal(t, []int64{12}, only6, "tag 6 receive posted second")
	got := []int64{0}
	st, err = mp.Recv(c, got, peer, 8)
	require.NoError(t, err)
	assert.Equal(t, mp.Status{Source: peer, Tag: 8, Count: 1}, st)
	assert.Equal(t, []int64{11}, got)
}
