package mp

import (
	"errors"
	"reflect"
	"runtime"
	"sync"
	"time"

	"github.com/courier-mp/courier/backend"
)

// Request is a pending non-blocking operation, returned by Isend and
// Irecv and by the non-blocking collectives (Iallreduce, …). Wait, Test, WaitAll, WaitAny, WaitSome, TestAll and TestAny
// complete it; until one of them reports completion, the operation's
// buffer belongs to the library. Cancel cancels a receive that has not
// matched a message.
//
// A Request is safe for concurrent use. Once its completion has been
// reported, Wait and Test keep returning the same status and error, and the
// request counts as inactive for WaitAny, WaitSome and TestAny.
type Request struct {
	c    *Comm
	op   string
	peer int
	tag  int
	coll bool // a non-blocking collective's (icoll.go)

	mu       sync.Mutex
	r        backend.Request // nil once released
	users    int             // goroutines inside r's methods
	done     bool
	reported bool // completion returned to the caller
	st       Status
	err      error
	guard    *bufGuard // COURIER_CHECK=2: the send buffer's checksums at post (guard.go)
	tseq     uint64    // its span on the timeline (trace.go); 0: none
}

// fail completes a request that never reached the transport.
func (q *Request) fail(err error) {
	q.done = true
	q.err = q.c.opErr(q.op, q.peer, q.tag, err)
}

// acquire returns the transport request for use, or nil when the request
// has completed.
func (q *Request) acquire() backend.Request {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.done {
		return nil
	}
	q.users++
	return q.r
}

// settle ends a use of the transport request; completed says the use
// observed completion with st and err. The transport request is released
// once it has completed and nobody is using it.
func (q *Request) settle(completed bool, st Status, err error) {
	q.mu.Lock()
	q.users--
	if completed && !q.done {
		q.done = true
		q.st = st
		if err == nil && q.guard != nil {
			err = q.guard.check()
		}
		q.guard = nil
		q.err = q.c.opErr(q.op, q.peer, q.tag, err)
		if q.tseq != 0 {
			q.c.traceDone(q.tseq, st, q.err)
		}
	}
	var rel backend.Request
	if q.done && q.users == 0 && q.r != nil {
		rel, q.r = q.r, nil
	}
	q.mu.Unlock()
	if rel != nil {
		rel.Release()
	}
}

func (q *Request) result() (Status, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.reported = true
	return q.st, q.err
}

// Wait blocks the calling goroutine until the operation completes and
// returns its status. It is bounded by the communicator's timeout. After
// Wait returns, the buffer may be reused.
func (q *Request) Wait() (Status, error) {
	if q == nil {
		return Status{}, &OpError{Op: "wait", Rank: -1, Peer: -1, Tag: -1, Err: invalidf("nil *Request")}
	}
	if r := q.acquire(); r != nil {
		st, err := q.c.wait(r)
		q.settle(true, st, err)
	}
	return q.result()
}

// Test reports, without blocking, whether the operation has completed; if
// it has, it returns the status and error as Wait would.
func (q *Request) Test() (done bool, st Status, err error) {
	if q == nil {
		return true, Status{}, &OpError{Op: "test", Rank: -1, Peer: -1, Tag: -1, Err: invalidf("nil *Request")}
	}
	if r := q.acquire(); r != nil {
		done, st, err := r.Test()
		q.settle(done, statusOf(st), err)
		if !done {
			return false, Status{}, nil
		}
	}
	st, err = q.result()
	return true, st, err
}

// closedChan is returned by Done for completed requests.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done returns a channel that is closed when the operation completes, so a
// caller can select on it beside ctx.Done(). Completion is still collected
// with Wait or Test.
func (q *Request) Done() <-chan struct{} {
	if q == nil {
		return closedChan
	}
	r := q.acquire()
	if r == nil {
		return closedChan
	}
	ch := r.Done()
	q.settle(false, Status{}, nil)
	return ch
}

// active reports whether the request's completion is yet to be reported
// (by Wait, Test, WaitAny, WaitSome, TestAny or TestAll).
func (q *Request) active() bool {
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.reported
}

// WaitAll waits for every request and returns the errors of those that
// failed, joined (errors.Is finds each sentinel); nil requests are skipped.
// Each request's status stays available from its Wait.
func WaitAll(reqs ...*Request) error {
	var errs []error
	for _, q := range reqs {
		if q == nil {
			continue
		}
		if _, err := q.Wait(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// TestAll reports whether every request has completed, without blocking.
// When all have, it returns their errors joined, as WaitAll.
func TestAll(reqs ...*Request) (bool, error) {
	all := true
	for _, q := range reqs {
		if q == nil {
			continue
		}
		if done, _, _ := q.Test(); !done {
			all = false
		}
	}
	if !all {
		return false, nil
	}
	return true, WaitAll(reqs...)
}

// WaitAny blocks until one of the active requests completes and returns
// its index, status and error. A request is active until its completion
// has been reported (by Wait, Test, WaitAny, WaitSome, TestAny or
// TestAll); nil and inactive
// requests are skipped, so calling WaitAny repeatedly on the same list
// yields each request once. With no active request it returns -1 and no
// error at once.
func WaitAny(reqs ...*Request) (int, Status, error) {
	var timeout time.Duration
	for spin := 0; ; spin++ {
		anyActive := false
		for i, q := range reqs {
			if !q.active() {
				continue
			}
			anyActive = true
			timeout = q.c.anyBound(timeout)
			if done, st, err := q.Test(); done {
				return i, st, err
			}
		}
		if !anyActive {
			return -1, Status{}, nil
		}
		if spin < 64 {
			runtime.Gosched()
			continue
		}
		if i, ok := waitAnyCounted(reqs, timeout); !ok {
			// Timed out: abort the communicator of the first active request
			// with the report; the request then ends with ErrTimeout.
			if c := reqs[i].c; c != nil {
				c.abortTimedOut()
			}
			st, err := reqs[i].Wait()
			return i, st, err
		}
	}
}

// waitAnyCounted is waitAnyBlocking, counted as a wait of the first
// active request's communicator (for the watchdog).
func waitAnyCounted(reqs []*Request, timeout time.Duration) (int, bool) {
	for _, q := range reqs {
		if q.active() && q.c != nil {
			q.c.beginWait()
			defer q.c.endWait()
			break
		}
	}
	return waitAnyBlocking(reqs, timeout)
}

// waitAnyBlocking blocks until one active request's Done channel closes;
// on timeout it returns (index of an active request, false).
func waitAnyBlocking(reqs []*Request, timeout time.Duration) (int, bool) {
	cases := make([]reflect.SelectCase, 0, len(reqs)+1)
	index := make([]int, 0, len(reqs))
	for i, q := range reqs {
		if q.active() {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(q.Done())})
			index = append(index, i)
		}
	}
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.C)})
	}
	chosen, _, _ := reflect.Select(cases)
	if chosen == len(index) {
		return index[0], false
	}
	return index[chosen], true
}

// TestAny reports, without blocking, whether one of the active requests
// has completed, as MPI_Testany: it returns the index of the first one in
// reqs that has (that request's completion is then reported, so it is no
// longer active), done true, and its status and error as its Wait would.
// It returns what Test returns after the index, as WaitAny returns what
// Wait returns after it. Active, nil and inactive requests are as for
// WaitAny: calling TestAny repeatedly on the same list yields each
// request once. When requests are active and none has completed, it
// returns -1 and done false; with no active request (all nil or already
// reported), -1 and done true, as MPI reports MPI_UNDEFINED with the flag
// set.
func TestAny(reqs ...*Request) (index int, done bool, st Status, err error) {
	anyActive := false
	for i, q := range reqs {
		if !q.active() {
			continue
		}
		anyActive = true
		if done, st, err := q.Test(); done {
			return i, true, st, err
		}
	}
	return -1, !anyActive, Status{}, nil
}

// WaitSome blocks until at least one of the active requests completes and
// returns the indices, in increasing order, of every active request that
// has completed by then, as MPI_Waitsome; their completion is reported,
// so they are no longer active. Active, nil and inactive requests are as
// for WaitAny, and the wait is bounded as WaitAny's is. With no active
// request it returns nil and no error at once.
//
// Errors are per request: each request's status and error stay available
// from its Wait. The error WaitSome returns joins the errors of the
// requests it reports (errors.Is finds each sentinel, as for WaitAll); nil
// when all of them succeeded. One request's failure never hides another's
// completion.
func WaitSome(reqs ...*Request) ([]int, error) {
	first, _, err := WaitAny(reqs...)
	if first < 0 {
		return nil, nil
	}
	var idx []int
	var errs []error
	for i, q := range reqs {
		if i == first {
			idx = append(idx, i)
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if !q.active() {
			continue
		}
		if done, _, err := q.Test(); done {
			idx = append(idx, i)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	return idx, errors.Join(errs...)
}
