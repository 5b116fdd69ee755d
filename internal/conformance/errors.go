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
		{Name: "Errors/PeerLost", MinRanks: 2, Run: errorsPeerLost},
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
	finish(t, c)
}

// refusedAtOnce posts a receive with invalid arguments and reports whether
// it was refused at once. One that was accepted instead is reported, and
// the caller skips the blocking call with the same arguments, which would
// wait for the communicator's timeout.
func refusedAtOnce(t T, c *mp.Comm, pt peerTag) bool {
	t.Helper()
	refused := false
	noPanic(t, fmt.Sprintf("Irecv from rank %d with tag %d", pt.peer, pt.tag), func() {
		done, _, err := mp.Irecv(c, []float64{1}, pt.peer, pt.tag).Test()
		if !done {
			t.Errorf("Irecv from rank %d with tag %d was accepted (it is pending); want ErrInvalid", pt.peer, pt.tag)
			return
		}
		refused = isErr(t, err, mp.ErrInvalid, "Irecv from rank %d with tag %d", pt.peer, pt.tag)
	})
	return refused
}

// sendRefusedAtOnce is refusedAtOnce for a send.
func sendRefusedAtOnce(t T, c *mp.Comm, pt peerTag) bool {
	t.Helper()
	refused := false
	noPanic(t, fmt.Sprintf("Isend to rank %d with tag %d", pt.peer, pt.tag), func() {
		done, _, err := mp.Isend(c, []float64{1}, pt.peer, pt.tag).Test()
		if !done || err == nil {
			t.Errorf("Isend to rank %d with tag %d was accepted; want ErrInvalid", pt.peer, pt.tag)
			return
		}
		refused = isErr(t, err, mp.ErrInvalid, "Isend to rank %d with tag %d", pt.peer, pt.tag)
	})
	return refused
}

func invalidRecv(t T, c *mp.Comm) {
	for _, pt := range invalidRecvs(c) {
		what := fmt.Sprintf("Recv from rank %d with tag %d", pt.peer, pt.tag)
		if !refusedAtOnce(t, c, pt) {
			continue
		}
		noPanic(t, what, func() {
			_, err := mp.Recv(c, []float64{1}, pt.peer, pt.tag)
			if isErr(t, err, mp.ErrInvalid, "%s", what) {
				checkOpError(t, err, "recv", c.Rank(), pt.peer, pt.tag, c.Backend())
			}
		})
	}
	selfSend(t, c, 3)
	finish(t, c)
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
	if !done {
		t.Errorf("%s was accepted (it is pending); want ErrInvalid", what)
		return
	}
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
	finish(t, c)
}

func invalidIrecv(t T, c *mp.Comm) {
	for _, pt := range invalidRecvs(c) {
		what := fmt.Sprintf("Irecv from rank %d with tag %d", pt.peer, pt.tag)
		noPanic(t, what, func() {
			checkFailedRequest(t, mp.Irecv(c, []int8{1}, pt.peer, pt.tag), what, "recv", c, pt)
		})
	}
	selfSend(t, c, 3)
	finish(t, c)
}

// invalidSendrecv: a Sendrecv with either half invalid fails with
// ErrInvalid and starts neither half.
func invalidSendrecv(t T, c *mp.Comm) {
	me := c.Rank()
	for _, pt := range invalidSends(c) {
		what := fmt.Sprintf("Sendrecv sending to rank %d with tag %d", pt.peer, pt.tag)
		if !sendRefusedAtOnce(t, c, pt) {
			// A Sendrecv would send, then wait for the timeout on its
			// receive, which no one answers.
			continue
		}
		noPanic(t, what, func() {
			_, err := mp.Sendrecv(c, []int32{1}, pt.peer, pt.tag, []int32{0}, me, 77)
			if isErr(t, err, mp.ErrInvalid, "%s", what) {
				checkOpError(t, err, "send", me, pt.peer, pt.tag, c.Backend())
			}
		})
	}
	for _, pt := range invalidRecvs(c) {
		what := fmt.Sprintf("Sendrecv receiving from rank %d with tag %d", pt.peer, pt.tag)
		if !refusedAtOnce(t, c, pt) {
			continue
		}
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
	finish(t, c)
}

// finish ends an invalid-argument case with a barrier, so that no rank
// leaves while another may still (wrongly) reach it.
func finish(t T, c *mp.Comm) {
	t.Helper()
	require.NoError(t, mp.Barrier(c), "the communicator after invalid calls")
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
		require.NoError(t, mp.Barrier(c))
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
		require.NoError(t, mp.Barrier(c))
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
	// Rank 1 stays until rank 0 has its verdict: a rank that leaves early
	// is a lost peer, which would hide it.
	require.NoError(t, mp.Barrier(c))
}

// errorsClose: rank 0 closes while it has receives pending: they end with
// ErrClosed; afterwards every operation on its communicator fails with
// ErrClosed; Close is idempotent. The other ranks' pending receives from
// rank 0 end with ErrPeerLost.
func errorsClose(t T, c *mp.Comm) {
	me := c.Rank()
	if me != 0 {
		q := mp.Irecv(c, []int32{0}, 0, 51) // rank 0 never sends it
		require.NoError(t, mp.Barrier(c))
		_, err := q.Wait()
		isErr(t, err, mp.ErrPeerLost, "pending receive from rank 0, which closed")
		_, err = mp.Recv(c, []int32{0}, 0, 52)
		isErr(t, err, mp.ErrPeerLost, "Recv from rank 0, which closed")
		return
	}
	next := 1 % c.Size()
	self := mp.Irecv(c, []int32{0}, me, 50) // nobody sends it
	var fromPeer *mp.Request
	if c.Size() > 1 {
		fromPeer = mp.Irecv(c, []int32{0}, next, 51) // nobody sends it
	}
	require.NoError(t, mp.Barrier(c))
	first := c.Close()
	require.NoError(t, first, "Close")
	assert.Equal(t, first, c.Close(), "second Close")

	_, err := self.Wait()
	isErr(t, err, mp.ErrClosed, "pending receive from self, after Close")
	if fromPeer != nil {
		_, err = fromPeer.Wait()
		isErr(t, err, mp.ErrClosed, "pending receive from rank %d, after Close", next)
	}
	err = mp.Send(c, []int32{1}, me, 1)
	isErr(t, err, mp.ErrClosed, "Send to self after Close")
	_, err = mp.Recv(c, []int32{1}, me, 1)
	isErr(t, err, mp.ErrClosed, "Recv from self after Close")
	if c.Size() == 1 {
		return
	}
	// The peers have left too by now (Close waits for them), but the
	// communicator that was used is the closed one.
	err = mp.Send(c, []int32{1}, next, 1)
	isErr(t, err, mp.ErrClosed, "Send to rank %d after Close", next)
	err = mp.Send(c, make([]int32, 1<<17), next, 1)
	isErr(t, err, mp.ErrClosed, "large Send to rank %d after Close", next)
	_, err = mp.Recv(c, []int32{1}, next, 1)
	isErr(t, err, mp.ErrClosed, "Recv from rank %d after Close", next)
	_, err = mp.Isend(c, []int32{1}, next, 1).Wait()
	isErr(t, err, mp.ErrClosed, "Isend after Close")
	_, err = mp.Irecv(c, []int32{1}, next, 1).Wait()
	isErr(t, err, mp.ErrClosed, "Irecv after Close")
	isErr(t, mp.Barrier(c), mp.ErrClosed, "Barrier after Close")
}

var errStop = errors.New("conformance: stop")

// errorsAbort: rank 0 aborts from another goroutine while a receive is
// pending: it ends with an error matching ErrAborted and Abort's argument,
// its Done channel closes, and later operations fail the same way. The
// other ranks see rank 0 as lost.
func errorsAbort(t T, c *mp.Comm) {
	me := c.Rank()
	if me != 0 {
		q := mp.Irecv(c, []int32{0}, 0, 61) // rank 0 never sends it
		require.NoError(t, mp.Barrier(c))
		_, err := q.Wait()
		isErr(t, err, mp.ErrPeerLost, "pending receive from rank 0, which aborted")
		return
	}
	q := mp.Irecv(c, []int32{0}, me, 60) // nobody sends it
	require.NoError(t, mp.Barrier(c))
	aborted := make(chan struct{})
	go func() {
		defer close(aborted)
		time.Sleep(10 * time.Millisecond)
		c.Abort(errStop)
	}()
	require.True(t, waitDone(q.Done()), "Done not closed %v after Abort", pollLimit)
	<-aborted
	_, err := q.Wait()
	isErr(t, err, mp.ErrAborted, "pending receive, after Abort")
	isErr(t, err, errStop, "pending receive, after Abort")
	err = mp.Send(c, []int32{1}, me, 1)
	isErr(t, err, mp.ErrAborted, "Send to self after Abort")
	isErr(t, err, errStop, "Send to self after Abort")
	_, err = mp.Recv(c, []int32{1}, me, 1)
	isErr(t, err, mp.ErrAborted, "Recv from self after Abort")
	if c.Size() > 1 {
		err = mp.Send(c, []int32{1}, 1, 1)
		isErr(t, err, mp.ErrAborted, "Send to rank 1 after Abort")
	}
}

// errorsPeerLost: every rank but 0 closes its communicator while rank 0
// has receives pending from each: they end with ErrPeerLost, and so do new
// operations with those ranks, without waiting for the timeout. Rank 0's
// own traffic with itself goes on: a receive from itself, pending all
// along, still gets its message.
func errorsPeerLost(t T, c *mp.Comm) {
	if c.Rank() != 0 {
		require.NoError(t, mp.Barrier(c))
		require.NoError(t, c.Close())
		return
	}
	me := c.Rank()
	got := []int32{0}
	self := mp.Irecv(c, got, me, 70)
	var reqs []*mp.Request
	for _, r := range others(c) {
		reqs = append(reqs, mp.Irecv(c, []int32{0}, r, 71)) // never sent
	}
	require.NoError(t, mp.Barrier(c))
	start := time.Now()
	for i, q := range reqs {
		_, err := q.Wait()
		isErr(t, err, mp.ErrPeerLost, "pending receive from rank %d, which closed", i+1)
	}
	assert.Less(t, time.Since(start), c.Timeout()/2+time.Second, "lost peers noticed late")
	for _, r := range others(c) {
		isErr(t, mp.Send(c, []int32{1}, r, 1), mp.ErrPeerLost, "Send to rank %d, which closed", r)
		_, err := mp.Recv(c, []int32{1}, r, 1)
		isErr(t, err, mp.ErrPeerLost, "Recv from rank %d, which closed", r)
	}
	require.NoError(t, mp.Send(c, []int32{7}, me, 70), "Send to self with every peer gone")
	_, err := self.Wait()
	require.NoError(t, err, "a receive from self, pending while every peer left")
	assert.Equal(t, []int32{7}, got)
}
