package mp

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// Scratch memory of the collectives over point-to-point messages: host
// memory a call borrows and gives back, from pools of power-of-two sizes
// shared by every communicator of the process, so that a steady stream of
// collectives allocates nothing. (Device memory, for the collectives of
// device buffers on the device, is each communicator's own:
// colldevice.go.)

const (
	minScratchLog = 6  // 64 bytes
	maxScratchLog = 30 // 1 GiB; larger scratch comes from the heap
)

var scratchPools [maxScratchLog - minScratchLog + 1]sync.Pool

// A sync.Pool is emptied by the garbage collector, which then makes a
// large collective allocate its scratch again (measured: an 8 MiB buffer
// every 70 calls of a 16 MiB Allreduce, 42 KB per call). So the classes
// from keptFromLog to keptToLog keep buffers outside the pools, which a
// collector leaves alone: up to keptBytes per class (at least one buffer:
// ranks that are goroutines of one process each hold one at a time), held
// only in the sizes a program uses.
const (
	keptFromLog = 20 // 1 MiB
	keptToLog   = 26 // 64 MiB
	keptBytes   = 16 << 20
)

var kept struct {
	sync.Mutex
	s [keptToLog - keptFromLog + 1][]*scratch
}

// keptIndex is class k's index in kept.s, or -1.
func keptIndex(k int) int {
	i := k + minScratchLog - keptFromLog
	if i < 0 || i >= len(kept.s) {
		return -1
	}
	return i
}

// takeKept returns a kept buffer of class k, or nil.
func takeKept(k int) *scratch {
	i := keptIndex(k)
	if i < 0 {
		return nil
	}
	kept.Lock()
	defer kept.Unlock()
	l := kept.s[i]
	if len(l) == 0 {
		return nil
	}
	s := l[len(l)-1]
	l[len(l)-1] = nil
	kept.s[i] = l[:len(l)-1]
	return s
}

// keep holds s among its class's kept buffers if they have room, and
// reports whether it did.
func keep(s *scratch) bool {
	i := keptIndex(s.class)
	if i < 0 {
		return false
	}
	most := max(1, keptBytes>>(i+keptFromLog))
	kept.Lock()
	defer kept.Unlock()
	if len(kept.s[i]) >= most {
		return false
	}
	kept.s[i] = append(kept.s[i], s)
	return true
}

// scratch is one borrowed piece of memory, 8-byte aligned (for every
// element type): host memory from the pools, or device memory of a
// communicator's (dev set; colldevice.go).
type scratch struct {
	mem   []uint64
	class int // its pool (or device size class), or -1 when it is not pooled
	dev   *devColl
	dmem  cuda.Slice[byte]
}

// getScratch borrows at least n bytes.
func getScratch(n int64) *scratch {
	if n > 1<<maxScratchLog {
		return &scratch{mem: make([]uint64, (n+7)/8), class: -1}
	}
	k := 0
	if n > 1<<minScratchLog {
		k = bits.Len64(uint64(n-1)) - minScratchLog
	}
	if s := takeKept(k); s != nil {
		return s
	}
	if s, ok := scratchPools[k].Get().(*scratch); ok {
		return s
	}
	return &scratch{mem: make([]uint64, (1<<(k+minScratchLog))/8), class: k}
}

// release gives s back when err is nil. After a failure a transport may
// still hold a receive into it, so host memory is left to the garbage
// collector, and device memory to the communicator's Close.
func (s *scratch) release(err error) {
	if s.dev != nil {
		s.dev.put(s, err)
		return
	}
	if err == nil && s.class >= 0 && !keep(s) {
		scratchPools[s.class].Put(s)
	}
}

// buf is count elements of type t of s, from byte offset off (a multiple
// of 8), in s's memory.
func (s *scratch) buf(off int64, t backend.DType, count int64) backend.Buffer {
	if s.dev != nil {
		return devBuf(s.dmem, off, t, count)
	}
	b := backend.Buffer{Count: count, Type: t, Mem: backend.Host}
	if count > 0 {
		b.Ptr = unsafe.Add(unsafe.Pointer(unsafe.SliceData(s.mem)), off)
	}
	return b
}

// roundUp8 is n rounded up to a multiple of 8: where the next part of a
// scratch may start.
func roundUp8(n int64) int64 { return (n + 7) &^ 7 }

// requests is a list of transport requests a collective posts at once,
// pooled like scratch; want is, beside each, the count a receive must
// fill (-1 for a send), where a collective records it (post).
type requests struct {
	list []backend.Request
	want []int64
}

var requestPool = sync.Pool{New: func() any { return new(requests) }}

// getRequests borrows an empty list.
func getRequests() *requests { return requestPool.Get().(*requests) }

// release clears the list (its requests were released) and gives it back.
func (q *requests) release() {
	clear(q.list)
	q.list, q.want = q.list[:0], q.want[:0]
	requestPool.Put(q)
}
