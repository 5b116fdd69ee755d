package engine

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Eager payloads that arrive before their receive is posted are held in
// buffers from size-classed pools (powers of two up to EagerLimit), so a
// steady stream of small unexpected messages allocates nothing.

const minClass = 6 // 64 bytes

// bufPools holds, per class, the first bytes of free buffers: a pointer
// fits in an interface without allocating, and the class gives the
// capacity, so neither getting nor putting a buffer allocates.
var bufPools [EagerLog - minClass + 1]sync.Pool

func classOf(n int) int {
	if n <= 1<<minClass {
		return 0
	}
	return bits.Len(uint(n-1)) - minClass
}

// getBuf returns a buffer of length n. Buffers over EagerLimit (self-sends
// of large messages) come from the heap.
func getBuf(n int) []byte {
	if n > EagerLimit {
		return make([]byte, n)
	}
	c := classOf(n)
	if p, ok := bufPools[c].Get().(*byte); ok {
		return unsafe.Slice(p, 1<<(c+minClass))[:n]
	}
	return make([]byte, n, 1<<(c+minClass))
}

// putBuf returns a buffer from getBuf.
func putBuf(b []byte) {
	if cap(b) > EagerLimit || cap(b) == 0 {
		return
	}
	c := classOf(cap(b))
	if cap(b) != 1<<(c+minClass) {
		return
	}
	bufPools[c].Put(unsafe.SliceData(b[:cap(b)]))
}

// Unexpected messages come from a pool too: one is taken when a message
// arrives before its receive, and given back when a receive has taken it.
var messagePool = sync.Pool{New: func() any { return new(message) }}

// newMessage returns a message holding m's fields.
func newMessage(m message) *message {
	p := messagePool.Get().(*message)
	*p = m
	return p
}

// freeMessage gives m back; nothing may use it afterwards.
func freeMessage(m *message) {
	*m = message{}
	messagePool.Put(m)
}

// GetBuf returns a buffer of length n from the engine's pools, for a link
// that must keep a copy of a payload (PutBuf it when done).
func GetBuf(n int) []byte { return getBuf(n) }

// PutBuf returns a buffer from GetBuf; nil is ignored.
func PutBuf(b []byte) { putBuf(b) }
