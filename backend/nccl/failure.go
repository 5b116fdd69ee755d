package nccl

import (
	"errors"
	"fmt"

	"github.com/courier-mp/courier/backend"
)

// failChanLocked ends channel i after an error that leaves its state
// unknown (an NCCL or CUDA error, a rank lost with operations on the GPU):
// its queued operations fail at once, and its NCCL communicator is aborted
// on a goroutine of its own (abortChan), outside the mutex: ncclCommAbort
// can take a while, and may need the peer to abort its side too, which
// must not wait for this rank's mutex. The operations that were on the
// GPU fail once the abort has returned, when the GPU no longer uses their
// buffers. Later operations on the channel fail with err. Other channels
// go on. Once Close has begun, engine.close aborts every channel, and
// failChanLocked only fails the operations.
func (c *conn) failChanLocked(i int, err error) {
	ch := &c.chans[i]
	first := ch.err == nil
	if first {
		ch.err = err
	}
	err = ch.err
	if first && i == worldChan(c.size) && c.warming {
		// Not aborted while startWarm's call may be in NCCL: it aborts
		// once that has returned.
		c.quitWarmLocked()
	} else if first && !c.closing {
		if abort := c.eng.detach(i); abort != nil {
			groups := ch.inflight
			ch.inflight = nil
			c.aborts.add()
			go c.abortChan(abort, groups, err)
		}
	}
	c.failGroupsLocked(ch.inflight, err, true)
	clear(ch.inflight)
	ch.inflight = ch.inflight[:0]
	if i == recvChan(chanPeer(i)) {
		c.failRecvsLocked(chanPeer(i), err, true)
	}
	kept := c.queue[:0]
	for _, r := range c.queue {
		if chanOf(r) == i {
			r.fail(err)
		} else {
			kept = append(kept, r)
		}
	}
	clear(c.queue[len(kept):])
	c.queue = kept
}

// abortChan aborts a channel's NCCL communicator (abort, from
// engine.detach, is bounded by abortBound), then fails the operations that
// were on the GPU. If the abort did not return in time, the GPU may still
// use the groups' memory: their requests fail with an error that says so,
// and their staging memory is not reused.
func (c *conn) abortChan(abort func() error, groups []*group, err error) {
	defer c.aborts.done()
	aerr := abort()
	c.mu.Lock()
	defer c.mu.Unlock()
	if aerr != nil {
		err = fmt.Errorf("%w (and ncclCommAbort failed: %v)", err, aerr)
	}
	c.failGroupsLocked(groups, err, aerr == nil || !errors.Is(aerr, errAbortStuck))
	c.kick()
}

// failGroupsLocked fails the requests of groups taken off the GPU, and
// gives back their resources (release) or, when the GPU may still use
// them, leaves them.
func (c *conn) failGroupsLocked(groups []*group, err error, release bool) {
	for _, g := range groups {
		for j := range g.ops {
			o := &g.ops[j]
			if o.r != nil {
				o.r.fail(err)
			}
			if m := o.early; m != nil {
				if m.r != nil {
					m.r.fail(err)
				}
				if m.tmp != nil && release {
					c.eng.freeTemp(m.tmp)
				}
				m.tmp = nil
			}
		}
		if release {
			c.eng.release(g)
			c.putGroup(g)
		}
	}
}

// failAllLocked aborts every channel and fails every operation, NCCL's and
// this rank's own, with err.
func (c *conn) failAllLocked(err error) {
	for i := range c.chans {
		if chanPeer(i) != c.rank {
			c.failChanLocked(i, err)
		}
	}
	for _, r := range c.queue { // none should be left: every op has a channel
		r.fail(err)
	}
	clear(c.queue)
	c.queue = c.queue[:0]
	c.wantFlush = false
	for p := range c.peers {
		c.failRecvsLocked(p, err, true)
	}
	c.self.fail(err)
	c.ipcFailAllLocked(err)
}

// peerLost records that rank p is gone (its host connection ended: it
// closed, aborted, or its process died). Queued sends to it fail at once.
// Receives of what it sent before it left may still complete: in checked
// mode those whose envelope came go on and the others fail at once;
// without checks every receive goes on. Operations on the GPU with it get
// lostGrace after their last progress to finish, after which their
// channel is aborted.
func (c *conn) peerLost(p int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing || c.fatal != nil || c.peers[p].lost != nil {
		return
	}
	if !errors.Is(err, backend.ErrPeerLost) {
		err = fmt.Errorf("%w: rank %d: %w", backend.ErrPeerLost, p, err)
	}
	c.peers[p].lost = err
	c.ipcLostLocked(p, err)
	kept := c.queue[:0]
	for _, r := range c.queue {
		if r.peer == p && !r.recv {
			r.fail(err)
		} else {
			kept = append(kept, r)
		}
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	// Checked: every message p sent was announced before it left; the
	// receives that matched none never will.
	c.failRecvsLocked(p, err, false)
	if !errors.Is(err, backend.ErrPeerClosed) {
		// p aborted, or its process vanished: what it had not delivered
		// never will be, and its side of the channels is being torn down
		// (an abort of p's may wait until this rank aborts its side).
		c.failChanLocked(sendChan(p), err)
		c.failChanLocked(recvChan(p), err)
		if c.world {
			c.failChanLocked(worldChan(c.size), err)
		}
	}
	c.kick()
}

// Abort implements backend.Conn: every pending and future operation ends
// with err, the other ranks learn that this rank is gone (first, so that
// they abort their side of the channels), and every channel is aborted
// (ncclCommAbort, all at once, each bounded by abortBound). When
// Abort returns, the GPU no longer uses the buffers of pending operations
// (unless an abort did not return in time; their requests say so). Abort
// of the communicator Open made aborts those derived from it too.
func (c *conn) Abort(err error) {
	c.mu.Lock()
	if c.fatal == nil {
		c.fatal = err
	}
	err = c.fatal
	c.mu.Unlock()
	if c.ctl != nil {
		c.ctl.abort(err)
	}
	// After the host connection's abort: the other ranks learn that this
	// rank left the world before anything of the derived ones.
	for _, d := range c.fam.derived(c) {
		d.Abort(err)
	}
	c.mu.Lock()
	c.failAllLocked(err)
	c.mu.Unlock()
	// The channel of every rank is aborted once startWarm's call has
	// returned; past abortBound the engine is marked stuck, and Close
	// says so.
	_ = c.stopWarm()
	c.aborts.wait()
}
