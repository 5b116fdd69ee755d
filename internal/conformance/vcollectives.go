package conformance

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// vcollectiveCases: Gather and Scatter from every root, their v-forms,
// Allgatherv and Alltoallv with uneven counts (zeros among them), Scan
// and Exscan on every element type and operator, and bad counts, which
// fail with ErrInvalid on every rank and leave nothing on the way.
func vcollectiveCases() []Case {
	return []Case{
		{Name: "Coll/Gather", MinRanks: 1, Run: collGather},
		{Name: "Coll/Scatter", MinRanks: 1, Run: collScatter},
		{Name: "Coll/GathervScatterv", MinRanks: 1, Run: collGathervScatterv},
		{Name: "Coll/Allgatherv", MinRanks: 1, Run: collAllgatherv},
		{Name: "Coll/Alltoallv", MinRanks: 1, Run: collAlltoallv},
		{Name: "Coll/BadCounts", MinRanks: 1, Run: collBadCounts},
		scanCase[[]int8]("int8"),
		scanCase[[]uint8]("uint8"),
		scanCase[[]int16]("int16"),
		scanCase[[]uint16]("uint16"),
		scanCase[[]int32]("int32"),
		scanCase[[]uint32]("uint32"),
		scanCase[[]int64]("int64"),
		scanCase[[]uint64]("uint64"),
		scanCase[[]int]("int"),
		scanCase[[]uint]("uint"),
		scanCase[[]float32]("float32"),
		scanCase[[]float64]("float64"),
		scanCase[[]complex64]("complex64"),
		scanCase[[]complex128]("complex128"),
		scanCase[[]mp.Float16]("Float16"),
		scanCase[[]mp.BFloat16]("BFloat16"),
	}
}

// collGather: to every root, every size (the largest to the last rank
// only), out of place and in place at the root.
func collGather(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for root := range p {
		for _, n := range collSizes {
			if n == collSizes[len(collSizes)-1] && root != p-1 {
				continue
			}
			for _, inPlace := range []bool{false, true} {
				what := fmt.Sprintf("Gather of %d elements to rank %d (in place %v)", n, root, inPlace)
				send := block(r, n)
				var recv []uint64
				if r == root {
					recv = pattern[[]uint64](n*p, 3)
					if inPlace {
						copy(recv[r*n:], send)
						send = recv[r*n : (r+1)*n]
					}
				}
				require.NoError(t, mp.Gather(c, send, recv, root), what)
				if r == root {
					for k := range p {
						if !sameBits(t, fmt.Sprintf("%s: rank %d's block", what, k), recv[k*n:(k+1)*n], block(k, n)) {
							break
						}
					}
				}
			}
		}
	}
}

// collScatter: from every root, every size (the largest from the last
// rank only), out of place and in place at the root.
func collScatter(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for root := range p {
		for _, n := range collSizes {
			if n == collSizes[len(collSizes)-1] && root != p-1 {
				continue
			}
			for _, inPlace := range []bool{false, true} {
				what := fmt.Sprintf("Scatter of %d elements from rank %d (in place %v)", n, root, inPlace)
				var send []uint64
				if r == root {
					for k := range p {
						send = append(send, block(k+100*root, n)...)
					}
				}
				recv := pattern[[]uint64](n, 4)
				if r == root && inPlace {
					recv = send[r*n : (r+1)*n]
				}
				require.NoError(t, mp.Scatter(c, send, recv, root), what)
				sameBits(t, what, recv, block(r+100*root, n))
			}
		}
	}
}

// unevenCounts is p counts of about n each, seeded, a third of them 0 (and
// rank 0's 0 when p > 1).
func unevenCounts(p, n int, seed uint64) []int {
	counts := make([]int, p)
	for k := range counts {
		x := mix(seed, uint64(k))
		if x%3 != 0 && !(k == 0 && p > 1) {
			counts[k] = int(x/3%uint64(2*n+1)) + 1
		}
	}
	return counts
}

// offsets is the start of each block of counts, and the total.
func offsets(counts []int) ([]int, int) {
	offs := make([]int, len(counts))
	total := 0
	for k, n := range counts {
		offs[k] = total
		total += n
	}
	return offs, total
}

// collGathervScatterv: every root, uneven counts of a few sizes (one
// large); only the root passes counts and the buffer of every block.
func collGathervScatterv(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for root := range p {
		for i, n := range []int{0, 1, 7, 300, 20000} {
			if n == 20000 && root != p-1 {
				continue
			}
			counts := unevenCounts(p, n, uint64(100*i+root))
			offs, total := offsets(counts)
			what := fmt.Sprintf("Gatherv to rank %d, counts %v", root, counts)
			var all []uint64
			var cs []int
			if r == root {
				all, cs = pattern[[]uint64](total, 5), counts
			}
			require.NoError(t, mp.Gatherv(c, block(r, counts[r]), all, cs, root), what)
			if r == root {
				for k := range p {
					if !sameBits(t, fmt.Sprintf("%s: rank %d's block", what, k), all[offs[k]:offs[k]+counts[k]], block(k, counts[k])) {
						break
					}
				}
				all = pattern[[]uint64](total, 77)
			}
			what = fmt.Sprintf("Scatterv from rank %d, counts %v", root, counts)
			recv := pattern[[]uint64](counts[r], 6)
			require.NoError(t, mp.Scatterv(c, all, cs, recv, root), what)
			sameBits(t, what, recv, pattern[[]uint64](total, 77)[offs[r]:offs[r]+counts[r]])
		}
	}
}

// collAllgatherv: uneven counts of a few sizes (the largest past the
// small-buffer thresholds of the point-to-point algorithms), out of place
// and in place.
func collAllgatherv(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for i, n := range []int{0, 1, 7, 300, 20000} {
		counts := unevenCounts(p, n, uint64(7+i))
		offs, total := offsets(counts)
		for _, inPlace := range []bool{false, true} {
			what := fmt.Sprintf("Allgatherv of counts %v (in place %v)", counts, inPlace)
			recv := pattern[[]uint64](total, 8)
			send := block(r, counts[r])
			if inPlace {
				copy(recv[offs[r]:], send)
				send = recv[offs[r] : offs[r]+counts[r]]
			}
			require.NoError(t, mp.Allgatherv(c, send, recv, counts), what)
			for k := range p {
				if !sameBits(t, fmt.Sprintf("%s: rank %d's block", what, k), recv[offs[k]:offs[k]+counts[k]], block(k, counts[k])) {
					break
				}
			}
		}
	}
}

// pairCount is how many elements rank from sends rank to in the
// Alltoallv case of seed: uneven, some 0.
func pairCount(from, to, n int, seed uint64) int {
	x := mix(seed+uint64(1000*from), uint64(to))
	if x%4 == 0 {
		return 0
	}
	return int(x / 4 % uint64(2*n+1))
}

// collAlltoallv: uneven counts per pair, of a few sizes.
func collAlltoallv(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for i, n := range []int{0, 1, 9, 2000} {
		seed := uint64(i)
		sc, rc := make([]int, p), make([]int, p)
		var send []uint64
		for k := range p {
			sc[k], rc[k] = pairCount(r, k, n, seed), pairCount(k, r, n, seed)
			send = append(send, alltoallBlock(r, k, sc[k])...)
		}
		offs, total := offsets(rc)
		recv := pattern[[]uint64](total, 9)
		what := fmt.Sprintf("Alltoallv with send counts %v, receive counts %v", sc, rc)
		require.NoError(t, mp.Alltoallv(c, send, sc, recv, rc), what)
		for j := range p {
			if !sameBits(t, fmt.Sprintf("%s: the block from rank %d", what, j), recv[offs[j]:offs[j]+rc[j]], alltoallBlock(j, r, rc[j])) {
				break
			}
		}
	}
}

// collBadCounts: counts that are bad on one rank (the root's, for Gatherv
// and Scatterv; any rank's, for Alltoallv) or on every rank (Allgatherv,
// whose counts every rank passes alike) fail with ErrInvalid on every
// rank; a pair whose Alltoallv counts disagree fails with ErrMismatch on
// both, and the other pairs' blocks move; a collective afterwards works.
func collBadCounts(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	last := p - 1
	good := slices.Repeat([]int{2}, p)
	neg := slices.Clone(good)
	neg[0] += 3
	neg[last] = -3
	buf := make([]int32, 2*p)
	on := func(rank int, counts []int) []int { // counts at rank, good elsewhere
		if r == rank {
			return counts
		}
		return good
	}
	bad := []struct {
		what string
		call func() error
	}{
		{"Gatherv with a negative count at the root", func() error { return mp.Gatherv(c, buf[:2], make([]int32, 2*p), on(last, neg), last) }},
		{"Gatherv with too few counts at the root", func() error { return mp.Gatherv(c, buf[:2], make([]int32, 2*p), on(0, good[1:]), 0) }},
		{"Gatherv whose counts miss the receive buffer", func() error { return mp.Gatherv(c, buf[:2], make([]int32, 2*p+1), good, 0) }},
		{"Gatherv whose root's count is not its send buffer's", func() error {
			return mp.Gatherv(c, buf[:1+min(r, 1)], make([]int32, 2*p), good, 0)
		}},
		{"Scatterv with a negative count at the root", func() error { return mp.Scatterv(c, buf, on(last, neg), make([]int32, 2), last) }},
		{"Scatterv from rank Size", func() error { return mp.Scatterv(c, buf, good, make([]int32, 2), p) }},
		{"Allgatherv with a negative count", func() error { return mp.Allgatherv(c, buf[:2], make([]int32, 2*p), neg) }},
		{"Allgatherv with too many counts", func() error { return mp.Allgatherv(c, buf[:2], make([]int32, 2*p+2), append(slices.Clone(good), 2)) }},
		{"Alltoallv with a negative send count on the last rank", func() error {
			return mp.Alltoallv(c, buf, on(last, neg), make([]int32, 2*p), good)
		}},
		{"Alltoallv whose receive counts miss the buffer on rank 0", func() error {
			recv := make([]int32, 2*p)
			if r == 0 {
				recv = recv[:2*p-1]
			}
			return mp.Alltoallv(c, buf, good, recv, good)
		}},
		{"Gather to rank -1", func() error { return mp.Gather(c, buf[:2], buf, -1) }},
	}
	for _, b := range bad {
		isErr(t, b.call(), mp.ErrInvalid, "%s", b.what)
	}
	if p > 1 {
		// Ranks 0 and the last disagree on the length of their blocks.
		sc, rc := slices.Clone(good), slices.Clone(good)
		recv := make([]int32, 2*p+1)
		send := make([]int32, 2*p)
		switch r {
		case 0:
			rc[last] = 3
		case last:
			recv = recv[:2*p]
		default:
			recv = recv[:2*p]
		}
		for k := range send {
			send[k] = int32(100*r + k/2)
		}
		err := mp.Alltoallv(c, send, sc, recv, rc)
		if r == 0 || r == last {
			if isErr(t, err, mp.ErrMismatch, "Alltoallv where ranks 0 and %d disagree", last) {
				assert.Contains(t, err.Error(), fmt.Sprintf("rank %d sends", map[bool]int{true: last, false: 0}[r == 0]))
			}
		} else {
			require.NoError(t, err, "Alltoallv where ranks 0 and %d disagree, on rank %d", last, r)
		}
		for j := range p {
			if (r == 0 && j == last) || (r == last && j == 0) {
				continue
			}
			at := 2 * j
			assert.Equal(t, []int32{int32(100*j + r), int32(100*j + r)}, recv[at:at+2], "Alltoallv beside a pair that disagrees: the block from rank %d", j)
		}
	}
	v := []int64{1}
	require.NoError(t, mp.Allreduce(c, v, v, mp.Sum), "an Allreduce after the bad calls")
	assert.Equal(t, []int64{int64(p)}, v)
}

// scanCase: Scan and Exscan of S with every operator that applies, every
// size (one element and the largest with Sum only, the largest as an
// inclusive Scan only), out of place, and in place at 1001 elements. Rank r's
// Scan is the combination over ranks [0, r], its Exscan over [0, r), and
// rank 0's Exscan leaves its receive buffer as it was.
func scanCase[S mp.Buffer](name string) Case {
	return Case{Name: "Coll/Scan/" + name, MinRanks: 1, Run: func(t T, c *mp.Comm) {
		r := c.Rank()
		_, cx := kindOf[S]()
		ops := []mp.Op{mp.Sum, mp.Prod, mp.Min, mp.Max}
		if cx {
			ops = ops[:2]
		}
		for _, op := range ops {
			for _, n := range collSizes {
				if n > 2000 && op != mp.Sum || n == 1 && op != mp.Sum {
					continue
				}
				for _, ex := range []bool{false, true} {
					for _, inPlace := range []bool{false, true} {
						if inPlace && n < 1000 || n > 2000 && (inPlace || ex) {
							continue // the case runs on every backend, often: in place at 1001 only, the largest size once
						}
						what := fmt.Sprintf("Scan %v of %d elements (exclusive %v, in place %v)", op, n, ex, inPlace)
						send := input[S](r, n, op)
						recv := pattern[S](n, 42)
						if inPlace {
							recv = send
						}
						scan := mp.Scan[S]
						if ex {
							scan = mp.Exscan[S]
						}
						require.NoError(t, scan(c, send, recv, op), what)
						same := sameBits[S]
						if cx && op == mp.Prod {
							// The sign of a zero part of a complex
							// product depends on the order of the
							// products, which the reference (in
							// integers) does not keep.
							same = sameComplex[S]
						}
						switch {
						case !ex:
							same(t, what, recv, expected[S](r+1, 0, n, op))
						case r > 0:
							same(t, what, recv, expected[S](r, 0, n, op))
						case inPlace:
							sameBits(t, what+": rank 0's buffer", recv, input[S](r, n, op))
						default:
							sameBits(t, what+": rank 0's buffer", recv, pattern[S](n, 42))
						}
						if !inPlace {
							sameBits(t, what+": the send buffer", send, input[S](r, n, op))
						}
					}
				}
			}
		}
	}}
}

// sameComplex is sameBits for complex numbers compared as numbers (a
// zero part equals a zero of the other sign).
func sameComplex[S mp.Buffer](t T, what string, got, want S) bool {
	t.Helper()
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	if gv.Len() != wv.Len() {
		t.Errorf("%s: %d elements, want %d", what, gv.Len(), wv.Len())
		return false
	}
	for i := range gv.Len() {
		if g, w := gv.Index(i).Complex(), wv.Index(i).Complex(); g != w {
			t.Errorf("%s: element %d is %v, want %v", what, i, g, w)
			return false
		}
	}
	return true
}
