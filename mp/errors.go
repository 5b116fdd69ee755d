package mp

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/courier-mp/courier/internal/errs"
)

// The sentinel errors. Every error the message calls return wraps one of
// them (inside an *OpError), so callers branch with errors.Is:
//
//	if errors.Is(err, mp.ErrPeerLost) { … }
//
// They are the same values as package backend's and package cuda's (all
// three re-export courier's internal/errs), whichever transport or layer
// produced the error.
var (
	// ErrNotSupported: the backend or operation cannot work here; the
	// wrapped error says why (a missing library, a wildcard NCCL cannot
	// match, no GPU).
	ErrNotSupported = errs.ErrNotSupported
	// ErrTruncate: the message is larger than the receive buffer.
	ErrTruncate = errs.ErrTruncate
	// ErrMismatch: sender and receiver disagree on element type, count or
	// tag; the error names both ranks.
	ErrMismatch = errs.ErrMismatch
	// ErrClosed: the communicator was closed.
	ErrClosed = errs.ErrClosed
	// ErrTimeout: a wait lasted longer than the communicator's timeout
	// (COURIER_TIMEOUT). The communicator is aborted; the error lists the
	// operations that were pending on this rank.
	ErrTimeout = errs.ErrTimeout
	// ErrPeerLost: the peer's process or connection went away.
	ErrPeerLost = errs.ErrPeerLost
	// ErrAborted: the communicator was aborted with Comm.Abort; the error
	// given to Abort is wrapped too.
	ErrAborted = errs.ErrAborted
	// ErrInvalid: an argument is out of range: a rank outside the
	// communicator, a negative tag, a nil communicator.
	ErrInvalid = errs.ErrInvalid
	// ErrEncode: SendValue or BcastValue could not encode a value (a
	// channel or a function in it, a struct with no exported fields,
	// an interface whose concrete type gob does not know). The sender's
	// error wraps encoding/gob's; the receivers' RecvValue or
	// BcastValue fails with it too, naming the sender.
	ErrEncode = errs.ErrEncode
	// ErrCanceled: a receive was canceled with Request.Cancel before a
	// message matched it. It received nothing, and the message it would
	// have taken goes to the next matching receive.
	ErrCanceled = errs.ErrCanceled
	// ErrCorrupt: bytes from a peer failed their integrity check (a TCP
	// frame header whose CRC32-C does not match): the connection is
	// closed, and the operations with that peer fail with ErrPeerLost and
	// ErrCorrupt both.
	ErrCorrupt = errs.ErrCorrupt
	// ErrPeerClosed marks, beside ErrPeerLost, a peer that closed its
	// communicator in order (Close) rather than failing: errors.Is(err,
	// ErrPeerClosed) tells a finished peer from a dead one.
	ErrPeerClosed = errs.ErrPeerClosed
	// ErrRevoked marks, beside ErrPeerLost, an operation that ended
	// because a member of its communicator began Shrink on it (Comm.Shrink
	// revokes the communicator it is called on, at every member): the
	// program calls Shrink too, and goes on with the communicator it
	// returns. OpError.LostRank names the rank whose loss the member that
	// began it had seen.
	ErrRevoked = errs.ErrRevoked
	// ErrModified: with COURIER_CHECK=2, a send whose buffer the program
	// changed between Isend and the send's completion (MPI leaves the
	// result undefined: the peer may get either bytes, or a mix). The
	// error names the call and the bytes that changed; what was sent is
	// not known.
	ErrModified = errs.ErrModified
)

// OpError is the error of a message call: which operation, on which rank,
// with which peer and tag, on which backend, and why (Err, which matches
// one of the sentinels).
type OpError struct {
	Op      string // "send", "recv", "wait", "init", …
	Rank    int    // this process's rank in the communicator (-1 before Init knows it)
	Peer    int    // the other rank, in the communicator (AnySource for a wildcard receive, -1 when none)
	Tag     int    // the message tag (-1 when none)
	Backend string // "host", "tcp", "nccl"
	Comm    string // the communicator's name for one made by Split, Dup or Shrink (Comm.Name); "" for the world
	Err     error
}

// Error returns "courier: Op (Backend) on rank Rank [of Comm] with rank
// Peer, tag Tag: Err", leaving out what is unknown.
func (e *OpError) Error() string {
	s := "courier: " + e.Op
	if e.Backend != "" {
		s += " (" + e.Backend + ")"
	}
	if e.Rank >= 0 {
		s += " on rank " + strconv.Itoa(e.Rank)
		if e.Comm != "" {
			s += " of " + e.Comm
		}
	}
	switch {
	case e.Peer == AnySource && (e.Op == "recv" || e.Op == "probe"):
		// Only a receive has a wildcard source; elsewhere -1 is "none".
		s += " from any source"
	case e.Peer >= 0 && e.Op == "send":
		s += " to rank " + strconv.Itoa(e.Peer)
	case e.Peer >= 0:
		s += " with rank " + strconv.Itoa(e.Peer)
	}
	switch {
	case e.Tag == AnyTag && e.Op == "recv":
		s += ", any tag"
	case e.Tag >= 0:
		s += ", tag " + strconv.Itoa(e.Tag)
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *OpError) Unwrap() error { return e.Err }

// LostRank returns the rank whose loss ended the operation, when Err
// matches ErrPeerLost and the transport names it (the host and tcp
// backends do): the rank that died, also where the peer of the operation
// only left after it lost that rank, and for a receive from AnySource,
// which a loss ends while it is pending. ok is false otherwise.
func (e *OpError) LostRank() (rank int, ok bool) {
	if e == nil {
		return -1, false
	}
	if le, ok := errors.AsType[*errs.LostError](e.Err); ok {
		return le.Rank, true
	}
	return -1, false
}

// Timeout reports whether the operation ended because a wait passed the
// communicator's timeout: whether Err matches ErrTimeout. With it an
// *OpError satisfies the interface{ Timeout() bool } that net.Error and
// os.IsTimeout-style checks use.
func (e *OpError) Timeout() bool { return e != nil && errors.Is(e.Err, ErrTimeout) }

func (c *Comm) opErr(op string, peer, tag int, err error) error {
	if err == nil {
		return nil
	}
	if c == nil {
		return &OpError{Op: op, Rank: -1, Peer: peer, Tag: tag, Err: err}
	}
	oe := &OpError{Op: op, Rank: c.rank, Peer: peer, Tag: tag, Backend: c.backendName, Err: err}
	if c.parent != nil {
		oe.Comm = c.name
	}
	return oe
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
