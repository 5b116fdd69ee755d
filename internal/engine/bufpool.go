package engine

import (
	"math/bits"
	"sync"
)

// Eager payloads that arrive before their receive is posted are held in
// buffers from size-classed pools (powers of two up to EagerLimit), so a
// steady stream of small unexpected messages allocates nothing.

const minClass = 6 // 64 bytes

var bufPools [EagerLog - minClass + 1]sync.Pool

// sliceHeads holds the *[]byte boxes the buffers travel in, emptied, so
// that putting a buffer back allocates no box.
var sliceHeads sync.Pool

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
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		b := (*p)[:n]
		*p = nil
		sliceHeads.Put(p)
		return b
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
	p, ok := sliceHeads.Get().(*[]byte)
	if !ok {
		p = new([]byte)
	}
	*p = b[:0]
	bufPools[c].Put(p)
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
