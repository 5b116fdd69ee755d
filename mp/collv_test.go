package mp

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/courier-mp/courier/backend"
)

// Gather, Scatter, their v-forms, Allgatherv, Alltoallv, Scan and Exscan
// on the in-memory transport (a send waits for its receive), against
// serial references on random data: 1 to 9 ranks, every root, counts
// with zeros; and each algorithm of Allgatherv and Scan called directly.

// vRanks are the rank counts of these tests.
var vRanks = []int{1, 2, 3, 4, 5, 6, 7, 8, 9}

// randCounts is p random counts below most, about a third of them 0,
// the same for every seed.
func randCounts(seed uint64, p, most int) []int {
	rng := rand.New(rand.NewPCG(seed, uint64(p)))
	counts := make([]int, p)
	for k := range counts {
		if rng.IntN(3) > 0 {
			counts[k] = rng.IntN(most + 1)
		}
	}
	return counts
}

// words is n words of the pattern of (seed, from).
func vwords(seed uint64, n int) []uint64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	v := make([]uint64, n)
	for i := range v {
		v[i] = rng.Uint64()
	}
	return v
}

func TestCollGatherScatter(t *testing.T) {
	for _, p := range vRanks {
		for _, n := range []int{0, 1, 5, 300} {
			for root := range p {
				runMem(t, p, func(c *Comm) error {
					r := c.rank
					what := fmt.Sprintf("%d ranks, %d elements, root %d", p, n, root)
					var fail error // a wrong result: the rank goes on, so that the others do not wait
					send := vwords(uint64(r), n)
					var all []uint64
					if r == root {
						all = make([]uint64, n*p)
					}
					if err := Gather(c, send, all, root); err != nil {
						return fmt.Errorf("Gather, %s: %w", what, err)
					}
					if r == root {
						for k := range p {
							if !slices.Equal(all[k*n:(k+1)*n], vwords(uint64(k), n)) && fail == nil {
								fail = fmt.Errorf("Gather, %s: rank %d's block is wrong", what, k)
							}
						}
					}
					// Scatter back what was gathered, blocks shifted by one.
					var from []uint64
					if r == root {
						from = make([]uint64, 0, n*p)
						for k := range p {
							from = append(from, vwords(uint64((k+1)%p), n)...)
						}
					}
					got := make([]uint64, n)
					if err := Scatter(c, from, got, root); err != nil {
						return fmt.Errorf("Scatter, %s: %w", what, err)
					}
					if !slices.Equal(got, vwords(uint64((r+1)%p), n)) && fail == nil {
						fail = fmt.Errorf("Scatter, %s: this rank's block is wrong", what)
					}
					return fail
				})
			}
		}
	}
}

func TestCollGathervScatterv(t *testing.T) {
	for _, p := range vRanks {
		for seed := range uint64(3) {
			counts := randCounts(seed, p, 40)
			total := 0
			for _, n := range counts {
				total += n
			}
			for root := range p {
				runMem(t, p, func(c *Comm) error {
					r := c.rank
					what := fmt.Sprintf("%d ranks, counts %v, root %d", p, counts, root)
					var fail error // as in TestCollGatherScatter
					var all []uint64
					var cs []int
					if r == root {
						all, cs = make([]uint64, total), counts
					}
					if err := Gatherv(c, vwords(uint64(r), counts[r]), all, cs, root); err != nil {
						return fmt.Errorf("Gatherv, %s: %w", what, err)
					}
					if r == root {
						at := 0
						for k, n := range counts {
							if !slices.Equal(all[at:at+n], vwords(uint64(k), n)) && fail == nil {
								fail = fmt.Errorf("Gatherv, %s: rank %d's block is wrong", what, k)
							}
							at += n
						}
						copy(all, vwords(99, total))
					}
					got := make([]uint64, counts[r])
					if err := Scatterv(c, all, cs, got, root); err != nil {
						return fmt.Errorf("Scatterv, %s: %w", what, err)
					}
					want := vwords(99, total)[sumTo(counts, r) : sumTo(counts, r)+counts[r]]
					if !slices.Equal(got, want) && fail == nil {
						fail = fmt.Errorf("Scatterv, %s: this rank's block is wrong", what)
					}
					return fail
				})
			}
		}
	}
}

// allgathervs are Allgatherv's algorithms, each for the rank counts it
// takes.
var allgathervs = []struct {
	name string
	run  func(c *Comm, send, recv backend.Buffer, l blocks) error
	fits func(p int) bool
}{
	{"RecursiveDoubling", (*Comm).allgatherRDv, func(p int) bool { return p&(p-1) == 0 }},
	{"Bruck", (*Comm).allgatherBruckv, func(int) bool { return true }},
	{"Ring", func(c *Comm, s, r backend.Buffer, l blocks) error {
		copyHost(l.block(r, c.rank), s)
		return c.ringAllgather(r, l)
	}, func(int) bool { return true }},
}

func TestCollAllgathervAlgorithms(t *testing.T) {
	for _, a := range allgathervs {
		for _, p := range vRanks[1:] {
			if !a.fits(p) {
				continue
			}
			for seed := range uint64(4) {
				counts := randCounts(seed, p, 30)
				runMem(t, p, func(c *Comm) error {
					offs := make([]int64, p+1)
					l := layout(counts, offs)
					recv := make([]uint64, l.count)
					if err := a.run(c, describe(vwords(uint64(c.rank), counts[c.rank])), describe(recv), l); err != nil {
						return err
					}
					for k := range p {
						if !slices.Equal(recv[offs[k]:offs[k+1]], vwords(uint64(k), counts[k])) {
							return fmt.Errorf("%s, counts %v: rank %d's block is wrong", a.name, counts, k)
						}
					}
					return nil
				})
			}
		}
	}
}

func TestCollAllgathervAndAlltoallv(t *testing.T) {
	for _, p := range vRanks {
		for seed := range uint64(3) {
			counts := randCounts(seed, p, 50)
			// pair[j][k] is what rank j sends rank k.
			pair := make([][]int, p)
			for j := range pair {
				pair[j] = randCounts(seed*100+uint64(j), p, 20)
			}
			runMem(t, p, func(c *Comm) error {
				r := c.rank
				total := sumTo(counts, p)
				var fail error // as in TestCollGatherScatter
				for _, inPlace := range []bool{false, true} {
					recv := make([]uint64, total)
					send := vwords(uint64(r), counts[r])
					if inPlace {
						copy(recv[sumTo(counts, r):], send)
						send = recv[sumTo(counts, r) : sumTo(counts, r)+counts[r]]
					}
					if err := Allgatherv(c, send, recv, counts); err != nil {
						return fmt.Errorf("Allgatherv, counts %v: %w", counts, err)
					}
					for k := range p {
						if at := sumTo(counts, k); !slices.Equal(recv[at:at+counts[k]], vwords(uint64(k), counts[k])) && fail == nil {
							fail = fmt.Errorf("Allgatherv, counts %v, in place %v: rank %d's block is wrong", counts, inPlace, k)
						}
					}
				}
				sc, rc := pair[r], make([]int, p)
				var send []uint64
				for k := range p {
					rc[k] = pair[k][r]
					send = append(send, vwords(uint64(1000*r+k), sc[k])...)
				}
				recv := make([]uint64, sumTo(rc, p))
				if err := Alltoallv(c, send, sc, recv, rc); err != nil {
					return fmt.Errorf("Alltoallv: %w", err)
				}
				for j := range p {
					if at := sumTo(rc, j); !slices.Equal(recv[at:at+rc[j]], vwords(uint64(1000*j+r), rc[j])) && fail == nil {
						fail = fmt.Errorf("Alltoallv: the block from rank %d is wrong", j)
					}
				}
				return fail
			})
		}
	}
}

// scans are Scan's algorithms: recursive doubling, and the chain in
// pieces of 24 bytes (3 int64s), so that pieces pass one another.
var scans = []struct {
	name string
	run  func(c *Comm, send, recv backend.Buffer, op Op, ex bool) error
}{
	{"RecursiveDoubling", (*Comm).scanRD},
	{"Chain", func(c *Comm, s, r backend.Buffer, op Op, ex bool) error { return c.scanChain(s, r, op, ex, 24) }},
	{"Chosen", (*Comm).scan},
}

func TestCollScanAlgorithms(t *testing.T) {
	for _, a := range scans {
		for _, p := range vRanks[1:] {
			for _, n := range []int{0, 1, 7, 100} {
				for _, op := range []Op{Sum, Prod, Min, Max} {
					for _, ex := range []bool{false, true} {
						for _, inPlace := range []bool{false, true} {
							what := fmt.Sprintf("%s, %d ranks, %d elements, %v, exclusive %v, in place %v", a.name, p, n, op, ex, inPlace)
							runMem(t, p, func(c *Comm) error {
								send := ints(c.rank, n)
								recv := send
								if !inPlace {
									recv = slices.Repeat([]int64{-7}, n)
								}
								if err := a.run(c, describe(send), describe(recv), op, ex); err != nil {
									return err
								}
								want := slices.Repeat([]int64{-7}, n)
								if inPlace {
									want = ints(c.rank, n)
								}
								last := c.rank
								if ex {
									last--
								}
								for k := 0; k <= last; k++ {
									for i, x := range ints(k, n) {
										switch {
										case k == 0:
											want[i] = x
										case op == Sum:
											want[i] += x
										case op == Prod:
											want[i] *= x
										case op == Min:
											want[i] = min(want[i], x)
										case op == Max:
											want[i] = max(want[i], x)
										}
									}
								}
								if !slices.Equal(recv, want) {
									return fmt.Errorf("%s: got %v, want %v", what, recv[:min(n, 6)], want[:min(n, 6)])
								}
								return nil
							})
						}
					}
				}
			}
		}
	}
}

// TestCollVBadCounts: bad counts fail on every rank with ErrInvalid, and a
// collective afterwards works (nothing was left on the way).
func TestCollVBadCounts(t *testing.T) {
	for _, p := range []int{1, 2, 3, 5} {
		runMem(t, p, func(c *Comm) error {
			r := c.rank
			good := slices.Repeat([]int{2}, p)
			buf := make([]int32, 2*p)
			neg := slices.Clone(good)
			neg[0] += 4
			neg[p-1] = -2
			short := good[:p-1]
			var rootOnly []int
			if r == p-1 {
				rootOnly = neg // only the root's count: every rank must learn
			}
			for _, bad := range []struct {
				what string
				call func() error
			}{
				{"Gatherv, a negative count at the root", func() error { return Gatherv(c, buf[:2], buf, rootOnly, p-1) }},
				{"Scatterv, a negative count at the root", func() error { return Scatterv(c, buf, rootOnly, buf[:2], p-1) }},
				{"Gatherv, counts of the wrong sum", func() error { return Gatherv(c, buf[:2], buf[:2*p-1], good, 0) }},
				{"Allgatherv, too few counts", func() error { return Allgatherv(c, buf[:2], buf, short) }},
				{"Allgatherv, a negative count", func() error { return Allgatherv(c, buf[:2], buf, neg) }},
				{"Alltoallv, bad counts on the last rank", func() error {
					sc := good
					if r == p-1 {
						sc = neg
					}
					return Alltoallv(c, buf, sc, make([]int32, 2*p), good)
				}},
				{"Alltoallv, too few receive counts", func() error { return Alltoallv(c, buf, good, make([]int32, 2*p), short) }},
			} {
				if err := bad.call(); !errors.Is(err, ErrInvalid) {
					return fmt.Errorf("%s: %v, want ErrInvalid", bad.what, err)
				}
			}
			v := []int64{1}
			if err := Allreduce(c, v, v, Sum); err != nil || v[0] != int64(p) {
				return fmt.Errorf("an Allreduce after the bad calls: %v, %v", v, err)
			}
			return nil
		})
	}
}
