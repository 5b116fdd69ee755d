package cuda

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

// Elem is the constraint on element types of device and pinned memory:
// Go's integer, floating-point and complex types and types defined on them
// (such as mp.Float16, a uint16).
type Elem interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 |
		~int | ~uint | ~uintptr | ~float32 | ~float64 | ~complex64 | ~complex128
}

// Slice is a run of n elements of type T in one device's memory. The CPU
// cannot read or write it: data moves with the Copy functions, and kernels
// and NCCL take its device pointer ([Slice.Ptr]).
//
// A Slice is a small value (pointer, length, device), copied freely; all
// copies denote the same memory. The zero Slice is an empty slice on
// device 0 and needs no Free.
type Slice[T Elem] struct {
	ptr uintptr // CUdeviceptr of the first element; 0 for an allocation of 0 elements
	n   int64
	dev Device
}

// devicePtr lets Launch take any Slice[T] as a kernel argument.
func (s Slice[T]) devicePtr() uintptr { return s.ptr }

// devicePointer is implemented by every Slice[T].
type devicePointer interface{ devicePtr() uintptr }

// Alloc allocates n elements of device memory on device d (cuMemAlloc).
// The memory is not initialized; see [Memset]. n == 0 is valid: the Slice
// is empty, Ptr() is 0 and nothing is allocated. It blocks the CPU only
// for the allocation, not for work queued on the device.
//
// The memory is freed only by [Slice.Free]: the garbage collector does not
// know about it.
func Alloc[T Elem](d Device, n int64) (Slice[T], error) {
	const op = "Alloc"
	size := elemSize[T]()
	if n < 0 {
		return Slice[T]{}, errInvalid(op, "negative length %d", n)
	}
	if n > math.MaxInt64/size {
		return Slice[T]{}, errInvalid(op, "length %d is too large", n)
	}
	l, err := getLib()
	if err != nil {
		return Slice[T]{}, err
	}
	if n == 0 {
		if _, err := l.device(d, op); err != nil {
			return Slice[T]{}, err
		}
		return Slice[T]{dev: d}, nil
	}
	ctx, err := l.context(d, op)
	if err != nil {
		return Slice[T]{}, err
	}
	p, err := l.drv.memAlloc(ctx, shareableSize(n*size))
	if err != nil {
		return Slice[T]{}, err
	}
	l.mem.addDevice(p, n*size)
	return Slice[T]{ptr: p, n: n, dev: d}, nil
}

// IPCGranularity is the size of the blocks the CUDA driver shares through
// IPC: an allocation smaller than a whole number of them may be carved out
// of a block it shares with other allocations, and exporting it exports
// the whole block (so another process could read its neighbours, and a
// process that has opened one allocation of a block cannot open another:
// CUDA_ERROR_ALREADY_MAPPED).
const IPCGranularity = 2 << 20

// sharing counts the callers of ShareAllocations that have not ended.
var sharing atomic.Int32

// ShareAllocations makes [Alloc] round every allocation up to a whole
// number of [IPCGranularity] bytes, so that each can be exported
// ([ExportIPC]) alone, until end is called (calls nest: the rounding
// lasts while any has not ended). The Slice keeps the length asked for.
// A transport that passes device memory to other processes calls it while
// it may; allocations made before keep their size.
func ShareAllocations() (end func()) {
	sharing.Add(1)
	var once sync.Once
	return func() { once.Do(func() { sharing.Add(-1) }) }
}

// shareableSize is the size Alloc asks the driver for, for n bytes.
func shareableSize(n int64) int64 {
	if sharing.Load() == 0 || n > math.MaxInt64-IPCGranularity {
		return n
	}
	return (n + IPCGranularity - 1) / IPCGranularity * IPCGranularity
}

// Free releases memory that [Alloc] returned (cuMemFree). Work queued on
// a [Stream] that uses the memory must have finished first (synchronize
// the stream); the call itself may block the CPU until the device is idle.
// Freeing an empty Slice does nothing. Freeing anything but a whole
// allocation (a sub-slice), or one twice, is an error matching
// ErrInvalid: the package keeps a table of live allocations.
func (s Slice[T]) Free() error {
	const op = "Slice.Free"
	if s.ptr == 0 && s.n == 0 {
		return nil
	}
	l, ctx, err := ctxFor(s.dev, op)
	if err != nil {
		return err
	}
	bytes := s.n * elemSize[T]()
	if l.mem.isOpened(s.ptr) {
		return errInvalid(op, "%#x is another process's memory, opened with OpenIPC: close it with CloseIPC", s.ptr)
	}
	ok, exported := l.mem.takeDevice(s.ptr, bytes)
	if !ok {
		return errInvalid(op, "%#x (%d bytes) is not a live allocation: freed twice, or a sub-slice", s.ptr, bytes)
	}
	if err := l.drv.memFree(ctx, s.ptr); err != nil {
		l.mem.addDevice(s.ptr, bytes)
		return err
	}
	if exported != 0 {
		freed(exported)
	}
	return nil
}

// Len returns the number of elements.
func (s Slice[T]) Len() int64 { return s.n }

// Ptr returns the device address of the first element (a CUdeviceptr), to
// pass to C code or kernels; 0 for an empty allocation.
func (s Slice[T]) Ptr() uintptr { return s.ptr }

// Device returns the device that holds the memory.
func (s Slice[T]) Device() Device { return s.dev }

// Sub returns the elements [from, to) of s as a Slice sharing its memory,
// like s[from:to] on a Go slice. Bounds outside 0 <= from <= to <= Len()
// are an error matching ErrInvalid. A sub-slice must not be
// freed; free the Slice that Alloc returned.
func (s Slice[T]) Sub(from, to int64) (Slice[T], error) {
	if from < 0 || to < from || to > s.n {
		return Slice[T]{}, errInvalid("Slice.Sub", "bounds [%d:%d] out of range for length %d", from, to, s.n)
	}
	p := s.ptr
	if p != 0 {
		p += uintptr(from * elemSize[T]())
	}
	return Slice[T]{ptr: p, n: to - from, dev: s.dev}, nil
}

// CopyToDevice copies src into dst (cuMemcpyHtoD). Their lengths must be
// equal. It blocks the CPU until the copy is complete: src may be reused,
// and work queued afterwards on any stream sees the data. It runs on the
// device's legacy default stream, so it does not wait for work already
// queued on a [Stream] (synchronize that stream first if the work uses
// dst).
func CopyToDevice[T Elem](dst Slice[T], src []T) error {
	const op = "CopyToDevice"
	if int64(len(src)) != dst.n {
		return errInvalid(op, "destination has %d elements, source %d", dst.n, len(src))
	}
	if dst.n == 0 {
		return nil
	}
	l, ctx, err := ctxFor(dst.dev, op)
	if err != nil {
		return err
	}
	return l.drv.memcpyHtoD(ctx, dst.ptr, asBytes(src))
}

// CopyToHost copies src into dst (cuMemcpyDtoH). Their lengths must be
// equal. It blocks the CPU until the copy is complete: dst holds the data
// when it returns. Like [CopyToDevice], it does not wait for work already
// queued on a [Stream].
func CopyToHost[T Elem](dst []T, src Slice[T]) error {
	const op = "CopyToHost"
	if int64(len(dst)) != src.n {
		return errInvalid(op, "destination has %d elements, source %d", len(dst), src.n)
	}
	if src.n == 0 {
		return nil
	}
	l, ctx, err := ctxFor(src.dev, op)
	if err != nil {
		return err
	}
	return l.drv.memcpyDtoH(ctx, asBytes(dst), src.ptr)
}

// CopyDevice copies src into dst, on one device (cuMemcpyDtoD) or between
// two (cuMemcpyPeerAsync, which uses NVLink or PCIe peer access where
// available and stages through the host otherwise). Their lengths must be
// equal. It blocks the CPU until the copy is complete, so both may be
// reused, and work queued afterwards sees the data, when it returns. It
// runs on the legacy default stream of dst's device and does not wait for
// work already queued on a [Stream].
func CopyDevice[T Elem](dst, src Slice[T]) error {
	const op = "CopyDevice"
	if dst.n != src.n {
		return errInvalid(op, "destination has %d elements, source %d", dst.n, src.n)
	}
	if dst.n == 0 {
		return nil
	}
	l, dctx, err := ctxFor(dst.dev, op)
	if err != nil {
		return err
	}
	bytes := dst.n * elemSize[T]()
	if dst.dev == src.dev {
		return l.drv.memcpyDtoD(dctx, dst.ptr, src.ptr, bytes)
	}
	sctx, err := l.context(src.dev, op)
	if err != nil {
		return err
	}
	return l.drv.memcpyPeer(dctx, dst.ptr, sctx, src.ptr, bytes)
}

// Memset sets every byte of s to byteValue (cuMemsetD8): 0 zeroes any
// element type. It blocks the CPU until the memory is set; like the
// blocking copies it does not wait for work already queued on a [Stream].
func Memset[T Elem](s Slice[T], byteValue uint8) error {
	const op = "Memset"
	if s.n == 0 {
		return nil
	}
	l, ctx, err := ctxFor(s.dev, op)
	if err != nil {
		return err
	}
	return l.drv.memsetD8(ctx, s.ptr, byteValue, s.n*elemSize[T]())
}

// CopyToDeviceAsync queues a copy of src into dst on stream s
// (cuMemcpyHtoDAsync): the GPU runs it after the work queued on s before
// it. Lengths must be equal, and s must be on dst's device.
//
// When src lies in page-locked memory from [HostAlloc], the call returns
// at once without waiting, and src must not be changed or freed until the
// copy has run (s.Synchronize, or an [Event] recorded after it has fired).
// Any other src (ordinary Go memory) cannot be read by the GPU
// asynchronously, nor kept by C past the call, so the call waits until s
// has finished the copy (and therefore the work queued before it): src may
// be reused when it returns. Use pinned memory for copies that overlap
// with computation.
func CopyToDeviceAsync[T Elem](dst Slice[T], src []T, s *Stream) error {
	const op = "CopyToDeviceAsync"
	if int64(len(src)) != dst.n {
		return errInvalid(op, "destination has %d elements, source %d", dst.n, len(src))
	}
	h, err := s.use(op, dst.dev)
	if err != nil || dst.n == 0 {
		return err
	}
	b := asBytes(src)
	if !s.l.mem.pinned(hostAddr(b), int64(len(b))) {
		return s.bounceIn(dst.ptr, b, h)
	}
	return s.l.drv.memcpyHtoDAsync(s.ctx, dst.ptr, b, h, false)
}

// CopyToHostAsync queues a copy of src into dst on stream s
// (cuMemcpyDtoHAsync). Lengths must be equal, and s must be on src's
// device.
//
// When dst lies in page-locked memory from [HostAlloc], the call returns
// at once; dst holds the data only once the copy has run (s.Synchronize,
// or an [Event] recorded after it has fired), and must not be read,
// changed or freed before. Any other dst (ordinary Go memory) makes the
// call wait until s has finished the copy, so dst holds the data when it
// returns.
func CopyToHostAsync[T Elem](dst []T, src Slice[T], s *Stream) error {
	const op = "CopyToHostAsync"
	if int64(len(dst)) != src.n {
		return errInvalid(op, "destination has %d elements, source %d", len(dst), src.n)
	}
	h, err := s.use(op, src.dev)
	if err != nil || src.n == 0 {
		return err
	}
	b := asBytes(dst)
	if !s.l.mem.pinned(hostAddr(b), int64(len(b))) {
		return s.bounceOut(b, src.ptr, h)
	}
	return s.l.drv.memcpyDtoHAsync(s.ctx, b, src.ptr, h, false)
}

// A copy between a stream and ordinary (pageable) Go memory goes through
// page-locked bounce buffers of this package's own, a chunk at a time:
// the chunk's copy is queued on the stream, the stream waited for, and
// the chunk copied by the CPU. Handing the driver pageable memory instead
// (cuMemcpyDtoHAsync of it waits for the stream inside the driver) held
// up other threads' calls into the driver while the stream waited,
// measured on an H200: a stream waiting for work that another thread was
// to queue (the nccl backend's copies for stream-ordered messages between
// ranks of one GPU) never got it, and both hung.

// bounceSize is the size of a bounce buffer.
const bounceSize = 4 << 20

// bouncePool is the free bounce buffers of a loaded driver (page-locked,
// kept for the process's life, not counted by Live).
type bouncePool struct {
	mu   sync.Mutex
	free [][]byte
}

// getBounce returns a bounce buffer, allocated if none is free.
func (s *Stream) getBounce() ([]byte, error) {
	p := &s.l.bounces
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	_, ctx, err := hostCtx("bounce buffer")
	if err != nil {
		return nil, err
	}
	return s.l.drv.memHostAlloc(ctx, bounceSize, cuMemHostAllocPortable|cuMemHostAllocDeviceMap)
}

func (s *Stream) putBounce(b []byte) {
	p := &s.l.bounces
	p.mu.Lock()
	p.free = append(p.free, b)
	p.mu.Unlock()
}

// bounceOut copies device memory at src into pageable dst through a
// bounce buffer, on stream h, and returns when dst holds it.
func (s *Stream) bounceOut(dst []byte, src, h uintptr) error {
	b, err := s.getBounce()
	if err != nil {
		return err
	}
	defer s.putBounce(b)
	for off := 0; off < len(dst); off += bounceSize {
		n := min(bounceSize, len(dst)-off)
		if err := s.l.drv.memcpyDtoHAsync(s.ctx, b[:n], src+uintptr(off), h, false); err != nil {
			return err
		}
		if err := s.l.drv.streamSynchronize(s.ctx, h); err != nil {
			return err
		}
		copy(dst[off:], b[:n])
	}
	return nil
}

// bounceIn copies pageable src into device memory at dst through a bounce
// buffer, on stream h, and returns when the copy is done.
func (s *Stream) bounceIn(dst uintptr, src []byte, h uintptr) error {
	b, err := s.getBounce()
	if err != nil {
		return err
	}
	defer s.putBounce(b)
	for off := 0; off < len(src); off += bounceSize {
		n := copy(b, src[off:])
		if err := s.l.drv.memcpyHtoDAsync(s.ctx, dst+uintptr(off), b[:n], h, false); err != nil {
			return err
		}
		if err := s.l.drv.streamSynchronize(s.ctx, h); err != nil {
			return err
		}
	}
	return nil
}

// CopyDeviceAsync queues a copy of src into dst on stream s, on one device
// (cuMemcpyDtoDAsync) or between two (cuMemcpyPeerAsync). Lengths must be
// equal, and s must be on dst's or src's device. It returns at once;
// neither buffer may be freed, nor dst read, until the copy has run.
func CopyDeviceAsync[T Elem](dst, src Slice[T], s *Stream) error {
	const op = "CopyDeviceAsync"
	if dst.n != src.n {
		return errInvalid(op, "destination has %d elements, source %d", dst.n, src.n)
	}
	dev := dst.dev
	if s != nil && s.dev == src.dev {
		dev = src.dev
	}
	h, err := s.use(op, dev)
	if err != nil || dst.n == 0 {
		return err
	}
	bytes := dst.n * elemSize[T]()
	if dst.dev == src.dev {
		return s.l.drv.memcpyDtoDAsync(s.ctx, dst.ptr, src.ptr, bytes, h)
	}
	dctx, err := s.l.context(dst.dev, op)
	if err != nil {
		return err
	}
	sctx, err := s.l.context(src.dev, op)
	if err != nil {
		return err
	}
	return s.l.drv.memcpyPeerAsync(s.ctx, dctx, dst.ptr, sctx, src.ptr, bytes, h)
}

// MemsetAsync queues setting every byte of dst to byteValue on stream s
// (cuMemsetD8Async); s must be on dst's device. It returns at once.
func MemsetAsync[T Elem](dst Slice[T], byteValue uint8, s *Stream) error {
	const op = "MemsetAsync"
	h, err := s.use(op, dst.dev)
	if err != nil || dst.n == 0 {
		return err
	}
	return s.l.drv.memsetD8Async(s.ctx, dst.ptr, byteValue, dst.n*elemSize[T](), h)
}

// Pinned is page-locked ("pinned") host memory (cuMemHostAlloc): memory
// the CPU reads and writes as an ordinary []T, and that the GPU can copy
// to and from asynchronously, at full speed. It is portable: usable with
// every device's streams, and mapped: kernels and stream memory operations
// reach it at [Pinned.DevicePtr].
//
// The memory is C memory: the garbage collector neither moves nor frees
// it. Free it with [Pinned.Free] once no copy still uses it; the []T from
// [Pinned.Slice] must not be used after that.
type Pinned[T Elem] struct {
	s []T
}

// HostAlloc allocates n elements of page-locked host memory. n == 0 is
// valid (nothing is allocated). The memory is not initialized. Page-locked
// memory is a scarce system resource: allocate staging buffers once and
// reuse them. It blocks the CPU for the allocation, which is slow
// (milliseconds for large sizes).
func HostAlloc[T Elem](n int64) (Pinned[T], error) {
	const op = "HostAlloc"
	size := elemSize[T]()
	if n < 0 {
		return Pinned[T]{}, errInvalid(op, "negative length %d", n)
	}
	if n > math.MaxInt64/size || n > math.MaxInt {
		return Pinned[T]{}, errInvalid(op, "length %d is too large", n)
	}
	l, ctx, err := hostCtx(op)
	if err != nil || n == 0 {
		return Pinned[T]{}, err
	}
	b, err := l.drv.memHostAlloc(ctx, n*size, cuMemHostAllocPortable|cuMemHostAllocDeviceMap)
	if err != nil {
		return Pinned[T]{}, err
	}
	l.mem.addHost(hostAddr(b), int64(len(b)))
	return Pinned[T]{s: asElems[T](b, n)}, nil
}

// hostCtx is the context page-locked memory is allocated in: device 0's
// (the memory is portable, so any device can use it).
func hostCtx(op string) (*lib, uintptr, error) {
	l, err := getLib()
	if err != nil {
		return nil, 0, err
	}
	if len(l.devices) == 0 {
		return nil, 0, errInvalid(op, "no CUDA device")
	}
	ctx, err := l.context(0, op)
	if err != nil {
		return nil, 0, err
	}
	return l, ctx, nil
}

// Slice returns the memory as a []T of length n (nil for n == 0), for the
// CPU to read and write and to pass to the Async copies.
func (p Pinned[T]) Slice() []T { return p.s }

// Len returns the number of elements.
func (p Pinned[T]) Len() int64 { return int64(len(p.s)) }

// DevicePtr returns the address at which the GPU reaches the memory: what
// a kernel, or a stream memory operation ([Stream.WriteValue64],
// [Stream.WaitValue64]), is given to read or write it
// (cuMemHostGetDevicePointer; with unified addressing it is the host
// address). 0 for an empty Pinned.
func (p Pinned[T]) DevicePtr() (uintptr, error) {
	const op = "Pinned.DevicePtr"
	if len(p.s) == 0 {
		return 0, nil
	}
	l, ctx, err := hostCtx(op)
	if err != nil {
		return 0, err
	}
	b := asBytes(p.s)
	if !l.mem.pinned(hostAddr(b), int64(len(b))) {
		return 0, errInvalid(op, "%#x (%d bytes) is not live page-locked memory from HostAlloc", hostAddr(b), len(b))
	}
	return l.drv.memHostDevicePointer(ctx, b)
}

// Free releases the memory (cuMemFreeHost). No copy may still be using it:
// synchronize the streams that do first. Freeing an empty Pinned does
// nothing; freeing one twice is an error matching ErrInvalid.
func (p Pinned[T]) Free() error {
	const op = "Pinned.Free"
	if len(p.s) == 0 {
		return nil
	}
	l, ctx, err := hostCtx(op)
	if err != nil {
		return err
	}
	b := asBytes(p.s)
	if !l.mem.takeHost(hostAddr(b), int64(len(b))) {
		return errInvalid(op, "%#x (%d bytes) is not live page-locked memory from HostAlloc: freed twice?", hostAddr(b), len(b))
	}
	if err := l.drv.memFreeHost(ctx, b); err != nil {
		l.mem.addHost(hostAddr(b), int64(len(b)))
		return err
	}
	return nil
}

// Live returns how many allocations made through this package are live:
// device memory from [Alloc] not yet freed, and page-locked memory from
// [HostAlloc] not yet freed. A program, or its tests, checks with it that
// it freed all it allocated. It is 0, 0 before the driver is loaded.
func Live() (device, host int) {
	s := current.Load()
	if s == nil || s.l == nil {
		return 0, 0
	}
	return s.l.mem.live()
}

// memTable records the live allocations: device memory, so that Free
// refuses sub-slices and double frees, and page-locked memory, so that the
// Async copies know whether the driver may read a host buffer after they
// return.
type memTable struct {
	mu     sync.RWMutex
	device map[uintptr]int64  // start → bytes
	ids    map[uintptr]uint64 // start → the allocation's number (ExportIPC), never reused
	nextID uint64
	export map[uintptr]IPCHandle // start → its handle, once ExportIPC asked for it
	opened map[uintptr]int64     // other processes' memory, mapped by OpenIPC: start → bytes
	host   []span                // sorted by start; never overlapping
	// recent is the region ExportIPC found last (Offset 0), at start
	// recentAt: the next export from the same allocation, while its
	// number stays live, needs no call to the driver (recentExport).
	recentAt uintptr
	recent   IPCRegion
}

type span struct {
	start uintptr
	bytes int64
}

// byStart orders spans by their start, for binary searches by address.
func byStart(s span, p uintptr) int { return cmp.Compare(s.start, p) }

func (m *memTable) addDevice(p uintptr, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.device == nil {
		m.device = make(map[uintptr]int64)
		m.ids = make(map[uintptr]uint64)
	}
	m.device[p] = bytes
	m.nextID++
	m.ids[p] = m.nextID
}

// takeDevice removes the allocation [p, p+bytes) and reports whether it
// was live, and its number if ExportIPC had exported it (else 0).
func (m *memTable) takeDevice(p uintptr, bytes int64) (ok bool, exported uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, live := m.device[p]; !live || b != bytes {
		return false, 0
	}
	if _, ok := m.export[p]; ok {
		exported = m.ids[p]
	}
	delete(m.device, p)
	delete(m.ids, p)
	delete(m.export, p)
	return true, exported
}

func (m *memTable) addHost(p uintptr, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, _ := slices.BinarySearchFunc(m.host, p, byStart)
	m.host = slices.Insert(m.host, i, span{p, bytes})
}

func (m *memTable) takeHost(p uintptr, bytes int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, ok := m.findHost(p)
	if !ok || m.host[i].start != p || m.host[i].bytes != bytes {
		return false
	}
	m.host = slices.Delete(m.host, i, i+1)
	return true
}

// findHost returns the index of the span that contains address p.
func (m *memTable) findHost(p uintptr) (int, bool) {
	// The last span starting at or before p.
	i, found := slices.BinarySearchFunc(m.host, p, byStart)
	if !found {
		i--
	}
	if i < 0 || p-m.host[i].start >= uintptr(m.host[i].bytes) {
		return 0, false
	}
	return i, true
}

// pinned reports whether [p, p+bytes) lies inside one live page-locked
// allocation.
func (m *memTable) pinned(p uintptr, bytes int64) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	i, ok := m.findHost(p)
	return ok && uintptr(bytes) <= uintptr(m.host[i].bytes)-(p-m.host[i].start)
}

// live returns the number of live device and page-locked allocations.
func (m *memTable) live() (device, host int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.device), len(m.host)
}

// SliceHeader is the memory layout shared by every Slice[T], whatever T:
// package mp reads a device buffer's address, length and device through it
// without converting the Slice to an interface (which would allocate).
// TestSliceHeaderLayout keeps the two in step.
type SliceHeader struct {
	Ptr    uintptr // CUdeviceptr of the first element
	Len    int64   // elements
	Device Device
}

// ByteView returns a Slice[uint8] over n bytes of device memory at ptr on
// d: how a transport that receives a raw buffer descriptor uses this
// package's copies. It allocates nothing and owns nothing; do not Free it.
func ByteView(ptr uintptr, n int64, d Device) Slice[uint8] {
	return Slice[uint8]{ptr: ptr, n: n, dev: d}
}
