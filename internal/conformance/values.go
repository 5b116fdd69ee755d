package conformance

import (
	"encoding/gob"
	"fmt"
	"slices"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// valueCases: Go values through SendValue, RecvValue and BcastValue:
// structs, maps, slices and values that nest them; wildcard receives
// (where the backend matches them); a value that cannot be encoded; a
// value received as another type.
func valueCases() []Case {
	return []Case{
		{Name: "Value/Types", MinRanks: 2, Run: valueTypes},
		{Name: "Value/Wildcards", MinRanks: 2, Run: valueWildcards},
		{Name: "Value/Unencodable", MinRanks: 2, Run: valueUnencodable},
		{Name: "Value/Bcast", MinRanks: 1, Run: valueBcast},
	}
}

// cell is a struct value of the cases: nested slices, maps, a pointer.
type cell struct {
	ID     int
	Name   string
	Pos    [3]float64
	Tags   []string
	Counts map[string]int
	Next   *cell
}

// cellOf is rank r's cell number i.
func cellOf(r, i int) cell {
	return cell{
		ID: 1000*r + i, Name: fmt.Sprintf("cell %d/%d", r, i), Pos: [3]float64{float64(r), 0.5, -float64(i)},
		Tags:   slices.Repeat([]string{"a", "bc"}, i%3+1),
		Counts: map[string]int{"r": r, "i": i},
		Next:   &cell{ID: -i, Name: "next"},
	}
}

// valueTypes: ranks 0 and 1 send each other (one way, then the other) a
// struct, a map, a slice of structs, a large slice and a string, and each
// gets what the other sent, in order, with the right Status.
func valueTypes(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	for sender := range 2 {
		if c.Rank() == sender {
			valueSendAll(t, c, peer)
		} else {
			valueRecvAll(t, c, peer)
		}
	}
}

// bigValue is rank r's large value: 800 KB.
func bigValue(r int) []float64 {
	big := make([]float64, 100000)
	for i := range big {
		big[i] = float64(i * r)
	}
	return big
}

// valueSendAll is valueTypes' sending side.
func valueSendAll(t T, c *mp.Comm, peer int) {
	r := c.Rank()
	require.NoError(t, mp.SendValue(c, cellOf(r, 1), peer, 5))
	require.NoError(t, mp.SendValue(c, map[int][]string{r: {"x", "y"}, 7: nil}, peer, 6))
	require.NoError(t, mp.SendValue(c, []cell{cellOf(r, 2), cellOf(r, 3)}, peer, 5))
	require.NoError(t, mp.SendValue(c, bigValue(r), peer, 7))
	require.NoError(t, mp.SendValue(c, "done", peer, 8))
}

// valueRecvAll is valueTypes' receiving side.
func valueRecvAll(t T, c *mp.Comm, peer int) {
	got, st, err := mp.RecvValue[cell](c, peer, 5)
	require.NoError(t, err)
	assert.Equal(t, cellOf(peer, 1), got)
	assert.Equal(t, peer, st.Source)
	assert.Equal(t, 5, st.Tag)
	assert.Positive(t, st.Count, "Status.Count: the encoding's bytes")
	m, _, err := mp.RecvValue[map[int][]string](c, peer, 6)
	require.NoError(t, err)
	assert.Equal(t, map[int][]string{peer: {"x", "y"}, 7: nil}, m)
	cells, _, err := mp.RecvValue[[]cell](c, peer, 5)
	require.NoError(t, err)
	assert.Equal(t, []cell{cellOf(peer, 2), cellOf(peer, 3)}, cells)
	b, _, err := mp.RecvValue[[]float64](c, peer, 7)
	require.NoError(t, err)
	if want := bigValue(peer); !slices.Equal(b, want) {
		t.Errorf("the large slice: %d elements, want %d; they differ", len(b), len(want))
	}
	s, _, err := mp.RecvValue[string](c, peer, 8)
	require.NoError(t, err)
	assert.Equal(t, "done", s)
}

// valueWildcards: every other rank sends rank 0 a value with a tag of
// its own; rank 0 receives them with AnySource and AnyTag, and each
// Status names the real sender and tag. Backends that cannot match
// wildcards (nccl) are left out.
func valueWildcards(t T, c *mp.Comm) {
	if b := c.Backend(); b != "tcp" && b != "host" {
		return
	}
	if c.Rank() != 0 {
		require.NoError(t, mp.SendValue(c, []int{c.Rank(), 10 + c.Rank()}, 0, 10+c.Rank()))
		return
	}
	seen := map[int]bool{}
	for range c.Size() - 1 {
		v, st, err := mp.RecvValue[[]int](c, mp.AnySource, mp.AnyTag)
		require.NoError(t, err)
		assert.Equal(t, []int{st.Source, st.Tag}, v, "the value and its Status")
		assert.Equal(t, 10+st.Source, st.Tag)
		assert.False(t, seen[st.Source], "rank %d's value twice", st.Source)
		seen[st.Source] = true
	}
}

// unencodable holds a channel, which gob cannot encode.
type unencodable struct {
	C chan int
}

// hidden has no exported field, which gob refuses.
type hidden struct{ x int }

// valueUnencodable: a value that cannot be encoded fails on the sender
// with ErrEncode and on the receiver too (which is not left waiting), and
// the next value goes to the next receive; a value received as another
// type fails with ErrMismatch, and is taken whole.
func valueUnencodable(t T, c *mp.Comm) {
	peer, ok := pair(c)
	if !ok {
		return
	}
	if c.Rank() == 0 {
		isErr(t, mp.SendValue(c, unencodable{C: make(chan int)}, peer, 3), mp.ErrEncode, "SendValue of a channel")
		isErr(t, mp.SendValue(c, hidden{x: 1}, peer, 3), mp.ErrEncode, "SendValue of a struct with no exported field")
		require.NoError(t, mp.SendValue(c, cellOf(0, 4), peer, 3))
		require.NoError(t, mp.SendValue(c, []string{"not", "a", "cell"}, peer, 3))
		require.NoError(t, mp.SendValue(c, 42, peer, 3))
		return
	}
	for i := range 2 {
		_, st, err := mp.RecvValue[unencodable](c, peer, 3)
		if isErr(t, err, mp.ErrEncode, "RecvValue of value %d, which its sender could not encode", i) {
			assert.Contains(t, err.Error(), "rank 0 could not encode")
			assert.Equal(t, 0, st.Source)
		}
	}
	got, _, err := mp.RecvValue[cell](c, peer, 3)
	require.NoError(t, err, "the value after the ones that could not be encoded")
	assert.Equal(t, cellOf(0, 4), got)
	_, _, err = mp.RecvValue[cell](c, peer, 3)
	isErr(t, err, mp.ErrMismatch, "RecvValue of a []string as a cell")
	n, _, err := mp.RecvValue[int](c, peer, 3)
	require.NoError(t, err, "the value after the one that did not decode")
	assert.Equal(t, 42, n)
}

// shape is an interface value of valueBcast, registered with gob.
type shape interface{ Area() float64 }

// square is the shape sent.
type square struct{ Side float64 }

// Area is the square's.
func (s square) Area() float64 { return s.Side * s.Side }

func init() { gob.Register(square{}) }

// valueBcast: from every root, a struct (replacing, not merging into,
// what the other ranks held), a map and an interface value; a value the
// root cannot encode fails on every rank with ErrEncode and changes
// nothing.
func valueBcast(t T, c *mp.Comm) {
	r := c.Rank()
	for root := range c.Size() {
		v := cell{ID: -1, Name: "stale", Tags: []string{"stale"}}
		if r == root {
			v = cellOf(root, 0)
			v.Tags = nil // a zero field: must not leave the stale one
		}
		require.NoError(t, mp.BcastValue(c, &v, root), "BcastValue from rank %d", root)
		want := cellOf(root, 0)
		want.Tags = nil
		assert.Equal(t, want, v, "BcastValue from rank %d", root)

		m := map[string]int{"stale": 1}
		if r == root {
			m = map[string]int{"root": root}
		}
		require.NoError(t, mp.BcastValue(c, &m, root))
		assert.Equal(t, map[string]int{"root": root}, m)

		var s shape
		if r == root {
			s = square{Side: float64(root + 1)}
		}
		require.NoError(t, mp.BcastValue(c, &s, root))
		assert.Equal(t, shape(square{Side: float64(root + 1)}), s)

		u := unencodable{}
		if r == root {
			u.C = make(chan int)
		}
		isErr(t, mp.BcastValue(c, &u, root), mp.ErrEncode, "BcastValue of a channel from rank %d", root)
		if r != root {
			assert.Nil(t, u.C)
		}
	}
	v := []int64{1}
	require.NoError(t, mp.Allreduce(c, v, v, mp.Sum), "an Allreduce after the values")
	assert.Equal(t, []int64{int64(c.Size())}, v)
}
