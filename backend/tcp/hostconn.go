package tcp

import (
	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/backend/shm"
	"github.com/courier-mp/courier/internal/engine"
)

// hostConn is the communicator of a job whose ranks are all on this host:
// the engine, and the shared-memory collectives (backend.Collectives)
// beside it. The communicators derived from it (Split, the engine's) are
// the engine's alone: the collective areas belong to the world, so their
// collectives run over point-to-point messages, in package mp.
type hostConn struct {
	*engine.Engine
	coll *shm.Coll
}

// Collective implements backend.Collectives: small collectives of host
// buffers run through shared memory; the rest (an error matching
// backend.ErrSkip) over point-to-point messages, in package mp.
func (c *hostConn) Collective(co backend.Coll) (backend.Request, error) {
	return c.coll.Collective(co)
}

// RunCollective implements backend.CollRunner: Collective's, run to its
// end on the caller's goroutine where its parts come at once.
func (c *hostConn) RunCollective(co backend.Coll) (backend.Request, error) {
	return c.coll.RunCollective(co)
}

// Pending implements backend.Conn: the engine's operations, and the
// shared-memory collective under way.
func (c *hostConn) Pending() []backend.OpInfo {
	p := c.Engine.Pending()
	if op, ok := c.coll.Pending(); ok {
		p = append(p, op)
	}
	return p
}

// engineOf is the engine under a communicator of this package's drivers,
// or nil.
func engineOf(c backend.Conn) *engine.Engine {
	switch c := c.(type) {
	case *engine.Engine:
		return c
	case *hostConn:
		return c.Engine
	}
	return nil
}

// SharedCollectives is the number of collectives this rank has run
// through shared memory on c, a communicator of the host driver (0 for
// any other): tests check with it which path a collective took.
func SharedCollectives(c backend.Conn) int64 {
	if h, ok := c.(*hostConn); ok {
		return h.coll.Calls()
	}
	return 0
}
