package mp

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/courier-mp/courier/backend"
)

// Undefined is the color of a rank that takes part in Split without
// joining any of the new communicators (MPI_UNDEFINED): its Split returns
// nil, nil. Every negative color means the same.
const Undefined = -1

// Sub-communicators. Split and Dup derive communicators from one the
// program has: they are collective over it (every rank calls them, in the
// same order as its other collectives) and return a *Comm of its own, with
// its own ranks (Rank, Size), its own tag space and its own collectives.
// Messages of one communicator never match, block or reorder another's,
// AnySource and AnyTag included: a library may Dup the communicator it is
// given and talk on the copy without ever seeing the program's messages.
// Errors (OpError's Rank and Peer) and the timeout's report speak of ranks
// in the communicator the call was made on, and name it ("split 1 of
// world").
//
// A derived communicator shares the connections of the one Init returned
// (the world); its Close ends its own pending operations with ErrClosed
// and tells its other members, whose operations with this rank on it then
// end with ErrPeerLost (and ErrPeerClosed), as if this rank had closed a
// world; the communicator it was derived from, and every other one, goes
// on. Closing a derived communicator that has derived ones of its own
// leaves those working (they depend on the world, not on it). Closing (or
// aborting) the world ends every communicator derived from it: their
// operations end with ErrClosed, and their Close, still to be called,
// returns at once. Abort of a derived communicator ends only it (its
// other members see this rank as lost there); a wait on it that passes
// the timeout aborts only it.
//
// Every backend derives communicators. On nccl a derived communicator
// has NCCL communicators of its own, made from scratch in Split and Dup by
// its members (the others take no part): derive once, not per step.

// Split partitions the ranks of c by color: the ranks that pass the same
// color form one new communicator, ranked by key (ties by their rank in
// c), and each gets its own *Comm of that communicator. A rank that passes
// a negative color (Undefined) joins none and gets nil, nil. Split is
// collective over c: every rank of c calls it (it all-gathers the colors
// and keys over c), in the same order as its other collectives, and it
// blocks until every rank of c has called it.
//
//go:noinline
func (c *Comm) Split(color, key int) (*Comm, error) {
	if c == nil {
		return nil, c.opErr("split", -1, -1, invalidf("nil *Comm"))
	}
	if color < 0 {
		color = Undefined
	}
	return c.derive("split", color, key, callerPC())
}

// Dup returns a new communicator of the same ranks as c, in the same
// order, whose messages and collectives are apart from c's. It is
// collective over c, as Split is.
//
//go:noinline
func (c *Comm) Dup() (*Comm, error) {
	if c == nil {
		return nil, c.opErr("dup", -1, -1, invalidf("nil *Comm"))
	}
	return c.derive("dup", 0, c.rank, callerPC())
}

// family is what the communicators derived from one world share: the ids
// in use in this process, and the derived communicators still open (the
// world's Close ends them).
type family struct {
	mu   sync.Mutex
	used map[uint32]bool // ids taken: the world's, derived ones (open or closed), and reserved
	open map[*Comm]bool
}

func newFamily() *family {
	return &family{used: map[uint32]bool{0: true}, open: make(map[*Comm]bool)}
}

// reserve takes id if it is free here, and reports whether it did.
func (f *family) reserve(id uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.used[id] {
		return false
	}
	f.used[id] = true
	return true
}

// free reports whether id is free here, without taking it.
func (f *family) free(id uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.used[id]
}

// release gives back an id reserved and not used.
func (f *family) release(id uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.used, id)
}

// opened and closed keep the list of open derived communicators.
func (f *family) opened(c *Comm) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open[c] = true
}

func (f *family) closed(c *Comm) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.open, c)
}

// stillOpen lists the derived communicators not closed.
func (f *family) stillOpen() []*Comm {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*Comm, 0, len(f.open))
	for c := range f.open {
		out = append(out, c)
	}
	return out
}

// commID derives the id of a communicator from its parent's id, the
// parent's count of Split and Dup calls and an attempt number: every
// member computes the same without talking. All the communicators of one
// Split share the id; they have no member in common, so no rank ever holds
// two of them.
func commID(parent uint32, seq uint64, attempt uint32) uint32 {
	var b [16]byte
	binary.LittleEndian.PutUint32(b[0:], parent)
	binary.LittleEndian.PutUint64(b[4:], seq)
	binary.LittleEndian.PutUint32(b[12:], attempt)
	h := fnv.New32a()
	h.Write(b[:])
	if id := h.Sum32(); id != 0 {
		return id
	}
	return 1
}

// maxIDAttempts bounds the rounds Split spends finding an id free on every
// rank (one round, but for a hash collision).
const maxIDAttempts = 8

// derive is Split and Dup: the all-gather of (color, key, whether the
// candidate id is free here) over c, then the transport's Split.
func (c *Comm) derive(op string, color, key int, pc uintptr) (*Comm, error) {
	fail := func(err error) (*Comm, error) { return nil, c.opErr(op, -1, -1, err) }
	sp, ok := c.conn.(backend.Splitter)
	if !ok {
		return fail(fmt.Errorf("%w: the %s backend has no sub-communicators (%s needs a transport that keeps each communicator's messages apart)",
			ErrNotSupported, c.backendName, op))
	}
	seq := c.splits.Add(1)
	all := make([]int64, 3*c.size)
	var id uint32
	for attempt := uint32(0); ; attempt++ {
		if attempt == maxIDAttempts {
			return fail(fmt.Errorf("%w: no communicator id free on every rank after %d attempts", ErrInvalid, attempt))
		}
		id = commID(c.id, seq, attempt)
		free := c.fam.reserve(id)
		mine := []int64{int64(color), int64(key), 0}
		if free {
			mine[2] = 1
		}
		if err := c.allgatherLocked(mine, all, pc, derivedCall(op)); err != nil {
			if free {
				c.fam.release(id)
			}
			return fail(err)
		}
		agreed := true
		for k := range c.size {
			agreed = agreed && all[3*k+2] == 1
		}
		if agreed {
			break
		}
		if free {
			c.fam.release(id)
		}
	}
	if color < 0 {
		c.fam.release(id) // not a member here: the id stays free in this process
		return nil, nil
	}
	var members []int
	for k := range c.size {
		if all[3*k] == int64(color) {
			members = append(members, k)
		}
	}
	slices.SortStableFunc(members, func(a, b int) int {
		ka, kb := all[3*a+1], all[3*b+1]
		switch {
		case ka < kb:
			return -1
		case ka > kb:
			return 1
		}
		return a - b
	})
	conn, err := sp.Split(id, members)
	if err != nil {
		c.fam.release(id)
		return fail(err)
	}
	return c.child(conn, members, id, fmt.Sprintf("%s %d of %s", op, seq, c.name)), nil
}

// child makes the communicator derived from c over conn, whose ranks are
// c's members in that order, with c's settings, and counts it among c's
// family (Split, Dup, Shrink).
func (c *Comm) child(conn backend.Conn, members []int, id uint32, name string) *Comm {
	d := &Comm{
		conn:        conn,
		sender:      senderOf(conn),
		rank:        slices.Index(members, c.rank),
		size:        len(members),
		backendName: c.backendName,
		timeout:     c.timeout,
		watchdog:    c.watchdog,
		check:       c.check,
		guard:       c.guard,
		job:         c.job,
		env:         c.env,
		devMode:     c.devMode,
		spare:       c.spare,
		id:          id,
		name:        name,
		parent:      c,
		fam:         c.fam,
		tr:          c.tr,
	}
	c.fam.opened(d)
	d.track()
	return d
}

// allgatherLocked all-gathers mine (one block per rank) into all over c,
// as a collective in its turn.
func (c *Comm) allgatherLocked(mine, all []int64, pc uintptr, call uint32) error {
	co := backend.Coll{Kind: backend.Allgather, Send: describe(mine), Recv: describe(all), Caller: pc}
	if err := c.checkColl(&co); err != nil {
		return err
	}
	var span uint64
	if traceOn.Load() {
		span = c.traceColl(call, &co)
	}
	c.collLock(pc, call, span)
	defer c.collUnlock()
	return c.traceEnd(span, c.runColl(co))
}

// Name names the communicator in errors and reports: "world" for the one
// Init returned, "split 2 of world" for the one its second Split or Dup
// made ("dup 1 of split 2 of world", …). Every rank of a communicator
// names it alike.
func (c *Comm) Name() string {
	if c == nil {
		return ""
	}
	return c.name
}
