package campaign

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/courier-mp/courier/mp"
)

// Kind is a kind of step of a workload.
type Kind int

// The steps a workload is made of: point-to-point patterns, a
// master–worker loop whose master receives from AnySource, and every
// collective.
const (
	Ring         Kind = iota // Sendrecv to the right, from the left
	Exchange                 // Isend and Irecv with every other rank, then WaitAll
	MasterWorker             // rank 0 hands out tasks, collects results from AnySource
	Barrier
	Bcast
	Reduce
	Allreduce
	Iallreduce
	Gather
	Gatherv
	Scatter
	Scatterv
	Allgather
	Allgatherv
	Alltoall
	Alltoallv
	ReduceScatter
	Scan
	Exscan
	numKinds
)

var kindNames = [...]string{"ring", "exchange", "master-worker", "barrier", "bcast", "reduce", "allreduce",
	"iallreduce", "gather", "gatherv", "scatter", "scatterv", "allgather", "allgatherv", "alltoall", "alltoallv",
	"reduce-scatter", "scan", "exscan"}

// String names the kind.
func (k Kind) String() string {
	if k >= 0 && k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Step is one step of a workload.
type Step struct {
	Kind Kind
	// N is the elements (int64) per rank or per block: a few, or enough
	// for a message of at least LargeBytes.
	N int
	// Root is the root of a rooted collective.
	Root int
	// Tasks is the number of tasks of a master–worker step.
	Tasks int
}

// LargeBytes is the least size of a large step's messages: past the eager
// limit and the 4 MiB chunk of the TCP link.
const LargeBytes = 4 << 20

// Plan returns the workload of seed for size ranks: every kind once, in
// a random order, and as many random steps again; a third of the steps
// that move data move at least LargeBytes per message.
func Plan(seed uint64, size int) []Step {
	rng := rand.New(rand.NewPCG(seed, 0x636f7572696572))
	kinds := make([]Kind, 0, 2*numKinds)
	for k := range numKinds {
		kinds = append(kinds, k)
	}
	for range numKinds {
		kinds = append(kinds, Kind(rng.IntN(int(numKinds))))
	}
	rng.Shuffle(int(numKinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	plan := make([]Step, len(kinds))
	for i, k := range kinds {
		s := Step{Kind: k, Root: rng.IntN(size), N: 1 + rng.IntN(2000)}
		if rng.IntN(3) == 0 {
			s.N = LargeBytes/8 + rng.IntN(LargeBytes/8/4)
		}
		if k == MasterWorker {
			s.N, s.Tasks = 1+rng.IntN(64), 4+rng.IntN(40)
		}
		plan[i] = s
	}
	return plan
}

// errWrong marks a step whose data came out wrong.
var errWrong = errors.New("wrong result")

// val is element i of rank r's data in step k.
func val(r, k, i int) int64 { return int64(r)<<48 | int64(k&0xffff)<<32 | int64(i) }

// sumOver is the sum of val over ranks lo … hi−1.
func sumOver(lo, hi, k, i int) int64 {
	var s int64
	for r := lo; r < hi; r++ {
		s += val(r, k, i)
	}
	return s
}

// fill returns n elements of rank r's data in step k, offset by off.
func fill(n, r, k, off int) []int64 {
	b := make([]int64, n)
	for i := range b {
		b[i] = val(r, k, off+i)
	}
	return b
}

// check compares got with want(i) and names the first difference.
func check(what string, got []int64, want func(i int) int64) error {
	for i, g := range got {
		if w := want(i); g != w {
			return fmt.Errorf("%w: %s: element %d of %d is %#x, want %#x", errWrong, what, i, len(got), g, w)
		}
	}
	return nil
}

// Run runs step s, the k-th step this rank runs, on c, and checks every
// result it receives.
func Run(c *mp.Comm, s Step, k int) error {
	me, size, n := c.Rank(), c.Size(), s.N
	tag := 100 + k%1000
	switch s.Kind {
	case Ring:
		right, left := (me+1)%size, (me+size-1)%size
		got := make([]int64, n)
		if _, err := mp.Sendrecv(c, fill(n, me, k, 0), right, tag, got, left, tag); err != nil {
			return err
		}
		return check("from the left", got, func(i int) int64 { return val(left, k, i) })
	case Exchange:
		got := make([][]int64, size)
		var reqs []*mp.Request
		for p := range size {
			if p == me {
				continue
			}
			got[p] = make([]int64, n)
			reqs = append(reqs, mp.Irecv(c, got[p], p, tag), mp.Isend(c, fill(n, me, k, p), p, tag))
		}
		if err := mp.WaitAll(reqs...); err != nil {
			return err
		}
		for p := range size {
			if p != me {
				if err := check(fmt.Sprintf("from rank %d", p), got[p], func(i int) int64 { return val(p, k, me+i) }); err != nil {
					return err
				}
			}
		}
		return nil
	case MasterWorker:
		return masterWorker(c, s, k)
	case Barrier:
		return mp.Barrier(c)
	case Bcast:
		buf := make([]int64, n)
		if me == s.Root {
			buf = fill(n, me, k, 0)
		}
		if err := mp.Bcast(c, buf, s.Root); err != nil {
			return err
		}
		return check("broadcast", buf, func(i int) int64 { return val(s.Root, k, i) })
	case Reduce, Allreduce, Iallreduce:
		recv := make([]int64, n)
		var err error
		switch s.Kind {
		case Reduce:
			err = mp.Reduce(c, fill(n, me, k, 0), recv, mp.Sum, s.Root)
		case Allreduce:
			err = mp.Allreduce(c, fill(n, me, k, 0), recv, mp.Sum)
		default:
			var r *mp.Request
			if r, err = mp.Iallreduce(c, fill(n, me, k, 0), recv, mp.Sum); err == nil {
				_, err = r.Wait()
			}
		}
		if err != nil || (s.Kind == Reduce && me != s.Root) {
			return err
		}
		return check("sum", recv, func(i int) int64 { return sumOver(0, size, k, i) })
	case Gather, Gatherv:
		counts := vcounts(s, size)
		if s.Kind == Gather {
			counts = slices.Repeat([]int{n}, size)
		}
		var recv []int64
		if me == s.Root {
			recv = make([]int64, sum(counts))
		}
		var err error
		if s.Kind == Gather {
			err = mp.Gather(c, fill(n, me, k, 0), recv, s.Root)
		} else {
			err = mp.Gatherv(c, fill(counts[me], me, k, 0), recv, counts, s.Root)
		}
		if err != nil || me != s.Root {
			return err
		}
		return check("gathered", recv, blockVal(counts, k, func(r, j int) int { return j }))
	case Scatter, Scatterv:
		counts := vcounts(s, size)
		if s.Kind == Scatter {
			counts = slices.Repeat([]int{n}, size)
		}
		var send []int64
		if me == s.Root {
			send = fill(sum(counts), me, k, 0)
		}
		recv := make([]int64, counts[me])
		var err error
		if s.Kind == Scatter {
			err = mp.Scatter(c, send, recv, s.Root)
		} else {
			err = mp.Scatterv(c, send, counts, recv, s.Root)
		}
		if err != nil {
			return err
		}
		off := sum(counts[:me])
		return check("scattered", recv, func(i int) int64 { return val(s.Root, k, off+i) })
	case Allgather, Allgatherv:
		counts := vcounts(s, size)
		if s.Kind == Allgather {
			counts = slices.Repeat([]int{n}, size)
		}
		recv := make([]int64, sum(counts))
		var err error
		if s.Kind == Allgather {
			err = mp.Allgather(c, fill(n, me, k, 0), recv)
		} else {
			err = mp.Allgatherv(c, fill(counts[me], me, k, 0), recv, counts)
		}
		if err != nil {
			return err
		}
		return check("all-gathered", recv, blockVal(counts, k, func(r, j int) int { return j }))
	case Alltoall, Alltoallv:
		// Rank r sends rank p a block of cnt(r, p) elements, its
		// elements from p·n on.
		cnt := func(r, p int) int { return n }
		if s.Kind == Alltoallv {
			cnt = func(r, p int) int { return (n*(r+2*p+1))%(n+1) + r }
		}
		sc, rc := make([]int, size), make([]int, size)
		var send []int64
		for p := range size {
			sc[p], rc[p] = cnt(me, p), cnt(p, me)
			send = append(send, fill(sc[p], me, k, p*n)...)
		}
		recv := make([]int64, sum(rc))
		var err error
		if s.Kind == Alltoall {
			err = mp.Alltoall(c, send, recv)
		} else {
			err = mp.Alltoallv(c, send, sc, recv, rc)
		}
		if err != nil {
			return err
		}
		return check("all-to-all", recv, blockVal(rc, k, func(r, j int) int { return me*n + j }))
	case ReduceScatter:
		recv := make([]int64, n)
		if err := mp.ReduceScatter(c, fill(n*size, me, k, 0), recv, mp.Sum); err != nil {
			return err
		}
		return check("reduce-scattered", recv, func(i int) int64 { return sumOver(0, size, k, me*n+i) })
	case Scan, Exscan:
		recv := make([]int64, n)
		if s.Kind == Scan {
			if err := mp.Scan(c, fill(n, me, k, 0), recv, mp.Sum); err != nil {
				return err
			}
			return check("scan", recv, func(i int) int64 { return sumOver(0, me+1, k, i) })
		}
		if err := mp.Exscan(c, fill(n, me, k, 0), recv, mp.Sum); err != nil || me == 0 {
			return err
		}
		return check("exscan", recv, func(i int) int64 { return sumOver(0, me, k, i) })
	}
	return fmt.Errorf("campaign: unknown step kind %d", s.Kind)
}

// vcounts are the block lengths of a v-collective step: uneven, one of
// them empty when the job has more than two ranks.
func vcounts(s Step, size int) []int {
	counts := make([]int, size)
	for r := range counts {
		counts[r] = s.N * (r + 1) / size
	}
	if size > 2 {
		counts[(s.Root+1)%size] = 0
	}
	return counts
}

func sum(c []int) int {
	t := 0
	for _, x := range c {
		t += x
	}
	return t
}

// blockVal is the want function of a buffer of blocks by rank (counts):
// element j of rank r's block is val(r, k, at(r, j)).
func blockVal(counts []int, k int, at func(r, j int) int) func(i int) int64 {
	return func(i int) int64 {
		r := 0
		for r < len(counts)-1 && i >= counts[r] {
			i -= counts[r]
			r++
		}
		return val(r, k, at(r, i))
	}
}

// Tags of the master–worker step, within its step's tag.
const (
	tagTask   = 0
	tagResult = 1
	tagStop   = 2
)

// masterWorker: rank 0 hands out s.Tasks tasks of s.N elements, one to
// each worker at a time, and takes each result with a receive from
// AnySource; workers take their next message from rank 0 with AnyTag.
func masterWorker(c *mp.Comm, s Step, k int) error {
	me, size, n := c.Rank(), c.Size(), s.N
	base := 3 * (1000 + k%1000)
	task := func(t int) []int64 { return fill(n, 0, k, t*n) }
	if me != 0 {
		buf := make([]int64, n)
		for {
			st, err := mp.Recv(c, buf, 0, mp.AnyTag)
			if err != nil {
				return err
			}
			switch st.Tag {
			case base + tagStop:
				return nil
			case base + tagTask:
			default:
				return fmt.Errorf("%w: master–worker: a message of tag %d from rank 0, want %d or %d", errWrong, st.Tag, base+tagTask, base+tagStop)
			}
			for i := range buf {
				buf[i] = -buf[i]
			}
			if err := mp.Send(c, buf, 0, base+tagResult); err != nil {
				return err
			}
		}
	}
	if size == 1 {
		return nil
	}
	holds := make([]int, size) // worker → the task it holds
	next, done := 0, 0
	for w := 1; w < size; w++ {
		if next < s.Tasks {
			holds[w] = next
			if err := mp.Send(c, task(next), w, base+tagTask); err != nil {
				return err
			}
			next++
		} else if err := mp.Send(c, []int64{}, w, base+tagStop); err != nil {
			return err
		}
	}
	res := make([]int64, n)
	for done < s.Tasks {
		st, err := mp.Recv(c, res, mp.AnySource, base+tagResult)
		if err != nil {
			return err
		}
		w := st.Source
		t := holds[w]
		if err := check(fmt.Sprintf("task %d's result from rank %d", t, w), res, func(i int) int64 { return -val(0, k, t*n+i) }); err != nil {
			return err
		}
		done++
		if next < s.Tasks {
			holds[w] = next
			if err := mp.Send(c, task(next), w, base+tagTask); err != nil {
				return err
			}
			next++
		} else if err := mp.Send(c, []int64{}, w, base+tagStop); err != nil {
			return err
		}
	}
	return nil
}
