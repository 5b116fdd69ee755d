package mp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/errs"
	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// The sentinels are one set of values, exported by mp, backend and cuda:
// an error any layer wraps matches the name a user imports.
func TestSentinelsAreTheLeafsValues(t *testing.T) {
	cases := []struct {
		name         string
		mp, be, leaf error
		cuda         error // nil where cuda exports none
		text         string
	}{
		{"ErrNotSupported", mp.ErrNotSupported, backend.ErrNotSupported, errs.ErrNotSupported, cuda.ErrNotSupported, "not supported"},
		{"ErrTruncate", mp.ErrTruncate, backend.ErrTruncate, errs.ErrTruncate, nil, "message truncated"},
		{"ErrMismatch", mp.ErrMismatch, backend.ErrMismatch, errs.ErrMismatch, nil, "sender and receiver disagree"},
		{"ErrClosed", mp.ErrClosed, backend.ErrClosed, errs.ErrClosed, nil, "communicator closed"},
		{"ErrTimeout", mp.ErrTimeout, backend.ErrTimeout, errs.ErrTimeout, nil, "timed out"},
		{"ErrPeerLost", mp.ErrPeerLost, backend.ErrPeerLost, errs.ErrPeerLost, nil, "peer lost"},
		{"ErrAborted", mp.ErrAborted, backend.ErrAborted, errs.ErrAborted, nil, "communicator aborted"},
		{"ErrInvalid", mp.ErrInvalid, backend.ErrInvalid, errs.ErrInvalid, cuda.ErrInvalid, "invalid argument"},
		{"ErrCanceled", mp.ErrCanceled, backend.ErrCanceled, errs.ErrCanceled, nil, "request canceled"},
		{"ErrCorrupt", mp.ErrCorrupt, backend.ErrCorrupt, errs.ErrCorrupt, nil, "corrupt data from a peer"},
		{"ErrRevoked", mp.ErrRevoked, backend.ErrRevoked, errs.ErrRevoked, nil, "communicator revoked"},
	}
	for i, c := range cases {
		assert.Same(t, c.leaf, c.mp, "mp.%s", c.name)
		assert.Same(t, c.leaf, c.be, "backend.%s", c.name)
		if c.cuda != nil {
			assert.Same(t, c.leaf, c.cuda, "cuda.%s", c.name)
		}
		assert.Equal(t, c.text, c.leaf.Error(), c.name)
		for _, d := range cases[i+1:] {
			assert.False(t, errors.Is(c.leaf, d.leaf), "%s matches %s", c.name, d.name)
		}
		assert.False(t, errors.Is(c.leaf, backend.ErrPeerClosed), "%s matches ErrPeerClosed", c.name)
	}
	// The "peer closed" signal of the contract is the leaf's too.
	assert.Same(t, errs.ErrPeerClosed, backend.ErrPeerClosed)
	assert.Same(t, errs.ErrPeerClosed, mp.ErrPeerClosed)
}

// A CUDA error that says CUDA cannot run here matches mp.ErrNotSupported
// (through the leaf's value); others match no sentinel.
func TestCUDAErrorMatchesMPSentinel(t *testing.T) {
	for code, want := range map[int]bool{
		34: true, 35: true, 100: true, 801: true, 803: true, 804: true, // stub library, driver too old, no device, …
		1: false, 2: false, 600: false, 999: false, // invalid value, out of memory, not ready, unknown
	} {
		err := error(&cuda.Error{Code: code, Name: "X", Msg: "x", Op: "cuTest"})
		assert.Equal(t, want, errors.Is(err, mp.ErrNotSupported), "CUresult %d and mp.ErrNotSupported", code)
		assert.Equal(t, want, errors.Is(err, backend.ErrNotSupported), "CUresult %d and backend.ErrNotSupported", code)
		assert.False(t, errors.Is(err, mp.ErrInvalid), "CUresult %d matches ErrInvalid", code)
	}
}

// An OpError says whether it is a timeout, as net.Error does: true for a
// wait that passed the communicator's timeout (and the requests its abort
// ended), false for other errors.
func TestOpErrorTimeout(t *testing.T) {
	ranktest.RunConfig(t, 1, ranktest.Config{Timeout: 100 * time.Millisecond}, func(t *ranktest.T, c *mp.Comm) {
		isTimeout := func(err error) bool {
			var te interface{ Timeout() bool }
			return errors.As(err, &te) && te.Timeout()
		}
		assert.False(t, isTimeout(mp.Send(c, []byte{1}, 7, 0)), "a rank out of range")
		pending := mp.Irecv(c, make([]byte, 1), 0, 1)
		_, err := mp.Recv(c, make([]byte, 1), 0, 2) // never sent
		assert.ErrorIs(t, err, mp.ErrTimeout)
		assert.True(t, isTimeout(err), "the timed-out wait: %v", err)
		_, err = pending.Wait()
		assert.True(t, isTimeout(err), "a request the timeout's abort ended: %v", err)
	})
	assert.False(t, (&mp.OpError{Op: "recv", Err: mp.ErrPeerLost}).Timeout())
	assert.False(t, (*mp.OpError)(nil).Timeout())
}

// An OpError names a wildcard source only for a receive or a probe; a
// collective's peer of -1 means none.
func TestOpErrorWildcardSource(t *testing.T) {
	recv := &mp.OpError{Op: "recv", Rank: 0, Peer: mp.AnySource, Tag: 3, Backend: "tcp", Err: mp.ErrTimeout}
	assert.Equal(t, "courier: recv (tcp) on rank 0 from any source, tag 3: "+mp.ErrTimeout.Error(), recv.Error())
	coll := &mp.OpError{Op: "allreduce", Rank: 0, Peer: -1, Tag: -1, Backend: "tcp", Err: mp.ErrPeerLost}
	assert.Equal(t, "courier: allreduce (tcp) on rank 0: "+mp.ErrPeerLost.Error(), coll.Error())
}
