package nccl

import (
	"fmt"
	"slices"

	"github.com/courier-mp/courier/backend"
)

// Cancel implements backend.Canceler. A receive can be canceled while no
// message has been given to it and NCCL does not have it: a receive from
// this rank itself not yet matched in memory; with checks, a receive
// waiting among its peer's posted ones (no announced message matched it);
// without checks, a receive still queued (not yet issued in a group, which
// happens at the next Wait, Test or Done of the communicator). It is taken
// out under the communicator's mutex and completes with ErrCanceled; a
// later message from the peer goes to the next receive. A receive NCCL
// has, or one matched to a message, completes as it would have (NCCL
// cannot take back an operation it was given). Sends and collectives are
// ErrNotSupported.
func (r *request) Cancel() error {
	if !r.recv || r.coll != 0 {
		return fmt.Errorf("%w: only a receive can be canceled (MPI deprecates canceling sends); the operation goes on", backend.ErrNotSupported)
	}
	if r.done.Load() {
		return nil
	}
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.stage == stageDone {
		return nil
	}
	var removed bool
	switch {
	case r.peer == c.rank:
		c.self.posted, removed = without(c.self.posted, r)
	case r.stage == stageIPC:
		removed = c.ipcCancelLocked(c.ipcPeerOf(r.peer), r)
	case c.check:
		p := &c.peers[r.peer]
		p.posted, removed = without(p.posted, r)
	case r.stage == stageQueued:
		c.queue, removed = without(c.queue, r)
	}
	if removed {
		r.fail(fmt.Errorf("%w: the receive from rank %d with tag %d was canceled before a message matched it",
			backend.ErrCanceled, r.peer, r.tag))
	}
	return nil
}

// without removes r from list, reporting whether it was there.
func without(list []*request, r *request) ([]*request, bool) {
	i := slices.Index(list, r)
	if i < 0 {
		return list, false
	}
	return slices.Delete(list, i, i+1), true
}
