package nccl

import (
	"errors"
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
// program would pay for it. So warm (the engine's warmWorld) runs on a
// goroutine of its own, outside the mutex, and the channel of every rank
// takes nothing until it has returned (issueLocked): a collective posted
// meanwhile waits in the queue, its wait bounded as any other. Close (or
// Abort) aborts the communicator if it is still connecting, which ends
// the call.
//
// prepare runs with the mutex held and returns the call to make.
func (c *conn) startWarm(prepare func() func(stop <-chan struct{}) error) {
	w := worldChan(c.size)
	c.mu.Lock()
	warm := prepare()
	c.warming = true
	c.warmDone = make(chan struct{})
	c.mu.Unlock()
	go func() {
		defer close(c.warmDone)
		err := warm(c.stop)
		c.mu.Lock()
		c.warming = false
		if err != nil && c.chans[w].err == nil {
			c.failChanLocked(w, fmt.Errorf("nccl: connecting the communicator of every rank (an Allreduce of one byte): %w", err))
		}
		c.mu.Unlock()
		c.kick()
	}()
}

// stopWarm is Close's part in startWarm: if the communicator of every rank
// is still connecting, it is aborted (ncclCommAbort makes the call
// return), and the goroutine is waited for, at most abortBound.
func (c *conn) stopWarm() error {
	if c.warmDone == nil {
		return nil
	}
	c.mu.Lock()
	var abort func() error
	if c.warming {
		abort = c.eng.detach(worldChan(c.size))
	}
	c.mu.Unlock()
	var err error
	if abort != nil {
		err = abort()
	}
	select {
	case <-c.warmDone:
	case <-time.After(abortBound):
		return errors.Join(err, fmt.Errorf("nccl: connecting the communicator of every rank did not end within %v of its abort", abortBound))
	}
	return err
}
