package engine

import (
	"fmt"
	"slices"

	"github.com/courier-mp/courier/backend"
)

// Cancel implements backend.Canceler. A receive still in the posted queue
// (no message has matched it) is taken out under the engine's lock and
// completed with ErrCanceled, so no arrival can match it afterwards and
// the next matching receive gets the message. A receive that has left the
// queue has matched: an eager payload is being read into it, a
// rendezvous's data is being pulled or asked for, or it has completed;
// Cancel leaves it to complete as it would have. A send is not canceled
// (MPI deprecates it): ErrNotSupported.
func (r *request) Cancel() error {
	if r.kind == reqSend {
		return fmt.Errorf("%w: a send cannot be canceled (MPI deprecates it); it goes on", backend.ErrNotSupported)
	}
	if r.isDone() {
		return nil
	}
	e, c := r.e, r.c
	e.mu.Lock()
	i := slices.Index(c.posted, r)
	if i < 0 {
		e.mu.Unlock()
		return nil // matched: it completes with the message
	}
	c.posted = slices.Delete(c.posted, i, i+1)
	e.mu.Unlock()
	// Out of the queue, r is this goroutine's to complete.
	r.complete(backend.Status{}, canceled(r.peer, r.tag))
	return nil
}

// canceled is the error of a receive canceled before it matched.
func canceled(source, tag int) error {
	from := fmt.Sprintf("rank %d", source)
	if source == backend.AnySource {
		from = "any rank"
	}
	what := fmt.Sprintf("tag %d", tag)
	if tag == backend.AnyTag {
		what = "any tag"
	}
	return fmt.Errorf("%w: the receive from %s with %s was canceled before a message matched it", backend.ErrCanceled, from, what)
}

// Cancel implements backend.Canceler for a receive into device memory: the
// host receive under it is canceled.
func (s *stagedRecv) Cancel() error {
	if c, ok := s.Request.(backend.Canceler); ok {
		return c.Cancel()
	}
	return fmt.Errorf("%w: the transport cannot cancel a receive", backend.ErrNotSupported)
}
