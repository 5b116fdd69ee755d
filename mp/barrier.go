package mp

import (
	"github.com/courier-mp/courier/backend"
)

// collTag is the tag of the library's own messages (collectives built on
// point-to-point). User tags are non-negative and AnyTag matches only those,
// so the two never mix.
const collTag = -2

// Barrier returns when every rank of the communicator has called it. The
// transport runs it where it can (on the host backend, ranks all on one
// host meet through shared memory); otherwise it uses the backend's
// point-to-point operations (a dissemination barrier: ⌈log2 Size⌉ rounds
// of one send and one receive per rank).
//
//go:noinline
func Barrier(c *Comm) error {
	if c == nil {
		return c.opErr("barrier", -1, -1, invalidf("nil *Comm"))
	}
	pc := callerPC()
	var span uint64
	if traceOn.Load() {
		span = c.traceColl(uint32(backend.Barrier), &backend.Coll{Kind: backend.Barrier, Caller: pc})
	}
	c.collLock(pc, uint32(backend.Barrier), span)
	defer c.collUnlock()
	peer, err := c.runBarrier()
	return c.traceEnd(span, c.opErr("barrier", peer, -1, err))
}

// runBarrier is Barrier's part in its turn; it returns the peer an error
// came from (-1: none).
func (c *Comm) runBarrier() (int, error) {
	if err := c.revokedErr(); err != nil {
		return -1, err
	}
	if c.size > 1 {
		if done, err := c.transportColl(backend.Coll{Kind: backend.Barrier, Caller: c.collPC}); done {
			return -1, err
		}
	}
	// The one-byte token and the byte it is received into, in scratch
	// memory (a transport keeps what it is given).
	s := getScratch(16)
	token, got := s.buf(0, backend.Uint8, 1), s.buf(8, backend.Uint8, 1)
	// One rank still does one round, with itself, so a closed or aborted
	// communicator reports it.
	for dist := 1; dist < c.size || dist == 1; dist *= 2 {
		to := (c.rank + dist) % c.size
		from := (c.rank - dist + c.size) % c.size
		if peer, err := c.exchange(token, to, got, from); err != nil {
			s.release(err)
			return peer, err
		}
	}
	s.release(nil)
	return -1, nil
}
