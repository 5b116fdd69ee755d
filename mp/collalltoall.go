package mp

import "github.com/courier-mp/courier/backend"

// alltoallPairs exchanges block k of send with every rank k at once: all
// receives posted, then all sends, then every wait. In place, send is
// copied to scratch memory first.
func (c *Comm) alltoallPairs(send, recv backend.Buffer) error {
	p, r := c.size, c.rank
	l := evenBlocks(send.Count/int64(p), p)
	var s *scratch
	if send.Ptr == recv.Ptr && send.Count > 0 {
		var err error
		if s, err = c.scratchFor(send, send.Len()); err != nil {
			return err
		}
		tmp := s.buf(0, send.Type, send.Count)
		if err := c.copyBuf(tmp, send); err != nil {
			s.release(nil) // no transport has it
			return err
		}
		send = tmp
	}
	err := c.copyBuf(l.block(recv, r), l.block(send, r))
	q := getRequests()
	for k := 1; k < p && err == nil; k++ {
		from := mod(r-k, p)
		var rq backend.Request
		if rq, err = c.conn.Irecv(l.block(recv, from), from, collTag, c.collPC); err == nil {
			q.list = append(q.list, rq)
		}
	}
	recvs := len(q.list)
	for k := 1; k < p && err == nil; k++ {
		to := (r + k) % p
		var sq backend.Request
		if sq, err = c.conn.Isend(l.block(send, to), to, collTag, c.collPC); err == nil {
			q.list = append(q.list, sq)
		}
	}
	for i, rq := range q.list {
		st, werr := c.wait(rq)
		rq.Release()
		if werr == nil && i < recvs && st.Count != l.each {
			werr = countMismatch(st.Source, st.Count, l.each)
		}
		if err == nil {
			err = werr
		}
	}
	q.release()
	if s != nil {
		s.release(err)
	}
	return err
}
