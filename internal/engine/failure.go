package engine

import (
	"slices"

	"github.com/courier-mp/courier/backend"
)

// failPeer ends every operation that depends on peer p with err and marks
// p lost. Requests owned by p's link are ended by it.
func (e *Engine) failPeer(p *Peer, err error) {
	e.mu.Lock()
	if p.lost == nil {
		p.lost = err
		le := err
		p.down.Store(&le)
	}
	err = p.lost
	var ended []*request
	keep := e.posted[:0]
	for _, r := range e.posted {
		if r.peer == p.rank {
			ended = append(ended, r)
		} else {
			keep = append(keep, r)
		}
	}
	clear(e.posted[len(keep):])
	e.posted = keep
	// Wildcard receives stay posted: another rank, or this one, may still
	// send what they wait for.
	// Unexpected messages stay: whole ones may still be received, and a
	// receive that matches an RTS from p ends with p's loss then. A message
	// still being read belongs to the reader.
	ended = e.takeInflight(p, ended)
	e.mu.Unlock()
	for _, r := range ended {
		r.complete(backend.Status{}, err)
	}
}

// failAll ends every operation with err and makes new ones fail with it.
// The first error wins.
func (e *Engine) failAll(err error) {
	e.mu.Lock()
	if e.fatal == nil {
		e.fatal = err
		fe := err
		e.dead.Store(&fe)
	}
	err = e.fatal
	ended := slices.Clone(e.posted)
	clear(e.posted)
	e.posted = e.posted[:0]
	ended = e.takeInflight(nil, ended)
	e.mu.Unlock()
	for _, r := range ended {
		r.complete(backend.Status{}, err)
	}
}

// takeInflight removes from e.inflight, and appends to ended, every
// rendezvous with peer only (nil: with any peer) that no link owns (those
// end their own); under e.mu.
func (e *Engine) takeInflight(only *Peer, ended []*request) []*request {
	for id, r := range e.inflight {
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
	if rank < 0 || rank >= e.size {
		return nil
	}
	return e.peers[rank]
}
