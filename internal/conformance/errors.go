package conformance

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// errorCases: misuse is reported as errors (never a panic), errors carry
// an *mp.OpError, and Close and Abort end pending operations.
func errorCases() []Case {
	return []Case{
		{Name: "Invalid/Send", MinRanks: 1, Run: invalidSend},
		{Name: "Invalid/Recv", MinRanks: 1, Run: invalidRecv},
		{Name: "Invalid/Isend", MinRanks: 1, Run: invalidIsend},
		{Name: "Invalid/Irecv", MinRanks: 1, Run: invalidIrecv},
		{Name: "Invalid/Sendrecv", MinRanks: 1, Run: invalidSendrecv},
		{Name: "Invalid/NilComm", MinRanks: 1, Run: invalidNilComm},
		{Name: "Tags/MaxTag", MinRanks: 2, Run: tagsMaxTag},
		{Name: "Errors/OpError", MinRanks: 2, Run: errorsOpError},
		{Name: "Errors/Close", MinRanks: 1, Run: errorsClose},
		{Name: "Errors/Abort", MinRanks: 1, Run: errorsAbort},
	}
}

type peerTag struct{ peer, tag int }

// invalidSends are (destination, tag) pairs no send may use.
func invalidSends(c *mp.Comm) []peerTag {
	next := (c.Rank() + 1) % c.Size()
	pts := []peerTag{
		{c.Size(), 0},
		{c.Size() + 100, 0},
		{-2, 0},
		{mp.AnySource, 0},
		{next, -3},
		{next, mp.AnyTag},
		{next, math.MinInt},
	}
	if strconv.IntSize == 64 {
		// Tags above MaxTag must be refused, not cut to 32 bits (where
		// 1<<32+5 would become tag 5).
		pts = append(pts, peerTag{next, mp.MaxTag + 1}, peerTag{next, 1<<32 + 5})
	}
	return pts
}

// invalidRecvs are (source, tag) pairs no receive may use.
func invalidRecvs(c *mp.Comm) []peerTag {
	pts := []peerTag{
		{c.Size(), 0},
		{-2, 0},
		{math.MinInt, 0},
		{c.Rank(), -3},
		{mp.AnySource, -2},
	}
	if strconv.IntSize == 64 {
		pts = append(pts, peerTag{c.Rank(), mp.MaxTag + 1})
	}
	return pts
}

func invalidSend(t T, c *mp.Comm) {
	for _, pt := range invalidSends(c) {
		what := fmt.Sprintf("Send to rank %d with tag %d", pt.peer, pt.tag)
		noPanic(t, what, func() {
			err := mp.Send(c, []float64{1}, pt.peer, pt.tag)
			if isErr(t, err, mp.ErrInvalid, "%s", what) {
				checkOpError(t, err, "send", c.Rank(), pt.peer, pt.tag, c.Backend())
			}
		})
	}
	// The communicator is unharmed.
	selfSend(t, c, 3)
}

func invalidRecv(t T, c *mp.Comm) {
	for _, pt := range invalidRecvs(c) {
		what := fmt.Sprintf("Recv from rank %d with tag %d", pt.peer, pt.tag)
		noPanic(t, what, func() {
			_, err := mp.Recv(c, []float64{1}, pt.peer, pt.tag)
			if isErr(t, err, mp.ErrInvalid, "%s", what) {
				checkOpError(t, err, "recv", c.Rank(), pt.peer, pt.tag, c.Backend())
			}
		})
	}
	selfSend(t, c, 3)
}

// checkFailedRequest checks that a request that could not start reports
// ErrInvalid through Test, Wait and Done.
func checkFailedRequest(t T, q *mp.Request, what, op string, c *mp.Comm, pt peerTag) {
	t.Helper()
	if q == nil {
		t.Errorf("%s returned a nil request", what)
		return
	}
	done, _, err := q.Test()
	assert.True(t, done, "%s: Test says it is pending", what)
	isErr(t, err, mp.ErrInvalid, "%s: Test", what)
	_, err = q.Wait()
	if isErr(t, err, mp.ErrInvalid, "%s: Wait", what) {
		checkOpError(t, err, op, c.Rank(), pt.peer, pt.tag, c.Backend())
	}
	assert.True(t, waitDone(q.Done()), "%s: Done not closed", what)
}

func invalidIsend(t T, c *mp.Comm) {
	for _, pt := range invalidSends(c) {
		what := fmt.Sprintf("Isend to rank %d with tag %d", pt.peer, pt.tag)
		noPanic(t, what, func() {
			checkFailedRequest(t, mp.Isend(c, []int8{1}, pt.peer, pt.tag), what, "send", c, pt)
		})
	}
	selfSend(t, c, 3)
}

func invalidIrecv(t T, c *mp.Comm) {
	for _, pt := range invalidRecvs(c) {
		what := fmt.Sprintf("Irecv from rank %d with tag %d", pt.peer, pt.tag)
		noPanic(t, what, func() {
			checkFailedRequest(t, mp.Irecv(c, []int8{1}, pt.peer, pt.tag), what, "recv", c, pt)
		})
	}
	selfSend(t, c, 3)
}

// invalidSendrecv: a Sendrecv with either half invalid fails with
// ErrInvalid and starts neither half.
func invalidSendrecv(t T, c *mp.Comm) {
	me := c.Rank()
	for _, pt := range invalidSends(c) {
		what := fmt.Sprintf("Sendrecv sending to rank %d with tag %d", pt.peer, pt.tag)
		noPanic(t, what, func() {
			_, err := mp.Sendrecv(c, []int32{1}, pt.peer, pt.tag, []int32{0}, me, 77)
			if isErr(t, err, mp.ErrInvalid, "%s", what) {
				checkOpError(t, err, "send", me, pt.peer, pt.tag, c.Backend())
			}
		})
	}
	for _, pt := range invalidRecvs(c) {
		what := fmt.Sprintf("Sendrecv receiving from rank %d with tag %d", pt.peer, pt.tag)
		noPanic(t, what, func() {
			_, err := mp.Sendrecv(c, []int32{1}, me, 77, []int32{0}, pt.peer, pt.tag)
			if isErr(t, err, mp.ErrInvalid, "%s", what) {
				checkOpError(t, err, "recv", me, pt.peer, pt.tag, c.Backend())
			}
		})
	}
	// No half started: the first message to ourselves on tag 77 is this
	// marker, not the send of a failed Sendrecv, and no receive of one
	// took it.
	require.NoError(t, mp.Send(c, []int32{2}, me, 77))
	got := []int32{0}
	_, err := mp.Recv(c, got, me, 77)
	require.NoError(t, err)
	assert.Equal(t, []int32{2}, got, "a failed Sendrecv sent its message")
}

// invalidNilComm: every call on a nil *Comm reports ErrInvalid.
func invalidNilComm(t T, _ *mp.Comm) {
	var c *mp.Comm
	noPanic(t, "Send(nil comm)", func() {
		isErr(t, mp.Send(c, []int32{1}, 0, 0), mp.ErrInvalid, "Send on a nil *Comm")
	})
	noPanic(t, "Recv(nil comm)", func() {
		_, err := mp.Recv(c, []int32{1}, 0, 0)
		isErr(t, err, mp.ErrInvalid, "Recv on a nil *Comm")
	})
	noPanic(t, "Isend(nil comm)", func() {
		_, err := mp.Isend(c, []int32{1}, 0, 0).Wait()
		isErr(t, err, mp.ErrInvalid, "Isend on a nil *Comm")
	})
	noPanic(t, "Irecv(nil comm)", func() {
		_, err := mp.Irecv(c, []int32{1}, 0, 0).Wait()
		isErr(t, err, mp.ErrInvalid, "Irecv on a nil *Comm")
	})
	noPanic(t, "Sendrecv(nil comm)", func() {
		_, err := mp.Sendrecv(c, []int32{1}, 0, 0, []int32{1}, 0, 0)
		isErr(t, err, mp.ErrInvalid, "Sendrecv on a nil *Comm")
	})
	noPanic(t, "Barrier(nil comm)", func() {
		isErr(t, mp.Barrier(c), mp.ErrInvalid, "Barrier on a nil *Comm")
	})
}

// tagsMaxTag: MaxTag is a valid tag; messages with MaxTag and with tags
// that agree with it in their low 32 or 16 bits stay apart.
func tagsMaxTag(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	tags := []int{mp.MaxTag, 0x7fff, 0xffff, 1 << 30, mp.MaxTag - 2}
	if c.Rank() == 0 {
		for i, tag := range tags {
			require.NoError(t, mp.Send(c, []int64{int64(i)}, peer, tag), "tag %d", tag)
		}
		return
	}
	got := []int64{-1}
	for i := len(tags) - 1; i >= 0; i-- {
		st, err := mp.Recv(c, got, peer, tags[i])
		require.NoError(t, err, "tag %d", tags[i])
		assert.Equal(t, mp.Status{Source: peer, Tag: tags[i], Count: 1}, st)
		assert.Equal(t, []int64{int64(i)}, got, "tag %d", tags[i])
	}
}

// errorsOpError: a transport error (truncation) is an *mp.OpError with
// Op, Rank, Peer, Tag and Backend filled, from Recv, Irecv and a send
// that learns of it.
func errorsOpError(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	if c.Rank() == 0 {
		require.NoError(t, mp.Send(c, []int16{1, 2}, peer, 7))
		require.NoError(t, mp.Send(c, []int16{1, 2}, peer, 8))
		_, err := mp.Isend(c, make([]int16, 1<<17), peer, 9).Wait()
		if err != nil {
			isErr(t, err, mp.ErrTruncate, "send of a truncated large message")
			checkOpError(t, err, "send", 0, peer, 9, c.Backend())
		}
		return
	}
	_, err := mp.Recv(c, []int16{0}, peer, 7)
	if isErr(t, err, mp.ErrTruncate, "Recv") {
		checkOpError(t, err, "recv", 1, peer, 7, c.Backend())
		msg := err.Error()
		for _, part := range []string{"recv", "rank 1", "tag 7"} {
			assert.True(t, strings.Contains(msg, part), "error text %q does not mention %q", msg, part)
		}
	}
	_, err = mp.Irecv(c, []int16{0}, peer, 8).Wait()
	if isErr(t, err, mp.ErrTruncate, "Irecv") {
		checkOpError(t, err, "recv", 1, peer, 8, c.Backend())
	}
	_, err = mp.Recv(c, make([]int16, 1<<16), peer, 9)
	if isErr(t, err, mp.ErrTruncate, "Recv of a large message") {
		checkOpError(t, err, "recv", 1, peer, 9, c.Backend())
	}
}

// errorsClose: Close ends pending requests with ErrClosed (or, for one
// with a peer that closed first, ErrPeerLost); afterwards every operation
// fails with ErrClosed; Close is idempotent.
func errorsClose(t T, c *mp.Comm) {
	me := c.Rank()
	next := (me + 1) % c.Size()
	prev := (me - 1 + c.Size()) % c.Size()
	self := mp.Irecv(c, []int32{0}, me, 50)        // nobody sends it
	fromPeer := mp.Irecv(c, []int32{0}, prev, 51) // nobody sends it
	require.NoError(t, mp.Barrier(c))
	first := c.Close()
	require.NoError(t, first, "Close")
	assert.Equal(t, first, c.Close(), "second Close")

	_, err := self.Wait()
	isErr(t, err, mp.ErrClosed, "pending receive from self, after Close")
	_, err = fromPeer.Wait()
	if !errors.Is(err, mp.ErrPeerLost) {
		isErr(t, err, mp.ErrClosed, "pending receive from rank %d, after Close", prev)
	}

	err = mp.Send(c, []int32{1}, me, 1)
	isErr(t, err, mp.ErrClosed, "Send to self after Close")
	err = mp.Send(c, []int32{1}, next, 1)
	isErr(t, err, mp.ErrClosed, "Send to rank %d after Close", next)
	err = mp.Send(c, make([]int32, 1<<17), next, 1)
	isErr(t, err, mp.ErrClosed, "large Send to rank %d after Close", next)
	_, err = mp.Recv(c, []int32{1}, prev, 1)
	isErr(t, err, mp.ErrClosed, "Recv after Close")
	_, err = mp.Isend(c, []int32{1}, next, 1).Wait()
	isErr(t, err, mp.ErrClosed, "Isend after Close")
	_, err = mp.Irecv(c, []int32{1}, prev, 1).Wait()
	isErr(t, err, mp.ErrClosed, "Irecv after Close")
	if c.Size() > 1 {
		isErr(t, mp.Barrier(c), mp.ErrClosed, "Barrier after Close")
	}
}

var errStop = errors.New("conformance: stop")

// errorsAbort: Abort, from another goroutine, ends a pending request with
// an error matching ErrAborted and Abort's argument, closes its Done
// channel, and makes later operations fail the same way.
func errorsAbort(t T, c *mp.Comm) {
	me := c.Rank()
	q := mp.Irecv(c, []int32{0}, me, 60) // nobody sends it
	require.NoError(t, mp.Barrier(c))
	go func() {
		time.Sleep(10 * time.Millisecond)
		c.Abort(errStop)
	}()
	require.True(t, waitDone(q.Done()), "Done not closed %v after Abort", pollLimit)
	_, err := q.Wait()
	isErr(t, err, mp.ErrAborted, "pending receive, after Abort")
	isErr(t, err, errStop, "pending receive, after Abort")
	err = mp.Send(c, []int32{1}, me, 1)
	isErr(t, err, mp.ErrAborted, "Send to self after Abort")
	isErr(t, err, errStop, "Send to self after Abort")
	_, err = mp.Recv(c, []int32{1}, me, 1)
	isErr(t, err, mp.ErrAborted, "Recv from self after Abort")
}
