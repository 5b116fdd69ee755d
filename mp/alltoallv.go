package mp

import (
	"fmt"

	"github.com/courier-mp/courier/backend"
)

// Alltoallv is Alltoall of blocks of a length per pair: send holds the
// blocks for ranks 0, 1, … in rank order, one after another, the one for
// rank k of sendCounts[k] elements; recv gets the blocks from ranks 0, 1,
// … the same way, the one from rank j of recvCounts[j] elements. Each
// rank's counts are its own: one per rank, none negative, sendCounts
// summing to len(send) and recvCounts to len(recv), and rank j's
// recvCounts[k] must be rank k's sendCounts[j]. send and recv must not
// overlap.
//
// Before any block moves, every pair of ranks exchanges the two counts
// of its pair (an Alltoall of 16 bytes per pair, one more round of
// messages): a rank whose counts are bad sends word of it instead, so
// bad counts on any rank fail with ErrInvalid on every rank, and a pair
// whose counts disagree fails with ErrMismatch on both its ranks (which
// then leave each other out; the other pairs' blocks still move), never
// with a truncated message.
//
// The blocks go to every rank at once, over point-to-point messages on
// every backend (NCCL has no Alltoallv); device buffers move as the
// collectives NCCL lacks move them (straight between device buffers where
// the transport moves device memory device to device, else staged
// through host memory).
//
//go:noinline
func Alltoallv[B Buffer](c *Comm, send B, sendCounts []int, recv B, recvCounts []int) error {
	co := backend.Coll{Kind: backend.Alltoallv, Send: describe(send), Recv: describe(recv), Caller: callerPC()}
	if c == nil {
		return c.opErr("alltoallv", -1, -1, invalidf("nil *Comm"))
	}
	var span uint64
	if traceOn.Load() {
		span = c.traceColl(uint32(co.Kind), &co)
	}
	c.collLock(co.Caller, uint32(co.Kind), span)
	defer c.collUnlock()
	return c.traceEnd(span, c.opErr("alltoallv", -1, -1, c.runAlltoallv(co, sendCounts, recvCounts)))
}

// runAlltoallv is Alltoallv's part in its turn.
func (c *Comm) runAlltoallv(co backend.Coll, sendCounts, recvCounts []int) error {
	p, r := c.size, c.rank
	bad := checkCounts("sendCounts", sendCounts, p, co.Send.Count, "send")
	if bad == nil {
		bad = checkCounts("recvCounts", recvCounts, p, co.Recv.Count, "receive")
	}
	if bad == nil {
		bad = sameMemory(co.Send, co.Recv)
	}
	if bad == nil && overlap(co.Send, co.Recv) {
		bad = invalidf("the send and receive buffers overlap")
	}
	if bad == nil && sendCounts[r] != recvCounts[r] {
		bad = invalidf("sendCounts[%d] is %d but recvCounts[%d] is %d: this rank's block to itself", r, sendCounts[r], r, recvCounts[r])
	}
	if done, err := c.beginV(co, bad); done {
		return err
	}
	// The counts of each pair, this rank's to rank k at [2k, 2k+2) of
	// out (what it sends k, what it expects from k), or −1 when they are
	// bad; rank k's to this rank at [2k, 2k+2) of in. Then the offsets.
	s := getScratch(8 * int64(6*p+2))
	out, in := s.buf(0, backend.Int64, int64(2*p)), s.buf(8*int64(2*p), backend.Int64, int64(2*p))
	o, got := view[int64](out), view[int64](in)
	for k := range p {
		o[2*k], o[2*k+1] = -1, -1
		if bad == nil {
			o[2*k], o[2*k+1] = int64(sendCounts[k]), int64(recvCounts[k])
		}
	}
	if err := c.alltoallPairs(out, in); err != nil {
		s.release(err)
		return err
	}
	if bad != nil {
		s.release(nil)
		return bad
	}
	for k := range p {
		if got[2*k] < 0 {
			s.release(nil)
			return invalidf("rank %d's counts are bad (its error says why), so nothing moved", k)
		}
	}
	// agrees reports whether this rank and rank k agree on their pair's
	// counts; both compute it alike.
	agrees := func(k int) bool {
		return got[2*k] == int64(recvCounts[k]) && got[2*k+1] == int64(sendCounts[k])
	}
	sl := layout(sendCounts, view[int64](s.buf(8*int64(4*p), backend.Int64, int64(p+1))))
	rl := layout(recvCounts, view[int64](s.buf(8*int64(5*p+1), backend.Int64, int64(p+1))))
	var err error
	if isDevice(co.Send, co.Recv) && !c.onDevice() {
		err = c.onHost(co.Send, co.Recv, func(send, recv backend.Buffer) error {
			return c.alltoallvPairs(send, recv, sl, rl, agrees)
		})
	} else {
		err = c.alltoallvPairs(co.Send, co.Recv, sl, rl, agrees)
	}
	if err == nil {
		for k := range p {
			if !agrees(k) {
				err = fmt.Errorf("%w: rank %d sends this rank %d elements and expects %d from it, but this rank's recvCounts[%d] is %d and sendCounts[%d] is %d (the blocks of this pair did not move)",
					ErrMismatch, k, got[2*k], got[2*k+1], k, recvCounts[k], k, sendCounts[k])
				break
			}
		}
	}
	s.release(err)
	return err
}

// alltoallvPairs exchanges the blocks of send (blocks sl) and recv
// (blocks rl) with every rank k for which agrees(k), all at once: every
// receive posted, then every send, then every wait.
func (c *Comm) alltoallvPairs(send, recv backend.Buffer, sl, rl blocks, agrees func(int) bool) error {
	p, r := c.size, c.rank
	q := getRequests()
	var err error
	for k := 1; k < p && err == nil; k++ {
		if from := mod(r-k, p); agrees(from) {
			err = c.post(q, true, rl.block(recv, from), from)
		}
	}
	for k := 1; k < p && err == nil; k++ {
		if to := (r + k) % p; agrees(to) {
			err = c.post(q, false, sl.block(send, to), to)
		}
	}
	if err == nil {
		err = c.copyBuf(rl.block(recv, r), sl.block(send, r))
	}
	return c.waitAll(q, err)
}
