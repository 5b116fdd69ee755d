package backend

import "github.com/courier-mp/courier/internal/errs"

// The sentinel errors every transport reports through. They are the values
// of courier's leaf package internal/errs, which package mp (and package
// cuda, for the two it reports) export too: mp.ErrTruncate ==
// backend.ErrTruncate, so a user matches them with errors.Is whichever
// package produced the error.
var (
	// ErrNotSupported: the operation or the backend cannot work here (no GPU,
	// no library, a wildcard the transport cannot match). The wrapped error
	// says why.
	ErrNotSupported = errs.ErrNotSupported
	// ErrTruncate: a message is larger than the buffer posted to receive it.
	ErrTruncate = errs.ErrTruncate
	// ErrMismatch: sender and receiver disagree on element type, count or
	// tag (reported by the checks of COURIER_CHECK=1, and always for element
	// types on transports that carry them).
	ErrMismatch = errs.ErrMismatch
	// ErrClosed: the communicator was closed.
	ErrClosed = errs.ErrClosed
	// ErrTimeout: a wait took longer than the communicator's timeout.
	ErrTimeout = errs.ErrTimeout
	// ErrPeerLost: the peer's process or connection went away.
	ErrPeerLost = errs.ErrPeerLost
	// ErrAborted: the communicator was aborted (comm.Abort); the error passed
	// to Abort is wrapped beside it.
	ErrAborted = errs.ErrAborted
	// ErrInvalid: an argument is out of range (a rank outside the
	// communicator, a negative tag).
	ErrInvalid = errs.ErrInvalid
	// ErrCanceled: a receive was canceled ([Canceler]) before a message
	// matched it; it received nothing.
	ErrCanceled = errs.ErrCanceled
	// ErrCorrupt: bytes from a peer failed their integrity check (a TCP
	// frame header whose CRC32-C does not match); the link is closed and
	// the peer is lost (the error matches ErrPeerLost too).
	ErrCorrupt = errs.ErrCorrupt
	// ErrRevoked: a member of the communicator revoked it ([Shrinker]):
	// operations on it end, but those of the agreement (tag ShrinkTag).
	// The error matches ErrPeerLost too.
	ErrRevoked = errs.ErrRevoked
)

// ErrPeerClosed is the "peer closed" signal of the contract: a transport
// wraps it, beside ErrPeerLost, in the error of operations with a rank
// that closed its communicator in order (said goodbye), as opposed to one
// that aborted or whose process vanished. Everything that rank sent before
// it closed was delivered, so a transport layered on another (nccl on the
// tcp host connection) can tell a peer that left from one that failed:
//
//	err := fmt.Errorf("%w: rank %d %w", backend.ErrPeerLost, rank, backend.ErrPeerClosed)
//
// Its text completes "rank N …".
var ErrPeerClosed = errs.ErrPeerClosed

// LostError is the contract's way to name the rank an ErrPeerLost error
// reports (internal/errs's type): a transport wraps its loss errors in
// one, with the rank that died, or the rank a peer that left said it had
// lost. mp's OpError.LostRank reads it.
type LostError = errs.LostError
