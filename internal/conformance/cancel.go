package conformance

import (
	"errors"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// cancelCases: Request.Cancel of receives that have not matched, of ones
// that have, and of sends.
func cancelCases() []Case {
	return []Case{
		{Name: "Cancel/Pending", MinRanks: 2, Run: cancelPending},
		{Name: "Cancel/Wildcard", MinRanks: 2, Run: cancelWildcard},
		{Name: "Cancel/AfterMatch", MinRanks: 2, Run: cancelAfterMatch},
		{Name: "Cancel/Send", MinRanks: 2, Run: cancelSend},
		{Name: "Cancel/Self", MinRanks: 1, Run: cancelSelf},
		{Name: "Cancel/Race", MinRanks: 2, Run: cancelRace},
	}
}

// cancelSizes are the message sizes (words) the cancel cases use: an
// eager message and a rendezvous.
var cancelSizes = []int{4, 1 << 17}

// canceledOK checks that q ended canceled: Wait reports ErrCanceled in
// an OpError of the receive, with a zero status, and so does Test; a
// second Cancel changes nothing.
func canceledOK(t T, c *mp.Comm, q *mp.Request, peer, tag int) bool {
	t.Helper()
	st, err := q.Wait()
	if !isErr(t, err, mp.ErrCanceled, "Wait of a canceled receive") {
		return false
	}
	ok := checkOpError(t, err, "recv", c.Rank(), peer, tag, c.Backend())
	ok = assert.Equal(t, mp.Status{}, st, "status of a canceled receive") && ok
	assert.NoError(t, q.Cancel(), "Cancel of a canceled receive")
	done, _, err := q.Test()
	ok = assert.True(t, done, "Test of a canceled receive") && ok
	return isErr(t, err, mp.ErrCanceled, "Test of a canceled receive") && ok
}

// cancelPending: a receive canceled before anything was sent ends with
// ErrCanceled and its buffer untouched; the message sent afterwards with
// the same tag goes to the next receive.
func cancelPending(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for tag, n := range cancelSizes {
		if c.Rank() == 0 {
			if !heard(t, c, peer) {
				return
			}
			require.NoError(t, mp.Send(c, words(n, 7), peer, tag))
			continue
		}
		stale := words(n, 99)
		q := mp.Irecv(c, stale, peer, tag)
		require.NoError(t, q.Cancel())
		okc := canceledOK(t, c, q, peer, tag)
		tell(t, c, okc, peer)
		if !okc {
			return
		}
		got := make([]uint64, n)
		st, err := mp.Recv(c, got, peer, tag)
		require.NoError(t, err, "the receive after the canceled one")
		assert.Equal(t, mp.Status{Source: peer, Tag: tag, Count: int64(n)}, st)
		checkWords(t, "the receive after the canceled one", got, 7)
		checkWords(t, "the canceled receive's buffer", stale, 99)
	}
}

// cancelWildcard: receives from any source, and with any tag, canceled
// before anything was sent end with ErrCanceled; the message goes to the
// next receive. A backend without wildcards reports ErrNotSupported, and
// Cancel of that failed request leaves its error.
func cancelWildcard(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	shapes := []struct{ source, tag int }{{mp.AnySource, 5}, {peer, mp.AnyTag}, {mp.AnySource, mp.AnyTag}}
	for i, sh := range shapes {
		tag := 5 + i
		if c.Rank() == 0 {
			if !heard(t, c, peer) {
				return
			}
			require.NoError(t, mp.Send(c, []int64{int64(tag)}, peer, tag))
			continue
		}
		q := mp.Irecv(c, make([]int64, 1), sh.source, sh.tag)
		if !wildcardOK(t, c, q) {
			assert.NoError(t, q.Cancel(), "Cancel of a refused wildcard receive")
			_, err := q.Wait()
			isErr(t, err, mp.ErrNotSupported, "Wait of a refused wildcard receive after Cancel")
			tell(t, c, false, peer)
			return
		}
		require.NoError(t, q.Cancel())
		okc := canceledOK(t, c, q, sh.source, sh.tag)
		tell(t, c, okc, peer)
		if !okc {
			return
		}
		got := []int64{-1}
		st, err := mp.Recv(c, got, peer, tag)
		require.NoError(t, err)
		assert.Equal(t, mp.Status{Source: peer, Tag: tag, Count: 1}, st)
		assert.Equal(t, []int64{int64(tag)}, got)
	}
}

// cancelAfterMatch: Cancel of a receive a message has matched does
// nothing; its Wait returns the message. Cancel after completion changes
// nothing either.
func cancelAfterMatch(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for tag, n := range cancelSizes {
		if c.Rank() == 0 {
			if !heard(t, c, peer) {
				return
			}
			require.NoError(t, mp.Send(c, words(n, 11), peer, tag))
			tell(t, c, true, peer) // sent: the receive has matched
			continue
		}
		got := make([]uint64, n)
		q := mp.Irecv(c, got, peer, tag)
		tell(t, c, true, peer)
		if !heard(t, c, peer) {
			return
		}
		require.NoError(t, q.Cancel(), "Cancel of a matched receive")
		want := mp.Status{Source: peer, Tag: tag, Count: int64(n)}
		st, err := q.Wait()
		require.NoError(t, err, "Wait of a matched receive after Cancel")
		assert.Equal(t, want, st)
		checkWords(t, "a matched receive after Cancel", got, 11)
		require.NoError(t, q.Cancel(), "Cancel of a completed receive")
		st, err = q.Wait()
		assert.NoError(t, err, "Wait after Cancel of a completed receive")
		assert.Equal(t, want, st)
	}
}

// cancelSend: Cancel of a send is ErrNotSupported, in an OpError of
// "cancel", and the send goes on.
func cancelSend(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for tag, n := range cancelSizes {
		if c.Rank() == 1 {
			got := make([]uint64, n)
			_, err := mp.Recv(c, got, peer, tag)
			require.NoError(t, err)
			checkWords(t, "a send Cancel refused", got, 13)
			continue
		}
		s := mp.Isend(c, words(n, 13), peer, tag)
		err := s.Cancel()
		isErr(t, err, mp.ErrNotSupported, "Cancel of a send")
		checkOpError(t, err, "cancel", c.Rank(), peer, tag, c.Backend())
		_, err = s.Wait()
		require.NoError(t, err, "the send after its Cancel was refused")
	}
}

// cancelSelf: a receive from this rank itself, canceled, ends with
// ErrCanceled; the message this rank then sends itself goes to the next
// receive.
func cancelSelf(t T, c *mp.Comm) {
	me := c.Rank()
	for tag, n := range cancelSizes {
		q := mp.Irecv(c, make([]uint64, n), me, tag)
		require.NoError(t, q.Cancel())
		if !canceledOK(t, c, q, me, tag) {
			return
		}
		s := mp.Isend(c, words(n, 17), me, tag)
		got := make([]uint64, n)
		st, err := mp.Recv(c, got, me, tag)
		require.NoError(t, err)
		assert.Equal(t, mp.Status{Source: me, Tag: tag, Count: int64(n)}, st)
		checkWords(t, "a self receive after a canceled one", got, 17)
		_, err = s.Wait()
		require.NoError(t, err)
	}
}

// cancelRace: Cancel races the message's arrival. Whichever wins, nothing
// is lost: the receive has the message, or it ends with ErrCanceled and
// the next receive has it.
func cancelRace(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	const rounds = 40
	canceled := 0
	for i := range rounds {
		n := cancelSizes[i%len(cancelSizes)]
		if c.Rank() == 0 {
			if !heard(t, c, peer) {
				return
			}
			require.NoError(t, mp.Send(c, words(n, uint64(i)), peer, 3))
			continue
		}
		got := make([]uint64, n)
		q := mp.Irecv(c, got, peer, 3)
		tell(t, c, true, peer)
		require.NoError(t, q.Cancel())
		st, err := q.Wait()
		if errors.Is(err, mp.ErrCanceled) {
			canceled++
			st, err = mp.Recv(c, got, peer, 3)
		}
		require.NoError(t, err, "round %d", i)
		require.Equal(t, mp.Status{Source: peer, Tag: 3, Count: int64(n)}, st, "round %d", i)
		if !checkWords(t, "round", got, uint64(i)) {
			return
		}
	}
	if c.Rank() == 1 {
		t.Logf("%d of %d receives canceled before their message matched", canceled, rounds)
	}
}
