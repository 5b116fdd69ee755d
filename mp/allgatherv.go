package mp

import "github.com/courier-mp/courier/backend"

// Allgatherv is Allgather of blocks of a length per rank: rank k sends
// counts[k] elements, and every rank's recv gets them in rank order, one
// after another (rank k's from the sum of counts[0:k]). Every rank passes
// the same counts (as in MPI): one count per rank, none negative, summing
// to len(recv), and a send buffer of counts[rank] elements. send may be
// this rank's own block of recv (in place).
//
// Since every rank passes the same counts, bad counts (a wrong number of
// them, a negative one, a sum other than len(recv)) are found by every
// rank alone, before anything moves: ErrInvalid everywhere, at no cost. A
// send buffer of another length than counts[rank] is ErrInvalid on its
// rank alone, which then takes no part (the others fail as for any rank
// that leaves a collective: with the communicator's timeout); with checks
// on (COURIER_CHECK=1) every rank fails at once with ErrMismatch naming
// it, as it does where ranks pass counts of different sums.
//
// It runs over point-to-point messages on every backend (NCCL has no
// Allgatherv), with Allgather's algorithms for the total size (recursive
// doubling or Bruck's for small buffers, a ring for large ones); device
// buffers as the collectives NCCL lacks: on the GPU where the transport
// moves device memory device to device, else staged through host memory.
//
//go:noinline
func Allgatherv[B Buffer](c *Comm, send, recv B, counts []int) error {
	co := backend.Coll{Kind: backend.Allgatherv, Send: describe(send), Recv: describe(recv), Caller: callerPC()}
	if c == nil {
		return c.opErr("allgatherv", -1, -1, invalidf("nil *Comm"))
	}
	if err := checkCounts("counts", counts, c.size, co.Recv.Count, "receive"); err != nil {
		return c.opErr("allgatherv", -1, -1, err)
	}
	if err := sameMemory(co.Send, co.Recv); err != nil {
		return c.opErr("allgatherv", -1, -1, err)
	}
	var span uint64
	if traceOn.Load() {
		span = c.traceColl(uint32(co.Kind), &co)
	}
	c.collLock(co.Caller, uint32(co.Kind), span)
	defer c.collUnlock()
	return c.traceEnd(span, c.opErr("allgatherv", -1, -1, c.runAllgatherv(co, counts)))
}

// runAllgatherv is Allgatherv's part in its turn, after the checks every
// rank makes alike.
func (c *Comm) runAllgatherv(co backend.Coll, counts []int) error {
	p, r := c.size, c.rank
	bad := error(nil)
	if int64(counts[r]) != co.Send.Count {
		bad = invalidf("the send buffer has %d elements, but counts[%d] is %d", co.Send.Count, r, counts[r])
	} else if overlap(co.Send, co.Recv) && !isBlock(co.Send, co.Recv, int64(sumTo(counts, r))) {
		bad = invalidf("the send and receive buffers overlap (in place, pass this rank's block of the receive buffer as the send buffer)")
	}
	if c.check && p > 1 {
		// What every rank must agree on: the total, and a send buffer
		// of its count (a rank whose is not says a total of −1).
		desc := co
		desc.Send.Count = co.Recv.Count
		if bad != nil {
			desc.Send.Count = -1
		}
		if err := c.agree(desc); err != nil {
			return err
		}
	}
	if bad != nil {
		return bad
	}
	if p == 1 {
		return copyLocal(co.Recv, co.Send)
	}
	if co.Recv.Count == 0 {
		return nil // every count is 0: nothing moves
	}
	s := getScratch(8 * int64(p+1))
	l := layout(counts, view[int64](s.buf(0, backend.Int64, int64(p+1))))
	run := func(send, recv backend.Buffer) error {
		if small(allgatherSmall, p, recv.Len()) {
			return c.allgatherSmallv(send, recv, l)
		}
		if err := c.copyBuf(l.block(recv, r), send); err != nil {
			return err
		}
		return c.ringAllgather(recv, l)
	}
	var err error
	if isDevice(co.Send, co.Recv) && !c.onDevice() {
		err = c.onHost(co.Send, co.Recv, run)
	} else {
		err = run(co.Send, co.Recv)
	}
	s.release(err)
	return err
}
