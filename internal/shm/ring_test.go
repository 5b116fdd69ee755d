package shm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// alignedMem returns n zero bytes of Go memory starting on a 128-byte
// boundary, as a ring in a Segment would.
func alignedMem(n int) []byte {
	b := make([]byte, n+ringLine)
	off := (ringLine - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%ringLine)) % ringLine
	return b[off : off+n : off+n]
}

// ringPair formats a ring of capacity bytes in fresh memory and attaches
// a second view to it: p produces, c consumes, as two processes would.
func ringPair(t testing.TB, capacity int) (mem []byte, p, c *Ring) {
	mem = alignedMem(RingBytes(capacity))
	p, err := NewRing(mem, capacity)
	require.NoError(t, err)
	c, err = AttachRing(mem)
	require.NoError(t, err)
	return mem, p, c
}

func put(t testing.TB, r *Ring, b []byte) bool {
	rec := r.Reserve(len(b))
	if rec == nil {
		return false
	}
	require.Len(t, rec, len(b))
	copy(rec, b)
	r.Commit()
	return true
}

func take(t testing.TB, r *Ring) []byte {
	rec, err := r.Next()
	require.NoError(t, err)
	if rec == nil {
		return nil
	}
	out := bytes.Clone(rec)
	r.Consume()
	return out
}

func TestRingFormat(t *testing.T) {
	for _, c := range []int{0, 1000, 4095, 4097, 6000, MaxRingCapacity + 1} {
		_, err := NewRing(alignedMem(8192), c)
		assert.Error(t, err, "capacity %d", c)
	}
	_, err := NewRing(alignedMem(RingBytes(4096)-1), 4096)
	assert.ErrorContains(t, err, "needs")
	_, err = NewRing(alignedMem(RingBytes(4096) + 8)[1:], 4096)
	assert.ErrorContains(t, err, "aligned")

	mem, p, c := ringPair(t, 8192)
	assert.Equal(t, 8192/2-8, p.MaxRecord())
	assert.Equal(t, p.MaxRecord(), c.MaxRecord())
	assert.Equal(t, 512+8192, RingBytes(8192))
	assert.Equal(t, 512+8192, len(mem))
	assert.True(t, c.Empty())

	// AttachRing checks what another process left there.
	_, err = AttachRing(alignedMem(RingBytes(4096)))
	assert.ErrorIs(t, err, ErrCorrupt, "never formatted")
	_, err = AttachRing(mem[:100])
	assert.ErrorContains(t, err, "needs")
	_, err = AttachRing(mem[:RingBytes(4096)])
	assert.ErrorIs(t, err, ErrCorrupt, "capacity larger than the memory")
	for _, bad := range []uint64{3000, 4097, 1 << 40, 0} {
		m := bytes.Clone(mem) // copies are 8-aligned: large allocations are
		binary.NativeEndian.PutUint64(m[offCap:], bad)
		_, err = AttachRing(m)
		assert.ErrorIs(t, err, ErrCorrupt, "capacity %d", bad)
	}
	for _, idx := range [][2]uint64{{8192 + 8, 0}, {0, 8}, {4, 0}, {100, 100 - 4}} {
		m := bytes.Clone(mem)
		binary.NativeEndian.PutUint64(m[offTail:], idx[0])
		binary.NativeEndian.PutUint64(m[offHead:], idx[1])
		_, err = AttachRing(m)
		assert.ErrorIs(t, err, ErrCorrupt, "tail %d head %d", idx[0], idx[1])
	}
}

func TestRingOrderAndRoom(t *testing.T) {
	_, p, c := ringPair(t, 4096)
	assert.Nil(t, take(t, c))

	// A reserved record is invisible until Commit; Next repeats until
	// Consume.
	rec := p.Reserve(3)
	copy(rec, "abc")
	assert.True(t, c.Empty())
	assert.False(t, c.Pending(), "reserved, not committed")
	rec, err := c.Next()
	require.NoError(t, err)
	assert.Nil(t, rec)
	p.Commit()
	assert.False(t, c.Empty())
	assert.True(t, c.Pending())
	assert.True(t, p.Pending(), "either side's view of the shared indices")
	r1, err := c.Next()
	require.NoError(t, err)
	r2, err := c.Next()
	require.NoError(t, err)
	assert.Equal(t, "abc", string(r1))
	assert.Equal(t, unsafe.SliceData(r1), unsafe.SliceData(r2))
	assert.Equal(t, 3, cap(r1), "the record's slice cannot reach past it")
	assert.True(t, c.Pending(), "taken by Next, not yet consumed")
	c.Consume()
	assert.True(t, c.Empty())
	assert.False(t, c.Pending())

	// Zero-length records are records.
	require.True(t, put(t, p, nil))
	got, err := c.Next()
	require.NoError(t, err)
	require.NotNil(t, got)
	assert.Empty(t, got)
	c.Consume()

	// Fill: 100-byte records take 112 bytes each.
	_, p, c = ringPair(t, 4096)
	n := 0
	for put(t, p, bytes.Repeat([]byte{byte(n)}, 100)) {
		n++
	}
	assert.Equal(t, 4096/112, n)
	assert.Nil(t, p.Reserve(100))
	assert.Nil(t, p.Reserve(4096-n*112-8), "8 bytes stay free for the zero header after the last record")
	assert.NotNil(t, p.Reserve(4096-n*112-16), "the last bytes still fit a smaller record")
	for i := range n {
		assert.Equal(t, bytes.Repeat([]byte{byte(i)}, 100), take(t, c))
	}
	assert.Nil(t, take(t, c), "the abandoned reservation was never committed")
	require.NoError(t, p.Err())
}

func TestRingWrapPads(t *testing.T) {
	_, p, c := ringPair(t, 4096)
	// Move both indices to 4096-24: the next record of 100 bytes straddles
	// the end, so a padding record fills the last 24 bytes and the record
	// starts at 0.
	for _, n := range []int{1000, 1000, 1000, 1000, 32} {
		require.True(t, put(t, p, make([]byte, n)))
		take(t, c)
	}
	require.Equal(t, uint64(4096-24), c.head)
	rec := p.Reserve(100)
	require.NotNil(t, rec)
	assert.Equal(t, unsafe.SliceData(p.data[8:]), unsafe.SliceData(rec), "the record starts at the ring's start")
	assert.Zero(t, binary.NativeEndian.Uint64(p.data[4096-24:]), "nothing is published before Commit")
	copy(rec, bytes.Repeat([]byte{7}, 100))
	p.Commit()
	assert.Equal(t, uint64(padFlag|16), binary.NativeEndian.Uint64(p.data[4096-24:]))
	assert.Equal(t, uint64(recFlag|100), binary.NativeEndian.Uint64(p.data[0:]))
	assert.Zero(t, binary.NativeEndian.Uint64(p.data[112:]), "the header after the record is zero")
	assert.Equal(t, bytes.Repeat([]byte{7}, 100), take(t, c))
	assert.Equal(t, uint64(4096+112), c.head, "the padding was consumed with the record")

	// The largest record fits in an empty ring wherever the indices are.
	for range 200 {
		k := rand.IntN(p.MaxRecord())
		require.True(t, put(t, p, make([]byte, k)))
		take(t, c)
		require.True(t, put(t, p, bytes.Repeat([]byte{1}, p.MaxRecord())), "at %d", c.head&c.mask)
		require.Equal(t, bytes.Repeat([]byte{1}, p.MaxRecord()), take(t, c))
	}
	assert.Panics(t, func() { p.Reserve(p.MaxRecord() + 1) })
	assert.Panics(t, func() { p.Reserve(-1) })
	assert.Panics(t, func() { p.Commit() })
	assert.Panics(t, func() { c.Consume() })
}

func TestRingSpaceWanted(t *testing.T) {
	_, p, c := ringPair(t, 4096)
	assert.False(t, c.SpaceWanted())
	assert.False(t, c.TakeSpaceWanted())
	p.WantSpace()
	assert.True(t, c.SpaceWanted())
	assert.True(t, c.TakeSpaceWanted())
	assert.False(t, c.SpaceWanted())
	assert.False(t, c.TakeSpaceWanted())

	// With more than half the ring in use, the flag stays set until the
	// consumer has freed down to half.
	rec := make([]byte, 1000-8) // 1000 bytes a record with its header
	for range 4 {
		b := p.Reserve(len(rec))
		require.NotNil(t, b)
		p.Commit()
	}
	p.WantSpace()
	for i := range 4 {
		_ = take(t, c)
		if i < 1 {
			assert.False(t, c.TakeSpaceWanted(), "record %d: 3 KiB of 4 still in use", i)
			assert.True(t, c.SpaceWanted())
		} else {
			assert.True(t, c.TakeSpaceWanted(), "record %d: half the ring free", i)
			break
		}
	}
}

// TestRingCorrupt writes bad headers (and a bad consumer index) where the other process
// would, and checks that each is an error from Next (and stays one), or a
// stopped producer, never a panic.
func TestRingCorrupt(t *testing.T) {
	const capacity = 4096
	setup := func(t *testing.T) (mem []byte, p, c *Ring) {
		mem, p, c = ringPair(t, capacity)
		require.True(t, put(t, p, []byte("hello")))
		return mem, p, c
	}
	set := func(mem []byte, off int, v uint64) { binary.NativeEndian.PutUint64(mem[off:], v) }
	// Each case may first move both indices to at (bytes), then corrupts
	// the words a producer would write there; hdr is the data's offset in
	// mem at at.
	type bad struct {
		at      uint64
		corrupt func(mem []byte, hdr int, at uint64)
	}
	cases := map[string]bad{
		"length huge":           {0, func(m []byte, h int, _ uint64) { set(m, h, recFlag|1<<40) }},
		"no record flag":        {0, func(m []byte, h int, _ uint64) { set(m, h, 5) }},
		"length over MaxRecord": {0, func(m []byte, h int, _ uint64) { set(m, h, recFlag|capacity/2) }},
		"record past the data end": {capacity - 24, func(m []byte, h int, _ uint64) {
			set(m, h, recFlag|100) // no padding before it
		}},
		"slot longer than its line": {0, func(m []byte, h int, _ uint64) { set(m, h, recFlag|slotFlag|60) }},
		"slot past the data end": {capacity - 24, func(m []byte, h int, _ uint64) {
			set(m, h, recFlag|slotFlag|40)
		}},
		"padding far past": {0, func(m []byte, h int, _ uint64) { set(m, h, padFlag|1<<40) }},
		"padding past the data end": {capacity - 24, func(m []byte, h int, _ uint64) {
			set(m, h, padFlag|24)
		}},
		"padding length not a multiple of 8": {capacity - 24, func(m []byte, h int, _ uint64) {
			set(m, h, padFlag|4)
		}},
		"padding with no record": {capacity - 24, func(m []byte, h int, _ uint64) {
			set(m, h, padFlag|16)
			set(m, ringHdr, 0)
		}},
		"padding then padding": {capacity - 24, func(m []byte, h int, _ uint64) {
			set(m, h, padFlag|16)
			set(m, ringHdr, padFlag|(capacity-8))
		}},
	}
	for name, bc := range cases {
		t.Run(name, func(t *testing.T) {
			mem, p, c := ringPair(t, capacity)
			for c.head < bc.at {
				require.True(t, put(t, p, make([]byte, min(1000, int(bc.at-c.head)-8))))
				take(t, c)
			}
			require.Equal(t, bc.at, c.head)
			require.True(t, put(t, p, []byte("hello")))
			bc.corrupt(mem, ringHdr+int(bc.at%capacity), bc.at)
			rec, err := c.Next()
			assert.Nil(t, rec)
			require.ErrorIs(t, err, ErrCorrupt)
			t.Log(err)
			// Sticky, even if the memory is repaired.
			set(mem, ringHdr+int(bc.at%capacity), recFlag|5)
			_, err2 := c.Next()
			assert.Equal(t, err, err2)
		})
	}

	// A bad consumer index stops the producer: Reserve returns nil and Err
	// says why; it never writes over records not yet consumed.
	for name, head := range map[string]func(tail uint64) uint64{
		"ahead of tail": func(tail uint64) uint64 { return tail + 8 },
		"backwards":     func(uint64) uint64 { return ^uint64(7) },
		"unaligned":     func(uint64) uint64 { return 4 },
	} {
		t.Run("producer/"+name, func(t *testing.T) {
			mem, p, _ := setup(t)
			for p.Reserve(1000) != nil {
				p.Commit()
			}
			set(mem, offHead, head(p.tail))
			assert.Nil(t, p.Reserve(1000))
			assert.ErrorIs(t, p.Err(), ErrCorrupt)
			assert.Nil(t, p.Reserve(0))
		})
	}
}

func FuzzRingNext(f *testing.F) {
	f.Add(uint64(16), uint64(0), []byte("\x05\x00\x00\x00\x00\x00\x00\x40hello"))
	f.Add(uint64(4096+16), uint64(4096-8), []byte("\x00\x00\x00\x00\x00\x00\x00\x80"))
	f.Fuzz(func(t *testing.T, tail, head uint64, data []byte) {
		const capacity = 4096
		mem, _, _ := ringPair(t, capacity)
		copy(mem[ringHdr:], data)
		binary.NativeEndian.PutUint64(mem[offTail:], tail)
		binary.NativeEndian.PutUint64(mem[offHead:], head)
		c, err := AttachRing(mem)
		if err != nil {
			return
		}
		base := uintptr(unsafe.Pointer(&mem[ringHdr]))
		for range 2 * capacity / 8 {
			rec, err := c.Next()
			if err != nil || rec == nil {
				return
			}
			if len(rec) > 0 {
				p := uintptr(unsafe.Pointer(unsafe.SliceData(rec)))
				if p < base || p+uintptr(len(rec)) > base+capacity {
					t.Fatalf("record of %d bytes at %#x outside the data [%#x, %#x)", len(rec), p, base, base+capacity)
				}
			}
			c.Consume()
		}
	})
}

func TestRingNoAllocs(t *testing.T) {
	_, p, c := ringPair(t, 1<<16)
	src := make([]byte, 1000)
	n := 0
	allocs := testing.AllocsPerRun(10000, func() {
		n = (n + 77) % len(src)
		copy(p.Reserve(n), src[:n])
		p.Commit()
		rec, _ := c.Next()
		_ = rec[:n]
		c.Consume()
		_ = c.Empty()
		_ = c.TakeSpaceWanted()
	})
	assert.Zero(t, allocs)
}

// recordStream is a deterministic sequence of records of random sizes (a
// few up to max, most small) cut from a random source buffer, so that a
// producer and a consumer that share its seed agree on every record
// without sending anything else.
type recordStream struct {
	rng *rand.Rand
	src []byte
	max int
}

func newRecordStream(seed uint64, max int) *recordStream {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	src := make([]byte, 2*max)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	return &recordStream{rng: rng, src: src, max: max}
}

// next returns the next record: a slice of the source.
func (s *recordStream) next() []byte {
	var n int
	switch k := s.rng.IntN(100); {
	case k < 70:
		n = s.rng.IntN(65)
	case k < 98:
		n = s.rng.IntN(1025)
	default:
		n = s.rng.IntN(s.max + 1)
	}
	off := s.rng.IntN(len(s.src) - n + 1)
	return s.src[off : off+n]
}

// TestRingGoroutines runs a producer and a consumer goroutine over one
// ring in Go memory, with records of random sizes wrapping many times;
// under -race it checks that Commit and Next order the record's bytes.
func TestRingGoroutines(t *testing.T) {
	records := 300_000
	if testing.Short() || raceEnabled {
		records = 50_000
	}
	_, p, c := ringPair(t, 1<<14)
	const seed = 42
	var wg sync.WaitGroup
	wg.Go(func() {
		s := newRecordStream(seed, p.MaxRecord())
		for range records {
			b := s.next()
			for !put(t, p, b) {
				runtime.Gosched()
			}
		}
	})
	s := newRecordStream(seed, c.MaxRecord())
	wraps := c.head / c.cap
	for i := range records {
		want := s.next()
		for {
			rec, err := c.Next()
			require.NoError(t, err)
			if rec != nil {
				if !bytes.Equal(want, rec) {
					t.Fatalf("record %d: %d bytes, want %d", i, len(rec), len(want))
				}
				c.Consume()
				break
			}
			runtime.Gosched()
		}
	}
	wg.Wait()
	assert.True(t, c.Empty())
	assert.Greater(t, c.head/c.cap-wraps, uint64(100), "the ring wrapped")
}

// TestRingAligned mixes aligned records (of every alignment and offset)
// with plain ones, on two goroutines, through many wraps: every aligned
// record's byte at its offset lies at its alignment in memory, and the
// consumer sees every record whole and in order, padding skipped.
func TestRingAligned(t *testing.T) {
	records := 100_000
	if testing.Short() || raceEnabled {
		records = 20_000
	}
	_, p, c := ringPair(t, 1<<13)
	type spec struct{ n, off, align int }
	specOf := func(rng *rand.Rand) spec {
		n := rng.IntN(p.MaxRecord() - MaxAlign + 1)
		if rng.IntN(3) == 0 {
			return spec{n: n} // a plain record
		}
		off := 8 * rng.IntN(min(n, 64)/8+1)
		return spec{n, off, 8 << rng.IntN(4)}
	}
	fill := func(b []byte, i int) {
		for j := range b {
			b[j] = byte(i + j)
		}
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(7, 7))
		for i := range records {
			sp := specOf(rng)
			var rec []byte
			for rec == nil {
				if sp.align == 0 {
					rec = p.Reserve(sp.n)
				} else {
					rec = p.ReserveAligned(sp.n, sp.off, sp.align)
				}
				if rec == nil {
					runtime.Gosched()
				}
			}
			if sp.align != 0 && (uintptr(unsafe.Pointer(unsafe.SliceData(rec)))+uintptr(sp.off))%uintptr(sp.align) != 0 {
				bad.Add(1)
			}
			fill(rec, i)
			p.Commit()
		}
	})
	rng := rand.New(rand.NewPCG(7, 7))
	want := make([]byte, p.MaxRecord())
	wraps := c.head / c.cap
	for i := range records {
		sp := specOf(rng)
		fill(want[:sp.n], i)
		for {
			rec, err := c.Next()
			require.NoError(t, err)
			if rec != nil {
				if !bytes.Equal(want[:sp.n], rec) {
					t.Fatalf("record %d: %d bytes, want %d", i, len(rec), sp.n)
				}
				c.Consume()
				break
			}
			runtime.Gosched()
		}
	}
	wg.Wait()
	assert.Zero(t, bad.Load(), "aligned records at a wrong address")
	assert.True(t, c.Empty())
	assert.Greater(t, c.head/c.cap-wraps, uint64(100), "the ring wrapped")
	assert.Panics(t, func() { p.ReserveAligned(p.MaxRecord(), 0, 64) }, "no room is left for the padding")
	assert.Panics(t, func() { p.ReserveAligned(64, 4, 64) }, "an offset that is not a multiple of 8")
	assert.Panics(t, func() { p.ReserveAligned(64, 0, 48) }, "an alignment that is not a power of two")
}

// BenchmarkRingLocal produces and consumes one record at a time on one
// goroutine: the ring's own cost per record, without a second core.
func BenchmarkRingLocal(b *testing.B) {
	for _, n := range []int{1, 64, 4096} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			_, p, c := ringPair(b, 1<<16)
			src, dst := make([]byte, n), make([]byte, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				copy(p.Reserve(n), src)
				p.Commit()
				rec, _ := c.Next()
				copy(dst, rec)
				c.Consume()
			}
		})
	}
}

// TestReserveLine: a small record that would straddle a cache line starts
// the next line (after a padding record), one that fits stays where it
// is, and the consumer sees them all, in order.
func TestReserveLine(t *testing.T) {
	mem := alignedMem(RingBytes(MinRingCapacity))
	r, err := NewRing(mem, MinRingCapacity)
	require.NoError(t, err)
	c, err := AttachRing(mem)
	require.NoError(t, err)
	base := uintptr(unsafe.Pointer(unsafe.SliceData(r.data)))
	prevSlot := false
	for i := range 200 {
		n := 1 + i%60 // with the header, 16 to 72 bytes
		b := r.ReserveLine(n)
		require.NotNil(t, b, "record %d", i)
		start := uintptr(unsafe.Pointer(unsafe.SliceData(b))) - base - recHdr
		need := (n + recHdr + 7) &^ 7
		if need <= lineSize {
			assert.LessOrEqual(t, int(start%lineSize)+need, lineSize, "record %d of %d bytes at %d straddles a line", i, n, start)
		}
		if prevSlot {
			assert.Zero(t, start%lineSize, "record %d after a small one starts a line", i)
		}
		prevSlot = need <= lineSize
		for k := range b {
			b[k] = byte(i)
		}
		r.Commit()
		if h := binary.NativeEndian.Uint64(r.data[start:]); prevSlot {
			assert.Equal(t, uint64(recFlag|slotFlag|n), h, "record %d: a slot's header", i)
		} else {
			assert.Equal(t, uint64(recFlag|n), h, "record %d: a record's header", i)
		}
		got, err := c.Next()
		require.NoError(t, err)
		require.Len(t, got, n, "record %d", i)
		assert.Equal(t, byte(i), got[0])
		c.Consume()
	}
}
