package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/courier-mp/courier/backend"
)

// Matching, MPI's way: receives match on (source, tag) in the order they
// were posted; unexpected messages are searched in the order they arrived.
// Each link hands its frames to the engine in order, so messages from one
// sender with one tag are never overtaken.

// wildUsable reports why a receive or probe of c from AnySource that
// finds no message cannot wait, under e.mu: a loss no wildcard of c has
// reported yet, or no rank of c left that could send (failure.go).
func (c *Comm) wildUsable() error {
	if err := c.usable(nil, backend.AnySource); err != nil {
		return err
	}
	if err := c.wildLoss(); err != nil {
		return err
	}
	if c.noSender() {
		return c.lastLoss()
	}
	return nil
}

// register gives r an id for the rendezvous, under e.mu.
func (e *Engine) register(r *request) uint64 {
	id := e.nextID
	e.nextID++
	e.inflight[id] = r
	return id
}

// removeUnexpected drops m from the unexpected queue if it is there;
// under e.mu.
func (c *Comm) removeUnexpected(m *message) {
	if i := slices.Index(c.unexpected, m); i >= 0 {
		c.unexpected = slices.Delete(c.unexpected, i, i+1)
	}
}

// matches reports whether a receive posted for (source, tag) takes a
// message from src with mtag. AnyTag matches user tags only (>= 0).
func matches(source, tag, src, mtag int) bool {
	return (source == backend.AnySource || source == src) &&
		(tag == mtag || (tag == backend.AnyTag && mtag >= 0))
}

// findUnexpected returns the index of the oldest unexpected message a
// receive for (source, tag) matches, or -1; under e.mu.
func (c *Comm) findUnexpected(source, tag int) int {
	for i, m := range c.unexpected {
		if matches(source, tag, m.src, m.tag) {
			return i
		}
	}
	return -1
}

// takePosted removes and returns the oldest posted receive that matches m,
// or nil; under e.mu.
func (c *Comm) takePosted(m *envelope) *request {
	for i, r := range c.posted {
		if matches(r.peer, r.tag, m.src, m.tag) {
			c.posted = slices.Delete(c.posted, i, i+1)
			return r
		}
	}
	return nil
}

// takePostedIf removes from c's posted receives those end reports true
// for, keeping the others in their order, and returns ended with the
// removed ones appended; under e.mu.
func (c *Comm) takePostedIf(ended []*request, end func(*request) bool) []*request {
	keep := c.posted[:0]
	for _, q := range c.posted {
		if end(q) {
			ended = append(ended, q)
		} else {
			keep = append(keep, q)
		}
	}
	clear(c.posted[len(keep):])
	c.posted = keep
	return ended
}

// verdict decides whether message m may land in receive r: nil, or the
// error r ends with. Element types must agree; with checks on, counts too.
// Ranks are those of r's communicator.
func (e *Engine) verdict(r *request, m *envelope) error {
	me := r.c.rank
	if m.typ != r.buf.Type {
		return fmt.Errorf("%w: rank %d sent %d × %v (tag %d), rank %d receives %v",
			backend.ErrMismatch, m.src, m.count, m.typ, m.tag, me, r.buf.Type)
	}
	if m.count > r.buf.Count {
		return fmt.Errorf("%w: rank %d sent %d × %v (tag %d) into a buffer of %d on rank %d",
			backend.ErrTruncate, m.src, m.count, m.typ, m.tag, r.buf.Count, me)
	}
	if e.check && m.count != r.buf.Count {
		return fmt.Errorf("%w: rank %d sent %d × %v (tag %d), rank %d receives %d (checks are on: counts must be equal)",
			backend.ErrMismatch, m.src, m.count, m.typ, m.tag, me, r.buf.Count)
	}
	return nil
}

// deliver copies a whole payload into receive r and completes it. r is
// owned by the caller.
func (e *Engine) deliver(r *request, m *envelope, payload []byte) {
	st := m.status()
	if err := e.verdict(r, m); err != nil {
		r.complete(st, err)
		return
	}
	copy(r.buf.Bytes(), payload)
	r.complete(st, nil)
}

// acceptRTS answers a rendezvous for receive r: it pulls the message when
// the sender offered that and the link can and wants to, else registers r for the DATA
// and asks for it (CTS), or refuses. posted: r was waiting when the RTS
// arrived (Arrive), not posted after it (Irecv). Called under e.mu; it
// unlocks.
func (e *Engine) acceptRTS(r *request, m *envelope, sid, addr uint64, pull, posted bool) {
	c := r.c
	p := c.peer(m.src)
	r.src, r.mtag, r.mcount = m.src, m.tag, m.count
	st := m.status()
	var flags uint16
	err := e.verdict(r, m)
	switch {
	case errors.Is(err, backend.ErrTruncate):
		flags = CTSTruncate
	case err != nil:
		flags = CTSMismatch
	}
	if err == nil {
		err = c.usable(p, m.src)
	}
	if err != nil {
		e.mu.Unlock()
		r.complete(st, err)
		if flags != 0 {
			p.link.Queue(Job{Kind: KindCTS, SID: sid, Flags: flags})
		}
		return
	}
	if pull && p.puller != nil && p.puller.WantPull(m.bytes(), m.tag, posted) {
		e.mu.Unlock()
		perr := p.puller.Pull(r.buf.Bytes()[:m.bytes()], addr, sid, m.tag)
		if perr == nil || !errors.Is(perr, backend.ErrNotSupported) {
			if perr != nil {
				// The sender's memory cannot be read: its process is gone
				// (or its address was bad). The peer is lost, not only
				// this receive: what else waits on it ends, and this
				// rank's goodbyes name it (ByeLost).
				lerr := p.lossError(perr)
				e.failPeer(p, lerr)
				perr = c.peerErr(p, lerr)
			} else {
				p.link.Queue(Job{Kind: KindCTS, SID: sid, Flags: CTSDone})
			}
			r.complete(st, perr)
			return
		}
		// The link cannot read the sender's memory after all: ask for
		// the DATA instead.
		e.mu.Lock()
	}
	r.want = m.bytes()
	id := e.register(r)
	r.id = id
	e.mu.Unlock()
	p.link.Queue(Job{Kind: KindCTS, SID: sid, RID: id})
}
