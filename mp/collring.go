package mp

import "github.com/courier-mp/courier/backend"

// Rings: N−1 steps in which each rank sends one block to the next rank
// and receives one from the previous, the bandwidth-optimal algorithms for
// large buffers (each rank sends and receives (N−1)/N of the data, once
// for Allgather and ReduceScatter, twice for Allreduce).

// allreduceRing is Allreduce as a ring reduce-scatter of N blocks (rank
// k ends with block k combined) into recv, then a ring allgather of the
// blocks. recv may be send.
func (c *Comm) allreduceRing(send, recv backend.Buffer, op Op) error {
	l := splitBlocks(recv.Count, c.size)
	s, err := c.scratchFor(recv, l.most()*int64(recv.Type.Size()))
	if err != nil {
		return err
	}
	err = c.ringReduceScatter(send, recv, s.buf(0, recv.Type, l.most()), op, l)
	if err == nil {
		err = c.ringAllgather(recv, l)
	}
	s.release(err)
	return err
}

// ringReduceScatter combines block k of every rank's send into block k
// of rank k's recv, in N−1 steps around the ring: at step s, each rank
// sends its partial block r−s−1 to the next rank (its own block of send
// at the first step, then the one it combined at the step before) and
// receives the previous rank's partial block r−s−2 into tmp, which it
// combines with its own block of send into that block of recv. Blocks of
// recv other than r that a step combined hold partial results afterwards.
// recv may be send; tmp holds a block.
func (c *Comm) ringReduceScatter(send, recv, tmp backend.Buffer, op Op, l blocks) error {
	p, r := c.size, c.rank
	next, prev := (r+1)%p, mod(r-1, p)
	for s := range p - 1 {
		out := l.block(recv, mod(r-s-1, p))
		if s == 0 {
			out = l.block(send, mod(r-1, p))
		}
		k := mod(r-s-2, p)
		_, n := l.at(k)
		in := sub(tmp, 0, n)
		if _, err := c.exchange(out, next, in, prev); err != nil {
			return err
		}
		if err := c.combine(l.block(recv, k), in, l.block(send, k), op); err != nil {
			return err
		}
	}
	return nil
}

// reduceScatterRing is ReduceScatter around a ring, as ringReduceScatter
// but with the partial blocks in two scratch blocks that take turns (one
// sent while the other receives) and the last step's combination written
// to recv.
func (c *Comm) reduceScatterRing(send, recv backend.Buffer, op Op) error {
	p, r, n := c.size, c.rank, recv.Count
	l := evenBlocks(n, p)
	next, prev := (r+1)%p, mod(r-1, p)
	size := roundUp8(recv.Len())
	sc, err := c.scratchFor(recv, 2*size)
	if err != nil {
		return err
	}
	bufs := [2]backend.Buffer{sc.buf(0, recv.Type, n), sc.buf(size, recv.Type, n)}
	out := l.block(send, mod(r-1, p))
	for s := range p - 1 {
		in := bufs[s%2]
		if _, err = c.exchange(out, next, in, prev); err != nil {
			break
		}
		dst := in
		if s == p-2 {
			dst = recv
		}
		if err = c.combine(dst, in, l.block(send, mod(r-s-2, p)), op); err != nil {
			break
		}
		out = dst
	}
	sc.release(err)
	return err
}

// allgatherRing is Allgather around a ring, in recv.
func (c *Comm) allgatherRing(send, recv backend.Buffer) error {
	n := send.Count
	if err := c.copyBuf(sub(recv, int64(c.rank)*n, n), send); err != nil {
		return err
	}
	return c.ringAllgather(recv, evenBlocks(n, c.size))
}

// ringAllgather spreads each rank's block (rank k holds block k of work)
// to every rank, in N−1 steps around the ring: at step s, each rank sends
// block r−s to the next rank and receives block r−s−1 from the previous.
func (c *Comm) ringAllgather(work backend.Buffer, l blocks) error {
	p, r := c.size, c.rank
	next, prev := (r+1)%p, mod(r-1, p)
	for s := range p - 1 {
		if _, err := c.exchange(l.block(work, mod(r-s, p)), next, l.block(work, mod(r-s-1, p)), prev); err != nil {
			return err
		}
	}
	return nil
}
