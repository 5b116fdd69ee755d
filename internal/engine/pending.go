package engine

import (
	"slices"

	"github.com/courier-mp/courier/backend"
)

// Pending implements backend.Conn.
func (e *Engine) Pending() []backend.OpInfo {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []backend.OpInfo
	for _, r := range e.posted {
		out = append(out, r.info())
	}
	for _, m := range e.unexpected {
		if m.recv != nil {
			out = append(out, m.recv.info())
		}
	}
	ids := make([]uint64, 0, len(e.inflight))
	for id := range e.inflight {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		out = append(out, e.inflight[id].info())
	}
	for _, p := range e.peers {
		if p != nil {
			out = append(out, p.busy()...)
		}
	}
	return out
}

// busy lists the requests p's link owns; under e.mu.
func (p *Peer) busy() []backend.OpInfo {
	var out []backend.OpInfo
	if r := p.reading.Load(); r != nil {
		out = append(out, r.info())
	}
	if r := p.writing.Load(); r != nil {
		out = append(out, r.info())
	}
	if m := p.readMsg; m != nil && m.recv != nil {
		out = append(out, m.recv.info())
	}
	return out
}
