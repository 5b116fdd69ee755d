package mp

import (
	"math/bits"

	"github.com/courier-mp/courier/backend"
)

// Scatter sends block k of root's send to rank k's recv: send holds Size
// blocks of len(recv) elements at the root and is not used elsewhere
// (pass nil there). Every rank passes a receive buffer of one length.
// recv may be the root's own block of send (in place).
//
// It runs over point-to-point messages on every backend (NCCL has no
// Scatter): down a binomial tree (⌈log2 N⌉ steps; each inner rank
// receives its subtree's blocks in one message and forwards them).
// Device buffers take Gather's path.
//
//go:noinline
func Scatter[B Buffer](c *Comm, send, recv B, root int) error {
	return c.collective(backend.Coll{Kind: backend.Scatter, Send: describe(send), Recv: describe(recv), Root: root, Caller: callerPC()})
}

// Scatterv is Scatter of blocks of a length per rank: root's send holds
// the blocks in rank order, one after another, rank k's of counts[k]
// elements (from the sum of counts[0:k]), and rank k's recv gets it. Only
// the root's counts and send are used (other ranks may pass nil for
// both), and counts holds one count per rank, none negative, summing to
// len(send), with counts[root] = len(recv).
//
// As in Gatherv, the root tells the other ranks its counts (and whether
// they are valid) before any block moves, so bad counts at the root fail
// with ErrInvalid on every rank. A rank whose receive buffer is not the
// length the root's counts give it fails with ErrMismatch (it still
// takes its part, so the other ranks are not held up, and its recv is
// left as it was). The blocks take Scatter's path.
//
//go:noinline
func Scatterv[B Buffer](c *Comm, send B, counts []int, recv B, root int) error {
	return c.rootedV(backend.Coll{Kind: backend.Scatterv, Send: describe(send), Recv: describe(recv), Root: root, Caller: callerPC()}, counts)
}

// scatterTree sends the blocks l of root's send down a binomial tree
// (the mirror of gatherTree, in bcastTree's order): rank v receives from
// its parent the blocks of its subtree, itself first, in scratch memory,
// keeps its own block and sends each child's subtree on, the largest
// first. A leaf receives straight into recv; the root sends each child's
// blocks straight from send (one child's, whose ranks wrap past the last,
// through scratch memory). recv has this rank's block's length.
func (c *Comm) scatterTree(send, recv backend.Buffer, l blocks, root int) error {
	p, r := c.size, c.rank
	v := mod(r-root, p)
	if v == 0 {
		for mask := topBit(p); mask > 0; mask >>= 1 {
			if err := c.sendSpan(send, l, (r+mask)%p, min(mask, p-mask)); err != nil {
				return err
			}
		}
		return c.copyBuf(recv, l.block(send, r))
	}
	low := v & -v
	lim := min(low, p-v)
	parent := (v - low + root) % p
	if lim == 1 {
		return c.recv(recv, parent)
	}
	own, next := recv.Count, (r+1)%p
	total := own + l.span(next, lim-1)
	s, err := c.scratchFor(recv, total*int64(recv.Type.Size()))
	if err != nil {
		return err
	}
	tree := s.buf(0, recv.Type, total)
	err = c.recv(tree, parent)
	if err == nil {
		err = c.copyBuf(recv, sub(tree, 0, own))
	}
	for mask := topBit(lim); mask > 0 && err == nil; mask >>= 1 {
		child := (r + mask) % p
		err = c.send(sub(tree, own+l.span(next, mask-1), l.span(child, min(mask, lim-mask))), child)
	}
	s.release(err)
	return err
}

// topBit is the largest power of two below n (n at least 2), 0 for n 1.
func topBit(n int) int {
	if n < 2 {
		return 0
	}
	return 1 << (bits.Len(uint(n-1)) - 1)
}

// sendSpan sends rank to the blocks of the n ranks to, to+1, … (modulo
// Size) of all: straight from there, or, where they wrap past the last
// rank, through scratch memory.
func (c *Comm) sendSpan(all backend.Buffer, l blocks, to, n int) error {
	total := l.span(to, n)
	at := l.start(to)
	if to+n <= c.size {
		return c.send(sub(all, at, total), to)
	}
	s, err := c.scratchFor(all, total*int64(all.Type.Size()))
	if err != nil {
		return err
	}
	tmp := s.buf(0, all.Type, total)
	head := l.count - at
	err = c.copyBuf(sub(tmp, 0, head), sub(all, at, head))
	if err == nil {
		err = c.copyBuf(sub(tmp, head, total-head), sub(all, 0, total-head))
	}
	if err == nil {
		err = c.send(tmp, to)
	}
	s.release(err)
	return err
}
