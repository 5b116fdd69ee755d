package conformance

import (
	"fmt"
	"sync"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// requestCases: non-blocking operations and the ways to complete them.
func requestCases() []Case {
	return []Case{
		{Name: "Requests/Many", MinRanks: 2, Run: requestsMany, Heavy: true},
		{Name: "Requests/WaitAny", MinRanks: 2, Run: requestsWaitAny},
		{Name: "Requests/TestAll", MinRanks: 2, Run: requestsTestAll},
		{Name: "Requests/TestAny", MinRanks: 2, Run: requestsTestAny},
		{Name: "Requests/WaitSome", MinRanks: 2, Run: requestsWaitSome},
		{Name: "Requests/TestPoll", MinRanks: 2, Run: requestsTestPoll},
		{Name: "Requests/Done", MinRanks: 2, Run: requestsDone},
		{Name: "Requests/WaitTwice", MinRanks: 2, Run: requestsWaitTwice},
		{Name: "Requests/WaitAllErrors", MinRanks: 2, Run: requestsWaitAllErrors},
		{Name: "Requests/ConcurrentWait", MinRanks: 2, Run: requestsConcurrentWait},
		{Name: "Requests/NoRequests", MinRanks: 1, Run: requestsNone},
	}
}

// requestsMany: each of two ranks posts 1000 receives and then 1000 sends
// to the other (over 10 tags, a few of them large), and completes all 2000
// with one WaitAll.
func requestsMany(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const n = 1000
	size := func(i int) int {
		if i%250 == 99 {
			return 1 << 14 // 128 KiB
		}
		return 2
	}
	seed := func(from, i int) uint64 { return uint64(from*n + i) }
	reqs := make([]*mp.Request, 0, 2*n)
	got := make([][]uint64, n)
	for i := range n {
		got[i] = make([]uint64, size(i))
		reqs = append(reqs, mp.Irecv(c, got[i], peer, i%10))
	}
	for i := range n {
		reqs = append(reqs, mp.Isend(c, words(size(i), seed(c.Rank(), i)), peer, i%10))
	}
	require.NoError(t, mp.WaitAll(reqs...))
	for i := range n {
		st, err := reqs[i].Wait()
		require.NoError(t, err)
		require.Equal(t, mp.Status{Source: peer, Tag: i % 10, Count: int64(size(i))}, st, "receive %d", i)
		if !checkWords(t, fmt.Sprintf("receive %d", i), got[i], seed(peer, i)) {
			return
		}
	}
}

// requestsWaitAny: WaitAny yields each request exactly once (nil entries
// skipped), with its status, and then -1.
func requestsWaitAny(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const k = 8
	order := []int{5, 2, 7, 0, 3, 6, 1, 4} // the sender's order of tags
	if c.Rank() == 0 {
		if !heard(t, c, peer) {
			return
		}
		reqs := make([]*mp.Request, k+1) // reqs[k] stays nil
		for i, tag := range order {
			reqs[i] = mp.Isend(c, []int32{int32(tag)}, peer, tag)
		}
		waitAnyAll(t, reqs, k, func(i int, st mp.Status) {
			assert.Equal(t, mp.Status{Source: c.Rank(), Tag: order[i], Count: 1}, st, "send %d", i)
		})
		return
	}
	reqs := make([]*mp.Request, k+1)
	bufs := make([][]int32, k)
	for tag := range k {
		bufs[tag] = []int32{-1}
		reqs[tag+1] = mp.Irecv(c, bufs[tag], peer, tag) // reqs[0] stays nil
	}
	tell(t, c, true, peer)
	waitAnyAll(t, reqs, k, func(i int, st mp.Status) {
		tag := i - 1
		assert.Equal(t, mp.Status{Source: peer, Tag: tag, Count: 1}, st, "receive %d", i)
		assert.Equal(t, []int32{int32(tag)}, bufs[tag], "receive %d", i)
	})
}

// waitAnyAll calls WaitAny until it returns -1, expecting k completions,
// each request once.
func waitAnyAll(t T, reqs []*mp.Request, k int, check func(i int, st mp.Status)) {
	t.Helper()
	seen := make([]bool, len(reqs))
	for range k {
		i, st, err := mp.WaitAny(reqs...)
		require.NoError(t, err)
		require.True(t, i >= 0 && i < len(reqs), "WaitAny returned %d with active requests left", i)
		require.NotNil(t, reqs[i], "WaitAny returned the index %d of a nil request", i)
		require.False(t, seen[i], "WaitAny returned request %d twice", i)
		seen[i] = true
		check(i, st)
	}
	i, st, err := mp.WaitAny(reqs...)
	assert.Equal(t, -1, i, "WaitAny after every request was reported")
	assert.NoError(t, err)
	assert.Equal(t, mp.Status{}, st)
}

// requestsTestAll: TestAll is false while a message cannot have been sent
// (the sender waits on a Barrier the receiver has not reached), and true,
// without error, once everything arrived.
func requestsTestAll(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		require.NoError(t, mp.Barrier(c))
		return
	}
	if c.Rank() == 0 {
		require.NoError(t, mp.Barrier(c))
		require.NoError(t, mp.Send(c, []uint8{1, 2, 3}, peer, 1))
		require.NoError(t, mp.Send(c, words(1<<17, 5), peer, 2))
		return
	}
	small, big := make([]uint8, 3), make([]uint64, 1<<17)
	reqs := []*mp.Request{mp.Irecv(c, small, peer, 1), nil, mp.Irecv(c, big, peer, 2)}
	done, err := mp.TestAll(reqs...)
	require.NoError(t, err)
	require.False(t, done, "TestAll before anything was sent")
	require.NoError(t, mp.Barrier(c))
	deadline := time.Now().Add(pollLimit)
	for !done && time.Now().Before(deadline) {
		done, err = mp.TestAll(reqs...)
		time.Sleep(time.Millisecond)
	}
	require.True(t, done, "TestAll still false after %v", pollLimit)
	require.NoError(t, err)
	assert.Equal(t, []uint8{1, 2, 3}, small)
	checkWords(t, "large message", big, 5)
	done, err = mp.TestAll(reqs...)
	assert.True(t, done, "TestAll again")
	assert.NoError(t, err)
}

// requestsTestPoll: a receive polled with Test is pending until the
// message is sent, completes once it comes, and Test keeps reporting the
// same completion.
func requestsTestPoll(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for i, n := range []int{4, 1 << 17} {
		if c.Rank() == 0 {
			if !heard(t, c, peer) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			require.NoError(t, mp.Send(c, words(n, 3), peer, i))
			continue
		}
		got := make([]uint64, n)
		q := mp.Irecv(c, got, peer, i)
		done, _, err := q.Test()
		require.NoError(t, err)
		require.False(t, done, "Test reported a message not sent yet")
		tell(t, c, true, peer)
		var st mp.Status
		for deadline := time.Now().Add(pollLimit); !done && time.Now().Before(deadline); {
			done, st, err = q.Test()
			if !done {
				time.Sleep(100 * time.Microsecond)
			}
		}
		require.True(t, done, "Test still false after %v", pollLimit)
		require.NoError(t, err)
		assert.Equal(t, mp.Status{Source: peer, Tag: i, Count: int64(n)}, st)
		checkWords(t, "polled receive", got, 3)
		done2, st2, err2 := q.Test()
		assert.True(t, done2)
		assert.Equal(t, st, st2)
		assert.NoError(t, err2)
	}
}

// requestsDone: Done's channel closes when the operation completes, and a
// select on it beside a timer works; the request's result is then ready.
func requestsDone(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for i, n := range []int{4, 1 << 17} {
		if c.Rank() == 0 {
			if !heard(t, c, peer) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			q := mp.Isend(c, words(n, 4), peer, i)
			require.True(t, waitDone(q.Done()), "send's Done not closed after %v", pollLimit)
			_, err := q.Wait()
			require.NoError(t, err)
			continue
		}
		got := make([]uint64, n)
		q := mp.Irecv(c, got, peer, i)
		select {
		case <-q.Done():
			t.Errorf("Done closed before the message was sent")
		default:
		}
		tell(t, c, true, peer)
		require.True(t, waitDone(q.Done()), "receive's Done not closed after %v", pollLimit)
		done, st, err := q.Test()
		require.True(t, done, "Test after Done closed")
		require.NoError(t, err)
		assert.Equal(t, mp.Status{Source: peer, Tag: i, Count: int64(n)}, st)
		checkWords(t, "received", got, 4)
		require.True(t, waitDone(q.Done()), "Done after completion was reported")
	}
}

// requestsWaitTwice: after completion, Wait and Test keep returning the
// same status and error, for success and for failure.
func requestsWaitTwice(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	if c.Rank() == 0 {
		require.NoError(t, mp.Send(c, []int64{1, 2}, peer, 1))
		if err := mp.Send(c, []int64{1, 2, 3}, peer, 2); err != nil {
			isErr(t, err, mp.ErrTruncate, "sender of the truncated message")
		}
		return
	}
	good := mp.Irecv(c, make([]int64, 2), peer, 1)
	bad := mp.Irecv(c, make([]int64, 2), peer, 2)
	st1, err1 := good.Wait()
	require.NoError(t, err1)
	st2, err2 := good.Wait()
	assert.NoError(t, err2, "second Wait")
	assert.Equal(t, st1, st2, "second Wait")
	done, st3, err3 := good.Test()
	assert.True(t, done, "Test after Wait")
	assert.Equal(t, st1, st3, "Test after Wait")
	assert.NoError(t, err3, "Test after Wait")

	_, err1 = bad.Wait()
	isErr(t, err1, mp.ErrTruncate, "truncated receive")
	_, err2 = bad.Wait()
	isErr(t, err2, mp.ErrTruncate, "second Wait of the truncated receive")
	done, _, err3 = bad.Test()
	assert.True(t, done)
	isErr(t, err3, mp.ErrTruncate, "Test after Wait of the truncated receive")
}

// requestsWaitAllErrors: WaitAll completes every request even when some
// fail, and its error matches each failure's sentinel.
func requestsWaitAllErrors(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	if c.Rank() == 0 {
		require.NoError(t, mp.Send(c, []int32{1}, peer, 1))
		if err := mp.Send(c, []int32{1, 2, 3}, peer, 2); err != nil {
			isErr(t, err, mp.ErrTruncate, "sender of the truncated message")
		}
		require.NoError(t, mp.Send(c, []int32{3}, peer, 3))
		return
	}
	a, b, d := []int32{0}, []int32{0}, []int32{0}
	reqs := []*mp.Request{
		mp.Irecv(c, a, peer, 1),
		mp.Irecv(c, b, peer, 2),
		mp.Isend(c, []int32{0}, c.Size(), 1), // invalid rank
		mp.Irecv(c, d, peer, 3),
	}
	err := mp.WaitAll(reqs...)
	isErr(t, err, mp.ErrTruncate, "WaitAll with a truncated receive")
	isErr(t, err, mp.ErrInvalid, "WaitAll with an invalid send")
	_, err = reqs[0].Wait()
	assert.NoError(t, err)
	assert.Equal(t, []int32{1}, a)
	_, err = reqs[3].Wait()
	assert.NoError(t, err)
	assert.Equal(t, []int32{3}, d)
}

// requestsConcurrentWait: a Request is safe for concurrent use: several
// goroutines wait on, test and select on one receive at once and all see
// the same completion.
func requestsConcurrentWait(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for i, n := range []int{4, 1 << 17} {
		if c.Rank() == 0 {
			time.Sleep(20 * time.Millisecond)
			require.NoError(t, mp.Send(c, words(n, 6), peer, i))
			continue
		}
		got := make([]uint64, n)
		q := mp.Irecv(c, got, peer, i)
		want := mp.Status{Source: peer, Tag: i, Count: int64(n)}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				st, err := q.Wait()
				assert.NoError(t, err, "waiter %d", g)
				assert.Equal(t, want, st, "waiter %d", g)
			})
		}
		wg.Go(func() {
			deadline := time.Now().Add(pollLimit)
			for time.Now().Before(deadline) {
				if done, st, err := q.Test(); done {
					assert.NoError(t, err, "tester")
					assert.Equal(t, want, st, "tester")
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
			t.Errorf("tester: not done after %v", pollLimit)
		})
		wg.Go(func() {
			if !waitDone(q.Done()) {
				t.Errorf("Done not closed after %v", pollLimit)
			}
		})
		wg.Wait()
		checkWords(t, "received", got, 6)
	}
}

// requestsNone: the completion functions accept no requests and nil ones;
// a nil *Request reports an error instead of panicking.
func requestsNone(t T, c *mp.Comm) {
	noPanic(t, "WaitAll()", func() { assert.NoError(t, mp.WaitAll()) })
	noPanic(t, "WaitAll(nil, nil)", func() { assert.NoError(t, mp.WaitAll(nil, nil)) })
	noPanic(t, "TestAll()", func() {
		done, err := mp.TestAll()
		assert.True(t, done)
		assert.NoError(t, err)
	})
	noPanic(t, "TestAll(nil)", func() {
		done, err := mp.TestAll(nil)
		assert.True(t, done)
		assert.NoError(t, err)
	})
	noPanic(t, "WaitAny()", func() {
		i, _, err := mp.WaitAny()
		assert.Equal(t, -1, i)
		assert.NoError(t, err)
	})
	noPanic(t, "WaitAny(nil, nil)", func() {
		i, _, err := mp.WaitAny(nil, nil)
		assert.Equal(t, -1, i)
		assert.NoError(t, err)
	})
	var q *mp.Request
	noPanic(t, "(*Request)(nil).Wait", func() {
		_, err := q.Wait()
		isErr(t, err, mp.ErrInvalid, "Wait of a nil request")
	})
	noPanic(t, "(*Request)(nil).Test", func() {
		done, _, err := q.Test()
		assert.True(t, done)
		isErr(t, err, mp.ErrInvalid, "Test of a nil request")
	})
	noPanic(t, "(*Request)(nil).Done", func() {
		assert.True(t, waitDone(q.Done()))
	})
}

// requestsTestAny: TestAny over nil, pending, canceled and completed
// requests (in the receiver's list of 4: nil, then tag 1's, a nil that
// becomes tag 2's, and a canceled one) reports the completed ones one at a time, pending ones as not
// done, and -1 with done true once none is active.
func requestsTestAny(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	if c.Rank() == 0 {
		for tag := 1; tag <= 2; tag++ {
			if !heard(t, c, peer) {
				return
			}
			require.NoError(t, mp.Send(c, []int32{int32(tag)}, peer, tag))
		}
		return
	}
	// The receive of tag 2 is posted once tag 1's has completed: on nccl
	// without checks, receives issued together complete together.
	a, b := []int32{-1}, []int32{-1}
	reqs := []*mp.Request{nil, mp.Irecv(c, a, peer, 1), nil, mp.Irecv(c, make([]int32, 1), peer, 9)}
	require.NoError(t, reqs[3].Cancel())
	i, done, st, err := mp.TestAny(reqs...)
	require.Equal(t, 3, i, "TestAny with only the canceled receive complete")
	assert.True(t, done)
	assert.Equal(t, mp.Status{}, st)
	isErr(t, err, mp.ErrCanceled, "TestAny of the canceled receive")
	i, done, _, err = mp.TestAny(reqs...)
	assert.Equal(t, -1, i, "TestAny before anything was sent")
	assert.False(t, done, "TestAny before anything was sent")
	assert.NoError(t, err)
	poll := func(want int) {
		t.Helper()
		deadline := time.Now().Add(pollLimit)
		for {
			i, done, st, err := mp.TestAny(reqs...)
			if done {
				require.Equal(t, want, i, "TestAny once a message was sent")
				require.NoError(t, err)
				assert.Equal(t, mp.Status{Source: peer, Tag: want, Count: 1}, st)
				return
			}
			require.Equal(t, -1, i, "TestAny not done")
			require.True(t, time.Now().Before(deadline), "TestAny still not done after %v", pollLimit)
			time.Sleep(100 * time.Microsecond)
		}
	}
	tell(t, c, true, peer)
	poll(1)
	assert.Equal(t, []int32{1}, a)
	reqs[2] = mp.Irecv(c, b, peer, 2)
	i, done, _, _ = mp.TestAny(reqs...)
	assert.Equal(t, -1, i, "TestAny with the second message not sent")
	assert.False(t, done, "TestAny with the second message not sent")
	tell(t, c, true, peer)
	poll(2)
	assert.Equal(t, []int32{2}, b)
	i, done, st, err = mp.TestAny(reqs...)
	assert.Equal(t, -1, i, "TestAny with every completion reported")
	assert.True(t, done, "TestAny with every completion reported")
	assert.Equal(t, mp.Status{}, st)
	assert.NoError(t, err)
	i, done, _, _ = mp.TestAny()
	assert.Equal(t, -1, i, "TestAny of nothing")
	assert.True(t, done, "TestAny of nothing")
}

// requestsWaitSome: WaitSome returns the indices of every request that has
// completed (at least one), each once, with the errors of those that
// failed joined; nil once none is active.
func requestsWaitSome(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const k = 4
	if c.Rank() == 0 {
		if !heard(t, c, peer) {
			return
		}
		for tag := range k {
			require.NoError(t, mp.Send(c, []int32{int32(10 + tag)}, peer, tag))
		}
		tell(t, c, true, peer) // all sent
		return
	}
	bufs := make([][]int32, k)
	reqs := make([]*mp.Request, k+2) // reqs[k] stays nil
	for tag := range k {
		bufs[tag] = []int32{-1}
		reqs[tag] = mp.Irecv(c, bufs[tag], peer, tag)
	}
	reqs[k+1] = mp.Irecv(c, make([]int32, 1), peer, 9)
	require.NoError(t, reqs[k+1].Cancel())
	idx, err := mp.WaitSome(reqs...)
	assert.Equal(t, []int{k + 1}, idx, "WaitSome with only the canceled receive complete")
	isErr(t, err, mp.ErrCanceled, "WaitSome reporting the canceled receive")
	tell(t, c, true, peer)
	if !heard(t, c, peer) {
		return
	}
	seen := make([]bool, len(reqs))
	for got, calls := 0, 0; got < k; calls++ {
		idx, err := mp.WaitSome(reqs...)
		require.NoError(t, err)
		require.NotEmpty(t, idx, "WaitSome returned nothing with %d requests active", k-got)
		if calls == 0 && hostBackend(c) {
			// Every message arrived before the one that said they were
			// sent: all have completed.
			assert.Equal(t, []int{0, 1, 2, 3}, idx, "WaitSome once every message arrived")
		}
		for j, i := range idx {
			require.True(t, i >= 0 && i < k, "WaitSome returned index %d", i)
			require.False(t, seen[i], "WaitSome returned request %d twice", i)
			require.True(t, j == 0 || idx[j-1] < i, "WaitSome's indices are not increasing: %v", idx)
			seen[i] = true
			st, err := reqs[i].Wait()
			require.NoError(t, err)
			assert.Equal(t, mp.Status{Source: peer, Tag: i, Count: 1}, st)
			assert.Equal(t, []int32{int32(10 + i)}, bufs[i])
		}
		got += len(idx)
	}
	idx, err = mp.WaitSome(reqs...)
	assert.Nil(t, idx, "WaitSome with every completion reported")
	assert.NoError(t, err)
}
