package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/courier-mp/courier/backend"
)

// ByeLost is BYE's flag, beside ByeAborted, that says the sender leaves
// after it lost another rank, whose number the BYE carries in its Tag
// field (unused in BYE otherwise): the sender's peers then name that rank
// as the one lost, not the sender, which only left in the cascade.
const ByeLost uint16 = 1 << 1

// failPeer ends every operation that depends on peer p with err, in every
// communicator (a derived one names p by its rank there), and marks p
// lost. Requests owned by p's link are ended by it.
//
// Receives from AnySource pending at that moment end too, with p's loss,
// in every communicator p is a member of, when p failed (as MPI's
// fault-tolerance proposal ends them with MPI_ERR_PROC_FAILED_PENDING:
// the message they wait for may have been p's), or when p closed in order
// and no other rank of the communicator is left that could send; the
// program posts them again if it wants to go on. When none is pending,
// the loss of a rank that failed is kept for the communicator's next
// receive or probe from AnySource that finds no message (wildUsable):
// each failure is reported to a wildcard of each communicator once,
// wherever the program is when it happens. A rank that closed in order
// while others live ends none: everything it sent was delivered.
func (e *Engine) failPeer(p *Peer, err error) {
	e.asks.gone(p.rank) // a question to it will have no answer
	e.mu.Lock()
	first := p.lost == nil
	if first {
		p.lost = lostError(err, p.rank)
		le := p.lost
		p.down.Store(&le)
		e.noteCause(p)
	}
	err = p.lost
	// Only the loss itself ends wildcard receives, not a later report of
	// it (the link's end after BYE): those posted since may go on.
	failed := !errors.Is(err, backend.ErrPeerClosed)
	var ended []*request
	for _, c := range e.joined() {
		r := c.fromWorld(p.rank)
		if r < 0 {
			continue
		}
		wild := first && (failed || c.noSender())
		if wild && failed && !slices.ContainsFunc(c.posted, isWild) {
			c.wildLosses = append(c.wildLosses, c.peerErr(p, err)) // for the next one
		}
		ended = c.takePostedIf(ended, func(q *request) bool {
			return q.peer == r || (wild && q.peer == backend.AnySource)
		})
	}
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

// lostError makes err, the loss of rank, an *backend.LostError, unless it is
// one already.
func lostError(err error, rank int) error {
	if _, ok := errors.AsType[*backend.LostError](err); ok || !errors.Is(err, backend.ErrPeerLost) {
		return err
	}
	return &backend.LostError{Rank: rank, Err: err}
}

// noteCause records, the first time, the rank whose loss is the cause of
// what follows: p, if it failed, or the rank p said it had lost when it
// left. Under e.mu.
func (e *Engine) noteCause(p *Peer) {
	le, ok := errors.AsType[*backend.LostError](p.lost)
	if !ok || (le.Rank == p.rank && errors.Is(p.lost, backend.ErrPeerClosed)) {
		return // closed in order, having lost no one
	}
	e.cause.CompareAndSwap(nil, le)
}

// isWild reports a receive from AnySource.
func isWild(r *request) bool { return r.peer == backend.AnySource }

// wildLoss returns, and forgets, the oldest loss no receive from AnySource
// of c has reported yet, or nil; under e.mu.
func (c *Comm) wildLoss() error {
	if len(c.wildLosses) == 0 {
		return nil
	}
	err := c.wildLosses[0]
	c.wildLosses = slices.Delete(c.wildLosses, 0, 1)
	return err
}

// noSender reports, under e.mu, that no other rank of c is left that
// could send to this one (in a communicator of more than one rank).
func (c *Comm) noSender() bool {
	for r := range c.size {
		if r == c.rank {
			continue
		}
		if p := c.peer(r); p == nil || p.lost == nil {
			return false
		}
	}
	return c.size > 1
}

// lastLoss is the error of a receive from AnySource of c posted when no
// other rank of c is left that could send: the loss of a rank that
// failed, if one did, else of the last one (all closed in order). Under
// e.mu.
func (c *Comm) lastLoss() error {
	var last error
	for r := range c.size {
		p := c.peer(r)
		if r == c.rank || p == nil {
			continue
		}
		if !errors.Is(p.lost, backend.ErrPeerClosed) {
			return c.peerErr(p, p.lost)
		}
		last = c.peerErr(p, p.lost)
	}
	return last
}

// ByeHeader returns the BYE frame for the link to p to send, aborted or
// not: with ByeLost and the rank in Tag when this rank lost another rank
// (not p) before it leaves, so that p names that one.
func (p *Peer) ByeHeader(aborted bool) Header {
	h := Header{Kind: KindBye}
	if aborted {
		h.Flags |= ByeAborted
	}
	if c := p.e.cause.Load(); c != nil && c.Rank != p.rank {
		h.Flags |= ByeLost
		h.Tag = int32(c.Rank)
	}
	return h
}

// onBye handles the peer's BYE: it closed its communicator, or aborted
// it, perhaps after it lost another rank (ByeLost), which the error then
// names as the rank lost.
func (p *Peer) onBye(h *Header) {
	p.bye.Store(true)
	how := "closed its communicator"
	if h.Flags&ByeAborted != 0 {
		how = "aborted its communicator"
	}
	var err error
	lost := p.rank
	k := int(h.Tag)
	switch {
	case h.Flags&ByeLost != 0 && k >= 0 && k < p.e.size && k != p.rank && k != p.e.rank:
		lost = k
		if h.Flags&ByeAborted != 0 {
			err = fmt.Errorf("%w: rank %d (rank %d %s after it lost rank %d)", backend.ErrPeerLost, k, p.rank, how, k)
		} else {
			err = fmt.Errorf("%w: rank %d (rank %d %w after it lost rank %d)", backend.ErrPeerLost, k, p.rank, backend.ErrPeerClosed, k)
		}
	case h.Flags&ByeAborted != 0:
		err = fmt.Errorf("%w: rank %d %s", backend.ErrPeerLost, p.rank, how)
	default:
		err = fmt.Errorf("%w: rank %d %w", backend.ErrPeerLost, p.rank, backend.ErrPeerClosed)
	}
	p.e.failPeer(p, &backend.LostError{Rank: lost, Err: err})
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
