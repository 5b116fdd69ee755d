package shm

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Claims is a range of chunks, numbered 0 to n-1, in memory two processes
// share, which the two take from either end until none is left: its
// owner, which made the range (Begin), from the front, and a helper from
// the back. Each chunk is taken exactly once, and neither waits for the
// other to start: a helper that comes late finds less, or nothing, to
// take. The owner of a large message's receive uses it to share the copy
// with the message's sender: the receiver reads chunks out of the
// sender's memory from the front while the sender writes chunks into the
// receiver's from the back, one copy of each byte, both processes copying
// at once.
//
// The helper counts the chunks it has copied (Finish), one at a time and
// in the order it took them, or says it stopped short (Stop): its last
// chunk taken is then not copied. The owner, once nothing is left to take,
// waits until the helper's count covers what it took (Helped, Back): the
// chunks the helper took are [Back, n), those it finished the last of
// them. Only then may the owner begin another range, so a helper's count
// always belongs to the range it took from.
//
// The layout, each word on a 128-byte block of its own (ClaimsBytes in
// all, native-endian, as Ring's):
//
//	0    range  uint64   generation (24 bits) | front (20 bits) | back (20 bits)
//	128  done   uint64   chunks the helper finished; bit 63: it stopped short
//
// The generation numbers the ranges the owner began: a helper takes only
// from the range of the generation it was told (TakeBack), so one that
// comes after its range ended takes nothing from the next. The memory is
// the other process's to write and is never trusted: a range whose back
// lies past the helper's n gives it nothing, and the owner checks the
// helper's count against what it took.
type Claims struct {
	rangeW *atomic.Uint64
	doneW  *atomic.Uint64
	gen    uint32 // the owner's last generation
}

// ClaimsBytes is the memory a Claims occupies.
const ClaimsBytes = 2 * ringLine

// MaxClaims is the most chunks one range holds.
const MaxClaims = 1<<claimBits - 1

const (
	claimBits = 20
	claimMask = 1<<claimBits - 1
	genBits   = 24
	genMask   = 1<<genBits - 1
	stopBit   = 1 << 63
)

// NewClaims returns the Claims at the start of mem, which must hold
// ClaimsBytes bytes and be 8-byte aligned; both processes call it on the
// same shared memory. Memory never written holds an empty range of
// generation 0, which no owner begins.
func NewClaims(mem []byte) (*Claims, error) {
	if len(mem) < ClaimsBytes {
		return nil, fmt.Errorf("shm: claims need %d bytes, the memory has %d", ClaimsBytes, len(mem))
	}
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(mem))); p%8 != 0 {
		return nil, fmt.Errorf("shm: claims memory at %#x is not 8-byte aligned", p)
	}
	return &Claims{rangeW: word64(mem, 0), doneW: word64(mem, ringLine)}, nil
}

func packRange(gen uint32, front, back int) uint64 {
	return uint64(gen)<<(2*claimBits) | uint64(front)<<claimBits | uint64(back)
}

func unpackRange(v uint64) (gen uint32, front, back int) {
	return uint32(v>>(2*claimBits)) & genMask, int(v>>claimBits) & claimMask, int(v) & claimMask
}

// Begin makes a new range of n chunks (1 to MaxClaims), all untaken, and
// returns its generation (never 0), which the owner passes to its helper.
// Only the owner calls it, and only once the helper's count covers the
// last range's chunks (or the helper is gone).
func (c *Claims) Begin(n int) (uint32, error) {
	if n < 1 || n > MaxClaims {
		return 0, fmt.Errorf("shm: a claims range of %d chunks (1 to %d)", n, MaxClaims)
	}
	c.gen = c.gen%genMask + 1
	c.doneW.Store(0)
	c.rangeW.Store(packRange(c.gen, 0, n)) // after done: a helper that sees the range sees the count reset
	return c.gen, nil
}

// TakeFront takes the first untaken chunk for the owner: its number, or
// false when none is left.
func (c *Claims) TakeFront() (int, bool) {
	for {
		v := c.rangeW.Load()
		gen, f, b := unpackRange(v)
		if gen != c.gen || f >= b {
			return 0, false
		}
		if c.rangeW.CompareAndSwap(v, packRange(gen, f+1, b)) {
			return f, true
		}
	}
}

// Back returns where the helper's chunks begin: those it took are [Back,
// n). It means that only once TakeFront has reported none left.
func (c *Claims) Back() int {
	_, _, b := unpackRange(c.rangeW.Load())
	return b
}

// Helped returns how many chunks the helper has finished and whether it
// stopped short.
func (c *Claims) Helped() (done int, stopped bool) {
	v := c.doneW.Load()
	return int(min(v&^stopBit, MaxClaims+1)), v&stopBit != 0
}

// TakeBack takes the last untaken chunk of the range of generation gen
// and n chunks, for the helper: its number, or false when none is left,
// or the range is another (the owner has moved on), or it does not fit n.
func (c *Claims) TakeBack(gen uint32, n int) (int, bool) {
	for {
		v := c.rangeW.Load()
		g, f, b := unpackRange(v)
		if g != gen || f >= b || b > n {
			return 0, false
		}
		if c.rangeW.CompareAndSwap(v, packRange(g, f, b-1)) {
			return b - 1, true
		}
	}
}

// Finish counts one more chunk the helper has copied.
func (c *Claims) Finish() { c.doneW.Add(1) }

// Stop says the helper stopped: the chunk it took last is not copied, and
// it takes no more.
func (c *Claims) Stop() { c.doneW.Or(stopBit) }
