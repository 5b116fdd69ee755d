package mp_test

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/courier-mp/courier/internal/ranktest"
	"github.com/courier-mp/courier/mp"
)

// particle is plain data: numbers, arrays and a nested struct.
type particle struct {
	Pos, Vel [3]float64
	ID       int32
	Alive    bool
	Box      struct{ I, J uint16 }
}

// TestBytesOf: a view of plain structs shares their memory, moves them
// as bytes between ranks, allocates nothing, and a type holding a
// pointer, a string, a slice, a map, an interface, a channel or a
// function at any depth is ErrInvalid.
func TestBytesOf(t *testing.T) {
	ps := make([]particle, 5)
	b, err := mp.BytesOf(ps)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 5*int(unsafe.Sizeof(particle{})) || unsafe.Pointer(&b[0]) != unsafe.Pointer(&ps[0]) {
		t.Fatalf("BytesOf: %d bytes at %p, want %d at %p", len(b), &b[0], 5*unsafe.Sizeof(particle{}), &ps[0])
	}
	if e, err := mp.BytesOf([]particle{}); err != nil || len(e) != 0 {
		t.Errorf("BytesOf of an empty slice: %d bytes, %v", len(e), err)
	}
	if a := testing.AllocsPerRun(100, func() { _, _ = mp.BytesOf(ps) }); a != 0 {
		t.Errorf("BytesOf: %v allocations", a)
	}
	type withPtr struct{ P *int }
	type deep struct {
		A [2]struct{ S []int }
	}
	type withString struct{ S string }
	type withMap struct{ M map[int]int }
	type withIface struct{ X any }
	type withChan struct{ C chan int }
	type withFunc struct{ F func() }
	for what, err := range map[string]error{
		"a pointer":               bytesErr[withPtr](),
		"a slice in an array":     bytesErr[deep](),
		"a string":                bytesErr[withString](),
		"a map":                   bytesErr[withMap](),
		"an interface":            bytesErr[withIface](),
		"a channel":               bytesErr[withChan](),
		"a function":              bytesErr[withFunc](),
		"a pointer type itself":   bytesErr[*particle](),
		"an unsafe.Pointer field": bytesErr[struct{ U unsafe.Pointer }](),
	} {
		if !errors.Is(err, mp.ErrInvalid) {
			t.Errorf("BytesOf of a struct holding %s: %v, want ErrInvalid", what, err)
		}
	}
	ranktest.Run(t, 2, func(rt *ranktest.T, c *mp.Comm) {
		ps := make([]particle, 1000)
		if c.Rank() == 0 {
			for i := range ps {
				ps[i] = particle{Pos: [3]float64{float64(i), 1, 2}, ID: int32(i), Alive: i%2 == 0}
				ps[i].Box.J = uint16(i)
			}
		}
		b, _ := mp.BytesOf(ps)
		if err := mp.Bcast(c, b, 0); err != nil {
			rt.Errorf("Bcast: %v", err)
			return
		}
		for i, p := range ps {
			if p.ID != int32(i) || p.Pos[0] != float64(i) || p.Alive != (i%2 == 0) || p.Box.J != uint16(i) {
				rt.Errorf("particle %d is %+v", i, p)
				return
			}
		}
	})
}

// bytesErr is BytesOf's error for a slice of T.
func bytesErr[T any]() error {
	_, err := mp.BytesOf(make([]T, 2))
	return err
}
