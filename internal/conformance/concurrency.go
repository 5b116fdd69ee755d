package conformance

import (
	"fmt"
	"sync"

	"github.com/stretchr/testify/assert"

	"github.com/courier-mp/courier/mp"
)

// concurrencyCases: one communicator used by several goroutines at once
// (mp.Comm is documented safe for concurrent use). Goroutines report with
// Errorf (assert), never FailNow.
func concurrencyCases() []Case {
	return []Case{
		{Name: "Concurrent/TagStreams", MinRanks: 2, Run: concurrentTagStreams, Heavy: true},
		{Name: "Concurrent/SameTag", MinRanks: 2, Run: concurrentSameTag},
		{Name: "Concurrent/AllPeers", MinRanks: 2, Run: concurrentAllPeers},
	}
}

// concurrentTagStreams: 8 goroutines on each of two ranks, each with its
// own tag, play 100 rounds of ping-pong; every 20th message is large.
func concurrentTagStreams(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const goroutines, rounds = 8, 100
	size := func(i int) int {
		if i%20 == 19 {
			return 1 << 14 // 128 KiB
		}
		return 4
	}
	seed := func(g, i, hop int) uint64 { return uint64(g<<20 | i<<2 | hop) }
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range rounds {
				n := size(i)
				got := make([]uint64, n)
				if c.Rank() == 0 {
					if !assert.NoError(t, mp.Send(c, words(n, seed(g, i, 0)), peer, g), "goroutine %d, round %d", g, i) {
						return
					}
					st, err := mp.Recv(c, got, peer, g)
					if !assert.NoError(t, err, "goroutine %d, round %d", g, i) {
						return
					}
					assert.Equal(t, mp.Status{Source: peer, Tag: g, Count: int64(n)}, st)
					if !checkWords(t, fmt.Sprintf("goroutine %d, round %d, reply", g, i), got, seed(g, i, 1)) {
						return
					}
					continue
				}
				st, err := mp.Recv(c, got, peer, g)
				if !assert.NoError(t, err, "goroutine %d, round %d", g, i) {
					return
				}
				assert.Equal(t, mp.Status{Source: peer, Tag: g, Count: int64(n)}, st)
				if !checkWords(t, fmt.Sprintf("goroutine %d, round %d", g, i), got, seed(g, i, 0)) {
					return
				}
				if !assert.NoError(t, mp.Send(c, words(n, seed(g, i, 1)), peer, g), "goroutine %d, round %d", g, i) {
					return
				}
			}
		})
	}
	wg.Wait()
}

// concurrentSameTag: on every rank but 0, 4 goroutines send 50 messages
// each to rank 0 with one tag; rank 0 receives from each rank in its own
// goroutine, gets every message once, and each goroutine's messages in the
// order it sent them.
func concurrentSameTag(t T, c *mp.Comm) {
	const goroutines, msgs = 4, 50
	var wg sync.WaitGroup
	if c.Rank() != 0 {
		for g := range goroutines {
			wg.Go(func() {
				for i := range msgs {
					if !assert.NoError(t, mp.Send(c, []int32{int32(c.Rank()), int32(g), int32(i)}, 0, 9)) {
						return
					}
				}
			})
		}
		wg.Wait()
		return
	}
	for _, src := range others(c) {
		wg.Go(func() {
			next := make([]int32, goroutines)
			got := []int32{0, 0, 0}
			for range goroutines * msgs {
				_, err := mp.Recv(c, got, src, 9)
				if !assert.NoError(t, err, "from rank %d", src) {
					return
				}
				g := got[1]
				if got[0] != int32(src) || g < 0 || g >= goroutines {
					t.Errorf("from rank %d: message %v", src, got)
					return
				}
				if got[2] != next[g] {
					t.Errorf("from rank %d, goroutine %d: message %d where %d was due", src, g, got[2], next[g])
					return
				}
				next[g]++
			}
		})
	}
	wg.Wait()
}

// concurrentAllPeers: one goroutine per peer on every rank, each doing 30
// Sendrecv exchanges (small and large) with its peer at the same time.
func concurrentAllPeers(t T, c *mp.Comm) {
	const rounds = 30
	var wg sync.WaitGroup
	for _, p := range others(c) {
		wg.Go(func() {
			for i := range rounds {
				n := 3
				if i%10 == 9 {
					n = 1 << 15 // 256 KiB
				}
				got := make([]uint64, n)
				seed := func(from, to int) uint64 { return uint64(from<<16 | to<<8 | i) }
				st, err := mp.Sendrecv(c, words(n, seed(c.Rank(), p)), p, 5, got, p, 5)
				if !assert.NoError(t, err, "with rank %d, round %d", p, i) {
					return
				}
				assert.Equal(t, mp.Status{Source: p, Tag: 5, Count: int64(n)}, st)
				if !checkWords(t, fmt.Sprintf("from rank %d, round %d", p, i), got, seed(p, c.Rank())) {
					return
				}
			}
		})
	}
	wg.Wait()
}
