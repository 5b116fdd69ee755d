package nccl

import (
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// stageAlign is the alignment of each operation's region in staging
// memory.
const stageAlign = 256

// minSlab is the smallest staging slab allocated.
const minSlab = 1 << 20

// slab is staging memory: device memory and as much page-locked host
// memory.
type slab struct {
	dev  cuda.Slice[byte]
	host cuda.Pinned[byte]
}

func (s *slab) size() int64 { return s.dev.Len() }

// copyBack is a staged receive: n bytes at off in the slab go to dst.
type copyBack struct {
	off, n int64
	dst    unsafe.Pointer
}

func alignUp(n int64) int64 { return (n + stageAlign - 1) &^ (stageAlign - 1) }

// getStaged takes a per-group record from the free list.
func (d *device) getStaged() *staged {
	if n := len(d.staged); n > 0 {
		st := d.staged[n-1]
		d.staged = d.staged[:n-1]
		return st
	}
	return new(staged)
}

// getEvent takes an event from the free list, or makes one.
func (d *device) getEvent() (*cuda.Event, error) {
	if n := len(d.events); n > 0 {
		e := d.events[n-1]
		d.events = d.events[:n-1]
		return e, nil
	}
	e, err := cuda.NewEventNoTiming(d.dev)
	if err != nil {
		return nil, fmt.Errorf("nccl: creating an event: %w", err)
	}
	d.allEvents = append(d.allEvents, e)
	return e, nil
}

// getSlab returns the smallest free slab of at least need bytes, or
// allocates one of the next power of two (at least minSlab).
func (d *device) getSlab(need int64) (*slab, error) {
	best := -1
	for i, s := range d.slabs {
		if s.size() >= need && (best < 0 || s.size() < d.slabs[best].size()) {
			best = i
		}
	}
	if best >= 0 {
		s := d.slabs[best]
		d.slabs[best] = d.slabs[len(d.slabs)-1]
		d.slabs[len(d.slabs)-1] = nil
		d.slabs = d.slabs[:len(d.slabs)-1]
		return s, nil
	}
	size := int64(minSlab)
	if need > size {
		size = int64(1) << bits.Len64(uint64(need-1))
	}
	dm, err := cuda.Alloc[byte](d.dev, size)
	if err != nil {
		return nil, fmt.Errorf("nccl: allocating %d bytes of device memory to stage host buffers: %w", size, err)
	}
	hm, err := cuda.HostAlloc[byte](size)
	if err != nil {
		dm.Free()
		return nil, fmt.Errorf("nccl: allocating %d bytes of page-locked memory to stage host buffers: %w", size, err)
	}
	s := &slab{dev: dm, host: hm}
	d.allSlabs = append(d.allSlabs, s)
	return s, nil
}

// copyBytes implements engine.
func (d *device) copyBytes(dst, src unsafe.Pointer, n int64) error {
	return d.hooks.copyBytes(dst, src, n)
}

// allocTemp implements engine: device memory in power-of-two sizes (at
// least stageAlign), kept for reuse until close.
func (d *device) allocTemp(n int64) (*tempMem, error) {
	size := int64(stageAlign)
	if n > size {
		size = int64(1) << bits.Len64(uint64(n-1))
	}
	if l := d.temps[size]; len(l) > 0 {
		t := l[len(l)-1]
		d.temps[size] = l[:len(l)-1]
		return t, nil
	}
	m, err := cuda.Alloc[byte](d.dev, size)
	if err != nil {
		return nil, fmt.Errorf("nccl: allocating %d bytes of device memory for a message no receive has matched yet: %w", size, err)
	}
	d.allTemps = append(d.allTemps, m)
	return &tempMem{addr: m.Ptr(), res: size}, nil
}

// copyTemp implements engine.
func (d *device) copyTemp(dst backend.Buffer, t *tempMem, n int64) error {
	return d.hooks.copyFrom(dst.Ptr, t.addr, n)
}

// freeTemp implements engine.
func (d *device) freeTemp(t *tempMem) {
	if d.temps == nil {
		d.temps = make(map[int64][]*tempMem)
	}
	size := t.res.(int64)
	d.temps[size] = append(d.temps[size], t)
}
