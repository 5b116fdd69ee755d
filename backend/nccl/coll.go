package nccl

import (
	"fmt"
	"time"

	"github.com/courier-mp/courier/backend"
)

// Collective implements backend.Collectives: NCCL's own collectives, on
// the communicator of every rank that Open makes beside the channels
// (worldChan). Like a send, the collective is queued and reaches NCCL at
// the next wait, test or Done on this communicator, in a group of its own
// channel (with any other collectives queued before it), on that
// channel's stream; host buffers are staged through device memory. An
// Alltoall is a group of a send and a receive with every rank on that
// communicator.
//
// It answers backend.ErrSkip, so that package mp runs the collective over
// point-to-point messages, where NCCL cannot: a reduction of int16,
// uint16, or a product, minimum or maximum of complex numbers (NCCL has
// no such types; a sum of complex numbers is one of real numbers), or a
// communicator opened without the communicator of every rank
// (CollectivesEnv=0, or one rank).
func (c *conn) Collective(co backend.Coll) (backend.Request, error) {
	if !c.world {
		return nil, backend.ErrSkip
	}
	if co.Kind < backend.Bcast || co.Kind > backend.Alltoall {
		return nil, fmt.Errorf("%w: collective %v", backend.ErrInvalid, co.Kind)
	}
	if co.Kind.Reduces() {
		if _, _, ok := collType(co.Send.Type, co.Send.Count, true, co.Op); !ok {
			return nil, backend.ErrSkip
		}
	}
	for _, b := range []backend.Buffer{co.Send, co.Recv} {
		if err := c.validate(b); err != nil {
			return nil, err
		}
	}
	r := newRequest(c, false, co.Send, -1, -1, co.Caller)
	r.coll, r.recvBuf, r.op, r.root = co.Kind, co.Recv, co.Op, co.Root
	if co.Kind.Rooted() {
		r.peer = co.Root
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trace != nil {
		c.trace.posted(time.Now())
	}
	err := c.fatal
	if err == nil {
		err = c.chans[worldChan(c.size)].err
	}
	if err == nil {
		err = c.lostOfLocked(worldChan(c.size))
	}
	if err != nil {
		r.recycle()
		return nil, err
	}
	c.queue = append(c.queue, r)
	return r, nil
}

// startWarm connects the communicator of every rank in the background:
// NCCL connects a communicator's ranks in the first operation that needs
// them, which on 2 H200s took 0.9 s, longer than the rest of Open, and
// which a blocking communicator does inside the call, waiting for every
// rank. Done in a user's first collective, that wait would hold the
// communicator's mutex and escape COURIER_TIMEOUT; done in Open, every
// program would pay for it. So warm (the engine's warmWorld: the call,
// then a wait for its stream) runs on a goroutine of its own, outside the
// mutex, right after Open on every rank, and the channel of every rank
// takes nothing until it has returned (issueLocked): a collective posted
// meanwhile waits in the queue, its wait bounded as any other.
//
// The communicator is never aborted while the call is in NCCL (an abort
// frees what the call uses): a failure of the channel meanwhile
// (failChanLocked) only ends the wait for the stream, and the abort
// follows here, once warm has returned. Close waits for it (stopWarm).
//
// prepare runs with the mutex held and returns the call to make.
func (c *conn) startWarm(prepare func() func(quit <-chan struct{}) error) {
	w := worldChan(c.size)
	c.mu.Lock()
	warm := prepare()
	c.warming = true
	c.warmDone = make(chan struct{})
	c.warmQuit = make(chan struct{})
	c.mu.Unlock()
	go func() {
		defer close(c.warmDone)
		err := warm(c.warmQuit)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.warming = false
		switch ch := &c.chans[w]; {
		case ch.err == nil && err != nil:
			c.failChanLocked(w, fmt.Errorf("nccl: connecting the communicator of every rank (an Allreduce of one byte): %w", err))
		case ch.err != nil && !c.closing:
			// Failed while warm ran: abort now (Close leaves it to
			// engine.close).
			if abort := c.eng.detach(w); abort != nil {
				c.aborts.Add(1)
				go c.abortChan(abort, nil, ch.err)
			}
		}
		c.kick()
	}()
}

// quitWarmLocked makes warm stop waiting for its stream (Close, or a
// failure of the channel of every rank).
func (c *conn) quitWarmLocked() {
	if c.warming && !c.warmQuitting {
		c.warmQuitting = true
		close(c.warmQuit)
	}
}

// stopWarm is Close's part in startWarm: it waits for warm to return, at
// most abortBound (its call waits in NCCL only for ranks that have not
// made theirs, which every rank does right after Open). Past that, the
// engine is marked stuck: close then leaves the memory the call may use.
func (c *conn) stopWarm() error {
	if c.warmDone == nil {
		return nil
	}
	c.mu.Lock()
	c.quitWarmLocked()
	c.mu.Unlock()
	select {
	case <-c.warmDone:
		return nil
	case <-time.After(abortBound):
		if d, ok := c.eng.(*device); ok {
			d.stuck.Store(true)
		}
		return fmt.Errorf("nccl: connecting the communicator of every rank had not returned %v after Close (a rank never made its call?); its memory was left", abortBound)
	}
}
