package mp

import "github.com/courier-mp/courier/backend"

// bcastTree sends root's buf down a binomial tree: with ranks numbered
// from the root, rank v receives from v minus its lowest set bit and
// sends to v plus each lower power of two. ⌈log2 N⌉ steps of the whole
// buffer.
func (c *Comm) bcastTree(buf backend.Buffer, root int) error {
	p := c.size
	v := mod(c.rank-root, p)
	mask := 1
	for ; mask < p; mask <<= 1 {
		if v&mask != 0 {
			if err := c.recv(buf, (v-mask+root)%p); err != nil {
				return err
			}
			break
		}
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < p {
			if err := c.send(buf, (v+mask+root)%p); err != nil {
				return err
			}
		}
	}
	return nil
}

// bcastBinary sends root's buf down a binary tree: with ranks numbered
// from the root, rank v receives from (v-1)/2 and sends to 2v+1 and 2v+2.
// ⌈log2(N+1)⌉ levels, each rank sending at most twice: where back-to-back
// small Bcasts are bound by the busiest rank's sends (each one a system
// call of the TCP stack), it sends two where the binomial tree's root
// sends ⌈log2 N⌉.
func (c *Comm) bcastBinary(buf backend.Buffer, root int) error {
	p := c.size
	v := mod(c.rank-root, p)
	if v > 0 {
		if err := c.recv(buf, ((v-1)/2+root)%p); err != nil {
			return err
		}
	}
	for _, k := range [2]int{2*v + 1, 2*v + 2} {
		if k < p {
			if err := c.send(buf, (k+root)%p); err != nil {
				return err
			}
		}
	}
	return nil
}

// reduceTree combines send up a binomial tree into recv at root (the
// mirror of bcastTree). Each rank combines what its subtree sent into its
// own partial result, the lower ranks' values on the left. A leaf sends
// its send buffer as it is; an inner rank other than the root combines in
// scratch memory.
func (c *Comm) reduceTree(send, recv backend.Buffer, op Op, root int) error {
	p := c.size
	v := mod(c.rank-root, p)
	cur := send // this rank's partial result
	var s *scratch
	var acc, tmp backend.Buffer
	var err error
	for mask := 1; mask < p; mask <<= 1 {
		if v&mask != 0 {
			err = c.send(cur, (v-mask+root)%p)
			break
		}
		if v+mask >= p {
			continue
		}
		if s == nil {
			size := roundUp8(send.Len())
			if s, err = c.scratchFor(send, 2*size); err != nil {
				return err
			}
			tmp, acc = s.buf(0, send.Type, send.Count), recv
			if v != 0 {
				acc = s.buf(size, send.Type, send.Count)
			}
		}
		if err = c.recv(tmp, (v+mask+root)%p); err != nil {
			break
		}
		if err = c.combine(acc, cur, tmp, op); err != nil {
			break
		}
		cur = acc
	}
	if s != nil {
		s.release(err)
	}
	return err
}

// reduceBcast is Allreduce as reduceTree to rank 0 and bcastTree from
// it: 2⌈log2 N⌉ steps, but only 2(N−1) messages. Rank 0 computes the
// result once, so every rank gets the same bits.
func (c *Comm) reduceBcast(send, recv backend.Buffer, op Op) error {
	if err := c.reduceTree(send, recv, op, 0); err != nil {
		return err
	}
	return c.bcastTree(recv, 0)
}
