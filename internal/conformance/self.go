package conformance

import (
	"fmt"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// selfCases: every rank sends to itself. A blocking Send to one's own rank
// returns before the receive is posted, whatever the size (mp.Send:
// "Sending to one's own rank works; the matching Recv may be posted before
// or after").
func selfCases() []Case {
	return []Case{
		{Name: "Self/Small", MinRanks: 1, Run: func(t T, c *mp.Comm) { selfSend(t, c, 100) }},
		{Name: "Self/Large", MinRanks: 1, Run: func(t T, c *mp.Comm) { selfSend(t, c, 1<<20) }},
		{Name: "Self/Empty", MinRanks: 1, Run: func(t T, c *mp.Comm) { selfSend(t, c, 0) }},
		{Name: "Self/Sendrecv", MinRanks: 1, Run: selfSendrecv},
		{Name: "Self/Order", MinRanks: 1, Run: selfOrder},
	}
}

// selfSend: n words (8n bytes) to oneself, send first and receive first,
// blocking and not.
func selfSend(t T, c *mp.Comm, n int) {
	me := c.Rank()
	want := words(n, uint64(me))

	require.NoError(t, mp.Send(c, want, me, 1), "Send to self before the receive")
	got := make([]uint64, n)
	st, err := mp.Recv(c, got, me, 1)
	require.NoError(t, err)
	assert.Equal(t, mp.Status{Source: me, Tag: 1, Count: int64(n)}, st)
	checkWords(t, "Send, then Recv", got, uint64(me))

	clear(got)
	q := mp.Irecv(c, got, me, 2)
	require.NoError(t, mp.Send(c, want, me, 2), "Send to self after Irecv")
	st, err = q.Wait()
	require.NoError(t, err)
	assert.Equal(t, mp.Status{Source: me, Tag: 2, Count: int64(n)}, st)
	checkWords(t, "Irecv, then Send", got, uint64(me))

	clear(got)
	s := mp.Isend(c, want, me, 3)
	r := mp.Irecv(c, got, me, 3)
	require.NoError(t, mp.WaitAll(r, s), "Isend and Irecv to self")
	checkWords(t, "Isend, Irecv", got, uint64(me))
}

// selfSendrecv: Sendrecv with oneself as both ends, small and large.
func selfSendrecv(t T, c *mp.Comm) {
	me := c.Rank()
	for _, n := range []int{5, 1 << 20} {
		got := make([]uint64, n)
		st, err := mp.Sendrecv(c, words(n, 9), me, 4, got, me, 4)
		require.NoError(t, err, "%d words", n)
		assert.Equal(t, mp.Status{Source: me, Tag: 4, Count: int64(n)}, st)
		checkWords(t, fmt.Sprintf("%d words", n), got, 9)
	}
}

// selfOrder: several messages to oneself with one tag keep their order;
// another tag can be taken first.
func selfOrder(t T, c *mp.Comm) {
	me := c.Rank()
	for i := range 10 {
		require.NoError(t, mp.Send(c, []int16{int16(i)}, me, 1+i%2))
	}
	got := []int16{0}
	for _, tag := range []int{2, 1} {
		for i := tag - 1; i < 10; i += 2 {
			_, err := mp.Recv(c, got, me, tag)
			require.NoError(t, err)
			require.Equal(t, int16(i), got[0], "tag %d", tag)
		}
	}
}
