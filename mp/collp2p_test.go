package mp

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/courier-mp/courier/backend"
)

// The collectives' algorithms, each called directly (whatever the
// thresholds choose) on the in-memory transport, on 2 to 9 ranks: integer
// results compared exactly with a sum in rank order, floating-point
// results compared bit for bit across the ranks; in place and not.

// algoRanks are the rank counts the algorithms are tried on: powers of
// two and every count between.
var algoRanks = []int{2, 3, 4, 5, 6, 7, 8, 9}

// algoCounts are the element counts: one, fewer than the ranks, uneven.
var algoCounts = []int{1, 3, 10, 1001}

// ints is rank r's input of n small integers.
func ints(r, n int) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = int64((r*31+i*17)%97) - 48
	}
	return v
}

// intSum is the sum over p ranks of ints.
func intSum(p, n int) []int64 {
	want := make([]int64, n)
	for r := range p {
		for i, x := range ints(r, n) {
			want[i] += x
		}
	}
	return want
}

// floats is rank r's input of n float64s of mixed signs and magnitudes, so
// that the order of additions changes the rounding.
func floats(r, n int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(r), uint64(n)))
	v := make([]float64, n)
	for i := range v {
		v[i] = (rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(12)-6))
	}
	return v
}

// gatherAll collects one result per rank.
type gatherAll[T any] struct {
	mu  sync.Mutex
	got map[int]T
}

func (g *gatherAll[T]) put(r int, v T) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.got == nil {
		g.got = map[int]T{}
	}
	g.got[r] = v
}

// sameOnEvery reports a rank whose float result differs in any bit from
// rank 0's.
func sameOnEvery(t *testing.T, what string, g *gatherAll[[]float64]) {
	t.Helper()
	for r, v := range g.got {
		for i := range v {
			if math.Float64bits(v[i]) != math.Float64bits(g.got[0][i]) {
				t.Errorf("%s: rank %d's element %d is %x, rank 0's %x", what, r, i, math.Float64bits(v[i]), math.Float64bits(g.got[0][i]))
				return
			}
		}
	}
}

// closeTo reports elements further than a few ulps of the sum's
// magnitude from want.
func closeTo(t *testing.T, what string, got, want, scale []float64) {
	t.Helper()
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-12*scale[i] {
			t.Errorf("%s: element %d is %v, want %v", what, i, got[i], want[i])
			return
		}
	}
}

// allreduces are the Allreduce algorithms, each for the counts it takes.
var allreduces = []struct {
	name string
	run  func(c *Comm, send, recv backend.Buffer) error
	fits func(p, n int) bool
}{
	{"RecursiveDoubling", func(c *Comm, s, r backend.Buffer) error { return c.allreduceRD(s, r, Sum) }, func(p, n int) bool { return true }},
	{"ReduceBcast", func(c *Comm, s, r backend.Buffer) error { return c.reduceBcast(s, r, Sum) }, func(p, n int) bool { return true }},
	{"Ring", func(c *Comm, s, r backend.Buffer) error { return c.allreduceRing(s, r, Sum) }, func(p, n int) bool { return n >= p }},
}

func TestCollAllreduceAlgorithms(t *testing.T) {
	for _, a := range allreduces {
		for _, p := range algoRanks {
			for _, n := range algoCounts {
				if !a.fits(p, n) {
					continue
				}
				for _, inPlace := range []bool{false, true} {
					what := fmt.Sprintf("%s, %d ranks, %d elements, in place %v", a.name, p, n, inPlace)
					var fl gatherAll[[]float64]
					runMem(t, p, func(c *Comm) error {
						send := ints(c.rank, n)
						recv := send
						if !inPlace {
							recv = make([]int64, n)
						}
						if err := a.run(c, describe(send), describe(recv)); err != nil {
							return err
						}
						if want := intSum(p, n); !slices.Equal(recv, want) {
							return fmt.Errorf("%s: got %v, want %v", what, recv[:min(n, 8)], want[:min(n, 8)])
						}
						if !inPlace && !slices.Equal(send, ints(c.rank, n)) {
							return fmt.Errorf("%s: the send buffer changed", what)
						}
						fs := floats(c.rank, n)
						fr := fs
						if !inPlace {
							fr = make([]float64, n)
						}
						if err := a.run(c, describe(fs), describe(fr)); err != nil {
							return err
						}
						fl.put(c.rank, fr)
						return nil
					})
					sameOnEvery(t, what, &fl)
					want, scale := make([]float64, n), make([]float64, n)
					for r := range p {
						for i, x := range floats(r, n) {
							want[i] += x
							scale[i] += math.Abs(x)
						}
					}
					closeTo(t, what, fl.got[0], want, scale)
				}
			}
		}
	}
}

// TestCollAllreduceNaNs: NaNs with different payloads on every rank, and
// a sum whose bits depend on the order: every rank gets rank 0's bits.
func TestCollAllreduceNaNs(t *testing.T) {
	for _, a := range allreduces {
		for _, p := range algoRanks {
			n := 2 * p
			var g gatherAll[[]float64]
			runMem(t, p, func(c *Comm) error {
				v := floats(c.rank, n)
				v[0] = math.Float64frombits(0x7ff8000000000001 + uint64(c.rank)) // a NaN of its own
				v[n-1] = math.Float64frombits(0xfff4000000000000 + uint64(c.rank)<<8)
				if err := a.run(c, describe(v), describe(v)); err != nil {
					return err
				}
				g.put(c.rank, v)
				return nil
			})
			sameOnEvery(t, fmt.Sprintf("%s of NaNs, %d ranks", a.name, p), &g)
			if !math.IsNaN(g.got[0][0]) {
				t.Errorf("%s, %d ranks: the sum of NaNs is %v", a.name, p, g.got[0][0])
			}
		}
	}
}

// TestCollReduceScatterAlgorithms: both algorithms, in place (this rank's
// block of the send buffer) and not.
func TestCollReduceScatterAlgorithms(t *testing.T) {
	algos := []struct {
		name string
		run  func(c *Comm, send, recv backend.Buffer) error
	}{
		{"RecursiveDoubling", func(c *Comm, s, r backend.Buffer) error { return c.reduceScatterRD(s, r, Sum) }},
		{"Ring", func(c *Comm, s, r backend.Buffer) error { return c.reduceScatterRing(s, r, Sum) }},
	}
	for _, a := range algos {
		for _, p := range algoRanks {
			for _, n := range algoCounts {
				for _, inPlace := range []bool{false, true} {
					what := fmt.Sprintf("%s, %d ranks, %d elements per rank, in place %v", a.name, p, n, inPlace)
					runMem(t, p, func(c *Comm) error {
						send := ints(c.rank, n*p)
						keep := slices.Clone(send)
						recv := send[c.rank*n : (c.rank+1)*n]
						if !inPlace {
							recv = make([]int64, n)
						}
						if err := a.run(c, describe(send), describe(recv)); err != nil {
							return err
						}
						if want := intSum(p, n*p)[c.rank*n : (c.rank+1)*n]; !slices.Equal(recv, want) {
							return fmt.Errorf("%s: got %v, want %v", what, recv[:min(n, 8)], want[:min(n, 8)])
						}
						if !inPlace && !slices.Equal(send, keep) {
							return fmt.Errorf("%s: the send buffer changed", what)
						}
						return nil
					})
				}
			}
		}
	}
}

// rankBlock is what rank r contributes to an Allgather: n words.
func rankBlock(r, n int) []uint64 {
	v := make([]uint64, n)
	for i := range v {
		v[i] = uint64(r)<<32 | uint64(i)
	}
	return v
}

// TestCollAllgatherAlgorithms: recursive doubling (powers of two), Bruck's
// and the ring, in place and not.
func TestCollAllgatherAlgorithms(t *testing.T) {
	algos := []struct {
		name string
		run  func(c *Comm, send, recv backend.Buffer) error
		fits func(p int) bool
	}{
		{"RecursiveDoubling", (*Comm).allgatherRD, func(p int) bool { return p&(p-1) == 0 }},
		{"Bruck", (*Comm).allgatherBruck, func(int) bool { return true }},
		{"Ring", (*Comm).allgatherRing, func(int) bool { return true }},
	}
	for _, a := range algos {
		for _, p := range algoRanks {
			if !a.fits(p) {
				continue
			}
			for _, n := range algoCounts {
				for _, inPlace := range []bool{false, true} {
					what := fmt.Sprintf("%s, %d ranks, %d elements per rank, in place %v", a.name, p, n, inPlace)
					runMem(t, p, func(c *Comm) error {
						recv := make([]uint64, n*p)
						send := rankBlock(c.rank, n)
						if inPlace {
							copy(recv[c.rank*n:], send)
							send = recv[c.rank*n : (c.rank+1)*n]
						}
						if err := a.run(c, describe(send), describe(recv)); err != nil {
							return err
						}
						for k := range p {
							if !slices.Equal(recv[k*n:(k+1)*n], rankBlock(k, n)) {
								return fmt.Errorf("%s: rank %d's block is %v", what, k, recv[k*n:k*n+min(n, 4)])
							}
						}
						return nil
					})
				}
			}
		}
	}
}

// TestCollRootedAndAlltoall: the binomial trees from every root, and
// Alltoall in place and not, on every rank count.
func TestCollRootedAndAlltoall(t *testing.T) {
	for _, p := range algoRanks {
		for _, n := range algoCounts {
			for root := range p {
				runMem(t, p, func(c *Comm) error {
					buf := rankBlock(root, n)
					if c.rank != root {
						buf = make([]uint64, n)
					}
					if err := c.bcastTree(describe(buf), root); err != nil {
						return err
					}
					if !slices.Equal(buf, rankBlock(root, n)) {
						return fmt.Errorf("Bcast from %d of %d ranks: got %v", root, p, buf[:min(n, 4)])
					}
					// The binary tree, the same message again with another
					// block.
					buf = rankBlock(root+100, n)
					if c.rank != root {
						buf = make([]uint64, n)
					}
					if err := c.bcastBinary(describe(buf), root); err != nil {
						return err
					}
					if !slices.Equal(buf, rankBlock(root+100, n)) {
						return fmt.Errorf("Bcast down the binary tree from %d of %d ranks: got %v", root, p, buf[:min(n, 4)])
					}
					send := ints(c.rank, n)
					var recv []int64
					if c.rank == root {
						recv = make([]int64, n)
					}
					if err := c.reduceTree(describe(send), describe(recv), Sum, root); err != nil {
						return err
					}
					if c.rank == root && !slices.Equal(recv, intSum(p, n)) {
						return fmt.Errorf("Reduce to %d of %d ranks: got %v", root, p, recv[:min(n, 4)])
					}
					if !slices.Equal(send, ints(c.rank, n)) {
						return fmt.Errorf("Reduce to %d of %d ranks: the send buffer changed", root, p)
					}
					return nil
				})
			}
			for _, inPlace := range []bool{false, true} {
				runMem(t, p, func(c *Comm) error {
					send := make([]uint64, 0, n*p)
					for k := range p {
						send = append(send, rankBlock(1000*c.rank+k, n)...)
					}
					recv := send
					if !inPlace {
						recv = make([]uint64, n*p)
					}
					if err := c.alltoallPairs(describe(send), describe(recv)); err != nil {
						return err
					}
					for j := range p {
						if !slices.Equal(recv[j*n:(j+1)*n], rankBlock(1000*j+c.rank, n)) {
							return fmt.Errorf("Alltoall on %d ranks, in place %v: the block from %d is wrong", p, inPlace, j)
						}
					}
					return nil
				})
			}
		}
	}
}

// TestCollSmall: the thresholds table picks the row of the rank count.
func TestCollSmall(t *testing.T) {
	tab := []switchPoint{{2, 100}, {4, 50}, {anyRanks, 10}}
	for _, c := range []struct {
		p    int
		n    int64
		want bool
	}{{2, 99, true}, {2, 100, false}, {3, 49, true}, {4, 50, false}, {5, 9, true}, {1000, 10, false}} {
		if got := small(tab, c.p, c.n); got != c.want {
			t.Errorf("small(%d ranks, %d bytes) = %v", c.p, c.n, got)
		}
	}
	// The binary tree's Bcast: never on 4 ranks or fewer (the two trees
	// have one shape there), below 64 KiB beyond.
	for _, c := range []struct {
		p    int
		n    int64
		want bool
	}{{2, 8, false}, {4, 8, false}, {5, 8, true}, {8, 64<<10 - 1, true}, {8, 64 << 10, false}, {64, 8, true}} {
		if got := small(bcastBinary, c.p, c.n); got != c.want {
			t.Errorf("bcastBinary: %d ranks, %d bytes: %v", c.p, c.n, got)
		}
	}
}

// memRanks keeps the ranks of an in-memory job running, each waiting
// for the next call of op: a call of all runs it on every rank at once,
// and allocates nothing itself.
type memRanks struct {
	comms []*Comm
	start []chan struct{}
	done  chan error
	op    func(c *Comm) error
}

func newMemRanks(p int) *memRanks {
	m := &memRanks{comms: memComms(p, 0), start: make([]chan struct{}, p), done: make(chan error, p)}
	for r := range p {
		m.start[r] = make(chan struct{})
		go func() {
			for range m.start[r] {
				m.done <- m.op(m.comms[r])
			}
		}()
	}
	return m
}

// all runs m.op once on every rank and returns the first error.
func (m *memRanks) all() error {
	for _, s := range m.start {
		s <- struct{}{}
	}
	var first error
	for range m.start {
		if err := <-m.done; err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (m *memRanks) stop() {
	for _, s := range m.start {
		close(s)
	}
}

// collCalls are the collectives the allocation test and benchmark make,
// on every side of the thresholds: name, bytes (per rank's buffer) and
// the call on rank c with its buffers.
type collCall struct {
	name  string
	bytes int
	call  func(c *Comm, in, out []float32) error
	outOf func(p, n int) int // the receive buffer's length for n elements of send
}

func same(p, n int) int  { return n }
func times(p, n int) int { return n * p }

var collCalls = []collCall{
	{"Allreduce/8B", 8, func(c *Comm, in, out []float32) error { return Allreduce(c, in, out, Sum) }, same},
	{"Allreduce/32KiB", 32 << 10, func(c *Comm, in, out []float32) error { return Allreduce(c, in, out, Sum) }, same},
	{"Allreduce/1MiB", 1 << 20, func(c *Comm, in, out []float32) error { return Allreduce(c, in, out, Sum) }, same},
	{"AllreduceInPlace/8B", 8, func(c *Comm, in, _ []float32) error { return Allreduce(c, in, in, Sum) }, same},
	{"Allgather/8B", 8, func(c *Comm, in, out []float32) error { return Allgather(c, in, out) }, times},
	{"Allgather/256KiB", 256 << 10, func(c *Comm, in, out []float32) error { return Allgather(c, in, out) }, times},
	{"Bcast/8B", 8, func(c *Comm, in, _ []float32) error { return Bcast(c, in, 0) }, same},
	{"Bcast/1MiB", 1 << 20, func(c *Comm, in, _ []float32) error { return Bcast(c, in, 0) }, same},
	{"Reduce/8KiB", 8 << 10, func(c *Comm, in, out []float32) error {
		if c.Rank() != 1 {
			out = nil
		}
		return Reduce(c, in, out, Sum, 1)
	}, same},
	{"ReduceScatter/64B", 64, func(c *Comm, in, out []float32) error { return ReduceScatter(c, in, out[:len(in)/c.Size()], Sum) }, same},
	{"ReduceScatter/1MiB", 1 << 20, func(c *Comm, in, out []float32) error { return ReduceScatter(c, in, out[:len(in)/c.Size()], Sum) }, same},
	{"Alltoall/64B", 64, func(c *Comm, in, out []float32) error { return Alltoall(c, in, out) }, same},
	{"AlltoallInPlace/64B", 64, func(c *Comm, in, _ []float32) error { return Alltoall(c, in, in) }, same},
	{"Barrier", 0, func(c *Comm, _, _ []float32) error { return Barrier(c) }, same},
	{"Gather/64B", 64, func(c *Comm, in, out []float32) error { return Gather(c, in, rootOnly(c, out, 1), 1) }, times},
	{"Gather/1MiB", 1 << 20, func(c *Comm, in, out []float32) error { return Gather(c, in, rootOnly(c, out, 0), 0) }, times},
	{"Scatter/64B", 64, func(c *Comm, in, out []float32) error { return Scatter(c, rootOnly(c, out, 1), in, 1) }, times},
	{"Gatherv/64B", 64, func(c *Comm, in, out []float32) error {
		return Gatherv(c, in, rootOnly(c, out, 1), evenCounts(c.Size(), len(in)), 1)
	}, times},
	{"Scatterv/64KiB", 64 << 10, func(c *Comm, in, out []float32) error {
		return Scatterv(c, rootOnly(c, out, 0), evenCounts(c.Size(), len(in)), in, 0)
	}, times},
	{"Allgatherv/8B", 8, func(c *Comm, in, out []float32) error { return Allgatherv(c, in, out, evenCounts(c.Size(), len(in))) }, times},
	{"Allgatherv/256KiB", 256 << 10, func(c *Comm, in, out []float32) error {
		return Allgatherv(c, in, out, evenCounts(c.Size(), len(in)))
	}, times},
	{"Alltoallv/64B", 64, func(c *Comm, in, out []float32) error {
		counts := evenCounts(c.Size(), len(in)/c.Size())
		return Alltoallv(c, in, counts, out, counts)
	}, same},
	{"Scan/8B", 8, func(c *Comm, in, out []float32) error { return Scan(c, in, out, Sum) }, same},
	{"Scan/1MiB", 1 << 20, func(c *Comm, in, out []float32) error { return Scan(c, in, out, Sum) }, same},
	{"Exscan/8B", 8, func(c *Comm, in, out []float32) error { return Exscan(c, in, out, Max) }, same},
}

// rootOnly is buf at rank root, nil elsewhere.
func rootOnly(c *Comm, buf []float32, root int) []float32 {
	if c.Rank() != root {
		return nil
	}
	return buf
}

// evenCounts is p counts of n (the same slice every time, so that the
// allocation test counts only the collective's allocations).
func evenCounts(p, n int) []int {
	countsMu.Lock()
	defer countsMu.Unlock()
	k := [2]int{p, n}
	if cs, ok := countsCache[k]; ok {
		return cs
	}
	cs := make([]int, p)
	for i := range cs {
		cs[i] = n
	}
	countsCache[k] = cs
	return cs
}

var (
	countsMu    sync.Mutex
	countsCache = map[[2]int][]int{}
)

// setUp gives m the buffers of call cl on p ranks.
func (m *memRanks) setUp(cl collCall) {
	p := len(m.comms)
	n := max(cl.bytes/4/p*p, p) // a multiple of the rank count
	ins, outs := make([][]float32, p), make([][]float32, p)
	for r := range p {
		ins[r], outs[r] = make([]float32, n), make([]float32, cl.outOf(p, n))
		if cl.outOf(p, n) > n { // Allgather: send is one rank's block
			ins[r] = ins[r][:n]
		}
	}
	m.op = func(c *Comm) error { return cl.call(c, ins[c.rank], outs[c.rank]) }
}

// TestCollAllocs: in steady state a collective of host buffers allocates
// nothing (on the in-memory transport, which allocates nothing itself), on
// every algorithm's side of the thresholds, with and without checks.
func TestCollAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocations are not counted under the race detector")
	}
	for _, p := range []int{2, 3, 4, 6} {
		for _, check := range []bool{false, true} {
			m := newMemRanks(p)
			for _, c := range m.comms {
				c.check = check
			}
			for _, cl := range collCalls {
				m.setUp(cl)
				for range 3 {
					if err := m.all(); err != nil {
						t.Fatalf("%s on %d ranks: %v", cl.name, p, err)
					}
				}
				if a := testing.AllocsPerRun(20, func() {
					if err := m.all(); err != nil {
						t.Fatalf("%s on %d ranks: %v", cl.name, p, err)
					}
				}); a != 0 {
					t.Errorf("%s on %d ranks (checks %v): %v allocations per call", cl.name, p, check, a)
				}
			}
			m.stop()
		}
	}
}

// BenchmarkCollMem measures the collectives on 2 and 4 ranks of the
// in-memory transport: allocs/op is what courier's part of one call
// allocates on every rank together (0), ns/op mostly the goroutines'
// hand-offs.
func BenchmarkCollMem(b *testing.B) {
	for _, p := range []int{2, 4} {
		for _, cl := range collCalls {
			b.Run(fmt.Sprintf("%s/np=%d", cl.name, p), func(b *testing.B) {
				m := newMemRanks(p)
				defer m.stop()
				m.setUp(cl)
				if err := m.all(); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(int64(cl.bytes))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := m.all(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
