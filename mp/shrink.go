package mp

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/courier-mp/courier/backend"
)

// Shrink is how the ranks that live go on after others were lost: it
// agrees among them on who is alive and returns a communicator of them,
// ranked in their order in c. Call it on every surviving rank once an
// operation on c failed with ErrPeerLost (or ErrRevoked):
//
//	if errors.Is(err, mp.ErrPeerLost) {
//		s, serr := comm.Shrink(ctx)
//		if serr != nil { … }
//		defer s.Close()
//		comm = s // and go on: s.Rank(), s.Size() are the survivors'
//	}
//
// Shrink first revokes c, at this rank and at every member it can reach:
// each operation on c, pending or new, on any rank, ends with an error
// matching ErrRevoked and ErrPeerLost (OpError.LostRank names the rank
// whose loss made this rank begin), so a rank that waits for one that has
// gone on to Shrink stops waiting and calls Shrink in its turn. Then the
// ranks agree over the links that still work, on a tag of their own
// (backend.ShrinkTag): the lowest rank not known lost gathers every other
// survivor's list of lost ranks, and sends the union's complement, the
// new members, with the new communicator's id; each survivor passes the
// decision on to the others before it returns, so that if the gatherer
// dies while it sends, the next lowest rank, which then gathers, learns
// it and keeps it rather than deciding again. A rank that dies during
// Shrink, before the decision, is left out; one that dies after it is a
// member of the new communicator, whose operations with it then fail with
// ErrPeerLost (Shrink that one in its turn). Every survivor returns the
// same members and id; the agreement costs each rank one small message to
// the gatherer and one to every other survivor.
//
// ctx bounds Shrink: a rank that is alive but does not call it (one
// blocked in something other than c, or that closed only its world's
// derived communicators) holds the others until ctx ends, and then
// Shrink fails with an error wrapping ctx.Err(). A rank that the others
// have left out (it was counted lost) gets ErrPeerLost. After a failed
// Shrink, c stays revoked and Shrink may be called on it again (on every
// survivor).
//
// After Shrink, c is good for nothing but Close: its operations fail with
// ErrRevoked, and a second Shrink of c is ErrInvalid. The new
// communicator shares c's connections (those of the world): close it
// first, and the world after it, since closing the world ends every
// communicator derived from it. Shrink works on the world and on
// communicators made by Split, Dup or Shrink, on every backend (on nccl
// over the host connection, the survivors' NCCL communicators made from
// scratch in Shrink, as Split makes them); a transport without
// backend.Shrinker makes it ErrNotSupported.
//
//go:noinline
func (c *Comm) Shrink(ctx context.Context) (*Comm, error) {
	if c == nil {
		return nil, c.opErr("shrink", -1, -1, invalidf("nil *Comm"))
	}
	if ctx == nil {
		ctx = context.Background()
	}
	fail := func(err error) (*Comm, error) { return nil, c.opErr("shrink", -1, -1, err) }
	sh, ok := c.conn.(backend.Shrinker)
	if !ok {
		return fail(fmt.Errorf("%w: the %s backend cannot shrink a communicator (Shrink needs a transport that can revoke one and "+
			"go on over the links that still work)", ErrNotSupported, c.backendName))
	}
	c.shrinkMu.Lock()
	defer c.shrinkMu.Unlock()
	if c.shrunk {
		return fail(invalidf("%s was shrunk already: Shrink the communicator its Shrink returned", c.name))
	}
	n := c.shrinks.Add(1)
	lost := sh.Lost()
	cause := -1
	if len(lost) > 0 {
		cause = lost[0]
	}
	c.revoked.Store(true)
	sh.Revoke(cause)
	members, id, err := c.agreeSurvivors(ctx, sh, callerPC())
	if err != nil {
		return fail(err)
	}
	if !slices.Contains(members, c.rank) {
		return fail(fmt.Errorf("%w: the other survivors count this rank lost (members %v)", ErrPeerLost, members))
	}
	if !c.fam.reserve(id) {
		return fail(invalidf("the survivors' communicator id %#x is in use in this process (a hash collision)", id))
	}
	conn, err := sh.Split(id, members)
	if err != nil {
		c.fam.release(id)
		return fail(err)
	}
	c.shrunk = true
	return c.child(conn, members, id, fmt.Sprintf("shrink %d of %s", n, c.name)), nil
}

// revokedErr is the error of c's collectives once Shrink has begun on it
// here (the transport refuses its messages itself).
func (c *Comm) revokedErr() error {
	if c.revoked.Load() {
		return fmt.Errorf("%w: %w: this rank began Shrink on %s (it is good for nothing but Close)", ErrPeerLost, ErrRevoked, c.name)
	}
	return nil
}

// The agreement's messages: int64 words, the same length on every rank of
// c: kind, the decision's stamp, the new id, c's size, then a bit per
// rank of c (a VIEW's lost ranks, a DECIDE's members).
const (
	shrinkView   = 1 // a survivor's lost ranks, to the rank it takes for the gatherer
	shrinkDecide = 2 // the members and id, from the gatherer and then from every survivor
	shrinkHead   = 4 // words before the bits
)

// shrinkPoll is how often a rank waiting in the agreement looks again at
// what the transport knows is lost (a rank that closed in order ends no
// wildcard receive) and at ctx.
const shrinkPoll = 20 * time.Millisecond

// agreeSurvivors runs Shrink's agreement over c (revoked): it returns the
// members, in c's rank order, and the id of the new communicator.
//
// Every rank keeps the set of ranks it knows lost (the transport's list,
// the lists others send it, the ranks whose messages fail). The lowest
// rank not in it is the gatherer: the others send it their set (VIEW) and
// wait; it waits until every rank not in its set has sent one, and
// decides. A decision is stamped with the rank that made it or, where a
// gatherer learns of an older one before it has decided (its own
// gatherer died while sending it), with the gatherer that took it up. A
// rank takes a decision stamped at least with the gatherer it sent its
// VIEW to (that gatherer cannot decide otherwise: it waits for this
// rank's VIEW, which it has), or sent by that gatherer; a gatherer takes
// any before it decides; each sends the decision it takes to every member
// before it returns.
func (c *Comm) agreeSurvivors(ctx context.Context, sh backend.Shrinker, pc uintptr) (members []int, id uint32, err error) {
	var decision []int64
	if c.agreement == nil {
		words := shrinkHead + (c.size+63)/64
		c.agreement = &agreement{
			words:  words,
			lost:   make([]uint64, words-shrinkHead),
			got:    make([]uint64, words-shrinkHead),
			sentTo: -1,
			in:     make([]int64, words),
		}
	}
	// What a call learns stays for the next, when ctx ends it first: the
	// VIEWs it took, the gatherer it told, the receive it posted.
	a := c.agreement
	words, lost, got, in := a.words, a.lost, a.got, a.in
	setBit := func(set []uint64, r int) { set[r/64] |= 1 << (r % 64) }
	has := func(set []uint64, r int) bool { return set[r/64]&(1<<(r%64)) != 0 }
	refresh := func() {
		for _, r := range sh.Lost() {
			setBit(lost, r)
		}
	}
	post := func() error {
		var err error
		a.rq, err = c.conn.Irecv(describe(in), AnySource, backend.ShrinkTag, pc)
		return err
	}
	defer func() {
		if a.rq == nil || decision == nil {
			return // the next call waits on it
		}
		if cr, ok := a.rq.(backend.Canceler); ok {
			cr.Cancel()
		}
		select { // a message that matched meanwhile is dropped: a decision is made
		case <-a.rq.Done():
			a.rq.Release()
		case <-time.After(time.Second):
		}
		a.rq = nil
	}()
	tick := time.NewTicker(shrinkPoll)
	defer tick.Stop()
	refused := 0 // receives refused in a row
	for decision == nil {
		if err := ctx.Err(); err != nil {
			return nil, 0, fmt.Errorf("the survivors did not agree before the context ended (this rank counts %v lost): %w",
				ranksOf(lost, c.size), err)
		}
		refresh()
		gatherer := c.rank
		for r := range c.rank {
			if !has(lost, r) {
				gatherer = r
				break
			}
		}
		if gatherer == c.rank {
			all := true
			for r := range c.size {
				all = all && (r == c.rank || has(lost, r) || has(got, r))
			}
			if all {
				decision = c.decide(lost, words)
				break
			}
		} else if a.sentTo != gatherer {
			msg := make([]int64, words)
			msg[0], msg[3] = shrinkView, int64(c.size)
			for k, w := range lost {
				msg[shrinkHead+k] = int64(w)
			}
			if err := c.sendShrink(msg, gatherer, pc); err != nil {
				if errors.Is(err, ErrPeerLost) {
					setBit(lost, gatherer) // it cannot be reached: the next lowest gathers
					continue
				}
				return nil, 0, err
			}
			a.sentTo = gatherer
		}
		if a.rq == nil {
			if err := post(); err != nil {
				if !errors.Is(err, ErrPeerLost) {
					return nil, 0, err
				}
				// A loss reported to the wildcard (once each): look again,
				// at once the first time.
				a.rq = nil
				if refused++; refused > 1 {
					select {
					case <-ctx.Done():
					case <-tick.C:
					}
				}
				continue
			}
			refused = 0
		}
		select {
		case <-ctx.Done():
			continue
		case <-tick.C:
			continue
		case <-a.rq.Done():
		}
		st, err := a.rq.Wait(0)
		a.rq.Release()
		a.rq = nil
		if err != nil {
			if errors.Is(err, ErrPeerLost) {
				continue // a loss: refresh, and perhaps another gatherer
			}
			return nil, 0, err
		}
		if st.Count != int64(words) || in[3] != int64(c.size) {
			continue // not one of ours: drop it
		}
		switch in[0] {
		case shrinkView:
			setBit(got, st.Source)
			for k := range lost {
				lost[k] |= uint64(in[shrinkHead+k])
			}
		case shrinkDecide:
			// The gatherer this rank sent its VIEW to decides, or takes up,
			// no other decision than one it sends or one stamped by it or
			// by a rank above it (which decided only once it was lost).
			stamp := int(in[1])
			if gatherer == c.rank {
				decision = slices.Clone(in)
				decision[1] = int64(c.rank) // taken up by this gatherer
			} else if stamp >= a.sentTo || st.Source == a.sentTo {
				decision = slices.Clone(in)
			}
		}
	}
	// Pass the decision on before returning, so that a gatherer to come
	// learns it.
	for r := range c.size {
		if uint64(decision[shrinkHead+r/64])&(1<<(r%64)) != 0 {
			members = append(members, r)
		}
	}
	for _, r := range members {
		if r != c.rank {
			c.sendShrink(decision, r, pc) // a member lost since is no matter
			if shrinkSent != nil {
				shrinkSent(c, r)
			}
		}
	}
	return members, uint32(decision[2]), nil
}

// agreement is a Shrink agreement's state on one rank, kept from one call
// to the next of a communicator's Shrink.
type agreement struct {
	words  int
	lost   []uint64        // the ranks this rank knows lost, a bit each
	got    []uint64        // the ranks that sent this rank a VIEW
	sentTo int             // the gatherer this rank sent its VIEW to (-1: none)
	rq     backend.Request // the receive from AnySource posted, or nil
	in     []int64         // its buffer
}

// decide is this gatherer's decision: every rank not in lost, and an id
// free in this process.
func (c *Comm) decide(lost []uint64, words int) []int64 {
	d := make([]int64, words)
	d[0], d[1], d[3] = shrinkDecide, int64(c.rank), int64(c.size)
	for r := range c.size {
		if lost[r/64]&(1<<(r%64)) == 0 {
			d[shrinkHead+r/64] |= int64(uint64(1) << (r % 64))
		}
	}
	seq := c.shrinks.Load()
	for attempt := uint32(0); ; attempt++ {
		id := commID(c.id^shrinkSalt, seq, attempt)
		if c.fam.free(id) || attempt == maxIDAttempts {
			d[2] = int64(id)
			return d
		}
	}
}

// shrinkSent, when set (by tests), is called after each decision this
// rank passes on.
var shrinkSent func(c *Comm, to int)

// shrinkSalt sets the ids Shrink derives apart from Split's.
const shrinkSalt = 0x5eed5111

// sendShrink sends one agreement message to rank to and waits for it (a
// small message: it completes when the link has it).
func (c *Comm) sendShrink(msg []int64, to int, pc uintptr) error {
	r, err := c.conn.Isend(describe(msg), to, backend.ShrinkTag, pc)
	if err != nil {
		return err
	}
	_, err = r.Wait(0)
	r.Release()
	return err
}

// ranksOf lists the ranks of set.
func ranksOf(set []uint64, size int) []int {
	out := make([]int, 0, size)
	for k, w := range set {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			if r := 64*k + b; r < size {
				out = append(out, r)
			}
			w &^= 1 << b
		}
	}
	return out
}
