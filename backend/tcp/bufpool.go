package tcp

import (
	"math/bits"
	"sync"
)

// Eager payloads that arrive before their receive is posted are held in
// buffers from size-classed pools (powers of two up to eagerLimit), so a
// steady stream of small unexpected messages allocates nothing.

const minClass = 6 // 64 bytes

var bufPools [eagerLog - minClass + 1]sync.Pool

func classOf(n int) int {
	if n <= 1<<minClass {
		return 0
	}
	return bits.Len(uint(n-1)) - minClass
}

// getBuf returns a buffer of length n. Buffers over eagerLimit (self-sends
// of large messages) come from the heap.
func getBuf(n int) []byte {
	if n > eagerLimit {
		return make([]byte, n)
	}
	c := classOf(n)
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<(c+minClass))
}

// putBuf returns a buffer from getBuf.
func putBuf(b []byte) {
	if cap(b) > eagerLimit || cap(b) == 0 {
		return
	}
	c := classOf(cap(b))
	if cap(b) != 1<<(c+minClass) {
		return
	}
	b = b[:0]
	bufPools[c].Put(&b)
}
