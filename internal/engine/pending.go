package engine

import (
	"slices"

	"github.com/courier-mp/courier/backend"
)

// Pending implements backend.Conn: the communicator's own operations, each
// once (a receive may be both in flight and the one a link is reading
// into).
func (c *Comm) Pending() []backend.OpInfo {
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []backend.OpInfo
	seen := make(map[*request]bool)
	add := func(r *request) {
		if r != nil && r.c == c && !seen[r] {
			seen[r] = true
			out = append(out, r.info())
		}
	}
	for _, r := range c.posted {
		add(r)
	}
	for _, m := range c.unexpected {
		add(m.recv)
	}
	ids := make([]uint64, 0, len(e.inflight))
	for id, r := range e.inflight {
		if r.c == c {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		add(e.inflight[id])
	}
	for _, p := range e.peers {
		if p != nil {
			add(p.reading.Load())
			add(p.writing.Load())
			if m := p.readMsg; m != nil {
				add(m.recv)
			}
		}
	}
	return out
}

// Arrived lists the messages of the communicator that have arrived (or
// been announced) and match no receive yet, in their order of arrival:
// Op "arrived", the sender, tag, count and element type. A report of a
// hang shows them beside the receives, so that a receive that waits for
// another tag or sender is seen next to the message that did come.
func (c *Comm) Arrived() []backend.OpInfo {
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []backend.OpInfo
	for _, m := range c.unexpected {
		if m.recv == nil {
			out = append(out, backend.OpInfo{Op: "arrived", Peer: m.src, Tag: m.tag, Count: m.count, Type: m.typ})
		}
	}
	return out
}

// Arrived is the world's Comm.Arrived.
func (e *Engine) Arrived() []backend.OpInfo { return e.world.Arrived() }
