package engine

import "github.com/courier-mp/courier/backend"

// failPeer ends every operation that depends on peer p with err, in every
// communicator (a derived one names p by its rank there), and marks p
// lost. Requests owned by p's link are ended by it.
func (e *Engine) failPeer(p *Peer, err error) {
	e.mu.Lock()
	if p.lost == nil {
		p.lost = err
		le := err
		p.down.Store(&le)
	}
	err = p.lost
	var ended []*request
	for _, c := range e.joined() {
		r := c.fromWorld(p.rank)
		if r < 0 {
			continue
		}
		keep := c.posted[:0]
		for _, q := range c.posted {
			if q.peer == r {
				ended = append(ended, q)
			} else {
				keep = append(keep, q)
			}
		}
		clear(c.posted[len(keep):])
		c.posted = keep
	}
	// Wildcard receives stay posted: another rank, or this one, may still
	// send what they wait for.
	// Unexpected messages stay: whole ones may still be received, and a
	// receive that matches an RTS from p ends with p's loss then. A message
	// still being read belongs to the reader.
	ended = e.takeInflight(p, nil, ended)
	for id, d := range e.discard {
		if d.peer == p {
			delete(e.discard, id) // nothing more comes from p
		}
	}
	e.mu.Unlock()
	for _, r := range ended {
		r.complete(backend.Status{}, r.c.peerErr(p, err))
	}
}

// joined lists the world and the derived communicators made here; under
// e.mu.
func (e *Engine) joined() []*Comm {
	out := make([]*Comm, 1, 1+len(e.comms))
	out[0] = e.world
	for _, c := range e.comms {
		if c.joined {
			out = append(out, c)
		}
	}
	return out
}

// failAll ends every operation of every communicator with err and makes
// new ones fail with it. The first error wins.
func (e *Engine) failAll(err error) {
	e.mu.Lock()
	if e.fatal == nil {
		e.fatal = err
		fe := err
		e.dead.Store(&fe)
	}
	err = e.fatal
	var ended []*request
	for _, c := range e.joined() {
		ended = append(ended, c.posted...)
		clear(c.posted)
		c.posted = c.posted[:0]
	}
	ended = e.takeInflight(nil, nil, ended)
	e.mu.Unlock()
	for _, r := range ended {
		r.complete(backend.Status{}, err)
	}
}

// takeInflight removes from e.inflight, and appends to ended, every
// rendezvous with peer only (nil: with any peer) of communicator in (nil:
// of any) that no link owns (those end their own); under e.mu.
func (e *Engine) takeInflight(only *Peer, in *Comm, ended []*request) []*request {
	for id, r := range e.inflight {
		if in != nil && r.c != in {
			continue
		}
		p := e.peerOf(r)
		if (only != nil && p != only) || (p != nil && p.owns(r)) {
			continue
		}
		delete(e.inflight, id)
		ended = append(ended, r)
	}
	return ended
}

func (e *Engine) peerOf(r *request) *Peer {
	rank := r.peer
	if r.kind == reqRecv {
		rank = r.src
	}
	if rank < 0 || rank >= r.c.size {
		return nil
	}
	return r.c.peer(rank)
}
