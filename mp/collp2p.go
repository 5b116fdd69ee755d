package mp

import (
	"fmt"
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

// The collectives over point-to-point messages, on host memory, for the
// transports that do not run them (backend.Collectives). Every message
// carries collTag; each rank's messages to one peer are sent, and
// received, in one order on both sides, so they match in order.

// smallAllreduce is the size below which Allreduce is a Reduce to rank 0
// and a Bcast (2⌈log2 N⌉ steps) instead of a ring (2(N−1) steps of 1/N of
// the data each).
const smallAllreduce = 64 << 10

// p2pColl runs a validated collective of host buffers.
func (c *Comm) p2pColl(co backend.Coll) error {
	switch co.Kind {
	case backend.Bcast:
		return c.bcastTree(co.Recv, co.Root)
	case backend.Reduce:
		return c.reduceTree(co.Send, co.Recv, co.Op, co.Root)
	case backend.Allreduce:
		if co.Send.Len() < smallAllreduce || co.Send.Count < int64(c.size) {
			if err := c.reduceTree(co.Send, co.Recv, co.Op, 0); err != nil {
				return err
			}
			return c.bcastTree(co.Recv, 0)
		}
		copyHost(co.Recv, co.Send)
		return c.ringAllreduce(co.Recv, co.Op)
	case backend.Allgather:
		n := co.Send.Count
		copyHost(sub(co.Recv, int64(c.rank)*n, n), co.Send)
		return c.ringAllgather(co.Recv, func(k int) (int64, int64) { return int64(k) * n, n })
	case backend.ReduceScatter:
		work := hostLike(co.Send)
		copyHost(work, co.Send)
		n := co.Recv.Count
		if err := c.ringReduceScatter(work, co.Op, func(k int) (int64, int64) { return int64(k) * n, n }); err != nil {
			return err
		}
		copyHost(co.Recv, sub(work, int64(c.rank)*n, n))
		return nil
	case backend.Alltoall:
		return c.alltoallPairs(co.Send, co.Recv)
	}
	return fmt.Errorf("%w: collective %v", ErrInvalid, co.Kind)
}

// sub is elements [off, off+n) of host buffer b.
func sub(b backend.Buffer, off, n int64) backend.Buffer {
	out := backend.Buffer{Count: n, Type: b.Type, Mem: backend.Host}
	if n > 0 {
		out.Ptr = unsafe.Add(b.Ptr, off*int64(b.Type.Size()))
	}
	return out
}

// copyHost copies src into dst (host memory of one shape), unless they
// are the same memory.
func copyHost(dst, src backend.Buffer) {
	if dst.Ptr != src.Ptr {
		copy(dst.Bytes(), src.Bytes())
	}
}

// exchange sends out to rank to and receives in from rank from, at once
// (either skipped when its rank is -1), and checks that the message
// received filled in. The send is posted first: a send that cannot start
// leaves nothing posted. On failure it also returns the rank of the side
// that failed. The messages carry the line of the program's call
// (collPC).
func (c *Comm) exchange(out backend.Buffer, to int, in backend.Buffer, from int) (int, error) {
	var sr, rr backend.Request
	var err error
	if to >= 0 {
		if sr, err = c.conn.Isend(out, to, collTag, c.collPC); err != nil {
			return to, err
		}
	}
	if from >= 0 {
		rr, err = c.conn.Irecv(in, from, collTag, c.collPC)
	}
	var serr, rerr error
	if sr != nil {
		_, serr = c.wait(sr)
		sr.Release()
	}
	if rr != nil {
		var st Status
		st, rerr = c.wait(rr)
		rr.Release()
		if rerr == nil && st.Count != in.Count {
			rerr = countMismatch(from, st.Count, in.Count)
		}
	}
	switch {
	case err != nil:
		return from, err
	case serr != nil:
		return to, serr
	case rerr != nil:
		return from, rerr
	}
	return -1, nil
}

// countMismatch is the error of a collective's message whose count is
// not the one this rank expected.
func countMismatch(from int, got, want int64) error {
	return fmt.Errorf("%w: rank %d sent %d elements where this rank expected %d: do all ranks pass buffers of the same length?",
		ErrMismatch, from, got, want)
}

// bcastTree sends root's buf down a binomial tree: with ranks numbered
// from the root, rank v receives from v minus its lowest set bit and
// sends to v plus each lower power of two.
func (c *Comm) bcastTree(buf backend.Buffer, root int) error {
	p := c.size
	v := (c.rank - root + p) % p
	mask := 1
	for ; mask < p; mask <<= 1 {
		if v&mask != 0 {
			if _, err := c.exchange(backend.Buffer{}, -1, buf, (v-mask+root)%p); err != nil {
				return err
			}
			break
		}
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if v+mask < p {
			if _, err := c.exchange(buf, (v+mask+root)%p, backend.Buffer{}, -1); err != nil {
				return err
			}
		}
	}
	return nil
}

// reduceTree combines send up a binomial tree into recv at root (the
// mirror of bcastTree). Each rank combines what its subtree sent into its
// own partial result, the lower ranks' values on the left.
func (c *Comm) reduceTree(send, recv backend.Buffer, op Op, root int) error {
	p := c.size
	v := (c.rank - root + p) % p
	acc := recv
	if c.rank != root {
		acc = hostLike(send)
	}
	copyHost(acc, send)
	var tmp backend.Buffer
	for mask := 1; mask < p; mask <<= 1 {
		if v&mask != 0 {
			_, err := c.exchange(acc, (v-mask+root)%p, backend.Buffer{}, -1)
			return err
		}
		if v+mask < p {
			if tmp.Type == backend.Invalid {
				tmp = hostLike(send)
			}
			if _, err := c.exchange(backend.Buffer{}, -1, tmp, (v+mask+root)%p); err != nil {
				return err
			}
			reduceHost(acc, tmp, op)
		}
	}
	return nil
}

// ringAllreduce combines every rank's work into every rank's work: a ring
// reduce-scatter of N blocks (rank k ends with block k combined), then a
// ring allgather of the blocks.
func (c *Comm) ringAllreduce(work backend.Buffer, op Op) error {
	n, p := work.Count, int64(c.size)
	block := func(k int) (int64, int64) {
		lo, hi := n*int64(k)/p, n*int64(k+1)/p
		return lo, hi - lo
	}
	if err := c.ringReduceScatter(work, op, block); err != nil {
		return err
	}
	return c.ringAllgather(work, block)
}

// ringReduceScatter combines block k of every rank's work into rank k's
// block k, in N−1 steps around the ring: at step s, each rank sends its
// partial block r−s−1 to the next rank and combines the previous rank's
// partial block r−s−2 into its own.
func (c *Comm) ringReduceScatter(work backend.Buffer, op Op, block func(k int) (off, n int64)) error {
	p, r := c.size, c.rank
	next, prev := (r+1)%p, (r-1+p)%p
	var most int64
	for k := range p {
		_, n := block(k)
		most = max(most, n)
	}
	tmp := hostLike(backend.Buffer{Count: most, Type: work.Type})
	for s := range p - 1 {
		so, sn := block(((r-s-1)%p + p) % p)
		ro, rn := block(((r-s-2)%p + p) % p)
		in := sub(tmp, 0, rn)
		if _, err := c.exchange(sub(work, so, sn), next, in, prev); err != nil {
			return err
		}
		reduceHost(sub(work, ro, rn), in, op)
	}
	return nil
}

// ringAllgather spreads each rank's block (rank k holds block k of work)
// to every rank, in N−1 steps around the ring: at step s, each rank sends
// block r−s to the next rank and receives block r−s−1 from the previous.
func (c *Comm) ringAllgather(work backend.Buffer, block func(k int) (off, n int64)) error {
	p, r := c.size, c.rank
	next, prev := (r+1)%p, (r-1+p)%p
	for s := range p - 1 {
		so, sn := block(((r-s)%p + p) % p)
		ro, rn := block(((r-s-1)%p + p) % p)
		if _, err := c.exchange(sub(work, so, sn), next, sub(work, ro, rn), prev); err != nil {
			return err
		}
	}
	return nil
}

// alltoallPairs exchanges block k of send with every rank k at once: all
// receives posted, then all sends, then every wait.
func (c *Comm) alltoallPairs(send, recv backend.Buffer) error {
	p, r := c.size, c.rank
	n := send.Count / int64(p)
	if send.Ptr == recv.Ptr && send.Count > 0 {
		tmp := hostLike(send)
		copyHost(tmp, send)
		send = tmp
	}
	copyHost(sub(recv, int64(r)*n, n), sub(send, int64(r)*n, n))
	reqs := make([]backend.Request, 0, 2*(p-1))
	var err error
	for k := 1; k < p && err == nil; k++ {
		from := (r - k + p) % p
		var q backend.Request
		if q, err = c.conn.Irecv(sub(recv, int64(from)*n, n), from, collTag, c.collPC); err == nil {
			reqs = append(reqs, q)
		}
	}
	for k := 1; k < p && err == nil; k++ {
		to := (r + k) % p
		var q backend.Request
		if q, err = c.conn.Isend(sub(send, int64(to)*n, n), to, collTag, c.collPC); err == nil {
			reqs = append(reqs, q)
		}
	}
	for i, q := range reqs {
		st, werr := c.wait(q)
		q.Release()
		if werr == nil && i < p-1 && st.Count != n {
			werr = countMismatch(st.Source, st.Count, n)
		}
		if err == nil {
			err = werr
		}
	}
	return err
}
