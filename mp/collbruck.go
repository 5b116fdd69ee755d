package mp

import "github.com/courier-mp/courier/backend"

// allgatherBruck is Bruck's Allgather (allgatherBruckv with blocks of one
// length).
func (c *Comm) allgatherBruck(send, recv backend.Buffer) error {
	return c.allgatherBruckv(send, recv, evenBlocks(send.Count, c.size))
}

// allgatherBruckv is Bruck's Allgather of the blocks l, for any number of
// ranks in ⌈log2 N⌉ steps: rank r gathers the blocks of ranks r, r+1, …
// (modulo N) in that order in scratch memory; at the step of distance d
// it sends the first min(d, N−d) blocks it has to rank r−d and receives as
// many from rank r+d after its own d. At the end the blocks are rotated
// into place.
func (c *Comm) allgatherBruckv(send, recv backend.Buffer, l blocks) error {
	p, r := c.size, c.rank
	s, err := c.scratchFor(recv, recv.Len())
	if err != nil {
		return err
	}
	tmp := s.buf(0, recv.Type, recv.Count)
	err = c.copyBuf(sub(tmp, 0, send.Count), send)
	for d := 1; d < p && err == nil; d <<= 1 {
		k := min(d, p-d)
		from := (r + d) % p
		_, err = c.exchange(sub(tmp, 0, l.span(r, k)), mod(r-d, p), sub(tmp, l.span(r, d), l.span(from, k)), from)
	}
	if err == nil {
		// tmp holds the blocks of ranks r … N−1, then 0 … r−1.
		at := l.start(r)
		head := l.count - at
		err = c.copyBuf(sub(recv, at, head), sub(tmp, 0, head))
		if err == nil {
			err = c.copyBuf(sub(recv, 0, at), sub(tmp, head, at))
		}
	}
	s.release(err)
	return err
}
