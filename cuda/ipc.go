package cuda

import (
	"math"
	"sync"
)

// IPCHandle names an allocation of device memory to the other processes
// of this host (cuIpcGetMemHandle): 64 opaque bytes, which the exporting
// process sends as they are (over a socket, a file, a courier message) and
// another process opens with [OpenIPC] as a mapping of its own, on the
// same GPU or, where peer access allows, another. It holds no secret
// beyond the right to map that memory: send it only to processes meant to
// share it.
type IPCHandle [64]byte

// IPCHandle returns the handle of s, which must be a whole allocation of
// [Alloc] (not a sub-slice: send its offset beside the handle), for
// another process to open with [OpenIPC]. The handle stays valid while
// the allocation lives; freeing it while another process has it open
// leaves that process's mapping to the driver (the memory is not reused
// before it is closed there). An empty Slice, a sub-slice or memory
// opened from another process is an error matching ErrInvalid; a driver
// without IPC (or a device that does not support it) one matching
// ErrNotSupported.
func (s Slice[T]) IPCHandle() (IPCHandle, error) {
	const op = "Slice.IPCHandle"
	if s.n == 0 {
		return IPCHandle{}, errInvalid(op, "an empty Slice has no allocation")
	}
	l, ctx, err := ctxFor(s.dev, op)
	if err != nil {
		return IPCHandle{}, err
	}
	bytes := s.n * elemSize[T]()
	switch {
	case l.mem.isOpened(s.ptr):
		return IPCHandle{}, errInvalid(op, "%#x is another process's memory, opened with OpenIPC: only its owner exports it", s.ptr)
	case !l.mem.isDevice(s.ptr, bytes):
		return IPCHandle{}, errInvalid(op, "%#x (%d bytes) is not a whole live allocation (a sub-slice, or freed): export the allocation and send the offset", s.ptr, bytes)
	}
	return l.drv.ipcGetMemHandle(ctx, s.ptr)
}

// OpenIPC maps, on device d of this process, the allocation another
// process exported as h, and returns its first n elements (cuIpcOpenMemHandle,
// with peer access enabled lazily when d is not the allocation's device).
// n must not pass the allocation's size (the driver's record of the
// mapping says it): more is an error matching ErrInvalid. Opening costs
// the driver a mapping (of the order of 100 µs): keep the Slice for as
// long as the memory is used, and close it with [Slice.CloseIPC], never
// [Slice.Free]. A handle from this same process, or one the driver does
// not know, is an error; a driver without IPC, one matching
// ErrNotSupported.
func OpenIPC[T Elem](d Device, h IPCHandle, n int64) (Slice[T], error) {
	const op = "OpenIPC"
	size := elemSize[T]()
	if n < 0 || n > math.MaxInt64/size {
		return Slice[T]{}, errInvalid(op, "length %d", n)
	}
	l, ctx, err := ctxFor(d, op)
	if err != nil {
		return Slice[T]{}, err
	}
	p, err := l.drv.ipcOpenMemHandle(ctx, h)
	if err != nil {
		return Slice[T]{}, err
	}
	mapped := int64(-1) // unknown: a driver without cuMemGetAddressRange
	if base, bytes, err := l.drv.memGetAddressRange(ctx, p); err == nil && base == p {
		mapped = bytes
	}
	if mapped >= 0 && n*size > mapped {
		l.drv.ipcCloseMemHandle(ctx, p)
		return Slice[T]{}, errInvalid(op, "%d elements of %d bytes from an allocation of %d bytes", n, size, mapped)
	}
	l.mem.addOpened(p, max(mapped, n*size))
	return Slice[T]{ptr: p, n: n, dev: d}, nil
}

// CloseIPC unmaps memory that [OpenIPC] returned (cuIpcCloseMemHandle):
// the Slice, and every Slice taken from it, must not be used after it;
// work queued on a [Stream] that uses it must have finished. Closing an
// empty Slice does nothing; closing anything else that OpenIPC did not
// return (a sub-slice, memory of this process's own, a Slice closed
// already) is an error matching ErrInvalid.
func (s Slice[T]) CloseIPC() error {
	const op = "Slice.CloseIPC"
	if s.ptr == 0 && s.n == 0 {
		return nil
	}
	l, ctx, err := ctxFor(s.dev, op)
	if err != nil {
		return err
	}
	bytes, ok := l.mem.takeOpened(s.ptr)
	if !ok {
		return errInvalid(op, "%#x is not memory opened with OpenIPC (this process's own, a sub-slice, or closed already)", s.ptr)
	}
	if err := l.drv.ipcCloseMemHandle(ctx, s.ptr); err != nil {
		l.mem.addOpened(s.ptr, bytes)
		return err
	}
	return nil
}

// IPCRegion says where device memory lies for another process to map it:
// the handle of the allocation that holds it, the memory's offset in that
// allocation, the allocation's size, and ID, a number this process gives
// the allocation when [Alloc] makes it and never gives another, even one
// at the same address after a Free. A process that caches the mappings it
// opens keys them by (exporter, ID): a mapping of a freed allocation is
// then never used for the one that took its place.
type IPCRegion struct {
	Handle IPCHandle
	Offset int64
	Size   int64
	ID     uint64
}

// ExportIPC returns the region of the n bytes of device memory at p on d,
// for another process to open with [OpenIPC] (the whole allocation,
// Size bytes) and read or write at Offset. The n bytes must lie in one
// live allocation of [Alloc] on d; anything else (memory this package did
// not allocate, freed memory, a span that crosses an allocation's end,
// another process's memory) is an error matching ErrInvalid. The handle
// is asked of the driver once per allocation and kept until it is freed.
func ExportIPC(d Device, p uintptr, n int64) (IPCRegion, error) {
	const op = "ExportIPC"
	if n < 0 {
		return IPCRegion{}, errInvalid(op, "negative length %d", n)
	}
	l, ctx, err := ctxFor(d, op)
	if err != nil {
		return IPCRegion{}, err
	}
	if r, ok := l.mem.recentExport(p, n); ok {
		return r, nil
	}
	base, size, err := l.drv.memGetAddressRange(ctx, p)
	if err != nil {
		return IPCRegion{}, err
	}
	id, h, known := l.mem.exported(base, size)
	switch {
	case l.mem.isOpened(base):
		return IPCRegion{}, errInvalid(op, "%#x is another process's memory, opened with OpenIPC: only its owner exports it", p)
	case id == 0:
		return IPCRegion{}, errInvalid(op, "%#x is not in a live allocation of Alloc on %v", p, d)
	case int64(p-base)+n > size:
		return IPCRegion{}, errInvalid(op, "%d bytes at %#x pass the end of their allocation (%d bytes at %#x)", n, p, size, base)
	}
	if !known {
		if h, err = l.drv.ipcGetMemHandle(ctx, base); err != nil {
			return IPCRegion{}, err
		}
		l.mem.keepExport(base, h)
	}
	r := IPCRegion{Handle: h, Size: size, ID: id}
	l.mem.keepRecent(base, r)
	r.Offset = int64(p - base)
	return r, nil
}

// recentExport returns the region of the n bytes at p if they lie in the
// allocation ExportIPC found last and that allocation is still live: its
// start still has the allocation's number, which Free takes away before
// the driver frees the memory and Alloc never gives again. A program
// that sends from one buffer again and again exports it without asking
// the driver where the allocation starts (a call through cgo and the
// driver's lookup, on every message of the IPC path).
func (m *memTable) recentExport(p uintptr, n int64) (IPCRegion, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, at := m.recent, m.recentAt
	if r.ID == 0 || p < at || int64(p-at) > r.Size-n || m.ids[at] != r.ID {
		return IPCRegion{}, false
	}
	r.Offset = int64(p - at)
	return r, true
}

// keepRecent records r, the region of the live allocation at p (Offset
// 0), as the one ExportIPC found last.
func (m *memTable) keepRecent(p uintptr, r IPCRegion) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ids[p] == r.ID {
		m.recentAt, m.recent = p, r
	}
}

// exported returns the number of the live allocation [p, p+bytes) (0:
// there is none) and its handle, if ExportIPC asked for one before.
func (m *memTable) exported(p uintptr, bytes int64) (id uint64, h IPCHandle, known bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	// bytes is the driver's size: what Alloc asked for, rounded up when
	// allocations were being shared (ShareAllocations).
	if b, ok := m.device[p]; !ok || b > bytes {
		return 0, IPCHandle{}, false
	}
	h, known = m.export[p]
	return m.ids[p], h, known
}

// keepExport records the handle of the live allocation at p.
func (m *memTable) keepExport(p uintptr, h IPCHandle) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.device[p]; !ok {
		return // freed meanwhile
	}
	if m.export == nil {
		m.export = make(map[uintptr]IPCHandle)
	}
	m.export[p] = h
}

// addOpened records a mapping of another process's memory.
func (m *memTable) addOpened(p uintptr, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opened == nil {
		m.opened = make(map[uintptr]int64)
	}
	m.opened[p] = bytes
}

// takeOpened removes the mapping at p, and reports its size and whether
// it was there.
func (m *memTable) takeOpened(p uintptr) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.opened[p]
	delete(m.opened, p)
	return b, ok
}

// isOpened reports whether p starts a mapping of another process's
// memory.
func (m *memTable) isOpened(p uintptr) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.opened[p]
	return ok
}

// isDevice reports whether [p, p+bytes) is a whole live allocation.
func (m *memTable) isDevice(p uintptr, bytes int64) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	b, ok := m.device[p]
	return ok && b == bytes
}

// freeWatchers are the functions WatchFrees registered, by a number of
// their own.
var freeWatchers struct {
	mu   sync.Mutex
	next int
	m    map[int]func(id uint64)
}

// WatchFrees calls f with the number (IPCRegion.ID) of every exported
// allocation (ExportIPC) that Free frees from now on, once it is freed,
// on the goroutine that called Free, until stop is called. A process that
// has handed the allocation's handle to others tells them with it that
// their mappings hold memory nobody uses any more (a mapping keeps the
// memory of its allocation until it is closed). f must not block.
func WatchFrees(f func(id uint64)) (stop func()) {
	freeWatchers.mu.Lock()
	defer freeWatchers.mu.Unlock()
	if freeWatchers.m == nil {
		freeWatchers.m = make(map[int]func(uint64))
	}
	k := freeWatchers.next
	freeWatchers.next++
	freeWatchers.m[k] = f
	return func() {
		freeWatchers.mu.Lock()
		defer freeWatchers.mu.Unlock()
		delete(freeWatchers.m, k)
	}
}

// freed tells the watchers that exported allocation id is freed.
func freed(id uint64) {
	freeWatchers.mu.Lock()
	fs := make([]func(uint64), 0, len(freeWatchers.m))
	for _, f := range freeWatchers.m {
		fs = append(fs, f)
	}
	freeWatchers.mu.Unlock()
	for _, f := range fs {
		f(id)
	}
}
