package conformance

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// collectiveCases: Bcast, Reduce, Allreduce, Allgather, ReduceScatter and
// Alltoall, on every element type and operator, every root, empty,
// small, uneven and large buffers (over 64 KiB: the ring algorithms of
// point-to-point transports), in place and not; bad arguments; and
// collectives mixed with point-to-point traffic.
//
// Values are small integers, so that every order of combining gives the
// same bits (also for Float16, BFloat16 and products): each rank computes
// the expected result from the formula of every rank's input.
func collectiveCases() []Case {
	cases := []Case{
		{Name: "Coll/Bcast", MinRanks: 1, Run: collBcast},
		{Name: "Coll/Reduce", MinRanks: 1, Run: collReduce},
		{Name: "Coll/Allgather", MinRanks: 1, Run: collAllgather},
		{Name: "Coll/ReduceScatter", MinRanks: 1, Run: collReduceScatter},
		{Name: "Coll/Alltoall", MinRanks: 1, Run: collAlltoall},
		{Name: "Coll/InPlace", MinRanks: 1, Run: collInPlace},
		{Name: "Coll/BadArguments", MinRanks: 1, Run: collBadArguments},
		{Name: "Coll/WithPointToPoint", MinRanks: 2, Run: collWithPointToPoint},
		{Name: "Coll/Sequence", MinRanks: 1, Run: collSequence},
		{Name: "Coll/PendingSendProgresses", MinRanks: 2, Run: collPendingSend},
		{Name: "Coll/CheckedDisagreement", MinRanks: 2, Run: collCheckedDisagreement},
		{Name: "Coll/Thresholds", MinRanks: 1, Run: collThresholds, Heavy: true},
	}
	return append(cases,
		allreduceCase[[]int8]("int8"),
		allreduceCase[[]uint8]("uint8"),
		allreduceCase[[]int16]("int16"),
		allreduceCase[[]uint16]("uint16"),
		allreduceCase[[]int32]("int32"),
		allreduceCase[[]uint32]("uint32"),
		allreduceCase[[]int64]("int64"),
		allreduceCase[[]uint64]("uint64"),
		allreduceCase[[]int]("int"),
		allreduceCase[[]float32]("float32"),
		allreduceCase[[]float64]("float64"),
		allreduceCase[[]complex64]("complex64"),
		allreduceCase[[]complex128]("complex128"),
		allreduceCase[[]mp.Float16]("Float16"),
		allreduceCase[[]mp.BFloat16]("BFloat16"),
		allreduceCase[vec]("NamedSlice"),
	)
}

// collSizes are the element counts the cases try: empty, one, fewer than
// four ranks, uneven, and past 64 KiB for 1-byte elements.
var collSizes = []int{0, 1, 3, 1001, 70000}

// value is rank r's input element i for op: small integers, kept in
// {−2, −1, 1, 2} for products so that eight ranks' product stays exact in
// a Float16 and every integer type, and non-negative for the unsigned
// types (unsigned).
func value(r, i int, op mp.Op, unsigned bool) int64 {
	if op == mp.Prod {
		v := []int64{1, 2, -1, -2}[(r+i)%4]
		if unsigned {
			v = []int64{1, 2, 1, 3}[(r+i)%4]
		}
		return v
	}
	v := int64((r*7+i*3)%11) - 5
	if unsigned {
		v += 5
	}
	return v
}

// imagOf is the imaginary part of rank r's complex input element i.
func imagOf(r, i int) int64 { return int64((r+2*i)%3) - 1 }

// numbers returns n elements of S: element i is re(i) (+ im(i)·i for the
// complex types).
func numbers[S mp.Buffer](n int, re, im func(i int) int64) S {
	// The plain slice types without reflection (a reflect.Value per
	// element made these the suite's costliest lines); named slice types
	// and the half-precision ones through it.
	var zero S
	switch any(zero).(type) {
	case []int8:
		return any(ints[int8](n, re)).(S)
	case []uint8:
		return any(ints[uint8](n, re)).(S)
	case []int16:
		return any(ints[int16](n, re)).(S)
	case []uint16:
		return any(ints[uint16](n, re)).(S)
	case []int32:
		return any(ints[int32](n, re)).(S)
	case []uint32:
		return any(ints[uint32](n, re)).(S)
	case []int64:
		return any(ints[int64](n, re)).(S)
	case []uint64:
		return any(ints[uint64](n, re)).(S)
	case []int:
		return any(ints[int](n, re)).(S)
	case []uint:
		return any(ints[uint](n, re)).(S)
	case []float32:
		return any(floats[float32](n, re)).(S)
	case []float64:
		return any(floats[float64](n, re)).(S)
	case []complex64:
		return any(complexes[complex64](n, re, im)).(S)
	case []complex128:
		return any(complexes[complex128](n, re, im)).(S)
	}
	v := reflect.MakeSlice(reflect.TypeFor[S](), n, n)
	for i := range n {
		e := v.Index(i)
		switch {
		case e.Type() == reflect.TypeFor[mp.Float16]():
			e.SetUint(uint64(mp.Float16Of(float32(re(i)))))
		case e.Type() == reflect.TypeFor[mp.BFloat16]():
			e.SetUint(uint64(mp.BFloat16Of(float32(re(i)))))
		default:
			switch e.Kind() {
			case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
				e.SetInt(re(i))
			case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
				e.SetUint(uint64(re(i)))
			case reflect.Float32, reflect.Float64:
				e.SetFloat(float64(re(i)))
			case reflect.Complex64, reflect.Complex128:
				e.SetComplex(complex(float64(re(i)), float64(im(i))))
			default:
				panic("conformance: numbers of " + e.Type().String())
			}
		}
	}
	return v.Interface().(S)
}

// kindOf says how S's elements combine: as unsigned integers, as complex
// numbers, or neither.
func kindOf[S mp.Buffer]() (unsigned, complexType bool) {
	t := reflect.TypeFor[S]().Elem()
	if t == reflect.TypeFor[mp.Float16]() || t == reflect.TypeFor[mp.BFloat16]() {
		return false, false
	}
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true, false
	case reflect.Complex64, reflect.Complex128:
		return false, true
	}
	return false, false
}

// combined is the expected result of op over ranks [0, size) of element
// i: computed in int64 (or complex128), where it is exact, and converted
// the way numbers converts (integers wrap alike).
func combined(size, i int, op mp.Op, unsigned, complexType bool) (re, im int64) {
	if complexType {
		acc := complex(float64(value(0, i, op, false)), float64(imagOf(0, i)))
		for r := 1; r < size; r++ {
			z := complex(float64(value(r, i, op, false)), float64(imagOf(r, i)))
			if op == mp.Prod {
				acc *= z
			} else {
				acc += z
			}
		}
		return int64(real(acc)), int64(imag(acc))
	}
	acc := value(0, i, op, unsigned)
	for r := 1; r < size; r++ {
		v := value(r, i, op, unsigned)
		switch op {
		case mp.Sum:
			acc += v
		case mp.Prod:
			acc *= v
		case mp.Min:
			acc = min(acc, v)
		case mp.Max:
			acc = max(acc, v)
		}
	}
	return acc, 0
}

// ints is numbers for an integer type: element i is re(i), wrapped as
// the type's conversion wraps it (as reflect's SetInt and SetUint do).
func ints[E ~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~int | ~uint](n int, re func(i int) int64) []E {
	s := make([]E, n)
	for i := range s {
		s[i] = E(re(i))
	}
	return s
}

// floats is numbers for a floating-point type.
func floats[E ~float32 | ~float64](n int, re func(i int) int64) []E {
	s := make([]E, n)
	for i := range s {
		s[i] = E(float64(re(i)))
	}
	return s
}

// complexes is numbers for a complex type.
func complexes[E ~complex64 | ~complex128](n int, re, im func(i int) int64) []E {
	s := make([]E, n)
	for i := range s {
		s[i] = E(complex(float64(re(i)), float64(im(i))))
	}
	return s
}

// input is rank r's input of n elements for op.
func input[S mp.Buffer](r, n int, op mp.Op) S {
	unsigned, _ := kindOf[S]()
	return numbers[S](n, func(i int) int64 { return value(r, i, op, unsigned) }, func(i int) int64 { return imagOf(r, i) })
}

// expected is the combination over size ranks of their inputs of n
// elements, elements [from, from+n) of it.
func expected[S mp.Buffer](size, from, n int, op mp.Op) S {
	unsigned, cx := kindOf[S]()
	re := func(i int) int64 { v, _ := combined(size, from+i, op, unsigned, cx); return v }
	im := func(i int) int64 { _, v := combined(size, from+i, op, unsigned, cx); return v }
	return numbers[S](n, re, im)
}

// allreduceCase: Allreduce of S with every operator that applies, at every
// size (the large ones with Sum only), out of place and in place.
func allreduceCase[S mp.Buffer](name string) Case {
	return Case{Name: "Coll/Allreduce/" + name, MinRanks: 1, Run: func(t T, c *mp.Comm) {
		_, cx := kindOf[S]()
		ops := []mp.Op{mp.Sum, mp.Prod, mp.Min, mp.Max}
		if cx {
			ops = ops[:2]
		}
		// Then sizes just past 64 KiB, 128 KiB and 256 KiB, so that
		// every type goes through each of the point-to-point
		// algorithms (recursive doubling, trees, ring: mp's
		// colltune.go) on some rank count; Coll/Thresholds tries both
		// sides of every threshold.
		sizes := collSizes[: len(collSizes)-1 : len(collSizes)-1]
		for _, b := range []int{64 << 10, 128 << 10, 256 << 10} {
			sizes = append(sizes, b/int(reflect.TypeFor[S]().Elem().Size())+17)
		}
		for _, op := range ops {
			for _, n := range sizes {
				if n > 2000 && op != mp.Sum {
					continue
				}
				what := fmt.Sprintf("Allreduce %v of %d elements", op, n)
				send := input[S](c.Rank(), n, op)
				recv := pattern[S](n, 99)
				want := expected[S](c.Size(), 0, n, op)
				require.NoError(t, mp.Allreduce(c, send, recv, op), what)
				sameBits(t, what, recv, want)
				sameBits(t, what+": the send buffer", send, input[S](c.Rank(), n, op))
				// In place.
				require.NoError(t, mp.Allreduce(c, send, send, op), what+" in place")
				sameBits(t, what+" in place", send, want)
			}
		}
	}}
}

// collBcast: from every root, every size; the root's buffer is unchanged.
func collBcast(t T, c *mp.Comm) {
	for root := range c.Size() {
		for _, n := range collSizes {
			want := pattern[[]uint64](n, uint64(100*root+n))
			buf := pattern[[]uint64](n, 7)
			if c.Rank() == root {
				copy(buf, want)
			}
			what := fmt.Sprintf("Bcast of %d elements from rank %d", n, root)
			require.NoError(t, mp.Bcast(c, buf, root), what)
			sameBits(t, what, buf, want)
		}
	}
}

// collReduce: to every root, each operator; other ranks pass no receive
// buffer and their send buffers stay as they were.
func collReduce(t T, c *mp.Comm) {
	for root := range c.Size() {
		for _, op := range []mp.Op{mp.Sum, mp.Prod, mp.Min, mp.Max} {
			for _, n := range collSizes[:4] {
				what := fmt.Sprintf("Reduce %v of %d elements to rank %d", op, n, root)
				send := input[[]int32](c.Rank(), n, op)
				var recv []int32
				if c.Rank() == root {
					recv = pattern[[]int32](n, 5)
				}
				require.NoError(t, mp.Reduce(c, send, recv, op, root), what)
				sameBits(t, what+": the send buffer", send, input[[]int32](c.Rank(), n, op))
				if c.Rank() == root {
					sameBits(t, what, recv, expected[[]int32](c.Size(), 0, n, op))
				}
			}
		}
	}
	// The large size, with Sum, to the last rank.
	root, n := c.Size()-1, collSizes[len(collSizes)-1]
	send := input[[]float64](c.Rank(), n, mp.Sum)
	var recv []float64
	if c.Rank() == root {
		recv = make([]float64, n)
	}
	require.NoError(t, mp.Reduce(c, send, recv, mp.Sum, root))
	if c.Rank() == root {
		sameBits(t, "Reduce of 70000 float64", recv, expected[[]float64](c.Size(), 0, n, mp.Sum))
	}
}

// block is rank r's block of n elements for the gathering cases.
func block(r, n int) []uint64 { return pattern[[]uint64](n, uint64(1000+r)) }

// collAllgather: every size; block k of the result is rank k's.
func collAllgather(t T, c *mp.Comm) {
	for _, n := range collSizes {
		what := fmt.Sprintf("Allgather of %d elements per rank", n)
		recv := pattern[[]uint64](n*c.Size(), 3)
		require.NoError(t, mp.Allgather(c, block(c.Rank(), n), recv), what)
		for k := range c.Size() {
			sameBits(t, fmt.Sprintf("%s: rank %d's block", what, k), recv[k*n:(k+1)*n], block(k, n))
		}
	}
}

// collReduceScatter: every size and operator (Sum only at the largest).
func collReduceScatter(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for _, op := range []mp.Op{mp.Sum, mp.Prod, mp.Min, mp.Max} {
		for _, n := range collSizes {
			if n > 2000 && op != mp.Sum {
				continue
			}
			what := fmt.Sprintf("ReduceScatter %v of %d elements per rank", op, n)
			send := input[[]int64](r, n*p, op)
			recv := pattern[[]int64](n, 8)
			require.NoError(t, mp.ReduceScatter(c, send, recv, op), what)
			sameBits(t, what, recv, expected[[]int64](p, r*n, n, op))
		}
	}
}

// alltoallBlock is what rank from sends rank to: n elements.
func alltoallBlock(from, to, n int) []uint64 {
	return pattern[[]uint64](n, uint64(10000+100*from+to))
}

// collAlltoall: every size; block j of the result is what rank j sent
// this rank.
func collAlltoall(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for _, n := range collSizes {
		what := fmt.Sprintf("Alltoall of %d elements per pair", n)
		send := make([]uint64, 0, n*p)
		for k := range p {
			send = append(send, alltoallBlock(r, k, n)...)
		}
		recv := pattern[[]uint64](n*p, 4)
		require.NoError(t, mp.Alltoall(c, send, recv), what)
		for j := range p {
			sameBits(t, fmt.Sprintf("%s: the block from rank %d", what, j), recv[j*n:(j+1)*n], alltoallBlock(j, r, n))
		}
	}
}

// collInPlace: Allgather with this rank's block of the receive buffer as
// its send buffer, ReduceScatter with this rank's block of the send buffer
// as its receive buffer, Alltoall and Reduce with one buffer.
func collInPlace(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for _, n := range []int{1, 1001, 70000} {
		buf := make([]uint64, n*p)
		copy(buf[r*n:], block(r, n))
		require.NoError(t, mp.Allgather(c, buf[r*n:(r+1)*n], buf), "Allgather in place, %d elements", n)
		for k := range p {
			sameBits(t, fmt.Sprintf("Allgather in place: rank %d's block", k), buf[k*n:(k+1)*n], block(k, n))
		}

		data := input[[]int64](r, n*p, mp.Sum)
		require.NoError(t, mp.ReduceScatter(c, data, data[r*n:(r+1)*n], mp.Sum), "ReduceScatter in place, %d elements", n)
		sameBits(t, "ReduceScatter in place", data[r*n:(r+1)*n], expected[[]int64](p, r*n, n, mp.Sum))

		a := make([]uint64, 0, n*p)
		for k := range p {
			a = append(a, alltoallBlock(r, k, n)...)
		}
		require.NoError(t, mp.Alltoall(c, a, a), "Alltoall in place, %d elements", n)
		for j := range p {
			sameBits(t, fmt.Sprintf("Alltoall in place: the block from rank %d", j), a[j*n:(j+1)*n], alltoallBlock(j, r, n))
		}

		v := input[[]float32](r, n, mp.Max)
		var recv []float32
		if r == 0 {
			recv = v
		}
		require.NoError(t, mp.Reduce(c, v, recv, mp.Max, 0), "Reduce in place, %d elements", n)
		if r == 0 {
			sameBits(t, "Reduce in place", v, expected[[]float32](p, 0, n, mp.Max))
		}
	}
}

// collBadArguments: each bad call fails on every rank with ErrInvalid,
// at once and without a message: a good collective afterwards works.
func collBadArguments(t T, c *mp.Comm) {
	p := c.Size()
	x := make([]float64, 4*p+4)
	z := make([]complex128, 4)
	bad := []struct {
		what string
		call func() error
	}{
		{"Bcast from rank -1", func() error { return mp.Bcast(c, x, -1) }},
		{"Bcast from rank Size", func() error { return mp.Bcast(c, x, p) }},
		{"Reduce to rank Size", func() error { return mp.Reduce(c, x, x, mp.Sum, p) }},
		{"Allreduce with op 0", func() error { return mp.Allreduce(c, x, x, mp.Op(0)) }},
		{"Allreduce with op 99", func() error { return mp.Allreduce(c, x, x, mp.Op(99)) }},
		{"Allreduce Min of complex128", func() error { return mp.Allreduce(c, z, z, mp.Min) }},
		{"Allreduce into a shorter buffer", func() error { return mp.Allreduce(c, x, x[:3], mp.Sum) }},
		{"Allreduce into an overlapping buffer", func() error { return mp.Allreduce(c, x[:4], x[1:5], mp.Sum) }},
		{"Allgather into a buffer of the wrong length", func() error { return mp.Allgather(c, x[:2], x[:2*p+1]) }},
		{"Allgather from the wrong block of the receive buffer", func() error {
			off := 1 // overlapping, not at block 0
			if p > 1 {
				off = 2 * ((c.Rank() + 1) % p)
			}
			return mp.Allgather(c, x[off:off+2], x[:2*p])
		}},
		{"ReduceScatter of a send buffer not in Size blocks", func() error {
			if p == 1 {
				return mp.ReduceScatter(c, x[:3], x[:2], mp.Sum)
			}
			return mp.ReduceScatter(c, x[:2*p+1], make([]float64, 2), mp.Sum)
		}},
		{"Alltoall of a buffer not in Size blocks", func() error {
			if p == 1 {
				return mp.Alltoall(c, x[:3], make([]float64, 4))
			}
			return mp.Alltoall(c, x[:2*p+1], make([]float64, 2*p+1))
		}},
		{"Allreduce on a nil communicator", func() error { return mp.Allreduce(nil, x, x, mp.Sum) }},
	}
	for _, b := range bad {
		err := b.call()
		if isErr(t, err, mp.ErrInvalid, "%s", b.what) {
			assert.NotContains(t, fmt.Sprint(err), "panic", b.what)
		}
	}
	got := []int64{int64(c.Rank())}
	require.NoError(t, mp.Allreduce(c, got, got, mp.Sum), "Allreduce after the bad calls")
	assert.Equal(t, []int64{int64(p * (p - 1) / 2)}, got)
}

// collWithPointToPoint: a ring of user messages is posted, collectives
// run, and then the messages are waited for: neither takes the other's.
func collWithPointToPoint(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	next, prev := (r+1)%p, (r-1+p)%p
	in := make([]uint64, 500)
	rq := mp.Irecv(c, in, prev, 3)
	sq := mp.Isend(c, block(r, 500), next, 3)
	sum := []float64{float64(r)}
	require.NoError(t, mp.Allreduce(c, sum, sum, mp.Sum))
	assert.Equal(t, []float64{float64(p * (p - 1) / 2)}, sum)
	all := make([]uint64, 100*p)
	require.NoError(t, mp.Allgather(c, block(r, 100), all))
	require.NoError(t, mp.Barrier(c))
	require.NoError(t, mp.WaitAll(rq, sq))
	sameBits(t, "the user message", in, block(prev, 500))
	for k := range p {
		sameBits(t, fmt.Sprintf("Allgather beside user messages: rank %d's block", k), all[k*100:(k+1)*100], block(k, 100))
	}
}

// collSequence: 60 collectives of every kind in a row, roots moving, so
// that each rank's messages of one collective could be taken by the next
// if matching were wrong.
func collSequence(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for i := range 60 {
		root := i % p
		n := 1 + i%5
		switch i % 6 {
		case 0:
			buf := make([]int64, n)
			if r == root {
				for j := range buf {
					buf[j] = int64(i*100 + j)
				}
			}
			require.NoError(t, mp.Bcast(c, buf, root), "step %d", i)
			for j := range buf {
				require.Equal(t, int64(i*100+j), buf[j], "step %d: Bcast", i)
			}
		case 1:
			v := []int64{int64(r + i)}
			var out []int64
			if r == root {
				out = make([]int64, 1)
			}
			require.NoError(t, mp.Reduce(c, v, out, mp.Max, root), "step %d", i)
			if r == root {
				require.Equal(t, int64(p-1+i), out[0], "step %d: Reduce", i)
			}
		case 2:
			v := []int64{int64(r * i)}
			require.NoError(t, mp.Allreduce(c, v, v, mp.Sum), "step %d", i)
			require.Equal(t, int64(i*p*(p-1)/2), v[0], "step %d: Allreduce", i)
		case 3:
			out := make([]int64, n*p)
			mine := make([]int64, n)
			for j := range mine {
				mine[j] = int64(r*1000 + i)
			}
			require.NoError(t, mp.Allgather(c, mine, out), "step %d", i)
			for k := range p {
				require.Equal(t, int64(k*1000+i), out[k*n], "step %d: Allgather", i)
			}
		case 4:
			send := make([]int64, p)
			for k := range send {
				send[k] = int64(k + r)
			}
			out := make([]int64, 1)
			require.NoError(t, mp.ReduceScatter(c, send, out, mp.Sum), "step %d", i)
			require.Equal(t, int64(p*r+p*(p-1)/2), out[0], "step %d: ReduceScatter", i)
		case 5:
			send := make([]int64, p)
			for k := range send {
				send[k] = int64(r*100 + k + i)
			}
			out := make([]int64, p)
			require.NoError(t, mp.Alltoall(c, send, out), "step %d", i)
			for j := range out {
				require.Equal(t, int64(j*100+r+i), out[j], "step %d: Alltoall from rank %d", i, j)
			}
		}
	}
}

// collPendingSend: rank 0 posts a send to rank 1 and enters an Allreduce
// and a Barrier before waiting for it; rank 1 receives it (blocking)
// before it enters them. The send must progress while rank 0 waits in the
// collectives (MPI's progress rule), or both wait forever.
func collPendingSend(t T, c *mp.Comm) {
	msg := block(0, 100000)
	v := []int64{1}
	switch c.Rank() {
	case 0:
		q := mp.Isend(c, msg, 1, 6)
		require.NoError(t, mp.Allreduce(c, v, v, mp.Sum))
		require.NoError(t, mp.Barrier(c))
		_, err := q.Wait()
		require.NoError(t, err)
	case 1:
		got := make([]uint64, len(msg))
		_, err := mp.Recv(c, got, 0, 6)
		require.NoError(t, err)
		sameBits(t, "the message sent before the collectives", got, msg)
		require.NoError(t, mp.Allreduce(c, v, v, mp.Sum))
		require.NoError(t, mp.Barrier(c))
	default:
		require.NoError(t, mp.Allreduce(c, v, v, mp.Sum))
		require.NoError(t, mp.Barrier(c))
	}
	assert.Equal(t, []int64{int64(c.Size())}, v)
}

// collCheckedDisagreement: with checks on (COURIER_CHECK=1), ranks that
// call a collective differently (another count, operator or root) all get
// ErrMismatch naming the rank that differs, nothing moves, and the next
// collective works. Without checks the case does nothing: a transport
// cannot always tell (on NCCL a count that differs hangs).
func collCheckedDisagreement(t T, c *mp.Comm) {
	if !c.Checked() {
		return
	}
	last := c.Size() - 1
	n, op, root := 4, mp.Sum, 0
	for i, what := range []string{"count", "operator", "root"} {
		if c.Rank() == last {
			switch i {
			case 0:
				n = 5
			case 1:
				op = mp.Max
			case 2:
				root = last
			}
		}
		x := []float32{1, 2, 3, 4, 5}[:n]
		keep := slices.Clone(x)
		var err error
		if i < 2 {
			err = mp.Allreduce(c, x, x, op)
		} else {
			err = mp.Bcast(c, x, root)
		}
		if isErr(t, err, mp.ErrMismatch, "a collective whose %s differs on rank %d", what, last) {
			assert.Contains(t, err.Error(), fmt.Sprintf("rank %d called", last))
		}
		assert.Equal(t, keep, x, "the buffer after a refused collective (%s)", what)
		n, op, root = 4, mp.Sum, 0
	}
	v := []int64{1}
	require.NoError(t, mp.Allreduce(c, v, v, mp.Sum), "a collective after the refused ones")
	assert.Equal(t, []int64{int64(c.Size())}, v)
}

// SweepFrom and SweepTo bound the sizes, in bytes, of Coll/Thresholds:
// it tries the collectives just under and just over every power of two
// from SweepFrom to SweepTo, around where the point-to-point collectives
// change algorithm (mp's thresholds, in its colltune.go, must lie in this
// range, and mp's tests check that they do; a backend that runs
// collectives itself simply sees many sizes).
const (
	SweepFrom = 1 << 10
	SweepTo   = 2 << 20
)

// straddle returns the element counts just under and just over b bytes
// for elements of unit bytes: lo·unit < b < hi·unit, lo at least 1.
func straddle(b, unit int) (lo, hi int) {
	return max((b+unit-1)/unit-1, 1), b/unit + 1
}

// sweepFloat is rank r's element i of the sweep's floating-point inputs:
// fractions of mixed signs and magnitudes, so that the order in which the
// ranks' values are added changes the rounding.
func sweepFloat(r, i int) float64 {
	x := mix(uint64(1000+r), uint64(i))
	return float64(int64(x)>>20) / float64(uint64(1)<<(x%23))
}

// collThresholds: Allreduce (float32 and float64 of fractions, int32
// that wraps around), Allgather and ReduceScatter at every size of the
// sweep, out of place under each power of two and in place over it.
// Integers are compared exactly; floats with rank 0's result, bit for bit
// (every rank must get the same bits), and with the sum to within
// rounding.
func collThresholds(t T, c *mp.Comm) {
	p, r := c.Size(), c.Rank()
	for b := SweepFrom; b <= SweepTo; b *= 2 {
		for side := range 2 {
			inPlace := side == 1
			thresholdsAllreduce[float64](t, c, b, side, inPlace)
			thresholdsAllreduce[float32](t, c, b, side, inPlace)

			lo, hi := straddle(b, 4)
			n := []int{lo, hi}[side]
			what := fmt.Sprintf("Allreduce of %d int32 (in place %v)", n, inPlace)
			send, want := make([]int32, n), make([]int32, n)
			for i := range send {
				for k := range p {
					want[i] += int32(mix(uint64(k), uint64(i)))
				}
				send[i] = int32(mix(uint64(r), uint64(i)))
			}
			recv := send
			if !inPlace {
				recv = make([]int32, n)
			}
			require.NoError(t, mp.Allreduce(c, send, recv, mp.Sum), what)
			sameBits(t, what, recv, want)

			lo, hi = straddle(b, 8*p)
			n = []int{lo, hi}[side]
			what = fmt.Sprintf("Allgather of %d uint64 per rank (in place %v)", n, inPlace)
			all := pattern[[]uint64](n*p, 5)
			mine := block(r, n)
			if inPlace {
				copy(all[r*n:], mine)
				mine = all[r*n : (r+1)*n]
			}
			require.NoError(t, mp.Allgather(c, mine, all), what)
			for k := range p {
				if !sameBits(t, fmt.Sprintf("%s: rank %d's block", what, k), all[k*n:(k+1)*n], block(k, n)) {
					break
				}
			}

			what = fmt.Sprintf("ReduceScatter of %d int64 per rank (in place %v)", n, inPlace)
			data := input[[]int64](r, n*p, mp.Sum)
			out := data[r*n : (r+1)*n]
			if !inPlace {
				out = make([]int64, n)
			}
			require.NoError(t, mp.ReduceScatter(c, data, out, mp.Sum), what)
			sameBits(t, what, out, expected[[]int64](p, r*n, n, mp.Sum))
		}
	}
}

// thresholdsAllreduce is collThresholds' Allreduce of float32 or float64 at the size under b bytes (side 0) or over it (side 1).
func thresholdsAllreduce[E float32 | float64](t T, c *mp.Comm, b, side int, inPlace bool) {
	p, r := c.Size(), c.Rank()
	var zero E
	lo, hi := straddle(b, int(unsafe.Sizeof(zero)))
	n := []int{lo, hi}[side]
	what := fmt.Sprintf("Allreduce of %d %T (in place %v)", n, zero, inPlace)
	send := make([]E, n)
	sum, scale := make([]float64, n), make([]float64, n)
	for i := range send {
		send[i] = E(sweepFloat(r, i))
		for k := range p {
			x := float64(E(sweepFloat(k, i)))
			sum[i] += x
			scale[i] += math.Abs(x)
		}
	}
	recv := send
	if !inPlace {
		recv = make([]E, n)
	}
	first := make([]E, n)
	switch s := any(send).(type) {
	case []float32:
		require.NoError(t, mp.Allreduce(c, s, any(recv).([]float32), mp.Sum), what)
		copy(first, recv)
		require.NoError(t, mp.Bcast(c, any(first).([]float32), 0), what+": rank 0's result")
		sameBits(t, what+": this rank's result beside rank 0's", any(recv).([]float32), any(first).([]float32))
	case []float64:
		require.NoError(t, mp.Allreduce(c, s, any(recv).([]float64), mp.Sum), what)
		copy(first, recv)
		require.NoError(t, mp.Bcast(c, any(first).([]float64), 0), what+": rank 0's result")
		sameBits(t, what+": this rank's result beside rank 0's", any(recv).([]float64), any(first).([]float64))
	}
	eps := 0x1p-52
	if unsafe.Sizeof(zero) == 4 {
		eps = 0x1p-23
	}
	for i := range recv {
		if d := math.Abs(float64(recv[i]) - sum[i]); d > 2*float64(p)*eps*scale[i] {
			t.Errorf("%s: element %d is %v, the sum is %v", what, i, recv[i], sum[i])
			break
		}
	}
}
