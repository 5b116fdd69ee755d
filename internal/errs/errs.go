// Package errs holds courier's sentinel errors, in a leaf that imports
// nothing of courier, so that every layer can report through the same
// values: backend, mp and cuda re-export them (mp.ErrTimeout ==
// backend.ErrTimeout == errs.ErrTimeout), as cilium/ebpf re-exports
// internal.ErrNotSupported. Users match the re-exported names with
// errors.Is; this package is for courier's own packages.
package errs

import "errors"

// The sentinels. Their texts are what users read inside wrapped errors
// ("courier: recv on rank 1 with rank 0, tag 7: message truncated: …").
var (
	// ErrNotSupported: the operation or the backend cannot work here (no
	// GPU, no library, a wildcard the transport cannot match). The wrapped
	// error says why.
	ErrNotSupported = errors.New("not supported")
	// ErrTruncate: a message is larger than the buffer posted to receive it.
	ErrTruncate = errors.New("message truncated")
	// ErrMismatch: sender and receiver disagree on element type, count or
	// tag (reported by the checks of COURIER_CHECK=1, and always for
	// element types on transports that carry them).
	ErrMismatch = errors.New("sender and receiver disagree")
	// ErrClosed: the communicator was closed.
	ErrClosed = errors.New("communicator closed")
	// ErrTimeout: a wait took longer than the communicator's timeout.
	ErrTimeout = errors.New("timed out")
	// ErrPeerLost: the peer's process or connection went away.
	ErrPeerLost = errors.New("peer lost")
	// ErrAborted: the communicator was aborted (Comm.Abort); the error
	// passed to Abort is wrapped beside it.
	ErrAborted = errors.New("communicator aborted")
	// ErrInvalid: an argument is out of range (a rank outside the
	// communicator, a negative tag, a nil or destroyed object).
	ErrInvalid = errors.New("invalid argument")
	// ErrEncode: a Go value cannot be encoded for a message (a channel or
	// a function in it, a struct with no exported fields).
	ErrEncode = errors.New("value cannot be encoded")
	// ErrCanceled: a receive was canceled (Request.Cancel) before a
	// message matched it; it received nothing.
	ErrCanceled = errors.New("request canceled")
	// ErrCorrupt: bytes from a peer failed their integrity check (a TCP
	// frame header whose CRC32-C does not match): the connection cannot be
	// trusted and is closed.
	ErrCorrupt = errors.New("corrupt data from a peer")
	// ErrRevoked: the communicator was revoked, because one of its
	// members began Shrink on it (after it lost a rank): every operation
	// on it ends, and it is good for nothing but Shrink and Close. An
	// error matching it matches ErrPeerLost too.
	ErrRevoked = errors.New("communicator revoked")
	// ErrModified: a buffer the library owned was changed by the program
	// before the operation completed (a send buffer modified between Isend
	// and its completion), as the buffer checks of COURIER_CHECK=2 see.
	ErrModified = errors.New("buffer modified while the library owned it")
)

// ErrPeerClosed is wrapped, beside ErrPeerLost, in the error of operations
// with a rank that closed its communicator in order (said goodbye), as
// opposed to one that aborted or whose process vanished: everything that
// rank sent before it closed was delivered. Its text completes "rank N …".
var ErrPeerClosed = errors.New("closed its communicator")

// LostError is an error matching ErrPeerLost that names the rank whose
// loss it reports: the rank that died, or, where the peer that left had
// lost another rank first and said so as it left, that other rank. It is
// what mp's OpError.LostRank reads.
type LostError struct {
	// Rank is the lost rank.
	Rank int
	// Err is the error, which matches ErrPeerLost.
	Err error
}

func (e *LostError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *LostError) Unwrap() error { return e.Err }
