package mp

import (
	"fmt"

	"github.com/courier-mp/courier/backend"
)

// What the v-collectives (Gatherv, Scatterv, Allgatherv, Alltoallv) share:
// the checks of their counts, the blocks the counts make, and the
// exchanges of Alltoallv, every message posted at once.

// checkCounts validates the counts of a v-collective: one per rank, none
// negative, summing to total, the length of the buffer (named buf) the
// blocks lie in; what names the argument.
func checkCounts(what string, counts []int, p int, total int64, buf string) error {
	if len(counts) != p {
		return invalidf("%s has %d counts, want one per rank (%d)", what, len(counts), p)
	}
	var sum int64
	for k, n := range counts {
		if n < 0 {
			return invalidf("%s[%d] is %d: a count is not negative", what, k, n)
		}
		sum += int64(n)
	}
	if sum != total {
		return invalidf("%s sum to %d elements, but the %s buffer has %d", what, sum, buf, total)
	}
	return nil
}

// layout is the blocks of counts (one per rank, in rank order), with
// their offsets written into offs (len(counts)+1 elements).
func layout[N int | int64](counts []N, offs []int64) blocks {
	var at int64
	for k, n := range counts {
		offs[k] = at
		at += int64(n)
	}
	offs[len(counts)] = at
	return blocks{count: at, p: len(counts), offs: offs}
}

// emptyLike is a buffer of no elements of b's type and memory: the
// buffer a rank does not use (a non-root's receive buffer of Gather).
func emptyLike(b backend.Buffer) backend.Buffer {
	return backend.Buffer{Type: b.Type, Mem: b.Mem, Device: b.Device}
}

// sameMemory checks that send and recv lie in one kind of memory (and on
// one device), as the collectives need; an empty buffer lies anywhere.
func sameMemory(send, recv backend.Buffer) error {
	if send.Count == 0 || recv.Count == 0 {
		return nil
	}
	if send.Mem != recv.Mem || send.Mem == backend.Device && send.Device != recv.Device {
		return invalidf("the send and receive buffers are in different memories")
	}
	return nil
}

// overlap reports whether two buffers share memory.
func overlap(a, b backend.Buffer) bool {
	if a.Count == 0 || b.Count == 0 {
		return false
	}
	aa, ba := uintptr(a.Ptr), uintptr(b.Ptr)
	return aa < ba+uintptr(b.Len()) && ba < aa+uintptr(a.Len())
}

// post starts a send of b to rank peer (recv false) or a receive of b
// from it, of the library's tag, and appends its request to q.
func (c *Comm) post(q *requests, recv bool, b backend.Buffer, peer int) error {
	var r backend.Request
	var err error
	want := int64(-1)
	if recv {
		r, err = c.conn.Irecv(b, peer, collTag, c.collPC)
		want = b.Count
	} else {
		r, err = c.conn.Isend(b, peer, collTag, c.collPC)
	}
	if err != nil {
		return err
	}
	q.list = append(q.list, r)
	q.want = append(q.want, want)
	return nil
}

// waitAll waits for every request of q (err, a failure to post, first),
// checks that each receive filled its buffer, releases the requests and
// gives q back. It returns the first error.
func (c *Comm) waitAll(q *requests, err error) error {
	for i, r := range q.list {
		st, werr := c.wait(r)
		r.Release()
		if werr == nil && q.want[i] >= 0 && st.Count != q.want[i] {
			werr = countMismatch(st.Source, st.Count, q.want[i])
		}
		if err == nil {
			err = werr
		}
	}
	q.release()
	return err
}

// countsMismatch is the error of a rank whose own buffer does not have
// the length the counts give it.
func countsMismatch(buf string, n int64, what string, rank int, want int64) error {
	return fmt.Errorf("%w: this rank's %s buffer has %d elements, but %s[%d] is %d", ErrMismatch, buf, n, what, rank, want)
}

// rootedV runs Gatherv or Scatterv (co's kind): the ranks not at the root
// use no counts and no buffer of all the blocks, so the root checks its
// counts and sends them down a binomial tree, after a word that says
// whether they are valid, before any block moves (every rank needs them:
// the inner ranks of the block tree forward their subtrees' blocks).
func (c *Comm) rootedV(co backend.Coll, counts []int) error {
	name := co.Kind.String()
	if c == nil {
		return c.opErr(name, co.Root, -1, invalidf("nil *Comm"))
	}
	if co.Root < 0 || co.Root >= c.size {
		return c.opErr(name, co.Root, -1, invalidf("root %d is not in [0, %d)", co.Root, c.size))
	}
	var span uint64
	if traceOn.Load() {
		span = c.traceColl(uint32(co.Kind), &co)
	}
	c.collLock(co.Caller, uint32(co.Kind), span)
	defer c.collUnlock()
	return c.traceEnd(span, c.opErr(name, co.Root, -1, c.runRootedV(co, counts)))
}

// runRootedV is rootedV's part in its turn.
func (c *Comm) runRootedV(co backend.Coll, counts []int) error {
	p, r, root := c.size, c.rank, co.Root
	gather := co.Kind == backend.Gatherv
	// mine is this rank's block, all the root's buffer of every block.
	mine, all, buf := &co.Send, &co.Recv, "receive"
	if !gather {
		mine, all, buf = &co.Recv, &co.Send, "send"
	}
	var bad error
	if r == root {
		bad = checkCounts("counts", counts, p, all.Count, buf)
		if bad == nil && int64(counts[r]) != mine.Count {
			bad = invalidf("counts[%d] is %d, but the root's own block has %d elements", r, counts[r], mine.Count)
		}
		if bad == nil {
			bad = sameMemory(co.Send, co.Recv)
		}
		if bad == nil && overlap(*mine, *all) && !isBlock(*mine, *all, int64(sumTo(counts, r))) {
			bad = invalidf("the send and receive buffers overlap (in place, pass the root's own block of the %s buffer)", buf)
		}
	} else {
		*all = emptyLike(*mine)
	}
	if done, err := c.beginV(co, bad); done {
		return err
	}
	s := getScratch(8 * int64(2*p+2))
	hdr := s.buf(0, backend.Int64, int64(p+1))
	h := view[int64](hdr)
	if r == root {
		h[0] = 0
		if bad != nil {
			h[0] = 1
		} else {
			for k, n := range counts {
				h[k+1] = int64(n)
			}
		}
	}
	if err := c.bcastTree(hdr, root); err != nil {
		s.release(err)
		return err
	}
	if h[0] != 0 {
		s.release(nil)
		if bad != nil {
			return bad
		}
		return invalidf("the root (rank %d) refused its counts (its error says why)", root)
	}
	l := layout(h[1:], view[int64](s.buf(8*int64(p+1), backend.Int64, int64(p+1))))
	_, want := l.at(r)
	var err, mismatch error
	if mine.Count != want {
		own := "send"
		if !gather {
			own = "receive"
		}
		mismatch = countsMismatch(own, mine.Count, "the root's counts", r, want)
	}
	tree := c.scatterTree
	if gather {
		tree = c.gatherTree
	}
	recv := co.Recv
	var tmp *scratch
	if mismatch != nil && !gather {
		// Take this rank's part into scratch memory, so that the ranks
		// below it in the tree get theirs.
		if tmp, err = c.scratchFor(recv, want*int64(recv.Type.Size())); err != nil {
			s.release(nil)
			return err
		}
		recv = tmp.buf(0, recv.Type, want)
	}
	if isDevice(co.Send, recv) && !c.onDevice() {
		err = c.onHost(co.Send, recv, func(send, recv backend.Buffer) error { return tree(send, recv, l, root) })
	} else {
		err = tree(co.Send, recv, l, root)
	}
	if tmp != nil {
		tmp.release(err)
	}
	s.release(err)
	if err == nil {
		err = mismatch
	}
	return err
}

// sumTo is the sum of counts[0:k].
func sumTo(counts []int, k int) int {
	n := 0
	for _, x := range counts[:k] {
		n += x
	}
	return n
}

// isBlock reports whether b is the part of all from element off on.
func isBlock(b, all backend.Buffer, off int64) bool {
	return uintptr(b.Ptr) == uintptr(all.Ptr)+uintptr(off*int64(all.Type.Size()))
}

// beginV is the start Gatherv, Scatterv and Alltoallv share once a rank
// has checked its own arguments (bad): on one rank the call ends here
// (bad, or send copied to receive); with checks, every rank agrees on the
// call but not on its counts, which are the root's alone or each rank's
// own, and which the collective itself exchanges. done reports that the
// call is over, with err.
func (c *Comm) beginV(co backend.Coll, bad error) (done bool, err error) {
	if c.size == 1 {
		if bad != nil {
			return true, bad
		}
		return true, copyLocal(co.Recv, co.Send)
	}
	if c.check {
		desc := co
		desc.Send.Count = 0
		if err := c.agree(desc); err != nil {
			return true, err
		}
	}
	return false, nil
}
