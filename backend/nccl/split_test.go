package nccl

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/backend"
)

// splitAll calls Split on the ranks of members at once (it waits for every
// member) and returns the derived communicators, by rank of cs.
func splitAll(t *testing.T, cs []*conn, id uint32, members []int) map[int]*conn {
	t.Helper()
	out := make(map[int]*conn)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() {
			d, err := cs[m].Split(id, members)
			if !assert.NoError(t, err, "rank %d: Split", m) {
				return
			}
			mu.Lock()
			out[m] = d.(*conn)
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Len(t, out, len(members))
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, d := range out {
			wg.Go(func() { d.Close() })
		}
		wg.Wait()
	})
	return out
}

// TestFakeSplitMembers: bad memberships are ErrInvalid at once, without
// a word to the other ranks, and the communicator goes on.
func TestFakeSplitMembers(t *testing.T) {
	cs, _ := fakeJob(t, 2, false)
	for _, members := range [][]int{{}, {0, 2}, {-1, 0}, {0, 0}, {1}} {
		_, err := cs[0].Split(5, members)
		assert.ErrorIs(t, err, backend.ErrInvalid, "members %v", members)
	}
	ranks(cs, func(r int, c *conn) {
		buf := []int32{int32(r)}
		waitAll(t, isend(t, c, i32s(buf[:]), 1-r, 3), irecv(t, c, i32s(make([]int32, 1)), 1-r, 3))
	})
	lone := newConn(connOptions{rank: 0, size: 1, eng: fabricFor(t.Name() + "/lone").engine(0)})
	defer lone.Close()
	_, err := lone.Split(1, []int{0})
	assert.ErrorIs(t, err, backend.ErrNotSupported, "a communicator without derive")
}

// TestFakeSplitApart: ranks 2 and 0 of three derive a communicator (rank
// 2 is its rank 0); rank 2 sends on the world and then on it, and waits
// for the derived send first, while rank 0 receives the world's message
// before it posts the derived receive: the world's send, only queued, must
// go out on the derived communicator's wait (the family's flush), and each
// message arrives on its own communicator. Then the world's
// Close on rank 0 ends its derived communicator's pending receive with
// ErrClosed.
func TestFakeSplitApart(t *testing.T) {
	cs, _ := fakeJob(t, 3, false)
	ds := splitAll(t, cs, 9, []int{2, 0})
	require.Equal(t, 0, ds[2].rank)
	require.Equal(t, 1, ds[0].rank)
	require.Equal(t, 2, ds[0].size)
	const n = 1 << 12
	fill := func(v int32) []int32 {
		b := make([]int32, n)
		for i := range b {
			b[i] = v + int32(i)
		}
		return b
	}
	var wg sync.WaitGroup
	wg.Go(func() { // world rank 2, derived rank 0
		qw := isend(t, cs[2], i32s(fill(100)), 0, 4)
		qd := isend(t, ds[2], i32s(fill(200)), 1, 4)
		waitAll(t, qd, qw)
	})
	wg.Go(func() { // world rank 0, derived rank 1: the world's first
		gd, gw := make([]int32, n), make([]int32, n)
		waitAll(t, irecv(t, cs[0], i32s(gw), 2, 4))
		waitAll(t, irecv(t, ds[0], i32s(gd), 0, 4))
		assert.Equal(t, fill(200), gd, "the derived communicator's message")
		assert.Equal(t, fill(100), gw, "the world's message")
	})
	wg.Wait()

	q := irecv(t, ds[0], i32s(make([]int32, 1)), 0, 6) // never sent
	q.Test()
	require.NoError(t, cs[0].Close())
	_, err := q.Wait(testWait)
	assert.ErrorIs(t, err, backend.ErrClosed, "a derived receive when the world closed")
	_, err = ds[0].Isend(i32s([]int32{1}), 0, 1, 0)
	assert.ErrorIs(t, err, backend.ErrClosed, "a send on a derived communicator of a closed world")
	assert.NoError(t, ds[0].Close(), "Close of a derived communicator after its world's")
}

// TestFakeSplitOfOne: a communicator of this rank alone, and a split of
// it: messages to oneself move on each.
func TestFakeSplitOfOne(t *testing.T) {
	cs, _ := fakeJob(t, 2, true)
	d, err := cs[1].Split(3, []int{1})
	require.NoError(t, err)
	defer d.Close()
	dd, err := d.(*conn).Split(4, []int{0})
	require.NoError(t, err)
	defer dd.Close()
	for _, c := range []backend.Conn{d, dd} {
		got := []int32{0}
		r, err := c.Irecv(i32s(got), 0, 8, 0)
		require.NoError(t, err)
		s, err := c.Isend(i32s([]int32{42}), 0, 8, 0)
		require.NoError(t, err)
		waitAll(t, s, r)
		assert.Equal(t, int32(42), got[0])
	}
	if _, err := cs[1].Split(3, []int{1, 1}); !errors.Is(err, backend.ErrInvalid) {
		t.Errorf("a member twice: %v", err)
	}
}
