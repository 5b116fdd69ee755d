package mp

import (
	"fmt"

	"github.com/courier-mp/courier/backend"
)

// Cancel cancels a receive that no message has matched yet, as
// MPI_Cancel does. The request then completes: its Wait (or Test,
// WaitAny, …) reports an error matching ErrCanceled and a zero Status,
// the buffer was not written and may be reused, and the message it would
// have taken goes to the next matching receive, so nothing is lost.
//
// Cancel may fail to cancel, as in MPI: a receive that has already
// matched a message (its data may be on the way) or completed is left
// alone, and its Wait reports the real result, the message's status and
// data or its error. Cancel returns nil in both cases; errors.Is(err,
// ErrCanceled) on the result of Wait tells which happened (MPI's
// MPI_Test_cancelled). Calling Cancel more than once does no harm.
//
// Cancel of a send returns an error matching ErrNotSupported (MPI
// deprecates canceling sends) and leaves the send untouched; so does
// Cancel on a backend that cannot cancel a receive. On the tcp and host
// backends any receive not yet matched can be canceled. On nccl, a
// receive can be canceled until it has been handed to NCCL: without
// checks that happens at the first Wait, Test or Done of any request of
// the communicator (or a blocking call), after which Cancel does nothing;
// with checks, until the sender has announced the message it matches.
//
// Cancel of a non-blocking collective (Iallreduce, …) returns an error
// matching ErrNotSupported, as MPI does not cancel collectives, and the
// collective goes on.
//
// Cancel does not block.
func (q *Request) Cancel() error {
	if q == nil {
		return &OpError{Op: "cancel", Rank: -1, Peer: -1, Tag: -1, Err: invalidf("nil *Request")}
	}
	if q.coll {
		return q.c.opErr("cancel", q.peer, q.tag,
			fmt.Errorf("%w: a collective (%s) cannot be canceled; it goes on", ErrNotSupported, q.op))
	}
	if q.op != opRecv.String() {
		return q.c.opErr("cancel", q.peer, q.tag,
			fmt.Errorf("%w: a %s cannot be canceled (MPI deprecates canceling sends); it goes on", ErrNotSupported, q.op))
	}
	r := q.acquire()
	if r == nil {
		return nil // completed: its result stands
	}
	var err error
	if cr, ok := r.(backend.Canceler); ok {
		err = cr.Cancel()
	} else {
		err = fmt.Errorf("%w: the %s backend cannot cancel a receive; it goes on", ErrNotSupported, q.c.backendName)
	}
	q.settle(false, Status{}, nil)
	return q.c.opErr("cancel", q.peer, q.tag, err)
}
