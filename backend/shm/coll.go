package shm

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/engine"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// Coll runs small collectives through shared memory, for a communicator
// whose ranks are all on this host: each rank copies its part into its
// slot, every rank that needs it reads (and reduces) the slots straight
// from the others' memory, and no message moves. It implements the
// collectives of backend.Collectives that it takes (Bcast, Reduce,
// Allreduce, Allgather of host buffers up to the sizes of colltune.go,
// and Barrier) and answers backend.ErrSkip for the others.
//
// Memory: each rank's inbox ends with its collective area (collArea),
// which the other ranks map with the inbox: a line with its sequence word,
// a line with the bell its waiter sleeps on, collHeads head lines side by
// side (each the number of the call that last filled it, what that call
// holds, and up to collInline bytes of its data), then collSlots slots of
// collSlot bytes for the data that does not fit a head.
//
// The protocol, for the k-th collective of the communicator (every rank
// counts alike): call k uses head k mod H (H = collHeads) and, when its
// part does not fit there, slot k mod S (S = collSlots); D is H for a
// call whose part fits its head, S otherwise:
//
//  1. A rank that writes (all of them; the root alone for Bcast) waits
//     until every rank's sequence word is at least k−D+1, copies its send
//     buffer into its slot k mod S (into the head line itself when it
//     fits there), stores the call's descriptor in the head, and then k.
//  2. Every rank stores k in its sequence word and rings the others'
//     bells: k says it has entered call k, its head (if it writes) is
//     filled, and it has finished reading every earlier call.
//  3. A rank that reads (all of them; the non-roots for Bcast, the root
//     for Reduce) waits until head k mod H of each rank it reads says k,
//     checks that rank's descriptor against its own (a rank that calls
//     another collective, type, count, operator or root makes
//     ErrMismatch; a rank whose sequence word passed k without filling
//     the head called one where it writes nothing), and copies or reduces
//     the parts, in rank order.
//
// A reader polls one line per rank it reads, which holds all it needs for
// a small collective: the writer's one store of k publishes the data and
// the descriptor together, and each reader's wait ends in one cache miss.
// The heads lie in a row, so a reader that runs behind a writer reads
// them in address order and the processor fetches the next ahead.
//
// A head written in call k is overwritten in call k+H at the earliest,
// and a slot in call k+S, whose step 1 waits for every rank to reach
// k+1, that is, to have finished reading call k. So a writer waits for
// readers only when it is D calls ahead: a Bcast's root, a Reduce's
// non-roots, run up to H small calls (S large ones) ahead of the ranks
// that read them, as they would over buffered messages. A Barrier is the
// protocol with no data: every rank publishes, and waits for every other.
// An Allreduce combines the parts of ranks 0, 1, … N−1 in that order on
// every rank, with internal/reduce's kernels, so every rank gets the same
// bits.
//
// Waiting (collwait.go) polls the words for a while, giving the core away
// when ranks outnumber cores, then sleeps on the rank's bell, which every
// writer rings. A lost peer (the link's watcher), Close, Abort and the
// caller's timeout end a wait.
type Coll struct {
	h     *Hub
	rank  int
	size  int
	areas []collArea // by rank
	peers []*link    // by rank; nil at this rank
	seq   uint64     // collectives this rank has started here; under infoMu
	seen  []uint64   // by rank: the sequence word as last read (it only grows); under mu
	touch byte       // where finish's first reads of the slots land (kept, so not elided)
	fail  error      // a collective that failed: every later one fails with it

	mu    sync.Mutex // serializes a request's progress (Wait, Test, Done's waiter)
	req   collReq    // Collective's
	quick collReq    // RunCollective's

	infoMu sync.Mutex // the request's state as Pending and Done see it
}

// collArea is one rank's collective area, as this rank sees it.
type collArea struct {
	seq  *atomic.Uint64 // the last call the rank entered
	bell shmem.Bell     // the rank's waiter sleeps on it
	head [collHeads]slotHead
	slot [collSlots][]byte
}

// slotHead is one head line: k, the call that last filled it (stored
// last), desc, what that call holds (collDesc), and inline, the data of a
// collective whose part fits the line.
type slotHead struct {
	k      *atomic.Uint64
	desc   *uint64
	inline []byte
}

// The layout of a collective area: its sequence word on one cache line
// (pair), its bell on the next, then the heads, one line each, then the
// slots.
const (
	collLine     = 128 // a pair of cache lines: the adjacent-line prefetcher shares nothing
	collSeqOff   = 0
	collBellOff  = collLine
	collHeadOff  = 2 * collLine
	collHead     = 64 // a head: k, the descriptor, the inline data
	collInline   = collHead - 16
	collSlotOff  = collHeadOff + collHeads*collHead
	collAreaSize = (collSlotOff + collSlots*collSlot + page - 1) &^ (page - 1)
)

// newArea lays a collective area over mem (collAreaSize bytes, page
// aligned, inside a mapped segment).
func newArea(mem []byte) collArea {
	word := func(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&mem[off])) }
	a := collArea{seq: word(collSeqOff), bell: shmem.NewBell((*uint32)(unsafe.Pointer(&mem[collBellOff])))}
	for h := range collHeads {
		off := collHeadOff + h*collHead
		a.head[h] = slotHead{
			k:      word(off),
			desc:   (*uint64)(unsafe.Pointer(&mem[off+8])),
			inline: mem[off+16 : off+collHead : off+collHead],
		}
	}
	for b := range collSlots {
		off := collSlotOff + b*collSlot
		a.slot[b] = mem[off : off+collSlot : off+collSlot]
	}
	return a
}

// data is where a rank's part of call k, n bytes, lies in its area: the
// head line's inline bytes when it fits there, slot k mod collSlots
// otherwise.
func (a *collArea) data(k uint64, n int64) []byte {
	if n <= collInline {
		return a.head[k%collHeads].inline[:n]
	}
	return a.slot[k%collSlots][:n]
}

// ahead is how many calls a writer may run ahead of its readers in a call
// whose part is n bytes: as many as there are heads, or slots when the
// part needs one.
func ahead(n int64) uint64 {
	if n <= collInline {
		return collHeads
	}
	return collSlots
}

// Coll returns the hub's shared-memory collectives, or nil when some rank
// of the communicator is on another host (or the hub has no peers).
func (h *Hub) Coll() *Coll { return h.coll }

// Calls is the number of collectives this rank has run through shared
// memory: tests check with it which path a collective took.
//
// Call it between collectives: RunCollective counts without a lock.
func (c *Coll) Calls() int64 {
	c.infoMu.Lock()
	defer c.infoMu.Unlock()
	return int64(c.seq)
}

// Collective implements backend.Collectives: it starts c through shared
// memory when its kind, buffers and size are ones Coll takes (take, in
// colltune.go), and returns an error matching backend.ErrSkip otherwise,
// so that package mp runs it over point-to-point messages. Every rank
// decides alike: the decision depends only on what every rank passes
// alike (the kind, the element type, the send count, the number of ranks).
//
// The request's Wait does the work; Collective itself never blocks.
func (c *Coll) Collective(co backend.Coll) (backend.Request, error) {
	if err := c.ready(&co); err != nil {
		return nil, err
	}
	r := &c.req
	c.infoMu.Lock()
	defer c.infoMu.Unlock()
	if r.busy {
		return nil, errCollBusy
	}
	c.restart(r, co)
	r.busy, r.finished, r.doneCh = true, false, nil
	return r, nil
}

// ready checks what Collective and RunCollective check before they start
// co: that Coll takes it (else an error matching ErrSkip), that no earlier
// collective failed, and that the transport has not ended.
func (c *Coll) ready(co *backend.Coll) error {
	if c == nil || !take(co, c.size) {
		return backend.ErrSkip
	}
	if c.fail != nil {
		return c.fail
	}
	return c.h.e.Err()
}

// restart readies r, which its caller owns, for this rank's next call:
// co. Field by field: the request is reused, and its atomic word is
// stored only when it changes.
func (c *Coll) restart(r *collReq, co backend.Coll) {
	drainWatchers(r)
	c.seq++
	r.c, r.co, r.k, r.desc = c, co, c.seq, collDesc(&co)
	r.phase, r.err = phaseWrite, nil
	if r.waitFor.Load() != 0 {
		r.waitFor.Store(0)
	}
}

// drainWatchers waits until no goroutine that Done started for r's last
// use still looks at r (a plain load when none was started: the
// collectives package mp runs never ask for Done). Such a goroutine ends
// as soon as it has the mutex, r's use having completed.
func drainWatchers(r *collReq) {
	for r.watchers.Load() != 0 {
		runtime.Gosched()
	}
}

// errCollBusy: a collective started while this Coll's request of that
// kind is still handed out (package mp, which orders the collectives,
// never does this).
var errCollBusy = fmt.Errorf("%w: a shared-memory collective started while another is under way (one at a time per communicator)", backend.ErrInvalid)

// RunCollective implements backend.CollRunner: Collective and the start
// of its request's Wait in one, on the caller's goroutine. A collective
// whose parts come within quickPolls polls (most small ones, the ranks
// calling together) ends here having taken no lock and allocated nothing:
// each lock is an atomic instruction, which waits until the stores before
// it (to the head and the sequence word, lines the other ranks read) have
// left this core, and a dozen of them made up most of an 8-byte Bcast's
// time. One that must wait longer is handed back as its request, pending,
// as Collective would have handed it out: from then on it is Collective's
// in every way (Pending reports it, Wait waits for it under c.mu).
//
// The caller holds the communicator's turn (package mp's order of its
// collectives), which is what keeps another collective of this Coll from
// running meanwhile; the request, until it is handed back, is seen by this
// goroutine alone.
func (c *Coll) RunCollective(co backend.Coll) (backend.Request, error) {
	if err := c.ready(&co); err != nil {
		return nil, err
	}
	r := &c.quick
	if r.busy { // handed back and not released
		return nil, errCollBusy
	}
	c.restart(r, co)
	r.quiet = true
	if !c.h.enter() {
		c.end(r, c.closedErr(r))
		return nil, r.err
	}
	// Where the pauses give the core away, quickPolls of them can last
	// many time slices on a loaded machine, before the wait that counts
	// the timeout has begun: the clock bounds them to the spin budget.
	var begin time.Time
	slow := false
	for i := 0; i < quickPolls; i++ {
		if c.step(r, i&15 == 15) {
			c.h.exit()
			return nil, r.err
		}
		if c.h.e.SpinPause(i) {
			slow = true
		}
		if slow && i&15 == 15 {
			if begin.IsZero() {
				begin = time.Now()
			} else if time.Since(begin) > engine.SpinBudget {
				break
			}
		}
	}
	c.h.exit()
	c.infoMu.Lock()
	r.quiet, r.busy, r.finished, r.doneCh = false, true, false, nil
	c.infoMu.Unlock()
	return r, nil
}

// quickPolls is how many polls RunCollective makes before it hands the
// collective back as a request: enough for parts that come within a
// microsecond or so (a Bcast's reader, a rank a little ahead of the
// others), few enough that the watchdog and the timeout, which count from
// the request's Wait, start late by microseconds.
const quickPolls = 128

// collDesc packs what every rank must pass alike into one word: the kind,
// operator, element type, root and send size.
func collDesc(co *backend.Coll) uint64 {
	d := uint64(co.Kind) | uint64(co.Send.Type)<<16 | uint64(co.Send.Len())<<40
	if co.Kind.Reduces() {
		d |= uint64(co.Op) << 8
	}
	if co.Kind.Rooted() {
		d |= uint64(co.Root&0xffff) << 24
	}
	return d
}

// sayDesc describes a packed descriptor, for ErrMismatch.
func sayDesc(d uint64) string {
	kind, op, typ := backend.CollKind(d&0xff), backend.ReduceOp(d>>8&0xff), backend.DType(d>>16&0xff)
	if kind == backend.Barrier {
		return "barrier"
	}
	s := fmt.Sprintf("%v of %d bytes of %v", kind, d>>40, typ)
	if kind.Reduces() {
		s += " with " + op.String()
	}
	if kind.Rooted() {
		s += fmt.Sprintf(" (root %d)", d>>24&0xffff)
	}
	return s
}

// Pending describes the shared-memory collective under way, if any, for
// the report of a wait that timed out: the collective's name as Op and
// the rank it waits for as Peer.
func (c *Coll) Pending() (backend.OpInfo, bool) {
	if c == nil {
		return backend.OpInfo{}, false
	}
	c.infoMu.Lock()
	defer c.infoMu.Unlock()
	r := &c.req
	if !r.busy || r.finished {
		if r = &c.quick; !r.busy || r.finished {
			return backend.OpInfo{}, false
		}
	}
	return backend.OpInfo{Op: r.co.Kind.String() + " (shared memory)", Peer: r.waitingFor(), Tag: -1,
		Count: r.co.Send.Count, Type: r.co.Send.Type, Caller: r.co.Caller}, true
}

// collReq is the request of the collective under way; a Coll has one,
// reused, so a collective allocates nothing.
type collReq struct {
	c       *Coll
	co      backend.Coll
	k       uint64 // its number: the value of the sequence words it waits for
	desc    uint64
	phase   uint8
	quiet   bool         // RunCollective's, not handed back: no other goroutine sees it
	waitFor atomic.Int32 // 1 + the rank it waits for (0: none yet); read by Pending from any goroutine
	// watchers counts the goroutines Done started that have not
	// returned: they read the request under c.mu, which a restart does
	// not take, so a restart waits for them (drainWatchers).
	watchers atomic.Int32

	// Under c.infoMu:
	busy     bool // handed out and not yet released
	finished bool
	err      error
	doneCh   chan struct{}
}

// setWaitFor records that r waits for rank j, storing only a change (a
// store here is an atomic exchange, which waits for every store before it
// to reach the cache).
func (r *collReq) setWaitFor(j int) {
	if r.waitFor.Load() != int32(j+1) {
		r.waitFor.Store(int32(j + 1))
	}
}

// waitingFor is the rank r waits for, or -1 while it waits for none.
func (r *collReq) waitingFor() int { return int(r.waitFor.Load()) - 1 }

// The phases of a collective (step).
const (
	phaseWrite = iota // step 1 and 2: fill the slot, publish
	phaseRead         // step 3: read the others' slots
	phaseDone
)

// Test implements backend.Request: one attempt to advance, without
// waiting.
func (r *collReq) Test() (bool, backend.Status, error) {
	c := r.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.phase != phaseDone {
		c.attempt(r)
	}
	if r.phase != phaseDone {
		return false, backend.Status{}, nil
	}
	return true, backend.Status{}, r.err
}

// Wait implements backend.Request: it waits for the other ranks' parts,
// bounded by timeout (if positive), and does this rank's.
func (r *collReq) Wait(timeout time.Duration) (backend.Status, error) {
	c := r.c
	c.mu.Lock()
	var err error
	if r.phase != phaseDone {
		err = c.await(r, timeout)
	}
	if err == nil {
		err = r.err
	}
	c.mu.Unlock()
	return backend.Status{}, err
}

// Done implements backend.Request. The first call starts a goroutine that
// waits for the collective, since nothing else advances it.
func (r *collReq) Done() <-chan struct{} {
	c := r.c
	c.infoMu.Lock()
	defer c.infoMu.Unlock()
	if r.doneCh == nil {
		r.doneCh = make(chan struct{})
		if r.finished {
			close(r.doneCh)
		} else {
			k := r.k
			r.watchers.Add(1)
			go func() {
				defer r.watchers.Add(-1) // after the unlock: its last look at r
				c.mu.Lock()
				defer c.mu.Unlock()
				if r.k == k && r.phase != phaseDone {
					c.await(r, 0)
				}
			}()
		}
	}
	return r.doneCh
}

// Release implements backend.Request: the request may be handed out
// again, once it has completed.
func (r *collReq) Release() {
	c := r.c
	c.infoMu.Lock()
	if r.finished {
		r.busy = false
	}
	c.infoMu.Unlock()
}

// end completes r with err (nil: success); a failure is the Coll's from
// now on, since the ranks' sequence words no longer agree.
func (c *Coll) end(r *collReq, err error) {
	r.phase = phaseDone
	if err != nil && c.fail == nil {
		c.fail = err
	}
	if r.quiet {
		r.err = err
		return
	}
	c.infoMu.Lock()
	r.err, r.finished = err, true
	if r.doneCh != nil {
		close(r.doneCh)
	}
	c.infoMu.Unlock()
}

// down returns why r cannot go on, or nil: the communicator is closed,
// aborted or revoked (a member began Shrink), or the rank r waits for is lost (a rank that closed, or died,
// after it did its part of r holds nothing up).
func (c *Coll) down(r *collReq) error {
	if err := c.h.e.Err(); err != nil {
		return err
	}
	if err := c.h.e.Revoked(); err != nil {
		return err // a member began Shrink: it will not come
	}
	if j := r.waitingFor(); j >= 0 && j < c.size && c.peers[j] != nil {
		return c.peers[j].p.Down()
	}
	return nil
}

// errCollClosed is the error of a collective whose memory is being
// unmapped, when no peer's loss says more.
var errCollClosed = fmt.Errorf("%w: the shared-memory transport has ended", backend.ErrClosed)

// collMismatch is the error of a rank whose call differs from this one's.
func collMismatch(rank int, theirs, mine uint64) error {
	return fmt.Errorf("%w: rank %d called %s where this rank called %s (every rank must call the same collectives, alike)",
		backend.ErrMismatch, rank, sayDesc(theirs), sayDesc(mine))
}

// errNoArea: a peer's segment has no room for the collective area it
// announced.
var errNoArea = fmt.Errorf("%w: collective area outside the segment", backend.ErrCorrupt)

// newColl makes the collectives of h, whose inbox holds this rank's area
// in mine and whose links hold the others'.
func newColl(h *Hub, mine []byte) *Coll {
	size := h.e.Size()
	c := &Coll{h: h, rank: h.e.Rank(), size: size, areas: make([]collArea, size), peers: make([]*link, size), seen: make([]uint64, size)}
	c.areas[c.rank] = newArea(mine)
	for _, l := range h.links {
		c.areas[l.rank], c.peers[l.rank] = l.coll, l
	}
	return c
}

// wake rings this rank's own bell, so that a collective's waiter sleeping
// on it looks again: a link has ended.
func (c *Coll) wake() {
	if c != nil && c.h.enter() {
		c.areas[c.rank].bell.Ring()
		c.h.exit()
	}
}
