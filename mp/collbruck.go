package mp

import "github.com/courier-mp/courier/backend"

// allgatherBruck is Bruck's Allgather, for any number of ranks in
// ⌈log2 N⌉ steps: rank r gathers the blocks of ranks r, r+1, … (modulo N)
// in that order in scratch memory; at the step of distance d it sends the
// first min(d, N−d) blocks it has to rank r−d and receives as many from
// rank r+d after its own. At the end the blocks are rotated into place.
func (c *Comm) allgatherBruck(send, recv backend.Buffer) error {
	p, r, n := c.size, c.rank, send.Count
	s := getScratch(recv.Len())
	tmp := s.buf(0, recv.Type, recv.Count)
	copyHost(sub(tmp, 0, n), send)
	var err error
	for d := 1; d < p; d <<= 1 {
		k := int64(min(d, p-d))
		if _, err = c.exchange(sub(tmp, 0, k*n), mod(r-d, p), sub(tmp, int64(d)*n, k*n), (r+d)%p); err != nil {
			break
		}
	}
	if err == nil {
		// tmp's block i is rank r+i's.
		head := int64(p-r) * n
		copyHost(sub(recv, int64(r)*n, head), sub(tmp, 0, head))
		copyHost(sub(recv, 0, int64(r)*n), sub(tmp, head, int64(r)*n))
	}
	s.release(err)
	return err
}
