package shm

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// A ring's memory, as both processes see it (offsets in bytes; every word
// is native-endian, the two processes being on one host):
//
//	0    magic    uint64   ringMagic once formatted (stored last, atomically)
//	8    capacity uint64   bytes of data, a power of two
//	128  tail     uint64   producer's index, as of its last WantSpace
//	256  head     uint64   consumer's index: bytes ever consumed
//	384  want     uint32   1 while the producer waits for space
//	512  data     capacity bytes of records
//
// Each shared word has a 128-byte block of its own: a 64-byte cache line,
// and its neighbour, which Intel's adjacent-line prefetcher pulls in with
// it, so the producer's and the consumer's stores never contend for a
// line. The indices run free (they never wrap in practice: 2^64 bytes); a
// position in the data is index & (capacity-1).
//
// A record is an 8-byte header, then its bytes, padded to a multiple of 8.
// The header says the record is there: the consumer polls the header at
// its own index, and a record is published by the store of its header
// (atomic, after its bytes), so an arrival is one cache line to move, the
// one the record is in, not a line holding an index and then the record's.
// A header is the length with bit 62 set (recFlag), and bit 61
// (slotFlag) when a small record takes the rest of its line
// (ReserveLine); or, for a padding record, the length of its body with
// bit 63 set: padding fills the data's tail when the next record would
// straddle the end (the record then starts at position 0), or moves a
// record forward so that a byte of it is aligned (ReserveAligned). A zero header is "nothing yet": the producer
// zeroes the header after each record before it publishes the record, and
// publishes a record's padding after the record, so the first header the
// consumer can see is always the one stored last. The producer keeps 8
// bytes free beyond its last record for that zero word.
const (
	offMagic = 0
	offCap   = 8
	offTail  = 1 * ringLine
	offHead  = 2 * ringLine
	offWant  = 3 * ringLine
	ringHdr  = 4 * ringLine
	ringLine = 128

	ringMagic = 0x32676e69726d6863 // "chmring2", little-endian

	recHdr   = 8
	recAlign = 8 // records start at multiples of 8
	padFlag  = 1 << 63
	recFlag  = 1 << 62
	slotFlag = 1 << 61 // with recFlag: the record takes the rest of its line
)

// MinRingCapacity and MaxRingCapacity bound a ring's data capacity (a
// power of two).
const (
	MinRingCapacity = 4096
	MaxRingCapacity = 1 << 30
)

// Ring is a lock-free ring of variable-size records in memory two
// processes share (a Segment): one process produces (Reserve, Commit), the
// other consumes (Next, Consume). Records arrive whole and in order. Each
// process makes its own Ring value over the shared memory, the creator
// with NewRing and the other with AttachRing, and uses one side of it
// from one goroutine at a time; the two sides need no lock between them.
//
// Nothing blocks: Reserve returns nil when the ring is full and Next
// returns nil when it is empty. A waiting process spins briefly on Empty
// (or on Reserve) and then sleeps on a Bell: see Bell for the protocol,
// and WantSpace for a producer that waits for room.
//
// The memory comes from another process and is never trusted: the
// consumer validates every index and record header it reads, and a bad
// one is an error wrapping ErrCorrupt from Next (the ring stays broken),
// never a panic or an access outside the ring. A producer that reads a
// bad consumer index gets nil from every Reserve, and Err says why.
//
// The shared words are accessed with sync/atomic through pointers into
// the mapping. The Go memory model speaks of goroutines, but what makes
// these atomics order memory is the hardware: they compile to the same
// instructions in every process (on amd64 a plain load for Load, XCHG for
// Store, both ordered by x86's total store order; on arm64 LDAR and STLR),
// the two processes' mappings are the same physical pages, and cache
// coherence works on physical memory, so a record's bytes stored before
// the release store of its header are visible to the process whose
// acquire load sees that header, exactly as between two threads. The
// compiler does not move memory accesses across a sync/atomic call. The loads and
// stores are sequentially consistent, which the WantSpace and Bell
// protocols need (a store, then a load of the other side's word).
type Ring struct {
	data   []byte // the capacity bytes of records
	mask   uint64
	cap    uint64
	maxRec int
	tailW  *atomic.Uint64
	headW  *atomic.Uint64
	wantW  *atomic.Uint32

	// The producer's side; its index is its own copy, never read back.
	tail     uint64 // committed
	headSeen uint64 // the consumer's index, as last loaded
	pend     uint64 // the tail once the reserved record is committed
	reserved bool
	perr     error
	// The reserved record, as Commit publishes it: its header's place and
	// word, where it ends, and the places of the padding before it
	// (noPad: none).
	recPos, recHdrW, recEnd uint64
	alignPos, padPos        uint64

	// The consumer's side.
	head  uint64 // consumed
	next  uint64 // the head once the record Next returned is consumed
	taken bool
	cerr  error
}

// RingBytes returns the bytes a ring of capacity bytes of data occupies:
// a header of 512 bytes (the indices on cache lines of their own), then
// the data. capacity must be a power of two from MinRingCapacity to
// MaxRingCapacity (NewRing checks).
func RingBytes(capacity int) int {
	return ringHdr + capacity
}

// NewRing formats a ring of capacity bytes of data at the start of mem,
// which must hold RingBytes(capacity) bytes, be 8-byte aligned (a Segment
// is; a multiple of 128 bytes into it is best), and not be in use by the
// other process yet: it attaches after NewRing returns. The ring is empty.
func NewRing(mem []byte, capacity int) (*Ring, error) {
	if capacity < MinRingCapacity || capacity > MaxRingCapacity || capacity&(capacity-1) != 0 {
		return nil, fmt.Errorf("shm: ring capacity %d is not a power of two in [%d, %d]", capacity, MinRingCapacity, MaxRingCapacity)
	}
	if err := checkMem(mem, RingBytes(capacity)); err != nil {
		return nil, err
	}
	r := newRing(mem, uint64(capacity))
	r.tailW.Store(0)
	r.headW.Store(0)
	r.wantW.Store(0)
	r.setHdr(0, 0) // nothing yet at the consumer's index
	*(*uint64)(unsafe.Pointer(&mem[offCap])) = uint64(capacity)
	word64(mem, offMagic).Store(ringMagic) // last: an attacher that sees it sees the rest
	return r, nil
}

// AttachRing returns the ring another process formatted (NewRing) at the
// start of mem, after checking its header: the magic, a valid capacity
// that fits in mem, and indices within a capacity of each other. The
// capacity is read once, here.
func AttachRing(mem []byte) (*Ring, error) {
	if err := checkMem(mem, ringHdr); err != nil {
		return nil, err
	}
	if m := word64(mem, offMagic).Load(); m != ringMagic {
		return nil, fmt.Errorf("%w: magic %#x, want %#x (not formatted by NewRing?)", ErrCorrupt, m, uint64(ringMagic))
	}
	c := word64(mem, offCap).Load()
	if c < MinRingCapacity || c > MaxRingCapacity || c&(c-1) != 0 {
		return nil, fmt.Errorf("%w: capacity %d is not a power of two in [%d, %d]", ErrCorrupt, c, MinRingCapacity, MaxRingCapacity)
	}
	if need := RingBytes(int(c)); len(mem) < need {
		return nil, fmt.Errorf("%w: capacity %d needs %d bytes, the memory has %d", ErrCorrupt, c, need, len(mem))
	}
	r := newRing(mem, c)
	t, h := r.tailW.Load(), r.headW.Load()
	if t-h > c || t&7 != 0 || h&7 != 0 {
		return nil, fmt.Errorf("%w: tail %d and head %d (capacity %d)", ErrCorrupt, t, h, c)
	}
	r.tail, r.headSeen, r.head = t, h, h
	return r, nil
}

func checkMem(mem []byte, need int) error {
	if len(mem) < need {
		return fmt.Errorf("shm: ring needs %d bytes, the memory has %d", need, len(mem))
	}
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(mem))); p%8 != 0 {
		return fmt.Errorf("shm: ring memory at %#x is not 8-byte aligned", p)
	}
	return nil
}

func newRing(mem []byte, c uint64) *Ring {
	return &Ring{
		data:   mem[ringHdr : ringHdr+int(c) : ringHdr+int(c)],
		mask:   c - 1,
		cap:    c,
		maxRec: int(c/2) - recHdr,
		tailW:  word64(mem, offTail),
		headW:  word64(mem, offHead),
		wantW:  (*atomic.Uint32)(unsafe.Pointer(&mem[offWant])),
	}
}

func word64(mem []byte, off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[off]))
}

// MaxRecord returns the largest record Reserve accepts: half the
// capacity, less its header, so that a record always fits once the ring is
// empty, wherever the indices stand.
func (r *Ring) MaxRecord() int { return r.maxRec }

// Reserve returns room for one record of n bytes (0 to MaxRecord), or nil
// when the ring has no room for it now. The producer writes the record
// into the slice and publishes it with Commit; until then the consumer
// does not see it. A second Reserve before Commit abandons the first.
// Reserve never blocks and does not allocate. n outside [0, MaxRecord]
// panics: no wait would make room for it.
func (r *Ring) Reserve(n int) []byte {
	if uint(n) > uint(r.maxRec) {
		panic(fmt.Sprintf("shm: Reserve(%d): records are at most %d bytes in this ring", n, r.maxRec))
	}
	return r.reserve(n, 0, recAlign, false)
}

// ReserveLine is Reserve for a small record that should lie in one cache
// line with its header: when the record and its header fit in 64 bytes,
// the record takes the rest of its line (a slot: its header says so), so
// the next record starts a line of its own; and when it would straddle a
// line, the ring puts padding before it and it takes the next line. The
// consumer's read of a small record is then one cache miss, and a stream
// of them moves one line a record, never a line that holds the end of
// one record and the start of the next.
func (r *Ring) ReserveLine(n int) []byte {
	if uint(n) > uint(r.maxRec) {
		panic(fmt.Sprintf("shm: ReserveLine(%d): records are at most %d bytes in this ring", n, r.maxRec))
	}
	if need := (n + recHdr + 7) &^ 7; need <= lineSize {
		pos := r.tail & r.mask
		if into := int(pos & (lineSize - 1)); into+need > lineSize {
			// The record's header at the next line: its payload, at
			// byte 0 of the record, is recHdr into that line.
			return r.reserve(n, lineSize-recHdr, lineSize, true)
		}
		return r.reserve(n, 0, recAlign, true)
	}
	return r.reserve(n, 0, recAlign, false)
}

// lineSize is a cache line.
const lineSize = 64

// MaxAlign is the largest alignment ReserveAligned gives.
const MaxAlign = 64

// ReserveAligned is Reserve for a record whose byte at off (a multiple of
// 8) must lie at a multiple of align (a power of two from 8 to MaxAlign)
// in memory, so that a large payload after a header is copied in and out
// aligned (a copy whose destination is not 16-byte aligned runs slower).
// The ring puts padding before the record where it must. n is at most
// MaxRecord() - MaxAlign; outside that, or with a bad off or align, it
// panics.
func (r *Ring) ReserveAligned(n, off, align int) []byte {
	if uint(n) > uint(r.maxRec-MaxAlign) || off < 0 || off%recAlign != 0 || off > n ||
		align < recAlign || align > MaxAlign || align&(align-1) != 0 {
		panic(fmt.Sprintf("shm: ReserveAligned(%d, %d, %d): records are at most %d bytes in this ring", n, off, align, r.maxRec-MaxAlign))
	}
	return r.reserve(n, off, align, false)
}

// reserve reserves a record of n bytes whose byte at off lies at a
// multiple of align: the record is preceded by a padding record when it
// must move forward (and by one filling the data's tail when it would
// straddle the end). A slot (a small record, within one line) takes the
// rest of its line.
func (r *Ring) reserve(n, off, align int, slot bool) []byte {
	if r.perr != nil {
		return nil
	}
	size := (uint64(n) + recHdr + 7) &^ 7
	gap := func(pos uint64) uint64 { return -(pos + recHdr + uint64(off)) & uint64(align-1) }
	need := func(start uint64) uint64 {
		if slot {
			return lineSize - start&(lineSize-1)
		}
		return size
	}
	pos := r.tail & r.mask
	g := gap(pos)
	total := g + need(pos+g)
	wrap := pos+total > r.cap
	if wrap {
		g = gap(0)
		total = r.cap - pos + g + need(g)
	}
	// recHdr more: the zero header after the record must not land on a
	// record the consumer has not taken.
	if r.tail-r.headSeen+total+recHdr > r.cap {
		h := r.headW.Load()
		// The consumer's index only grows, and never passes the tail.
		if h-r.headSeen > r.tail-r.headSeen || h&7 != 0 {
			r.perr = fmt.Errorf("%w: the consumer's index went from %d to %d (producer's %d)", ErrCorrupt, r.headSeen, h, r.tail)
			return nil
		}
		r.headSeen = h
		if r.tail-h+total+recHdr > r.cap {
			return nil
		}
	}
	r.padPos, r.alignPos = noPad, noPad
	if wrap {
		r.padPos = pos
		pos = 0
	}
	if g != 0 {
		r.alignPos = pos
		pos += g
	}
	r.recPos, r.recHdrW, r.recEnd = pos, recFlag|uint64(n), pos+need(pos)
	if slot {
		r.recHdrW |= slotFlag
	}
	r.pend, r.reserved = r.tail+total, true
	p := int(pos) + recHdr
	return r.data[p : p+n : p+n]
}

// noPad marks a padding record that a reserved record does not need.
const noPad = ^uint64(0)

func (r *Ring) setHdr(pos, h uint64) {
	*(*uint64)(unsafe.Pointer(&r.data[pos])) = h
}

// Commit publishes the record Reserve returned (a release store of its
// header, or of its padding's): the consumer may see it from now on, and
// the producer must not touch its slice again. Commit without a Reserve
// panics.
func (r *Ring) Commit() {
	if !r.reserved {
		panic("shm: Commit without Reserve")
	}
	// The next record's header is zero before anything here can be seen.
	// Then the headers, the last one first: the one at the old tail, which
	// the consumer polls, is stored last, atomically (a release store).
	r.setHdr(r.recEnd&r.mask, 0)
	first, h := r.recPos, r.recHdrW
	if r.alignPos != noPad {
		r.setHdr(first, h)
		first, h = r.alignPos, padFlag|(r.recPos-r.alignPos-recHdr)
	}
	if r.padPos != noPad {
		r.setHdr(first, h)
		first, h = r.padPos, padFlag|(r.cap-r.padPos-recHdr)
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&r.data[first])), h)
	r.tail, r.reserved = r.pend, false
}

// Err returns the error that stopped the producer's side (a corrupt
// consumer index; every Reserve then returns nil), or nil.
func (r *Ring) Err() error { return r.perr }

// WantSpace tells the consumer that the producer waits for room (Reserve
// returned nil): the consumer, after Consume, calls TakeSpaceWanted and,
// when it reports true, rings the producer's bell. The producer's
// sequence, with its bell b, is
//
//	v := b.Arm()
//	r.WantSpace()
//	if rec := r.Reserve(n); rec != nil { b.Disarm(); … } else { b.Sleep(v, …) }
//
// No wake-up is lost: the producer stores the flag and then loads the
// consumer's index (in Reserve); the consumer stores its index and then
// loads the flag. Either the producer sees the room, or the consumer sees
// the flag, and then the bell, armed before the flag was set. (Set the
// flag before arming, and a consumer that frees too little room for the
// record could take the flag while the bell is not armed yet: its ring
// would wake no one, and no later Consume would ring again.)
func (r *Ring) WantSpace() {
	r.tailW.Store(r.tail) // for TakeSpaceWanted's measure of the room
	r.wantW.Store(1)
}

// SpaceWanted reports whether the producer has said it waits for room and
// no TakeSpaceWanted has cleared it since. It is one load.
func (r *Ring) SpaceWanted() bool { return r.wantW.Load() != 0 }

// TakeSpaceWanted is the consumer's check after Consume: it reports
// whether the producer waits for room and half the ring is free (as of
// the producer's index at its WantSpace), and then clears the flag.
// Waiting for half (any record fits in half the ring: MaxRecord) keeps a
// producer that streams large messages from being woken for every record the consumer frees: it is woken once per half a
// ring, and the two sides copy at once, each in its half. The consumer
// that leaves the flag set frees more later, since the records that fill
// the ring are still there for it to take; once the ring is empty, half
// of it is free. When the flag is clear it is one load.
func (r *Ring) TakeSpaceWanted() bool {
	if r.wantW.Load() == 0 {
		return false
	}
	if used := r.tailW.Load() - r.head; used <= r.cap && used > r.cap/2 {
		return false
	}
	return r.wantW.Swap(0) != 0
}

// Pending reports whether a record is committed that the consumer has not
// consumed: a load of the consumer's shared index and one of the header
// there, safe from any goroutine of the consuming process (the consumer's
// own fields are not read), so a poller may look before it takes the lock
// that guards Next. It is a hint: it may miss a record that is being
// committed, and it may report one that the consumer is consuming at that
// moment; Next is the answer that counts.
func (r *Ring) Pending() bool {
	h := r.headW.Load()
	return r.hdr(h&r.mask&^7) != 0
}

// Empty reports whether the consumer has nothing to read: one load of the
// header at its index, for pollers. A committed record may still be
// missed by a load that raced with its Commit; Next is the answer that
// counts.
func (r *Ring) Empty() bool {
	return !r.taken && r.hdr(r.head&r.mask) == 0
}

// Next returns the oldest committed record, or nil when there is none.
// The slice is in the ring: it is valid, and the producer leaves it alone,
// until Consume. Calling Next again before Consume returns the same
// record. A corrupt index or record header is an error wrapping
// ErrCorrupt, from this and every later call. Next does not allocate.
func (r *Ring) Next() ([]byte, error) {
	if r.cerr != nil {
		return nil, r.cerr
	}
	pos := r.head & r.mask
	h := r.hdr(pos) // acquire: a record seen is whole, with its padding
	if h == 0 {
		return nil, nil
	}
	skip := uint64(0)
	// At most two padding records come before a record: one filling the
	// data's tail, one aligning the record (ReserveAligned), each within
	// the data; the producer stored the record's header before theirs.
	for i := 0; h&padFlag != 0; i++ {
		l := h &^ padFlag
		if i == 2 || l > r.cap || l&7 != 0 || pos+recHdr+l > r.cap {
			return nil, r.corrupt(fmt.Errorf("bad padding header %#x at %d", h, pos))
		}
		skip += recHdr + l
		if pos += recHdr + l; pos == r.cap {
			pos = 0
		}
		if h = r.hdr(pos); h == 0 {
			return nil, r.corrupt(fmt.Errorf("padding with no record after it, at %d", pos))
		}
	}
	n := h &^ (recFlag | slotFlag)
	need := (n + recHdr + 7) &^ 7
	if h&slotFlag != 0 {
		if slot := lineSize - pos&(lineSize-1); slot >= need {
			need = slot
		} else {
			need = r.cap + 1 // not a record of one line: corrupt
		}
	}
	if h&recFlag == 0 || n > uint64(r.maxRec) || pos+need > r.cap || skip+need > r.cap {
		return nil, r.corrupt(fmt.Errorf("bad record header %#x at %d (records at most %d)", h, pos, r.maxRec))
	}
	r.next, r.taken = r.head+skip+need, true
	p := int(pos) + recHdr
	return r.data[p : p+int(n) : p+int(n)], nil
}

// hdr loads the header at pos once (a single load, so a peer that changes
// it meanwhile cannot make the checks and the slicing disagree).
func (r *Ring) hdr(pos uint64) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.data[pos])))
}

func (r *Ring) corrupt(err error) error {
	r.cerr = fmt.Errorf("%w: %w", ErrCorrupt, err)
	return r.cerr
}

// Consume frees the record Next returned (a release store of the
// consumer's index), so the producer may reuse its room; the slice must
// not be used afterwards. Consume without a record from Next panics.
func (r *Ring) Consume() {
	if !r.taken {
		panic("shm: Consume without a record from Next")
	}
	r.head, r.taken = r.next, false
	r.headW.Store(r.head)
}
