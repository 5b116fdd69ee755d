package conformance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/mp"
)

// Sizes around the thresholds of the TCP backend (the eager limit and the
// size of a DATA chunk); other backends have thresholds of their own, and
// these sizes are simply "small" and "large" for them.
const (
	eagerBytes = 64 << 10 // TCP: largest message sent eagerly
	chunkBytes = 4 << 20  // TCP: largest DATA frame of a large message
)

// pollLimit bounds the loops of a case that poll (Test, TestAll, Done)
// instead of blocking in the library, which bounds its own waits.
const pollLimit = 10 * time.Second

// gateTag is the tag of the one-byte messages by which a rank tells others
// whether to go on (after probing a wildcard receive). Cases do not use it
// for anything else.
const gateTag = mp.MaxTag - 1

// pair returns the peer of this rank in a case that uses ranks 0 and 1,
// and false on the other ranks, which then return.
func pair(c *mp.Comm) (peer int, ok bool) {
	switch c.Rank() {
	case 0:
		return 1, true
	case 1:
		return 0, true
	}
	return -1, false
}

// mix is a cheap hash of (seed, i): the content of element i of a test
// message, so that a misplaced, duplicated or stale element shows.
func mix(seed, i uint64) uint64 {
	x := seed*0x9e3779b97f4a7c15 + i*0xbf58476d1ce4e5b9 + 0x94d049bb133111eb
	x ^= x >> 31
	x *= 0xd6e8feb86ca1f5d5
	x ^= x >> 29
	return x
}

// words returns n words of the pattern of seed.
func words(n int, seed uint64) []uint64 {
	s := make([]uint64, n)
	for i := range s {
		s[i] = mix(seed, uint64(i))
	}
	return s
}

// checkWords reports the elements of got that differ from the pattern of
// seed: how many, and the first.
func checkWords(t T, what string, got []uint64, seed uint64) bool {
	t.Helper()
	bad, first := 0, -1
	for i, v := range got {
		if v != mix(seed, uint64(i)) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d words wrong; first at %d: got %#x, want %#x",
			what, bad, len(got), first, got[first], mix(seed, uint64(first)))
		return false
	}
	return true
}

// octets returns n bytes of the pattern of seed, made eight at a time.
func octets(n int, seed uint64) []byte {
	s := make([]byte, n)
	var w [8]byte
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(w[:], mix(seed, uint64(i/8)))
		copy(s[i:], w[:])
	}
	return s
}

// pattern returns n elements of any buffer type, built from the pattern of
// seed. Floating-point patterns include -0, ±Inf, NaN and subnormals, so
// that a transport that converts instead of copying bits is caught.
func pattern[S mp.Buffer](n int, seed uint64) S {
	v := reflect.MakeSlice(reflect.TypeFor[S](), n, n)
	for i := range n {
		x := mix(seed, uint64(i))
		e := v.Index(i)
		switch e.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			e.SetInt(int64(x))
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			e.SetUint(x)
		case reflect.Float32, reflect.Float64:
			e.SetFloat(floatOf(x, i))
		case reflect.Complex64, reflect.Complex128:
			e.SetComplex(complex(floatOf(x, i), floatOf(mix(x, 1), i+3)))
		default:
			panic("conformance: pattern of " + e.Type().String())
		}
	}
	return v.Interface().(S)
}

func floatOf(x uint64, i int) float64 {
	switch i % 32 {
	case 0:
		return math.Copysign(0, -1)
	case 1:
		return math.Inf(1)
	case 2:
		return math.Inf(-1)
	case 3:
		return math.NaN()
	case 4:
		return math.SmallestNonzeroFloat64
	case 5:
		return math.MaxFloat64
	}
	return float64(int64(x)) / (1 << 40)
}

// bytesOf is the memory of a buffer.
func bytesOf[S mp.Buffer](s S) []byte {
	v := reflect.ValueOf(s)
	if v.Len() == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(v.UnsafePointer()), v.Len()*int(v.Type().Elem().Size()))
}

// sameBits reports whether got holds exactly the bits of want, and reports
// the first difference if not.
func sameBits[S mp.Buffer](t T, what string, got, want S) bool {
	t.Helper()
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	if gv.Len() != wv.Len() {
		t.Errorf("%s: %d elements, want %d", what, gv.Len(), wv.Len())
		return false
	}
	gb, wb := bytesOf(got), bytesOf(want)
	if bytes.Equal(gb, wb) {
		return true
	}
	size := int(gv.Type().Elem().Size())
	bad, first := 0, -1
	for i := 0; i < gv.Len(); i++ {
		if !bytes.Equal(gb[i*size:(i+1)*size], wb[i*size:(i+1)*size]) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	t.Errorf("%s: %d of %d elements differ; first at %d: got %v, want %v",
		what, bad, gv.Len(), first, gv.Index(first).Interface(), wv.Index(first).Interface())
	return false
}

// isErr checks that err matches target (errors.Is).
func isErr(t T, err, target error, format string, args ...any) bool {
	t.Helper()
	if errors.Is(err, target) {
		return true
	}
	t.Errorf("%s: got error %v, want one matching %q", fmt.Sprintf(format, args...), err, target)
	return false
}

// checkOpError checks that err is an *mp.OpError with the given fields
// (peer or tag -2 means "do not check").
func checkOpError(t T, err error, op string, rank, peer, tag int, backend string) bool {
	t.Helper()
	var oe *mp.OpError
	if !errors.As(err, &oe) {
		t.Errorf("error %v (%T) is not an *mp.OpError", err, err)
		return false
	}
	ok := true
	if oe.Op != op {
		t.Errorf("OpError.Op = %q, want %q (%v)", oe.Op, op, err)
		ok = false
	}
	if oe.Rank != rank {
		t.Errorf("OpError.Rank = %d, want %d (%v)", oe.Rank, rank, err)
		ok = false
	}
	if peer != -2 && oe.Peer != peer {
		t.Errorf("OpError.Peer = %d, want %d (%v)", oe.Peer, peer, err)
		ok = false
	}
	if tag != -2 && oe.Tag != tag {
		t.Errorf("OpError.Tag = %d, want %d (%v)", oe.Tag, tag, err)
		ok = false
	}
	if oe.Backend != backend {
		t.Errorf("OpError.Backend = %q, want %q (%v)", oe.Backend, backend, err)
		ok = false
	}
	if oe.Err == nil {
		t.Errorf("OpError.Err is nil (%v)", err)
		ok = false
	}
	return ok
}

// noPanic calls f and turns a panic into a failure: the library must
// report misuse as errors.
func noPanic(t T, what string, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			buf := make([]byte, 8<<10)
			buf = buf[:runtime.Stack(buf, false)]
			t.Errorf("%s panicked: %v\n%s", what, p, buf)
		}
	}()
	f()
}

// wildcardOK inspects a receive posted with AnySource or AnyTag before any
// matching message can have been sent: it reports whether the backend
// accepted it. A backend other than tcp may refuse it with an error
// matching mp.ErrNotSupported; any other error fails the case.
func wildcardOK(t T, c *mp.Comm, q *mp.Request) bool {
	t.Helper()
	done, _, err := q.Test()
	if !done {
		return true
	}
	if err == nil {
		t.Errorf("a wildcard receive completed before any message was sent to it")
		return false
	}
	if !hostBackend(c) && errors.Is(err, mp.ErrNotSupported) {
		t.Logf("backend %s does not match wildcards: %v", c.Backend(), err)
		return false
	}
	t.Errorf("wildcard receive: %v", err)
	return false
}

// tell sends the go/stop verdict of a gate to each of ranks.
func tell(t T, c *mp.Comm, ok bool, ranks ...int) {
	t.Helper()
	v := []uint8{0}
	if ok {
		v[0] = 1
	}
	for _, r := range ranks {
		if err := mp.Send(c, v, r, gateTag); err != nil {
			t.Errorf("gate: telling rank %d: %v", r, err)
		}
	}
}

// heard receives the verdict of a gate from rank from.
func heard(t T, c *mp.Comm, from int) bool {
	t.Helper()
	v := []uint8{0}
	if _, err := mp.Recv(c, v, from, gateTag); err != nil {
		t.Errorf("gate: hearing from rank %d: %v", from, err)
		return false
	}
	return v[0] == 1
}

// others lists every rank but this one.
func others(c *mp.Comm) []int {
	var rs []int
	for r := range c.Size() {
		if r != c.Rank() {
			rs = append(rs, r)
		}
	}
	return rs
}

// waitDone waits, at most pollLimit, for ch to close.
func waitDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(pollLimit):
		return false
	}
}

// hostBackend reports whether c runs on a host backend ("tcp", "host"),
// which must match wildcards and probe.
func hostBackend(c *mp.Comm) bool { return c.Backend() == "tcp" || c.Backend() == "host" }
