package engine

import (
	"slices"

	"github.com/courier-mp/courier/backend"
)

// Pending implements backend.Conn: the communicator's own operations.
func (c *Comm) Pending() []backend.OpInfo {
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []backend.OpInfo
	for _, r := range c.posted {
		out = append(out, r.info())
	}
	for _, m := range c.unexpected {
		if m.recv != nil {
			out = append(out, m.recv.info())
		}
	}
	ids := make([]uint64, 0, len(e.inflight))
	for id, r := range e.inflight {
		if r.c == c {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, e.inflight[id].info())
	}
	for _, p := range e.peers {
		if p != nil {
			out = append(out, p.busy(c)...)
		}
	}
	return out
}

// busy lists the requests of c that p's link owns; under e.mu.
func (p *Peer) busy(c *Comm) []backend.OpInfo {
	var out []backend.OpInfo
	if r := p.reading.Load(); r != nil && r.c == c {
		out = append(out, r.info())
	}
	if r := p.writing.Load(); r != nil && r.c == c {
		out = append(out, r.info())
	}
	if m := p.readMsg; m != nil && m.recv != nil && m.recv.c == c {
		out = append(out, m.recv.info())
	}
	return out
}
