package nccl

import (
	"slices"
	"unsafe"

	"github.com/courier-mp/courier/backend"
)

// selfQueue matches the messages a rank sends itself. They never touch
// NCCL (a self send and receive in one group works on NCCL, but matching
// them by tag, and a send that must complete before its receive is posted,
// need more than NCCL's in-order delivery). Like MPI, and unlike messages
// between ranks here, they match by tag: the oldest message with the
// receive's tag.
type selfQueue struct {
	posted []*request // receives from this rank, oldest first
	msgs   []*selfMsg // messages sent before a receive took them, oldest first
}

// selfMsg is a message to this rank that no receive has taken yet: a copy
// of its payload, in host memory.
type selfMsg struct {
	tag   int
	typ   backend.DType
	count int64
	data  []byte
}

// sendSelfLocked delivers send r to this rank: straight into the oldest
// posted receive with its tag, or copied aside until one is posted. The
// send completes at once, whatever the size. An error (a failed device
// copy) is returned and r is not used.
func (c *conn) sendSelfLocked(r *request) error {
	r.stage = stageLocal
	st := backend.Status{Source: c.rank, Tag: r.tag, Count: r.buf.Count}
	if i := slices.IndexFunc(c.self.posted, func(q *request) bool { return q.tag == r.tag }); i >= 0 {
		q := c.self.posted[i]
		c.self.posted = slices.Delete(c.self.posted, i, i+1)
		c.deliverSelfLocked(q, r.tag, r.buf.Type, r.buf.Count, r.buf.Ptr, r.buf.Mem)
		r.complete(st, nil)
		return nil
	}
	m := &selfMsg{tag: r.tag, typ: r.buf.Type, count: r.buf.Count}
	if n := r.buf.Len(); n > 0 {
		m.data = make([]byte, n)
		if err := c.copyLocked(unsafe.Pointer(&m.data[0]), backend.Host, r.buf.Ptr, r.buf.Mem, n); err != nil {
			return err
		}
	}
	c.self.msgs = append(c.self.msgs, m)
	r.complete(st, nil)
	return nil
}

// recvSelfLocked posts receive r from this rank, or completes it at once
// with the oldest message already sent with its tag.
func (c *conn) recvSelfLocked(r *request) {
	r.stage = stageLocal
	i := slices.IndexFunc(c.self.msgs, func(m *selfMsg) bool { return m.tag == r.tag })
	if i < 0 {
		c.self.posted = append(c.self.posted, r)
		return
	}
	m := c.self.msgs[i]
	c.self.msgs = slices.Delete(c.self.msgs, i, i+1)
	var src unsafe.Pointer
	if len(m.data) > 0 {
		src = unsafe.Pointer(&m.data[0])
	}
	c.deliverSelfLocked(r, m.tag, m.typ, m.count, src, backend.Host)
}

// deliverSelfLocked copies a message of count × typ at src into receive q
// and completes q, or completes it with the error the checks find.
func (c *conn) deliverSelfLocked(q *request, tag int, typ backend.DType, count int64, src unsafe.Pointer, mem backend.MemKind) {
	st := backend.Status{Source: c.rank, Tag: tag, Count: count}
	if err := c.verdictOf(q, c.rank, tag, typ, count); err != nil {
		q.complete(st, err)
		return
	}
	if err := c.copyLocked(q.buf.Ptr, q.buf.Mem, src, mem, count*int64(typ.Size())); err != nil {
		q.complete(st, err)
		return
	}
	q.complete(st, nil)
}

// copyLocked copies n bytes between host or device buffers: with Go's
// copy when both are host memory, through the CUDA driver otherwise.
func (c *conn) copyLocked(dst unsafe.Pointer, dmem backend.MemKind, src unsafe.Pointer, smem backend.MemKind, n int64) error {
	if n == 0 {
		return nil
	}
	if dmem == backend.Host && smem == backend.Host {
		copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(src), n))
		return nil
	}
	return c.eng.copyBytes(dst, src, n)
}

// fail ends every posted receive with err. Messages copied aside are
// dropped.
func (s *selfQueue) fail(err error) {
	for _, r := range s.posted {
		r.fail(err)
	}
	clear(s.posted)
	s.posted = s.posted[:0]
	clear(s.msgs)
	s.msgs = s.msgs[:0]
}

// pending describes the posted receives.
func (s *selfQueue) pending() []backend.OpInfo {
	var out []backend.OpInfo
	for _, r := range s.posted {
		out = append(out, r.info())
	}
	return out
}
