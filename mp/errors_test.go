package mp_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/errs"
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
