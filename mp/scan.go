package mp

import "github.com/courier-mp/courier/backend"

// Scan is the inclusive prefix reduction: rank k's recv gets the
// combination with op, element by element, of the send buffers of ranks
// 0, 1, …, k, in rank order (the lower ranks' values on the left, as in
// every reduction). Every rank passes buffers of one length; recv may be
// send itself (in place). The operators and element types are those of
// Allreduce (Sum and Prod on every type, Min and Max on all but the
// complex ones; Float16 and BFloat16 combined in float32).
//
// It runs over point-to-point messages on every backend (NCCL has no
// scan): along a chain of the ranks (rank k receives from k−1 and sends
// to k+1, in pieces of 64 KiB so that the ranks work at once), which
// measured fastest on up to 8 ranks at every size, and by recursive
// doubling (⌈log2 N⌉ steps) for small buffers on more ranks
// (colltune.go). Device buffers are combined on the GPU where the
// transport moves device memory device to device (ranks sharing a GPU on
// nccl), else staged through host memory, where the combining runs.
//
//go:noinline
func Scan[B Buffer](c *Comm, send, recv B, op Op) error {
	return c.collective(backend.Coll{Kind: backend.Scan, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Caller: callerPC()})
}

// Exscan is the exclusive prefix reduction: rank k > 0's recv gets the
// combination with op of the send buffers of ranks 0, …, k−1, and rank
// 0's recv is left as it is (as in MPI). Otherwise as Scan.
//
//go:noinline
func Exscan[B Buffer](c *Comm, send, recv B, op Op) error {
	return c.collective(backend.Coll{Kind: backend.Exscan, Send: describe(send), Recv: describe(recv), Op: op.reduceOp(), Caller: callerPC()})
}

// scan runs Scan (or Exscan, when ex) by the algorithm colltune.go
// picks, in the buffers' memory.
func (c *Comm) scan(send, recv backend.Buffer, op Op, ex bool) error {
	if small(scanRD, c.size, send.Len()) {
		return c.scanRD(send, recv, op, ex)
	}
	return c.scanChain(send, recv, op, ex, chainPiece)
}

// scanRD is Scan by recursive doubling: at the step of bit m, rank r
// exchanges with rank r^m (where it exists) the combination of its
// aligned group of 2^m ranks (partial); the group of lower ranks
// combines on the left into both partial and the result, the higher on
// the right into partial only. A rank whose partner does not exist skips
// the step: no rank that exists needs what it would have sent. For
// Exscan, the first lower group's partial becomes the result.
func (c *Comm) scanRD(send, recv backend.Buffer, op Op, ex bool) error {
	p, r := c.size, c.rank
	size := roundUp8(send.Len())
	s, err := c.scratchFor(send, 2*size)
	if err != nil {
		return err
	}
	partial, tmp := s.buf(0, send.Type, send.Count), s.buf(size, send.Type, send.Count)
	err = c.copyBuf(partial, send)
	if err == nil && !ex {
		err = c.copyBuf(recv, send)
	}
	have := !ex // whether recv holds a result yet
	for mask := 1; mask < p && err == nil; mask <<= 1 {
		peer := r ^ mask
		if peer >= p {
			continue
		}
		if _, err = c.exchange(partial, peer, tmp, peer); err != nil {
			break
		}
		if peer > r {
			err = c.combine(partial, partial, tmp, op)
			continue
		}
		if err = c.combine(partial, tmp, partial, op); err != nil {
			break
		}
		if have {
			err = c.combine(recv, tmp, recv, op)
		} else {
			err = c.copyBuf(recv, tmp)
			have = true
		}
	}
	s.release(err)
	return err
}

// scanChain is Scan along the chain of ranks, in pieces of at most piece
// bytes: for each piece, rank r receives the prefix of ranks 0 … r−1 from
// rank r−1, combines its own send on the right, and sends the result to
// rank r+1, so that while a rank works on one piece the next rank works
// on the one before. Each rank sends and receives the buffer once.
func (c *Comm) scanChain(send, recv backend.Buffer, op Op, ex bool, piece int64) error {
	p, r := c.size, c.rank
	n, esize := send.Count, int64(send.Type.Size())
	step := max(piece/esize, 1)
	var s *scratch
	var in, out backend.Buffer // one piece each
	if r > 0 {
		sz := roundUp8(min(step, n) * esize)
		var err error
		if s, err = c.scratchFor(send, 2*sz); err != nil {
			return err
		}
		in, out = s.buf(0, send.Type, min(step, n)), s.buf(sz, send.Type, min(step, n))
	}
	var err error
	for off := int64(0); off < n && err == nil; off += step {
		k := min(step, n-off)
		mine, res := sub(send, off, k), sub(recv, off, k)
		if r == 0 {
			if !ex {
				err = c.copyBuf(res, mine)
			}
			if err == nil {
				err = c.send(mine, 1)
			}
			continue
		}
		prefix := sub(in, 0, k)
		if err = c.recv(prefix, r-1); err != nil {
			break
		}
		next := res
		if ex {
			next = sub(out, 0, k)
			if r < p-1 {
				err = c.combine(next, prefix, mine, op) // before res, which may be mine
			}
			if err == nil {
				err = c.copyBuf(res, prefix)
			}
		} else {
			err = c.combine(res, prefix, mine, op)
		}
		if err == nil && r < p-1 {
			err = c.send(next, r+1)
		}
	}
	if s != nil {
		s.release(err)
	}
	return err
}
