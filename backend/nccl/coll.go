package nccl

import (
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
// point-to-point messages, where NCCL cannot: a kind other than Bcast,
// Reduce, Allreduce, Allgather, ReduceScatter and Alltoall (NCCL has no
// Gather, Scatter or Scan), a reduction of int16,
// uint16, or a product, minimum or maximum of complex numbers (NCCL has
// no such types; a sum of complex numbers is one of real numbers), or a
// communicator opened without the communicator of every rank
// (CollectivesEnv=0, or one rank).
func (c *conn) Collective(co backend.Coll) (backend.Request, error) {
	if !c.runsColl(co) {
		return nil, backend.ErrSkip
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

// runsColl reports whether NCCL runs co on this communicator (see
// Collective for what it leaves to package mp).
func (c *conn) runsColl(co backend.Coll) bool {
	if !c.world || co.Kind < backend.Bcast || co.Kind > backend.Alltoall {
		return false // (Barrier is past Alltoall)
	}
	if co.Kind.Reduces() {
		_, _, ok := collType(co.Send.Type, co.Send.Count, true, co.Op)
		return ok
	}
	return true
}
