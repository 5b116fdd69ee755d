package mp_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// Four ranks as a 2 × 2 grid: Split makes one communicator per row (the
// ranks of one color), ranked by key; an Allreduce over a row sums only
// its ranks.
func ExampleComm_Split() {
	sums := make([]int, 4)
	err := ranktest.Go(4, func(comm *mp.Comm) error {
		row, col := comm.Rank()/2, comm.Rank()%2
		rows, err := comm.Split(row, col) // color: the row; key: the column
		if err != nil {
			return err
		}
		defer rows.Close()
		sum := []int{0}
		if err := mp.Allreduce(rows, []int{comm.Rank()}, sum, mp.Sum); err != nil {
			return err
		}
		if rows.Rank() == 0 {
			sums[row] = sum[0]
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	fmt.Println("row 0:", sums[0], "row 1:", sums[1])
	// Output: row 0: 1 row 1: 5
}

// On the host backend, with every rank on this host, the world's small
// collectives run through shared memory; a derived communicator's run
// over point-to-point messages on its own links (the shared-memory areas
// belong to the world), and give the same results.
func TestSplitCollectivePaths(t *testing.T) {
	const np = 4
	comms := openRanks(t, np, "host")
	errs := onAll(comms, func(c *mp.Comm) error {
		half, err := c.Split(c.Rank()%2, 0)
		if err != nil {
			return err
		}
		defer half.Close()
		before := mp.SharedCollectives(c)
		got := []float64{0}
		if err := mp.Allreduce(c, []float64{float64(c.Rank())}, got, mp.Sum); err != nil {
			return err
		}
		if got[0] != 6 || mp.SharedCollectives(c) != before+1 {
			return fmt.Errorf("world: sum %v, %d collectives through shared memory, want 6 and 1", got[0], mp.SharedCollectives(c)-before)
		}
		if err := mp.Allreduce(half, []float64{float64(c.Rank())}, got, mp.Sum); err != nil {
			return err
		}
		want := float64(c.Rank()%2) + float64(c.Rank()%2+2)
		if got[0] != want || mp.SharedCollectives(c) != before+1 || mp.SharedCollectives(half) != 0 {
			return fmt.Errorf("half: sum %v, want %v; through shared memory: world %d more, half %d",
				got[0], want, mp.SharedCollectives(c)-before-1, mp.SharedCollectives(half))
		}
		if err := mp.Barrier(half); err != nil {
			return err
		}
		return mp.Barrier(c)
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

// A wait on a derived communicator that passes the timeout aborts that
// communicator only: the error names it and lists its pending operation
// by its ranks, and the world goes on.
func TestSplitTimeoutAbortsOnlyIt(t *testing.T) {
	t.Parallel() // waits more than it computes
	cfg := ranktest.Config{Backend: "tcp", Options: []mp.Option{mp.WithTimeout(300 * time.Millisecond)}}
	ranktest.RunConfig(t, 2, cfg, func(t *ranktest.T, c *mp.Comm) {
		d, err := c.Split(0, -c.Rank()) // ranks reversed
		require.NoError(t, err)
		defer d.Close()
		if c.Rank() == 0 {
			_, err := mp.Recv(d, []int32{0}, 0, 3) // from world rank 1, never sent
			require.ErrorIs(t, err, mp.ErrTimeout)
			var oe *mp.OpError
			require.True(t, errors.As(err, &oe))
			assert.Equal(t, "split 1 of world", oe.Comm)
			assert.Equal(t, 1, oe.Rank)
			assert.Contains(t, err.Error(), "on rank 1 of split 1 of world")
			assert.Contains(t, err.Error(), "recv from rank 0, tag 3")
			// Later operations on it fail with that error; the world works.
			isTimeout := func(err error) bool { return errors.Is(err, mp.ErrTimeout) }
			assert.True(t, isTimeout(mp.Send(d, []int32{1}, 1, 4)))
		} else {
			time.Sleep(500 * time.Millisecond) // past rank 0's timeout
		}
		sum := []int32{0}
		require.NoError(t, mp.Allreduce(c, []int32{1}, sum, mp.Sum))
		assert.Equal(t, int32(2), sum[0])
	})
}

// Split and Dup of a nil communicator are ErrInvalid; a Name says where a
// communicator came from.
func TestSplitNames(t *testing.T) {
	var none *mp.Comm
	_, err := none.Split(0, 0)
	assert.ErrorIs(t, err, mp.ErrInvalid)
	_, err = none.Dup()
	assert.ErrorIs(t, err, mp.ErrInvalid)
	ranktest.Run(t, 2, func(t *ranktest.T, c *mp.Comm) {
		assert.Equal(t, "world", c.Name())
		a, err := c.Dup()
		require.NoError(t, err)
		defer a.Close()
		b, err := a.Split(0, 0)
		require.NoError(t, err)
		defer b.Close()
		assert.Equal(t, "dup 1 of world", a.Name())
		assert.Equal(t, "split 1 of dup 1 of world", b.Name())
		assert.True(t, strings.HasPrefix(b.Transport(b.Rank()), "self"))
		assert.Equal(t, "tcp", b.Transport(1-b.Rank()))
	})
}
