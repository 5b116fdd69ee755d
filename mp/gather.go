package mp

import "github.com/courier-mp/courier/backend"

// Gather gathers every rank's send into root's recv, rank k's at block
// k: recv holds Size blocks of len(send) elements at the root and is not
// used elsewhere (pass nil there). Every rank passes a send buffer of one
// length. send may be the root's own block of recv (in place).
//
// It runs over point-to-point messages on every backend (NCCL has no
// Gather): up a binomial tree (⌈log2 N⌉ steps; each inner rank forwards
// its subtree's blocks in one message). Device buffers take the path of
// the collectives NCCL lacks: on the GPU where the transport moves device
// memory device to device (the ranks of a nccl job that share one GPU),
// else staged through host memory (the library's own messages travel in
// host memory between ranks of NCCL's channels).
//
//go:noinline
func Gather[B Buffer](c *Comm, send, recv B, root int) error {
	return c.collective(backend.Coll{Kind: backend.Gather, Send: describe(send), Recv: describe(recv), Root: root, Caller: callerPC()})
}

// Gatherv is Gather of blocks of a length per rank: rank k sends
// counts[k] elements, and they lie in root's recv in rank order, one
// after another (rank k's from the sum of counts[0:k]). Only the root's
// counts and recv are used (other ranks may pass nil for both), and
// counts holds one count per rank, none negative, summing to len(recv),
// with counts[root] = len(send).
//
// The root tells the other ranks its counts before any block moves: a
// Bcast of Size+1 integers (⌈log2 N⌉ steps) that also says whether they
// are valid. So bad counts at the root (a wrong number of them, a
// negative one, a sum other than len(recv)) fail with ErrInvalid on every
// rank and nothing else moves. A rank whose send buffer is not the length
// the root's counts give it fails with ErrMismatch, and so does the rank
// that receives its block (where the transport can tell; the ranks above
// it in the tree then fail as for any rank that leaves a collective: with
// the communicator's timeout).
//
// The blocks take Gather's path (a binomial tree; device buffers as
// Gather's).
//
//go:noinline
func Gatherv[B Buffer](c *Comm, send, recv B, counts []int, root int) error {
	return c.rootedV(backend.Coll{Kind: backend.Gatherv, Send: describe(send), Recv: describe(recv), Root: root, Caller: callerPC()}, counts)
}

// gatherTree gathers send up a binomial tree into recv at root (the
// mirror of scatterTree): with ranks numbered from the root, rank v
// receives from v plus each power of two below its lowest set bit the
// blocks of that child's subtree, in scratch memory after its own block,
// and sends them all on to v minus its lowest set bit. A leaf sends its
// send buffer as it is; the root receives each child's blocks straight
// into recv (one child's, whose ranks wrap past the last, through
// scratch memory). The blocks are l's; a rank's own block is as long as
// its send buffer (where that differs from l, its parent sees a message
// of the wrong length).
func (c *Comm) gatherTree(send, recv backend.Buffer, l blocks, root int) error {
	p, r := c.size, c.rank
	v := mod(r-root, p)
	if v == 0 {
		if err := c.copyBuf(l.block(recv, r), send); err != nil {
			return err
		}
		for mask := 1; mask < p; mask <<= 1 {
			if err := c.recvSpan(recv, l, (r+mask)%p, min(mask, p-mask)); err != nil {
				return err
			}
		}
		return nil
	}
	low := v & -v
	lim := min(low, p-v) // the ranks of this rank's subtree, itself first
	parent := (v - low + root) % p
	if lim == 1 {
		return c.send(send, parent)
	}
	own, next := send.Count, (r+1)%p
	total := own + l.span(next, lim-1)
	s, err := c.scratchFor(send, total*int64(send.Type.Size()))
	if err != nil {
		return err
	}
	tree := s.buf(0, send.Type, total)
	err = c.copyBuf(sub(tree, 0, own), send)
	for mask := 1; mask < lim && err == nil; mask <<= 1 {
		child := (r + mask) % p
		err = c.recv(sub(tree, own+l.span(next, mask-1), l.span(child, min(mask, lim-mask))), child)
	}
	if err == nil {
		err = c.send(tree, parent)
	}
	s.release(err)
	return err
}

// recvSpan receives from rank from the blocks of the n ranks from, from+1,
// … (modulo Size) into their places in all: straight there, or, where
// they wrap past the last rank, through scratch memory.
func (c *Comm) recvSpan(all backend.Buffer, l blocks, from, n int) error {
	total := l.span(from, n)
	at := l.start(from)
	if from+n <= c.size {
		return c.recv(sub(all, at, total), from)
	}
	s, err := c.scratchFor(all, total*int64(all.Type.Size()))
	if err != nil {
		return err
	}
	tmp := s.buf(0, all.Type, total)
	err = c.recv(tmp, from)
	if err == nil {
		head := l.count - at
		err = c.copyBuf(sub(all, at, head), sub(tmp, 0, head))
		if err == nil {
			err = c.copyBuf(sub(all, 0, total-head), sub(tmp, head, total-head))
		}
	}
	s.release(err)
	return err
}
