package conformance

import (
	"fmt"

	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// groupingCases pair operations that one rank issues together (non-blocking
// calls completed by one wait: one NCCL group) with the same operations
// issued one at a time on the other rank. These pairings are valid MPI;
// NCCL has hung or failed on some of them when they were the pair's first
// traffic (NCCL 2.28.3 sets up each direction's connection inside the first
// call that needs it, and that setup needs the peer: rank 0 grouping a send
// and a receive while rank 1 receives, then sends, hangs), so they come
// first in Cases, for runners that share one communicator between cases.
func groupingCases() []Case {
	return []Case{
		{Name: "Grouping/ExchangeVsSerial", MinRanks: 2, Run: groupingExchangeVsSerial},
		{Name: "Grouping/SerialVsExchange", MinRanks: 2, Run: groupingSerialVsExchange},
		{Name: "Grouping/SendPairRecvSingly", MinRanks: 2, Run: groupingSendPair},
		{Name: "Grouping/SendSinglyRecvPair", MinRanks: 2, Run: groupingRecvPair},
	}
}

// groupingSizes are the sizes, in words, each grouping case tries: small
// and large.
var groupingSizes = []int{4, 1 << 17}

// groupingExchangeVsSerial: rank 0 posts a send and a receive and waits for
// both; rank 1 receives, then sends.
func groupingExchangeVsSerial(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for i, n := range groupingSizes {
		got := make([]uint64, n)
		if c.Rank() == 0 {
			s := mp.Isend(c, words(n, 10), peer, i)
			r := mp.Irecv(c, got, peer, i)
			require.NoError(t, mp.WaitAll(s, r), "%d words", n)
			checkWords(t, fmt.Sprintf("%d words from rank 1", n), got, 11)
			continue
		}
		_, err := mp.Recv(c, got, peer, i)
		require.NoError(t, err, "%d words", n)
		checkWords(t, fmt.Sprintf("%d words from rank 0", n), got, 10)
		require.NoError(t, mp.Send(c, words(n, 11), peer, i), "%d words", n)
	}
}

// groupingSerialVsExchange: the roles swapped, and the serial rank sends
// first: rank 0 sends, then receives; rank 1 posts both and waits.
func groupingSerialVsExchange(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for i, n := range groupingSizes {
		got := make([]uint64, n)
		if c.Rank() == 0 {
			require.NoError(t, mp.Send(c, words(n, 20), peer, i), "%d words", n)
			_, err := mp.Recv(c, got, peer, i)
			require.NoError(t, err, "%d words", n)
			checkWords(t, fmt.Sprintf("%d words from rank 1", n), got, 21)
			continue
		}
		r := mp.Irecv(c, got, peer, i)
		s := mp.Isend(c, words(n, 21), peer, i)
		require.NoError(t, mp.WaitAll(r, s), "%d words", n)
		checkWords(t, fmt.Sprintf("%d words from rank 0", n), got, 20)
	}
}

// groupingSendPair: rank 0 starts two sends and waits for both; rank 1
// receives them with two blocking calls.
func groupingSendPair(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for i, n := range groupingSizes {
		if c.Rank() == 0 {
			a := mp.Isend(c, words(n, 30), peer, 2*i)
			b := mp.Isend(c, words(n, 31), peer, 2*i+1)
			require.NoError(t, mp.WaitAll(a, b), "%d words", n)
			continue
		}
		got := make([]uint64, n)
		_, err := mp.Recv(c, got, peer, 2*i)
		require.NoError(t, err, "%d words, first", n)
		checkWords(t, "first", got, 30)
		_, err = mp.Recv(c, got, peer, 2*i+1)
		require.NoError(t, err, "%d words, second", n)
		checkWords(t, "second", got, 31)
	}
}

// groupingRecvPair: rank 0 sends twice with blocking calls; rank 1 posts
// both receives and waits for both.
func groupingRecvPair(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for i, n := range groupingSizes {
		if c.Rank() == 0 {
			require.NoError(t, mp.Send(c, words(n, 40), peer, 2*i), "%d words, first", n)
			require.NoError(t, mp.Send(c, words(n, 41), peer, 2*i+1), "%d words, second", n)
			continue
		}
		a, b := make([]uint64, n), make([]uint64, n)
		ra := mp.Irecv(c, a, peer, 2*i)
		rb := mp.Irecv(c, b, peer, 2*i+1)
		require.NoError(t, mp.WaitAll(ra, rb), "%d words", n)
		checkWords(t, "first", a, 40)
		checkWords(t, "second", b, 41)
	}
}
