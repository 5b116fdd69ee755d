package shm

import (
	"fmt"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/internal/reduce"
	shmem "github.com/courier-mp/courier/internal/shm"
)

// attempt advances r once, without waiting, inside the hub (its memory
// stays mapped meanwhile); under c.mu.
func (c *Coll) attempt(r *collReq) {
	if !c.h.enter() {
		c.end(r, c.closedErr(r))
		return
	}
	c.step(r, true)
	c.h.exit()
}

// closedErr is the error of a collective that finds the transport ended:
// why the rank it waits for cannot go on or, when it waits for none yet
// (it started after every link had ended), why the first lost peer is,
// which names the rank whose loss ended them (a peer that left after it
// lost a rank says which); errCollClosed only when no peer is lost.
func (c *Coll) closedErr(r *collReq) error {
	if err := c.down(r); err != nil {
		return err
	}
	for _, l := range c.peers {
		if l == nil {
			continue
		}
		if err := l.p.Down(); err != nil {
			return err
		}
	}
	return errCollClosed
}

// step advances r through the protocol (Coll's doc) as far as it can
// without waiting, and reports whether r is done; otherwise r.waitingFor() is
// the rank it waits for. thorough: a slot not filled yet is also checked
// against its rank's sequence word (a rank that called a collective where
// it writes nothing), which costs a second line per rank waited for. Under
// c.mu, inside the hub.
func (c *Coll) step(r *collReq, thorough bool) bool {
	me := &c.areas[c.rank]
	h := r.k % collHeads
	if r.phase == phaseWrite {
		if writes(&r.co, c.rank) {
			// Every rank must have entered call k−D+1 (finished reading
			// the last use of the head and the slot). The words only
			// grow, so one read long enough ago still answers for most
			// calls: each is read again only when the last value read is
			// too old, not on every call (each read of a word another
			// rank just wrote is a cache miss). A writer that reads one
			// again waits until that rank is d/4 calls further than it
			// must be, so that a writer that keeps up with a slower
			// reader reads its word once every d/4 calls, not on each
			// (and the reader's next store of it does not wait for the
			// line to come back, every call).
			n := r.co.Send.Len()
			d := ahead(n)
			for j := range c.areas {
				if j != c.rank && c.seen[j]+d <= r.k {
					// At most k: the reader will enter call k.
					need := r.k + 1 - d + d/4
					if c.seen[j] = c.areas[j].seq.Load(); c.seen[j] < need {
						r.setWaitFor(j)
						return false
					}
				}
			}
			if d == collHeads {
				// The next calls' heads were read by every rank long
				// ago: take their lines back now, so that their stores
				// of k (and, where Publish is sequentially consistent,
				// the fence with them) do not wait for them.
				shmem.PrefetchWrite((*byte)(unsafe.Pointer(me.head[(h+1)%collHeads].k)))
				shmem.PrefetchWrite((*byte)(unsafe.Pointer(me.head[(h+2)%collHeads].k)))
			}
			if streamSlot(&r.co, c.size) {
				shmem.CopyStream(me.data(r.k, n), r.co.Send.Bytes())
			} else {
				copy(me.data(r.k, n), r.co.Send.Bytes())
			}
			// Plain stores, published by the store of k after them.
			*me.head[h].desc = r.desc
			shmem.Publish(me.head[h].k, r.k)
		}
		shmem.Publish(me.seq, r.k)
		for j := range c.areas {
			if j != c.rank {
				c.areas[j].bell.Ring()
			}
		}
		if r.co.Kind == backend.Bcast || r.co.Kind == backend.Reduce {
			// The writers of these run ahead (a Bcast's root, a Reduce's
			// non-roots): the heads of the next calls are likely written
			// already: fetching those 4 and 8 calls on overlaps their
			// misses with this call's work (1 and 2 on came too late to
			// help). Once a call, not on every poll of its wait.
			lo, hi := readRange(&r.co, c.rank, c.size)
			for j := lo; j < hi; j++ {
				if j != c.rank {
					shmem.Prefetch((*byte)(unsafe.Pointer(c.areas[j].head[(h+4)%collHeads].k)))
					shmem.Prefetch((*byte)(unsafe.Pointer(c.areas[j].head[(h+8)%collHeads].k)))
				}
			}
		}
		r.phase = phaseRead
	}
	if r.phase != phaseRead {
		return true
	}
	lo, hi := readRange(&r.co, c.rank, c.size)
	for j := lo; j < hi; j++ {
		if j == c.rank {
			continue
		}
		hd := &c.areas[j].head[h]
		if hd.k.Load() != r.k {
			if thorough && c.areas[j].seq.Load() >= r.k && hd.k.Load() != r.k {
				// Rank j is in call k (or past it) and did not fill its
				// slot: its call writes nothing.
				c.end(r, fmt.Errorf("%w: rank %d called a collective to which it contributes nothing here (a Bcast or a Reduce with another root) where this rank called %s (every rank must call the same collectives, alike)",
					backend.ErrMismatch, j, sayDesc(r.desc)))
				return true
			}
			r.setWaitFor(j)
			return false
		}
	}
	for j := lo; j < hi; j++ {
		if d := *c.areas[j].head[h].desc; d != r.desc && j != c.rank {
			c.end(r, collMismatch(j, d, r.desc))
			return true
		}
	}
	c.finish(r)
	c.end(r, nil)
	return true
}

// writes reports whether rank fills its slot in co: every rank but a
// Bcast's non-roots (a Barrier's slot holds its descriptor alone, which
// the others check).
func writes(co *backend.Coll, rank int) bool {
	return co.Kind != backend.Bcast || rank == co.Root
}

// readRange is the ranks whose slots rank reads (or, for a Barrier,
// whose arrival it waits for) in co, lo to hi−1: every rank for
// Allreduce, Allgather and Barrier, the root for a Bcast's non-roots,
// every rank for a Reduce's root, none otherwise.
func readRange(co *backend.Coll, rank, size int) (lo, hi int) {
	switch co.Kind {
	case backend.Allreduce, backend.Allgather, backend.Barrier:
		return 0, size
	case backend.Bcast:
		if rank != co.Root {
			return co.Root, co.Root + 1
		}
	case backend.Reduce:
		if rank == co.Root {
			return 0, size
		}
	}
	return 0, 0
}

// finish does this rank's part once the slots it reads are filled:
// Allreduce and a Reduce's root combine every slot, in rank order, into
// Recv; Allgather copies each slot into its block of Recv; a Bcast's
// non-root copies the root's slot.
func (c *Coll) finish(r *collReq) {
	co, k := &r.co, r.k
	switch co.Kind {
	case backend.Allreduce, backend.Reduce:
		if co.Kind == backend.Reduce && c.rank != co.Root {
			return
		}
		n := co.Send.Len()
		slot := func(j int) backend.Buffer {
			return backend.Buffer{Ptr: unsafe.Pointer(unsafe.SliceData(c.areas[j].data(k, n))), Count: co.Send.Count, Type: co.Send.Type, Mem: backend.Host}
		}
		if n > collInline && n <= 256 {
			// A small reduction is a cache miss per slot: take them all
			// at once before combining, so they overlap.
			t := byte(0)
			for j := range c.size {
				t += c.areas[j].slot[k%collSlots][0]
			}
			c.touch = t
		}
		reduce.Combine(co.Recv, slot(0), slot(1), co.Op)
		for j := 2; j < c.size; j++ {
			reduce.Combine(co.Recv, co.Recv, slot(j), co.Op)
		}
	case backend.Allgather:
		n := co.Send.Len()
		recv := co.Recv.Bytes()
		for j := range c.size {
			copy(recv[int64(j)*n:int64(j+1)*n], c.areas[j].data(k, n))
		}
	case backend.Bcast:
		if c.rank != co.Root {
			copy(co.Recv.Bytes(), c.areas[co.Root].data(k, co.Recv.Len()))
		}
	}
}
