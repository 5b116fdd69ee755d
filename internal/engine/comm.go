package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/courier-mp/courier/backend"
)

// Comm is one communicator over the engine's links: the world (id 0, every
// rank, ranks as the job's) or one derived from it by Split, a subset of
// the ranks in an order of their own. It implements backend.Conn,
// backend.Prober and backend.Splitter.
//
// Every communicator has its own posted and unexpected queues, so its
// messages never match, block or reorder another's: each EAGER and RTS
// frame carries the id of its communicator (Header.Comm), and arrives in
// that communicator's queues. Ranks are the communicator's own everywhere
// a request, a status, a report or an error shows them; the rank table
// turns them into the job's ranks, which pick the link.
//
// A frame may arrive for a derived communicator before this rank has made
// it (its sender's Split returned first): it waits in a placeholder, kept
// under the same id, which Split then fills in. A communicator closed here
// is never made again: frames that come for it later are dropped (their
// senders learn of the close from LEAVE).
type Comm struct {
	e          *Engine
	id         uint32
	rank, size int
	members    []int   // comm rank → the job's rank; nil: the world (the identity)
	ranks      []int32 // the job's rank → comm rank (-1: not a member); nil: the world
	left       []atomic.Pointer[error]

	// Under e.mu:
	joined     bool       // made by Split (false: a placeholder holding early arrivals)
	earlyLeft  []leaveOf  // a placeholder's LEAVEs, applied when it is made
	posted     []*request // receives in the order they were posted
	unexpected []*message // messages in the order they arrived
	wildLosses []error    // failures no receive from AnySource has reported yet (failure.go)
	fatal      error      // a derived communicator's Close or Abort: its new operations fail with it
	dead       atomic.Pointer[error]
	revoked    error     // Revoke (revoke.go): its operations but the agreement's fail with it
	earlyRev   *revokeOf // a placeholder's revoke, applied when it is made
	revokedErr atomic.Pointer[error]
}

// owed is the DATA a peer still sends for a receive that its
// communicator's close ended: the receiver reads it and drops it.
type owed struct {
	peer *Peer
	left int64
}

// leaveOf is a LEAVE that came before its communicator was made here.
type leaveOf struct {
	world   int
	aborted bool
}

// ID is the communicator's id (0: the world).
func (c *Comm) ID() uint32 { return c.id }

// Rank is this rank's rank in the communicator.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks in the communicator.
func (c *Comm) Size() int { return c.size }

// toWorld is the job's rank of rank r of c (r in [0, c.size)).
func (c *Comm) toWorld(r int) int {
	if c.members == nil {
		return r
	}
	return c.members[r]
}

// fromWorld is the rank in c of the job's rank w, or -1.
func (c *Comm) fromWorld(w int) int {
	if c.ranks == nil {
		return w
	}
	return int(c.ranks[w])
}

// peer is the peer of rank r of c: nil for this rank.
func (c *Comm) peer(r int) *Peer { return c.e.peers[c.toWorld(r)] }

// Transport names what carries c's messages to its rank j, as
// Engine.Transport does.
func (c *Comm) Transport(j int) string {
	if j < 0 || j >= c.size {
		return ""
	}
	if j == c.rank {
		return "self"
	}
	return c.e.Transport(c.toWorld(j))
}

// Split implements backend.Splitter: the communicator id over c's ranks
// members, in the new communicator's rank order. It does not communicate.
func (c *Comm) Split(id uint32, members []int) (backend.Conn, error) {
	n, rev, err := c.derive(id, members)
	if err != nil {
		return nil, err
	}
	if rev != nil {
		n.revoke(rev.by, rev.lost) // a member revoked it before it was made here
	}
	return n, nil
}

// derive makes communicator id of c's ranks members (see Split), and
// returns the revoke that came for it before, if one did.
func (c *Comm) derive(id uint32, members []int) (*Comm, *revokeOf, error) {
	e := c.e
	if id == 0 {
		return nil, nil, fmt.Errorf("%w: communicator id 0 is the world's", backend.ErrInvalid)
	}
	world := make([]int, len(members))
	ranks := make([]int32, e.size)
	for j := range ranks {
		ranks[j] = -1
	}
	me := -1
	for k, r := range members {
		if r < 0 || r >= c.size {
			return nil, nil, fmt.Errorf("%w: member %d is rank %d, not in [0, %d)", backend.ErrInvalid, k, r, c.size)
		}
		w := c.toWorld(r)
		if ranks[w] >= 0 {
			return nil, nil, fmt.Errorf("%w: rank %d is a member twice", backend.ErrInvalid, r)
		}
		world[k], ranks[w] = w, int32(k)
		if r == c.rank {
			me = k
		}
	}
	if me < 0 {
		return nil, nil, fmt.Errorf("%w: rank %d is not among the members %v of the communicator it makes", backend.ErrInvalid, c.rank, members)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fatal != nil {
		return nil, nil, e.fatal
	}
	if c.fatal != nil {
		return nil, nil, c.fatal
	}
	if e.gone[id] {
		return nil, nil, fmt.Errorf("%w: communicator id %#x was used here before", backend.ErrInvalid, id)
	}
	n := e.comms[id]
	if n != nil && n.joined {
		return nil, nil, fmt.Errorf("%w: communicator id %#x is in use here", backend.ErrInvalid, id)
	}
	if n == nil {
		n = &Comm{e: e, id: id}
		e.comms[id] = n
	}
	n.rank, n.size, n.members, n.ranks = me, len(members), world, ranks
	n.left = make([]atomic.Pointer[error], n.size)
	n.joined = true
	// What came early was queued with the senders' ranks in the job.
	keep := n.unexpected[:0]
	for _, m := range n.unexpected {
		r := ranks[m.src]
		if r < 0 {
			// From a rank that is not a member: no receive can take it.
			if m.ready || m.kind == KindRTS {
				putBuf(m.data)
				freeMessage(m)
			}
			continue
		}
		m.src = int(r)
		keep = append(keep, m)
	}
	clear(n.unexpected[len(keep):])
	n.unexpected = keep
	for _, l := range n.earlyLeft {
		if r := ranks[l.world]; r >= 0 {
			err := leftError(int(r), l.aborted)
			n.left[r].Store(&err)
		}
	}
	n.earlyLeft = nil
	rev := n.earlyRev
	n.earlyRev = nil
	return n, rev, nil
}

// route finds the communicator of an EAGER or RTS frame from p, and the
// sender's rank in it; under e.mu. A nil communicator (and no error): the
// frame is for a communicator closed here, and is dropped.
func (p *Peer) route(h *Header) (*Comm, int, error) {
	e := p.e
	if h.Comm == 0 {
		return e.world, p.rank, nil
	}
	c := e.placeholder(h.Comm)
	if c == nil {
		return nil, 0, nil
	}
	if !c.joined {
		return c, p.rank, nil // the job's rank: Split translates it
	}
	r := c.fromWorld(p.rank)
	if r < 0 {
		return nil, 0, fmt.Errorf("%w: rank %d sent a message on communicator %#x, of which it is not a member", ErrFrame, p.rank, h.Comm)
	}
	return c, r, nil
}

// placeholder returns communicator id, made or not (a placeholder is made
// for it), or nil when it was closed here; under e.mu.
func (e *Engine) placeholder(id uint32) *Comm {
	c := e.comms[id]
	if c == nil {
		if e.gone[id] {
			return nil
		}
		c = &Comm{e: e, id: id}
		e.comms[id] = c
	}
	return c
}

// Close implements backend.Conn. For the world it is the engine's Close.
// A derived communicator's pending operations end with ErrClosed, its
// queues are dropped, and each other member is sent LEAVE over the link
// the world owns, after what was sent before; the links, the world and the
// other derived communicators go on. Close is idempotent.
func (c *Comm) Close() error {
	if c.members == nil {
		return c.e.Close()
	}
	c.end(fmt.Errorf("%w: the communicator was closed", backend.ErrClosed), false)
	return nil
}

// Abort implements backend.Conn. For the world it is the engine's Abort.
// A derived communicator ends as in Close, with err, and its LEAVE says it
// aborted: the other members' operations with this rank there fail with
// ErrPeerLost.
func (c *Comm) Abort(err error) {
	if c.members == nil {
		c.e.Abort(err)
		return
	}
	c.end(err, true)
}

// end ends a derived communicator with err (Close, Abort).
func (c *Comm) end(err error, aborted bool) {
	e := c.e
	e.mu.Lock()
	if c.fatal != nil {
		e.mu.Unlock()
		return
	}
	c.fatal = err
	fe := err
	c.dead.Store(&fe)
	ended := slices.Clone(c.posted)
	clear(c.posted)
	c.posted = nil
	ended = e.takeInflight(nil, c, ended)
	for _, r := range ended {
		if r.kind == reqRecv && r.want > 0 {
			// It asked for the payload (CTS): the DATA comes all the same.
			e.discard[r.id] = owed{peer: c.peer(r.src), left: r.want - r.got}
		}
	}
	for _, m := range c.unexpected {
		// A message whose payload a link is reading is the reader's; it
		// finds the message out of every queue and lets it go.
		if m.ready || m.kind == KindRTS {
			putBuf(m.data)
			freeMessage(m)
		}
	}
	c.unexpected = nil
	delete(e.comms, c.id)
	e.gone[c.id] = true
	announce := e.fatal == nil
	e.mu.Unlock()
	for _, r := range ended {
		r.complete(backend.Status{}, err)
	}
	if !announce {
		return // the links are ending: BYE says more
	}
	var flags uint16
	if aborted {
		flags = ByeAborted
	}
	for k := range c.size {
		if k == c.rank || c.left[k].Load() != nil {
			continue
		}
		if p := c.peer(k); p.Down() == nil {
			p.link.Queue(Job{Kind: KindLeave, Flags: flags, Comm: c.id})
		}
	}
}

// onLeave handles a LEAVE from p: p closed (or aborted) communicator id.
// Every operation of that communicator with p ends, and new ones fail;
// what p sent on it before stays for receives.
func (p *Peer) onLeave(h *Header) {
	if h.Flags&LeaveRevoke != 0 {
		p.onRevoke(h)
		return
	}
	e := p.e
	aborted := h.Flags&ByeAborted != 0
	e.mu.Lock()
	c := e.placeholder(h.Comm)
	if c == nil {
		e.mu.Unlock()
		return // closed here too
	}
	if !c.joined {
		c.earlyLeft = append(c.earlyLeft, leaveOf{world: p.rank, aborted: aborted})
		e.mu.Unlock()
		return
	}
	r := c.fromWorld(p.rank)
	if r < 0 || c.left[r].Load() != nil {
		e.mu.Unlock()
		return
	}
	err := leftError(r, aborted)
	c.left[r].Store(&err)
	ended := c.takePostedIf(nil, func(q *request) bool { return q.peer == r })
	ended = e.takeInflight(p, c, ended)
	e.mu.Unlock()
	for _, q := range ended {
		q.complete(backend.Status{}, err)
	}
}

// leftError is the error of operations with rank r of a communicator that
// r closed (or aborted).
func leftError(r int, aborted bool) error {
	if aborted {
		return fmt.Errorf("%w: rank %d aborted the communicator", backend.ErrPeerLost, r)
	}
	return fmt.Errorf("%w: rank %d %w", backend.ErrPeerLost, r, backend.ErrPeerClosed)
}

// peerErr is err, the loss of p, as c reports it: in a derived
// communicator it names p by its rank there (and in the job) first.
// Errors that are not a peer's loss are returned as they are.
func (c *Comm) peerErr(p *Peer, err error) error {
	if c.members == nil || err == nil || p == nil || !errors.Is(err, backend.ErrPeerLost) {
		return err
	}
	r := c.fromWorld(p.rank)
	if r == p.rank {
		return err // the same rank in both: the job's error says it
	}
	return fmt.Errorf("rank %d of this communicator (rank %d of the job): %w", r, p.rank, err)
}

// downErr returns why operations of c with its rank r (whose peer is p)
// fail, or nil, without taking e.mu.
func (c *Comm) downErr(p *Peer, r int) error {
	if e := c.e.dead.Load(); e != nil {
		return *e
	}
	if c.members == nil {
		if e := p.down.Load(); e != nil {
			return *e
		}
		return nil
	}
	if e := c.dead.Load(); e != nil {
		return *e
	}
	if e := p.down.Load(); e != nil {
		return c.peerErr(p, *e)
	}
	if e := c.left[r].Load(); e != nil {
		return *e
	}
	return nil
}

// usable reports why operations of c with its rank r (whose peer is p;
// nil for this rank or a wildcard) cannot start; under e.mu.
func (c *Comm) usable(p *Peer, r int) error {
	e := c.e
	if e.fatal != nil {
		return e.fatal
	}
	if c.fatal != nil {
		return c.fatal
	}
	if p == nil {
		return nil
	}
	if p.lost != nil {
		return c.peerErr(p, p.lost)
	}
	if c.left != nil {
		if e := c.left[r].Load(); e != nil {
			return *e
		}
	}
	return nil
}
