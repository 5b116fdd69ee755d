package conformance

import (
	"reflect"

	"github.com/stretchr/testify/require"

	"github.com/courier-mp/courier/mp"
)

// vec is a named slice type, as user code has them.
type vec []float64

// typeCases send each element type there and back, small and large (over
// the eager limit whatever the element size), and check every bit.
func typeCases() []Case {
	return []Case{
		typeCase[[]int8]("int8"),
		typeCase[[]uint8]("uint8"),
		typeCase[[]int16]("int16"),
		typeCase[[]uint16]("uint16"),
		typeCase[[]int32]("int32"),
		typeCase[[]uint32]("uint32"),
		typeCase[[]int64]("int64"),
		typeCase[[]uint64]("uint64"),
		typeCase[[]int]("int"),
		typeCase[[]uint]("uint"),
		typeCase[[]uintptr]("uintptr"),
		typeCase[[]float32]("float32"),
		typeCase[[]float64]("float64"),
		typeCase[[]complex64]("complex64"),
		typeCase[[]complex128]("complex128"),
		typeCase[[]mp.Float16]("Float16"),
		typeCase[[]mp.BFloat16]("BFloat16"),
		typeCase[vec]("NamedSlice"),
	}
}

// alloc makes a zeroed buffer of n elements of any buffer type.
func alloc[S mp.Buffer](n int) S {
	return reflect.MakeSlice(reflect.TypeFor[S](), n, n).Interface().(S)
}

func typeCase[S mp.Buffer](name string) Case {
	return Case{Name: "Types/" + name, MinRanks: 2, Run: func(t T, c *mp.Comm) {
		peer, ok := pair(c)
		if !ok {
			return
		}
		// 1 element, a small message, and one over 64 KiB even for 1-byte
		// elements.
		for i, n := range []int{1, 100, eagerBytes + 1000} {
			tag := 10 + i
			want := pattern[S](n, uint64(n))
			if c.Rank() == 0 {
				require.NoError(t, mp.Send(c, want, peer, tag), "send %d elements", n)
				got := alloc[S](n)
				st, err := mp.Recv(c, got, peer, tag)
				require.NoError(t, err, "receive the echo of %d elements", n)
				require.Equal(t, mp.Status{Source: peer, Tag: tag, Count: int64(n)}, st)
				sameBits(t, "echo", got, want)
				continue
			}
			got := alloc[S](n)
			st, err := mp.Recv(c, got, peer, tag)
			require.NoError(t, err, "receive %d elements", n)
			require.Equal(t, mp.Status{Source: peer, Tag: tag, Count: int64(n)}, st)
			sameBits(t, "message", got, want)
			require.NoError(t, mp.Send(c, got, peer, tag), "echo %d elements", n)
		}
	}}
}
