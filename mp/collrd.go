package mp

import (
	"math/bits"

	"github.com/courier-mp/courier/backend"
)

// Recursive doubling: ⌈log2 N⌉ steps in which pairs of ranks exchange
// everything they have, the latency-optimal algorithms for small buffers.

// allreduceRD is Allreduce by recursive doubling. With P the largest
// power of two not over N and R = N − P, ranks 0 … 2R−1 first fold in
// pairs (each even rank gives its buffer to the odd rank above it, which
// takes part for both), then the P ranks that remain exchange and combine
// with the rank whose position among them differs in one bit, highest bit
// last, and at the end each odd rank of a pair hands the result to its
// even rank.
//
// Every combination puts the value of the lower ranks on the left, and
// the two ranks of a pair combine the same two values, so every rank ends
// with the same bits (also for floating point).
func (c *Comm) allreduceRD(send, recv backend.Buffer, op Op) error {
	s, err := c.scratchFor(send, send.Len())
	if err != nil {
		return err
	}
	err = c.allreduceRDWith(send, recv, s.buf(0, send.Type, send.Count), op)
	s.release(err)
	return err
}

// allreduceRDWith is allreduceRD with tmp (of send's shape) to receive
// into. recv may be send.
func (c *Comm) allreduceRDWith(send, recv, tmp backend.Buffer, op Op) error {
	p, r := c.size, c.rank
	pof2 := 1 << (bits.Len(uint(p)) - 1)
	rem := p - pof2
	cur := send  // this rank's partial result: recv after the first combination
	v := r - rem // this rank's position among the pof2 ranks that take part
	if r < 2*rem {
		if r%2 == 0 {
			if err := c.send(send, r+1); err != nil {
				return err
			}
			return c.recv(recv, r+1)
		}
		if err := c.recv(tmp, r-1); err != nil {
			return err
		}
		if err := c.combine(recv, tmp, send, op); err != nil {
			return err
		}
		cur, v = recv, r/2
	}
	for mask := 1; mask < pof2; mask <<= 1 {
		pv := v ^ mask
		peer := pv + rem
		if pv < rem {
			peer = 2*pv + 1
		}
		if _, err := c.exchange(cur, peer, tmp, peer); err != nil {
			return err
		}
		a, b := cur, tmp
		if pv < v {
			a, b = tmp, cur
		}
		if err := c.combine(recv, a, b, op); err != nil {
			return err
		}
		cur = recv
	}
	if r < 2*rem {
		return c.send(recv, r-1)
	}
	return nil
}

// reduceScatterRD is ReduceScatter as an Allreduce by recursive doubling
// of the whole send buffer into scratch memory, from which each rank
// keeps its block: for small buffers, where the steps cost more than the
// data.
func (c *Comm) reduceScatterRD(send, recv backend.Buffer, op Op) error {
	size := roundUp8(send.Len())
	s, err := c.scratchFor(send, 2*size)
	if err != nil {
		return err
	}
	all := s.buf(0, send.Type, send.Count)
	err = c.allreduceRDWith(send, all, s.buf(size, send.Type, send.Count), op)
	if err == nil {
		err = c.copyBuf(recv, evenBlocks(recv.Count, c.size).block(all, c.rank))
	}
	s.release(err)
	return err
}

// allgatherRD is Allgather by recursive doubling, for a power of two of
// ranks (allgatherRDv with blocks of one length).
func (c *Comm) allgatherRD(send, recv backend.Buffer) error {
	return c.allgatherRDv(send, recv, evenBlocks(send.Count, c.size))
}

// allgatherRDv is Allgather of the blocks l (rank k's send is block k of
// recv) by recursive doubling (rdGather), for a power of two of ranks.
func (c *Comm) allgatherRDv(send, recv backend.Buffer, l blocks) error {
	if err := c.copyBuf(l.block(recv, c.rank), send); err != nil {
		return err
	}
	return c.rdGather(recv, l)
}

// rdGather spreads each rank's block of work (rank k holds block k) to
// every rank by recursive doubling, for a power of two of ranks: at the
// step of bit m, each rank holds the blocks of the 2^m ranks of its
// aligned group and exchanges them with the rank whose number differs in
// bit m, so every message is one contiguous part of work.
func (c *Comm) rdGather(work backend.Buffer, l blocks) error {
	p, r := c.size, c.rank
	for mask := 1; mask < p; mask <<= 1 {
		peer := r ^ mask
		mine, theirs := r&^(mask-1), peer&^(mask-1)
		if _, err := c.exchange(sub(work, l.start(mine), l.span(mine, mask)), peer, sub(work, l.start(theirs), l.span(theirs, mask)), peer); err != nil {
			return err
		}
	}
	return nil
}
