package conformance

import (
	"fmt"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// exchangeCases: patterns where ranks send to each other at the same time
// (which must never deadlock when valid), and large messages.
func exchangeCases() []Case {
	return []Case{
		{Name: "Sendrecv/Ring", MinRanks: 2, Run: sendrecvRing},
		{Name: "Sendrecv/RingSizes", MinRanks: 2, Run: sendrecvRingSizes},
		{Name: "Sendrecv/MixedTypes", MinRanks: 2, Run: sendrecvMixedTypes},
		{Name: "Exchange/Isend", MinRanks: 2, Run: exchangeIsend},
		{Name: "Exchange/Sendrecv", MinRanks: 2, Run: exchangeSendrecv},
		{Name: "Exchange/AllToAll", MinRanks: 2, Run: exchangeAllToAll},
		{Name: "Exchange/SharedSendBuffer", MinRanks: 1, Run: exchangeSharedSendBuffer},
		{Name: "Large/64MiB", MinRanks: 2, Run: large64MiB, Heavy: true},
		{Name: "Unexpected/Large", MinRanks: 2, Run: largeUnexpected},
		{Name: "Unexpected/ManySmall", MinRanks: 2, Run: unexpectedManySmall, Heavy: true},
	}
}

func ring(c *mp.Comm) (next, prev int) {
	return (c.Rank() + 1) % c.Size(), (c.Rank() - 1 + c.Size()) % c.Size()
}

// partner pairs rank 2k with 2k+1; a last odd rank has no partner.
func partner(c *mp.Comm) (int, bool) {
	p := c.Rank() ^ 1
	return p, p < c.Size()
}

// sendrecvRing: each rank sends to rank+1 and receives from rank-1, with
// small, medium and large messages.
func sendrecvRing(t T, c *mp.Comm) {
	next, prev := ring(c)
	for i, n := range []int{10, 100 << 10 / 8, 2 << 20 / 8} {
		got := make([]uint64, n)
		st, err := mp.Sendrecv(c, words(n, uint64(c.Rank())), next, 40+i, got, prev, 40+i)
		require.NoError(t, err, "%d words", n)
		assert.Equal(t, mp.Status{Source: prev, Tag: 40 + i, Count: int64(n)}, st)
		checkWords(t, fmt.Sprintf("%d words from rank %d", n, prev), got, uint64(prev))
	}
}

// sendrecvRingSizes: the ring shift with a different message size on each
// rank (rank r sends (r+1)·40000 float64s: 312 KiB to 1.2 MiB), and
// different send and receive tags.
func sendrecvRingSizes(t T, c *mp.Comm) {
	next, prev := ring(c)
	count := func(r int) int { return (r + 1) * 40000 }
	send := pattern[[]float64](count(c.Rank()), uint64(c.Rank()))
	got := make([]float64, count(prev))
	st, err := mp.Sendrecv(c, send, next, 100+c.Rank(), got, prev, 100+prev)
	require.NoError(t, err)
	assert.Equal(t, mp.Status{Source: prev, Tag: 100 + prev, Count: int64(count(prev))}, st)
	sameBits(t, fmt.Sprintf("from rank %d", prev), got, pattern[[]float64](count(prev), uint64(prev)))
}

// sendrecvMixedTypes: Sendrecv's send and receive buffers may have
// different element types (its two type parameters).
func sendrecvMixedTypes(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	ints, floats := pattern[[]int32](1000, 1), pattern[[]float64](700, 2)
	if c.Rank() == 0 {
		got := make([]float64, len(floats))
		st, err := mp.Sendrecv(c, ints, peer, 1, got, peer, 2)
		require.NoError(t, err)
		assert.Equal(t, mp.Status{Source: peer, Tag: 2, Count: int64(len(floats))}, st)
		sameBits(t, "float64s", got, floats)
		return
	}
	got := make([]int32, len(ints))
	st, err := mp.Sendrecv(c, floats, peer, 2, got, peer, 1)
	require.NoError(t, err)
	assert.Equal(t, mp.Status{Source: peer, Tag: 1, Count: int64(len(ints))}, st)
	sameBits(t, "int32s", got, ints)
}

const exchangeWords = 16 << 20 / 8 // 16 MiB

// exchangeIsend: both ranks of a pair start sending 16 MiB to each other
// before either posts its receive, then wait for both.
func exchangeIsend(t T, c *mp.Comm) {
	peer, ok := partner(c)
	if !ok {
		return
	}
	s := mp.Isend(c, words(exchangeWords, uint64(c.Rank())), peer, 1)
	got := make([]uint64, exchangeWords)
	r := mp.Irecv(c, got, peer, 1)
	require.NoError(t, mp.WaitAll(s, r))
	checkWords(t, "16 MiB from "+fmt.Sprint(peer), got, uint64(peer))
}

// exchangeSendrecv: the same exchange with blocking Sendrecv.
func exchangeSendrecv(t T, c *mp.Comm) {
	peer, ok := partner(c)
	if !ok {
		return
	}
	got := make([]uint64, exchangeWords)
	st, err := mp.Sendrecv(c, words(exchangeWords, uint64(c.Rank())), peer, 2, got, peer, 2)
	require.NoError(t, err)
	assert.Equal(t, mp.Status{Source: peer, Tag: 2, Count: exchangeWords}, st)
	checkWords(t, "16 MiB from "+fmt.Sprint(peer), got, uint64(peer))
}

// exchangeAllToAll: every rank sends 1 MiB to every other rank and
// receives from each, all at once; sends are posted before receives.
func exchangeAllToAll(t T, c *mp.Comm) {
	const n = 1 << 17 // 1 MiB
	seed := func(from, to int) uint64 { return uint64(from*100 + to) }
	var reqs []*mp.Request
	for _, r := range others(c) {
		reqs = append(reqs, mp.Isend(c, words(n, seed(c.Rank(), r)), r, 3))
	}
	got := make([][]uint64, c.Size())
	for _, r := range others(c) {
		got[r] = make([]uint64, n)
		reqs = append(reqs, mp.Irecv(c, got[r], r, 3))
	}
	require.NoError(t, mp.WaitAll(reqs...))
	for _, r := range others(c) {
		checkWords(t, fmt.Sprintf("from rank %d", r), got[r], seed(r, c.Rank()))
	}
}

// large64MiB: one 64 MiB message, every word checked.
func large64MiB(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const n = 64 << 20 / 8
	if c.Rank() == 0 {
		require.NoError(t, mp.Send(c, words(n, 64), peer, 1))
		return
	}
	got := make([]uint64, n)
	st, err := mp.Recv(c, got, peer, 1)
	require.NoError(t, err)
	assert.Equal(t, mp.Status{Source: peer, Tag: 1, Count: n}, st)
	checkWords(t, "64 MiB", got, 64)
}

// largeUnexpected: four 8 MiB messages are started before the receiver
// posts anything; it receives them 100 ms later, in the reverse order of
// their tags.
func largeUnexpected(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const n, msgs = 8 << 20 / 8, 4
	if c.Rank() == 0 {
		reqs := make([]*mp.Request, msgs)
		for i := range reqs {
			reqs[i] = mp.Isend(c, words(n, uint64(i)), peer, i)
		}
		require.NoError(t, mp.WaitAll(reqs...))
		return
	}
	time.Sleep(100 * time.Millisecond)
	got := make([]uint64, n)
	for i := msgs - 1; i >= 0; i-- {
		st, err := mp.Recv(c, got, peer, i)
		require.NoError(t, err)
		assert.Equal(t, mp.Status{Source: peer, Tag: i, Count: n}, st)
		checkWords(t, fmt.Sprintf("message %d", i), got, uint64(i))
	}
}

// exchangeSharedSendBuffer: one buffer is the send buffer of several
// pending sends at once (to every rank, oneself included); send buffers
// are only read, so this is valid.
func exchangeSharedSendBuffer(t T, c *mp.Comm) {
	const n = 1 << 17 // 1 MiB
	buf := words(n, uint64(c.Rank()))
	var reqs []*mp.Request
	got := make([][]uint64, c.Size())
	for r := range c.Size() {
		got[r] = make([]uint64, n)
		reqs = append(reqs, mp.Irecv(c, got[r], r, 6))
	}
	for r := range c.Size() {
		reqs = append(reqs, mp.Isend(c, buf, r, 6))
	}
	require.NoError(t, mp.WaitAll(reqs...))
	for r := range c.Size() {
		checkWords(t, fmt.Sprintf("from rank %d", r), got[r], uint64(r))
	}
	checkWords(t, "the shared send buffer", buf, uint64(c.Rank()))
}

// unexpectedManySmall: 3000 small messages over 3 tags reach the receiver
// before it posts anything; it then drains them tag by tag, each tag in
// the order sent.
func unexpectedManySmall(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const n, tags = 3000, 3
	if c.Rank() == 0 {
		reqs := make([]*mp.Request, n)
		for i := range reqs {
			reqs[i] = mp.Isend(c, []int32{int32(i), int32(-i)}, peer, i%tags)
		}
		require.NoError(t, mp.WaitAll(reqs...))
		return
	}
	time.Sleep(50 * time.Millisecond)
	got := []int32{0, 0}
	for tag := range tags {
		for i := tag; i < n; i += tags {
			_, err := mp.Recv(c, got, peer, tag)
			require.NoError(t, err)
			require.Equal(t, []int32{int32(i), int32(-i)}, got, "tag %d", tag)
		}
	}
}
