package engine

import (
	"fmt"

	"github.com/courier-mp/courier/backend"
)

// LeaveRevoke is LEAVE's flag, beside ByeAborted, that says the sender
// revoked the communicator (backend.Shrinker; package mp's Comm.Shrink):
// the receiver revokes it too, and tells the other members in its turn.
// The sender stays a member: the agreement's messages (tag
// backend.ShrinkTag) still go. The frame's Tag is the rank of the job
// whose loss the sender had seen (-1: none), which the errors of the
// operations it ends name. It is the one LEAVE the world (Comm 0) may get.
const LeaveRevoke uint16 = 1 << 2

// revokeOf is a revoke that came before its communicator was made here.
type revokeOf struct {
	by, lost int // ranks of the job
}

// Revoke implements backend.Shrinker on the world.
func (e *Engine) Revoke(cause int) { e.world.Revoke(cause) }

// Lost implements backend.Shrinker on the world.
func (e *Engine) Lost() []int { return e.world.Lost() }

// Revoked returns the error operations on the world end with once it has
// been revoked, or nil: the shared-memory collectives, which serve the
// world beside the engine, stop waiting with it.
func (e *Engine) Revoked() error {
	if err := e.world.revokedErr.Load(); err != nil {
		return *err
	}
	return nil
}

// Revoke implements backend.Shrinker: every operation of c but the
// agreement's (tag backend.ShrinkTag) ends with an error matching
// ErrRevoked and ErrPeerLost, new ones fail with it, messages of c that
// wait for a receive are dropped (but the agreement's), and every member
// whose link is up is sent LEAVE with LeaveRevoke. cause is the rank of c
// whose loss is the reason (-1: none; then the first rank this engine
// lost, if it is a member).
func (c *Comm) Revoke(cause int) {
	lost := -1
	if cause >= 0 && cause < c.size && cause != c.rank {
		lost = c.toWorld(cause)
	} else if le := c.e.cause.Load(); le != nil && le.Rank >= 0 && le.Rank < c.e.size && c.fromWorld(le.Rank) >= 0 {
		lost = le.Rank
	}
	c.revoke(c.e.rank, lost)
}

// revokedError is the error of c's operations once rank by (of the job)
// has revoked it, having lost rank lost (of the job; -1: none).
func (c *Comm) revokedError(by, lost int) error {
	who := "this rank"
	if by != c.e.rank {
		who = fmt.Sprintf("rank %d", c.fromWorld(by))
	}
	l := -1
	if lost >= 0 && lost < c.e.size {
		l = c.fromWorld(lost)
	}
	if l < 0 {
		return fmt.Errorf("%w: %w: %s began Shrink on it", backend.ErrPeerLost, backend.ErrRevoked, who)
	}
	return &backend.LostError{Rank: l, Err: fmt.Errorf("%w: %w: %s began Shrink on it, after it lost rank %d",
		backend.ErrPeerLost, backend.ErrRevoked, who, l)}
}

// revoke revokes c here (see Revoke) and tells the other members: by
// began it (the job's rank: this one, or the peer whose LEAVE said so),
// having lost the job's rank lost (-1: none).
func (c *Comm) revoke(by, lost int) {
	e := c.e
	err := c.revokedError(by, lost)
	e.mu.Lock()
	if c.revoked != nil || c.fatal != nil || e.fatal != nil {
		e.mu.Unlock()
		return
	}
	c.revoked = err
	re := err
	c.revokedErr.Store(&re)
	ended := c.takePostedIf(nil, func(q *request) bool { return q.tag != backend.ShrinkTag })
	// Rendezvous are never the agreement's: its messages are small.
	ended = e.takeInflight(nil, c, ended)
	for _, r := range ended {
		if r.kind == reqRecv && r.want > 0 {
			// It asked for the payload (CTS): the DATA comes all the same.
			e.discard[r.id] = owed{peer: c.peer(r.src), left: r.want - r.got}
		}
	}
	c.dropUnexpected()
	e.mu.Unlock()
	for _, r := range ended {
		r.complete(backend.Status{}, err)
	}
	for k := range c.size {
		if k == c.rank || c.toWorld(k) == by || (c.left != nil && c.left[k].Load() != nil) {
			continue
		}
		if p := c.peer(k); p.Down() == nil {
			p.link.Queue(Job{Kind: KindLeave, Flags: LeaveRevoke, Comm: c.id, Tag: int32(lost)})
		}
	}
}

// dropUnexpected drops the messages of c waiting for a receive, but the
// agreement's; under e.mu. A message whose payload a link is reading is
// the reader's.
func (c *Comm) dropUnexpected() {
	keep := c.unexpected[:0]
	for _, m := range c.unexpected {
		switch {
		case m.tag == backend.ShrinkTag:
			keep = append(keep, m)
		case m.ready || m.kind == KindRTS:
			putBuf(m.data)
			freeMessage(m)
		}
	}
	clear(c.unexpected[len(keep):])
	c.unexpected = keep
}

// revokedFor returns why an operation of c with tag cannot start because
// c is revoked, or nil, without taking e.mu.
func (c *Comm) revokedFor(tag int) error {
	if tag == backend.ShrinkTag {
		return nil
	}
	if err := c.revokedErr.Load(); err != nil {
		return *err
	}
	return nil
}

// refuses reports, under e.mu, whether c is revoked for messages with
// tag (all but the agreement's): an operation does not start, and a
// message that arrives is dropped (its sender, revoked too, ends its
// send).
func (c *Comm) refuses(tag int) bool {
	return c.revoked != nil && tag != backend.ShrinkTag
}

// onRevoke handles a LEAVE with LeaveRevoke from p.
func (p *Peer) onRevoke(h *Header) {
	e := p.e
	lost := int(h.Tag)
	if lost < 0 || lost >= e.size || lost == e.rank {
		lost = -1
	}
	e.mu.Lock()
	c := e.world
	if h.Comm != 0 {
		c = e.placeholder(h.Comm)
	}
	if c == nil {
		e.mu.Unlock()
		return // closed here
	}
	if !c.joined {
		if c.earlyRev == nil {
			c.earlyRev = &revokeOf{by: p.rank, lost: lost}
		}
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	if c.fromWorld(p.rank) < 0 {
		return // not a member: nothing of it to revoke
	}
	c.revoke(p.rank, lost)
}

// Lost implements backend.Shrinker: the ranks of c whose link is lost, or
// that closed or aborted c (a derived one), in increasing order.
func (c *Comm) Lost() []int {
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []int
	for r := range c.size {
		if r == c.rank {
			continue
		}
		if c.peer(r).lost != nil || (c.left != nil && c.left[r].Load() != nil) {
			out = append(out, r)
		}
	}
	return out
}
