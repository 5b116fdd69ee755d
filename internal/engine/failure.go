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

// failPeer ends every operation that depends on peer p with err and marks
// p lost. Requests owned by p's link are ended by it.
//
// Receives from AnySource pending at that moment end too, with p's loss,
// when p failed (as MPI's fault-tolerance proposal ends them with
// MPI_ERR_PROC_FAILED_PENDING: the message they wait for may have been
// p's), or when p closed in order and no other rank is left that could
// send; the program posts them again if it wants to go on. When none is
// pending, the loss of a rank that failed is kept for the next receive or
// probe from AnySource that finds no message (usable): each failure is
// reported to a wildcard once, wherever the program is when it happens. A
// rank that closed in order while others live ends none: everything it
// sent was delivered.
func (e *Engine) failPeer(p *Peer, err error) {
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
	wild := first && (failed || e.noSender())
	if wild && failed && !slices.ContainsFunc(e.posted, isWild) {
		e.wildLosses = append(e.wildLosses, err) // for the next one
	}
	var ended []*request
	keep := e.posted[:0]
	for _, r := range e.posted {
		if r.peer == p.rank || (wild && r.peer == backend.AnySource) {
			ended = append(ended, r)
		} else {
			keep = append(keep, r)
		}
	}
	clear(e.posted[len(keep):])
	e.posted = keep
	// Unexpected messages stay: whole ones may still be received, and a
	// receive that matches an RTS from p ends with p's loss then. A message
	// still being read belongs to the reader.
	ended = e.takeInflight(p, ended)
	e.mu.Unlock()
	for _, r := range ended {
		r.complete(backend.Status{}, err)
	}
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
// has reported yet, or nil; under e.mu.
func (e *Engine) wildLoss() error {
	if len(e.wildLosses) == 0 {
		return nil
	}
	err := e.wildLosses[0]
	e.wildLosses = slices.Delete(e.wildLosses, 0, 1)
	return err
}

// noSender reports, under e.mu, that no other rank is left that could
// send to this one (in a communicator of more than one rank).
func (e *Engine) noSender() bool {
	for j, p := range e.peers {
		if j != e.rank && (p == nil || p.lost == nil) {
			return false
		}
	}
	return e.size > 1
}

// lastLoss is the error of a receive from AnySource posted when no other
// rank is left that could send: the loss of a rank that failed, if one
// did, else of the last one (all closed in order). Under e.mu.
func (e *Engine) lastLoss() error {
	var last error
	for j, p := range e.peers {
		if j == e.rank || p == nil {
			continue
		}
		if !errors.Is(p.lost, backend.ErrPeerClosed) {
			return p.lost
		}
		last = p.lost
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
