package shm

import "github.com/courier-mp/courier/backend"

// Which collectives run through shared memory (Coll), and up to what
// size: every threshold in one table, chosen by measurement (courier
// bench -coll over the host backend, shared memory against mp's
// point-to-point algorithms over the same transport; the figures, the
// commands and how to measure again are in docs/benchmarks.md,
// "Collectives through shared memory").
//
// Each table has rows of a rank count and a size: for communicators of at
// most ranks ranks (the first row that fits), a collective whose part per
// rank (the send buffer: Allreduce's and Reduce's, Bcast's buffer,
// Allgather's block) has at most bytes bytes runs through shared memory.
var (
	// collAllreduce: every rank combines every slot, N−1 passes over the
	// buffer where recursive doubling makes log2 N: from 16–32 KiB the
	// redundant work costs more than the messages it saves.
	collAllreduce = []collPoint{{2, 8 << 10}, {4, 16 << 10}, {anyRanks, 8 << 10}}
	// collReduce: Allreduce's table (bench has no Reduce): the root does
	// an Allreduce's work, the other ranks only copy in.
	collReduce = collAllreduce
	// collBcast: ahead of the binomial tree at every size a slot holds,
	// 3–10 times at 16–64 KiB.
	collBcast = []collPoint{{anyRanks, collSlot}}
	// collAllgather: ahead from 4 ranks at every size a slot holds (3–8
	// times); on 2 ranks the single exchange wins from 8 KiB per rank.
	collAllgather = []collPoint{{2, 4 << 10}, {anyRanks, collSlot}}
)

// collStreamBcast: from these sizes a Bcast's root copies its part into
// its slot with non-temporal stores (shmem.CopyStream), which do not take
// the slot's lines back from the ranks that read them last; its readers
// then read them from memory. Measured as the other tables (the rows:
// docs/benchmarks.md, "Copied into the ring without taking its lines"):
// 2 ranks, 4 KiB 1.4-2.1 → 0.6-1.0 µs and 64 KiB 9.5-10.7 → 3.4-4.5; 4
// ranks lose at 4 KiB and gain from 16 KiB. Allgather and Allreduce,
// whose every slot every rank reads, lost or stayed level, and copy as
// before.
var collStreamBcast = []collPoint{{2, 4 << 10}, {anyRanks, 16 << 10}}

// streamSlot reports whether co's writer copies into its slot with
// non-temporal stores, on size ranks.
func streamSlot(co *backend.Coll, size int) bool {
	from, ok := rowFor(collStreamBcast, size)
	return ok && co.Kind == backend.Bcast && co.Send.Len() >= from
}

// rowFor is the size of t's first row for size ranks, if any.
func rowFor(t []collPoint, size int) (int64, bool) {
	for _, row := range t {
		if size <= row.ranks {
			return row.bytes, true
		}
	}
	return 0, false
}

// collSlot is the capacity of one slot of a rank's collective area: no
// table may go beyond it. collSlots is how many slots a rank has, so how
// many calls with parts of more than collInline bytes a writer may run
// ahead of its readers (Coll's doc), as buffered messages let a loop of
// Bcasts or Reduces overlap; collHeads, how many calls with smaller parts
// (a head line each). 256 heads, not 64: on 4 ranks over 2 cores an
// 8-byte Bcast's root ran into its slowest reader, descheduled, every 64
// calls (0.40-0.69 µs a call with 64, 0.24-0.38 with 256, vader
// 0.33-0.59 in the same runs; docs/benchmarks.md, "Vector kernels for the
// reductions, 256 heads"); on 2 ranks the two are level within the
// machine's spread.
const (
	collSlot  = 64 << 10
	collSlots = 8
	collHeads = 256
)

// anyRanks is the rank count of a table's last row.
const anyRanks = 1<<31 - 1

// collPoint is one row of a table: at most ranks ranks, at most bytes
// bytes per rank.
type collPoint struct {
	ranks int
	bytes int64
}

// take reports whether co runs through shared memory on size ranks: its
// kind has a table, its buffers are host memory, and its part per rank is
// within the table's size.
func take(co *backend.Coll, size int) bool {
	if co.Send.Mem != backend.Host || co.Recv.Mem != backend.Host {
		return false
	}
	var t []collPoint
	switch co.Kind {
	case backend.Allreduce:
		t = collAllreduce
	case backend.Reduce:
		t = collReduce
	case backend.Bcast:
		t = collBcast
	case backend.Allgather:
		t = collAllgather
	case backend.Barrier:
		return true
	default:
		return false
	}
	upTo, ok := rowFor(t, size)
	return ok && co.Send.Len() <= min(upTo, collSlot)
}

// CollThresholds lists every size of the tables, for the test that checks
// the conformance suite tries sizes on both sides of each.
func CollThresholds() []int64 {
	var all []int64
	for _, t := range [][]collPoint{collAllreduce, collReduce, collBcast, collAllgather, collStreamBcast} {
		for _, row := range t {
			all = append(all, row.bytes)
		}
	}
	return all
}
