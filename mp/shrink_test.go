package mp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
	"github.com/courier-mp/courier/mp/mptest"
)

// Five ranks compute sums; rank 4 fails. The survivors' Allreduce fails
// (ErrPeerLost, or ErrRevoked where another survivor began Shrink
// first), they Shrink, and go on with a communicator of four.
func ExampleComm_Shrink() {
	var mu sync.Mutex
	sums := map[int]int{}
	err := mptest.Go(5, func(comm *mp.Comm) error {
		if comm.Rank() == 4 {
			comm.Abort(errors.New("rank 4 fails"))
			return nil
		}
		for {
			one := []int{1}
			if err := mp.Allreduce(comm, one, one, mp.Sum); err != nil {
				if !errors.Is(err, mp.ErrPeerLost) {
					return err
				}
				break // rank 4 is gone: go on without it
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := comm.Shrink(ctx)
		if err != nil {
			return err
		}
		defer s.Close()
		sum := []int{comm.Rank() + 1}
		if err := mp.Allreduce(s, sum, sum, mp.Sum); err != nil {
			return err
		}
		mu.Lock()
		sums[s.Rank()] = sum[0]
		mu.Unlock()
		return nil
	})
	fmt.Println("error:", err)
	fmt.Println("sums on the survivors' ranks 0 to 3:", sums[0], sums[1], sums[2], sums[3])
	// Output:
	// error: <nil>
	// sums on the survivors' ranks 0 to 3: 10 10 10 10
}

// shrink is c.Shrink bounded by 10 s.
func shrink(c *mp.Comm) (*mp.Comm, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Shrink(ctx)
}

// sumOver runs an Allreduce of each rank's old rank + 1 on s and checks
// it against want.
func sumOver(t *ranktest.T, s *mp.Comm, old int, want int64) {
	v := []int64{int64(old + 1)}
	require.NoError(t, mp.Allreduce(s, v, v, mp.Sum))
	assert.Equal(t, want, v[0])
	require.NoError(t, mp.Barrier(s))
}

// TestShrinkNobodyLost: with no rank lost, Shrink returns a communicator
// of every rank in the same order; the parent is revoked (ErrRevoked),
// and a second Shrink of it is ErrInvalid; with checks on, Close reports
// no message left behind.
func TestShrinkNobodyLost(t *testing.T) {
	for _, be := range []string{"tcp", "host", "checked"} {
		t.Run(be, func(t *testing.T) {
			cfg := ranktest.Config{Backend: be}
			if be == "checked" {
				// Close's check finds nothing left: the agreement's own
				// messages are not the program's.
				cfg = ranktest.Config{Backend: "tcp", Options: []mp.Option{mp.WithCheck(true)}}
			}
			ranktest.RunConfig(t, 3, cfg, func(t *ranktest.T, c *mp.Comm) {
				s, err := shrink(c)
				require.NoError(t, err)
				defer s.Close()
				assert.Equal(t, 3, s.Size())
				assert.Equal(t, c.Rank(), s.Rank())
				assert.Equal(t, "shrink 1 of world", s.Name())
				sumOver(t, s, c.Rank(), 6)
				err = mp.Send(c, []int{1}, (c.Rank()+1)%3, 0)
				assert.ErrorIs(t, err, mp.ErrRevoked)
				assert.ErrorIs(t, err, mp.ErrPeerLost)
				assert.ErrorIs(t, mp.Allreduce(c, []int{1}, make([]int, 1), mp.Sum), mp.ErrRevoked)
				_, err = c.Shrink(context.Background())
				assert.ErrorIs(t, err, mp.ErrInvalid)
			})
		})
	}
}

// TestShrinkAfterLostRank: rank 3 of 4 fails while the others run
// Allreduces; each survivor's Allreduce ends with ErrPeerLost (the one
// that waits for another survivor, with ErrRevoked, once that one begins
// Shrink), and Shrink gives the three a communicator on which sums are
// theirs.
func TestShrinkAfterLostRank(t *testing.T) {
	for _, be := range []string{"tcp", "host"} {
		t.Run(be, func(t *testing.T) {
			ranktest.RunConfig(t, 4, ranktest.Config{Backend: be}, func(t *ranktest.T, c *mp.Comm) {
				if c.Rank() == 3 {
					time.Sleep(20 * time.Millisecond) // the others are in their Allreduces
					c.Abort(errors.New("rank 3 fails"))
					return
				}
				var err error
				for err == nil {
					v := []float64{1}
					err = mp.Allreduce(c, v, v, mp.Sum)
				}
				require.ErrorIs(t, err, mp.ErrPeerLost)
				oe, ok := errors.AsType[*mp.OpError](err)
				require.True(t, ok, "%v", err)
				lost, ok := oe.LostRank()
				require.True(t, ok, "%v", err)
				assert.Equal(t, 3, lost, "%v", err)
				s, err := shrink(c)
				require.NoError(t, err)
				defer s.Close()
				require.Equal(t, 3, s.Size())
				assert.Equal(t, c.Rank(), s.Rank())
				sumOver(t, s, c.Rank(), 6)
			})
		})
	}
}

// TestShrinkGathererLost: more ranks fail during Shrink itself. Rank 4
// of 5 fails first; then the rank that gathers the views (rank 0) fails:
// before it decides (it never calls Shrink and dies once the others have
// begun), or after it has sent its decision to rank 1 only. The others
// agree without it in the first case; in the second every survivor takes
// rank 0's decision (rank 1 passes it on), whose communicator still holds
// rank 0, and a second Shrink, on it, leaves rank 0 out.
func TestShrinkGathererLost(t *testing.T) {
	for _, when := range []string{"before-deciding", "while-sending"} {
		t.Run(when, func(t *testing.T) {
			var once sync.Once
			if when == "while-sending" {
				mp.SetShrinkSent(func(c *mp.Comm, to int) {
					if c.Rank() == 0 && c.Name() == "world" && to == 1 {
						once.Do(func() {
							// Rank 1 has the decision (a closed socket with
							// unread bytes resets, which can lose it).
							time.Sleep(200 * time.Millisecond)
							c.Abort(errors.New("rank 0 fails mid-agreement"))
						})
					}
				})
				defer mp.SetShrinkSent(nil)
			}
			var mu sync.Mutex
			sizes := map[int][]int{}
			ranktest.RunConfig(t, 5, ranktest.Config{}, func(t *ranktest.T, c *mp.Comm) {
				if c.Rank() == 4 {
					c.Abort(errors.New("rank 4 fails"))
					return
				}
				if c.Rank() == 0 && when == "before-deciding" {
					time.Sleep(300 * time.Millisecond) // the others wait for it in Shrink
					c.Abort(errors.New("rank 0 fails"))
					return
				}
				s, err := shrink(c)
				if c.Rank() == 0 {
					require.Error(t, err) // it died while it sent
					return
				}
				require.NoError(t, err)
				defer s.Close()
				got := []int{s.Size()}
				if s.Size() == 4 { // rank 0's decision: it is still a member
					require.Equal(t, "while-sending", when)
					err := mp.Allreduce(s, []int{1}, make([]int, 1), mp.Sum)
					require.ErrorIs(t, err, mp.ErrPeerLost)
					s2, err := shrink(s)
					require.NoError(t, err)
					defer s2.Close()
					assert.Equal(t, "shrink 1 of shrink 1 of world", s2.Name())
					s = s2
					got = append(got, s.Size())
				}
				require.Equal(t, 3, s.Size())
				assert.Equal(t, c.Rank()-1, s.Rank())
				sumOver(t, s, c.Rank(), 2+3+4)
				mu.Lock()
				sizes[c.Rank()] = got
				mu.Unlock()
			})
			want := []int{3}
			if when == "while-sending" {
				want = []int{4, 3}
			}
			for r := 1; r <= 3; r++ {
				assert.Equal(t, want, sizes[r], "rank %d's communicators' sizes", r)
			}
		})
	}
}

// TestShrinkMemberLost: a rank that the gatherer waits for dies during
// Shrink (rank 2 of 4, after rank 3): the gatherer stops waiting for it,
// and the two left agree on each other.
func TestShrinkMemberLost(t *testing.T) {
	ranktest.RunConfig(t, 4, ranktest.Config{}, func(t *ranktest.T, c *mp.Comm) {
		switch c.Rank() {
		case 3:
			c.Abort(errors.New("rank 3 fails"))
			return
		case 2:
			time.Sleep(300 * time.Millisecond) // ranks 0 and 1 are in Shrink
			c.Abort(errors.New("rank 2 fails"))
			return
		}
		s, err := shrink(c)
		require.NoError(t, err)
		defer s.Close()
		require.Equal(t, 2, s.Size())
		assert.Equal(t, c.Rank(), s.Rank())
		sumOver(t, s, c.Rank(), 1+2)
	})
}

// TestShrinkContext: a rank that does not call Shrink holds the others
// until their context ends, and Shrink fails with the context's error;
// called again once every rank calls it, it succeeds.
func TestShrinkContext(t *testing.T) {
	var failed sync.WaitGroup // ranks 0 and 1's first Shrink
	failed.Add(2)
	ranktest.RunConfig(t, 3, ranktest.Config{}, func(t *ranktest.T, c *mp.Comm) {
		if c.Rank() != 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			_, err := c.Shrink(ctx)
			cancel()
			failed.Done()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NotErrorIs(t, err, mp.ErrPeerLost)
		} else {
			failed.Wait()
		}
		s, err := shrink(c)
		require.NoError(t, err)
		defer s.Close()
		assert.Equal(t, 3, s.Size())
		sumOver(t, s, c.Rank(), 6)
	})
}

// TestShrinkSplit: Shrink of a communicator made by Split, one of whose
// members closed it (and lives on in the world) and another of which
// fails: the two left are ranked in the split's order, and the rank
// outside the split takes no part.
func TestShrinkSplit(t *testing.T) {
	ranktest.RunConfig(t, 5, ranktest.Config{}, func(t *ranktest.T, c *mp.Comm) {
		color := 0
		if c.Rank() == 0 {
			color = mp.Undefined
		}
		sub, err := c.Split(color, -c.Rank()) // ranks 4, 3, 2, 1 of the world
		require.NoError(t, err)
		if sub == nil {
			return
		}
		defer sub.Close()
		switch c.Rank() {
		case 3: // leaves the split, lives on in the world a while
			require.NoError(t, sub.Close())
			time.Sleep(500 * time.Millisecond)
			return
		case 4:
			c.Abort(errors.New("rank 4 fails"))
			return
		}
		s, err := shrink(sub)
		require.NoError(t, err)
		defer s.Close()
		require.Equal(t, 2, s.Size())
		assert.Equal(t, map[int]int{2: 0, 1: 1}[c.Rank()], s.Rank())
		assert.Equal(t, "shrink 1 of split 1 of world", s.Name())
		sumOver(t, s, c.Rank(), 2+3)
	})
}

// TestShrinkNotSupported: a transport without backend.Shrinker (here tcp
// behind a wrapper that offers only backend.Conn; nccl is another) makes
// Shrink fail with ErrNotSupported, saying why, and leaves the
// communicator working.
func TestShrinkNotSupported(t *testing.T) {
	c, err := mp.Init(context.Background(), single(), mp.WithEnv(noEnv), mp.WithBackend("test-device-bound"))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Shrink(context.Background())
	require.ErrorIs(t, err, mp.ErrNotSupported)
	assert.ErrorContains(t, err, "cannot shrink")
	require.NoError(t, mp.Barrier(c))
	var nilComm *mp.Comm
	_, err = nilComm.Shrink(context.Background())
	require.ErrorIs(t, err, mp.ErrInvalid)
}
