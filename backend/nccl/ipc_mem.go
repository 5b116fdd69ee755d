package nccl

import (
	"container/list"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// ipcMem is what the IPC path (ipc.go) needs of the GPU: the CUDA driver
// on a real or fake GPU (cudaIPC), or host memory in the tests of the
// fake engine. Each method may be called from any of the path's
// goroutines, beside the others; those that take a peer are called for
// that peer by one goroutine at a time (the one that holds its copying
// stage).
type ipcMem interface {
	// readOut copies the bytes of buf (host or device memory) into dst.
	readOut(dst []byte, buf backend.Buffer) error
	// export returns where buf's bytes lie for another process to copy
	// them: device memory as it is, host memory staged into device
	// memory first. The source's release is called once the peer has
	// copied them.
	export(buf backend.Buffer) (ipcSource, error)
	// writeIn copies data into buf, a receive from peer; it returns once
	// data may be reused (into device memory, the copy itself may still
	// be queued: a mark after it says when it has run).
	writeIn(peer int, buf backend.Buffer, data []byte) error
	// copyIn copies the first n bytes at the region of peer's memory
	// into buf: queued on peer's copy stream when buf is device memory
	// (a mark after it says when it has run), done at once into host
	// memory. The mapping of the region's allocation stays open for the
	// next message from it (a bounded cache, keyed by the peer and the
	// allocation's number, so a mapping is never used for another
	// allocation at the same address).
	copyIn(peer int, buf backend.Buffer, r cuda.IPCRegion, n int64) error
	// mark sets mark k of peer (0 ≤ k < ipcFlights) after the copies
	// queued for peer so far; marked reports, without waiting, whether
	// they have run; awaitMark waits until they have. A mark is set again
	// only once marked or awaitMark has seen it pass.
	mark(peer, k int) error
	marked(peer, k int) (bool, error)
	awaitMark(peer, k int) error
	// forget closes peer's mapping of its allocation id, if one is open:
	// peer freed it (the copies from it have run).
	forget(peer int, id uint64)
	// newSlot returns a completion word for a request a stream will wait
	// for, and the value its completion writes there; signal writes it
	// (and frees the slot); waitSlot makes s wait until it is written.
	newSlot() (slot int, want uint64, err error)
	signal(slot int, v uint64)
	waitSlot(s *cuda.Stream, slot int, v uint64) error
	// close closes the mappings and frees what the path allocated; the
	// path's goroutines have ended.
	close() error
}

// ipcSource is a send's memory as the peer will copy it.
type ipcSource struct {
	region  cuda.IPCRegion
	release func() // nil: nothing to give back
}

// ipcCacheMax bounds the mappings of other ranks' memory a rank keeps
// open per peer; the least recently used is closed first.
const ipcCacheMax = 64

// ipcSlots is the number of completion words for stream-ordered IPC
// operations in flight at once.
const ipcSlots = 4096

// ipcStageMin is the smallest staging allocation for host send buffers.
const ipcStageMin = 1 << 16

// cudaIPC is ipcMem on the CUDA driver.
type cudaIPC struct {
	dev     cuda.Device
	streams []*cuda.Stream // by peer: the stream its copier copies on

	// The marks: where the driver has stream memory operations, a
	// completion word per peer (tally, by peer) that its copy stream
	// writes after each batch with the batch's number (markWant[peer][k]
	// is mark k's), so that each look at a batch is a load from memory,
	// not a call into the driver (a copy seen done this way costs 0.1-1
	// µs less than through an event: docs/benchmarks.md, "The CUDA IPC
	// path, stage by stage"); elsewhere, and with EventsEnv=1, an event
	// per flight (marks), recorded on the stream and queried.
	tally    *flagWords
	markWant [][]uint64
	looks    []int           // by peer: marked's looks since it last asked the stream
	marks    [][]*cuda.Event // by peer, ipcFlights each, without the words

	mu    sync.Mutex
	maps  []*ipcCache                  // by peer
	stage map[int64][]cuda.Slice[byte] // free staging allocations, by size
	all   []cuda.Slice[byte]           // every staging allocation
	words cuda.Pinned[uint64]
	base  uintptr // the words' device address
	vals  []uint64
	free  []int
}

// ipcCache is the mappings of one peer's memory, most recently used first.
type ipcCache struct {
	byID map[uint64]*list.Element
	lru  list.List    // of *ipcMapping
	n    atomic.Int64 // lru's length, for readers other than the copier (open)
}

type ipcMapping struct {
	id uint64
	s  cuda.Slice[byte]
}

// newCudaIPC makes the IPC path's memory side on dev for the peers of on:
// a copy stream for each, and its marks: words in page-locked memory
// unless events is set or the driver cannot write them, events then.
func newCudaIPC(dev cuda.Device, on []bool, events bool) (*cudaIPC, error) {
	m := &cudaIPC{dev: dev, streams: make([]*cuda.Stream, len(on)), marks: make([][]*cuda.Event, len(on)), maps: make([]*ipcCache, len(on)), stage: map[int64][]cuda.Slice[byte]{}}
	for p, yes := range on {
		if !yes {
			continue
		}
		s, err := cuda.NewStream(dev)
		if err != nil {
			m.close()
			return nil, fmt.Errorf("nccl: creating the IPC path's copy stream on %v: %w", dev, err)
		}
		m.streams[p] = s
		m.maps[p] = &ipcCache{byID: map[uint64]*list.Element{}}
	}
	if !events && m.useTally(on) {
		return m, nil
	}
	for p, yes := range on {
		if !yes {
			continue
		}
		var err error
		m.marks[p] = make([]*cuda.Event, ipcFlights)
		for k := range m.marks[p] {
			// No timing: cheaper to record and to query.
			if m.marks[p][k], err = cuda.NewEventNoTiming(dev); err != nil {
				m.close()
				return nil, fmt.Errorf("nccl: creating the IPC path's copy events on %v: %w", dev, err)
			}
		}
	}
	return m, nil
}

// useTally sets up the marks' words (newFlagWords, probed on a copy
// stream), and reports whether it could; a failure leaves the marks to
// events.
func (m *cudaIPC) useTally(on []bool) bool {
	var probe *cuda.Stream
	for _, s := range m.streams {
		if s != nil {
			probe = s
			break
		}
	}
	if probe == nil {
		return false
	}
	f, err := newFlagWords(len(on), probe)
	if err != nil {
		return false
	}
	m.tally, m.looks = f, make([]int, len(on))
	m.markWant = make([][]uint64, len(on))
	for p, yes := range on {
		if yes {
			m.markWant[p] = make([]uint64, ipcFlights)
		}
	}
	return true
}

// view is buf's device memory as a Slice of bytes.
func (m *cudaIPC) view(buf backend.Buffer) cuda.Slice[byte] {
	return cuda.ByteView(uintptr(buf.Ptr), buf.Len(), m.dev)
}

// hostView is buf's host memory as bytes.
func hostView(buf backend.Buffer) []byte {
	if buf.Len() == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(buf.Ptr), buf.Len())
}

func (m *cudaIPC) readOut(dst []byte, buf backend.Buffer) error {
	if buf.Mem == backend.Host {
		copy(dst, hostView(buf))
		return nil
	}
	if len(dst) == 0 {
		return nil
	}
	return cuda.CopyToHost(dst, m.view(buf))
}

func (m *cudaIPC) export(buf backend.Buffer) (ipcSource, error) {
	n := buf.Len()
	if buf.Mem == backend.Device {
		r, err := cuda.ExportIPC(m.dev, uintptr(buf.Ptr), n)
		return ipcSource{region: r}, err
	}
	s, err := m.getStage(n)
	if err != nil {
		return ipcSource{}, err
	}
	part, _ := s.Sub(0, n)
	if err := cuda.CopyToDevice(part, hostView(buf)); err != nil {
		m.putStage(s)
		return ipcSource{}, err
	}
	r, err := cuda.ExportIPC(m.dev, s.Ptr(), n)
	if err != nil {
		m.putStage(s)
		return ipcSource{}, err
	}
	return ipcSource{region: r, release: func() { m.putStage(s) }}, nil
}

// getStage returns a staging allocation of at least n bytes (a power of
// two from ipcStageMin), reused or new.
func (m *cudaIPC) getStage(n int64) (cuda.Slice[byte], error) {
	size := int64(ipcStageMin)
	if n > size {
		size = int64(1) << bits.Len64(uint64(n-1))
	}
	m.mu.Lock()
	if l := m.stage[size]; len(l) > 0 {
		s := l[len(l)-1]
		m.stage[size] = l[:len(l)-1]
		m.mu.Unlock()
		return s, nil
	}
	m.mu.Unlock()
	s, err := cuda.Alloc[byte](m.dev, size)
	if err != nil {
		return s, fmt.Errorf("allocating %d bytes of device memory to stage a host buffer: %w", size, err)
	}
	m.mu.Lock()
	m.all = append(m.all, s)
	m.mu.Unlock()
	return s, nil
}

func (m *cudaIPC) putStage(s cuda.Slice[byte]) {
	m.mu.Lock()
	m.stage[s.Len()] = append(m.stage[s.Len()], s)
	m.mu.Unlock()
}

func (m *cudaIPC) writeIn(peer int, buf backend.Buffer, data []byte) error {
	if buf.Mem == backend.Host {
		copy(hostView(buf), data)
		return nil
	}
	dst, _ := m.view(buf).Sub(0, int64(len(data)))
	// From ordinary Go memory the call returns once data may be reused.
	return cuda.CopyToDeviceAsync(dst, data, m.streams[peer])
}

func (m *cudaIPC) copyIn(peer int, buf backend.Buffer, r cuda.IPCRegion, n int64) error {
	mapped, err := m.mapping(peer, r)
	if err != nil {
		return err
	}
	src, err := mapped.Sub(r.Offset, r.Offset+n)
	if err != nil {
		return err
	}
	if buf.Mem == backend.Host {
		return cuda.CopyToHostAsync(hostView(buf)[:n], src, m.streams[peer])
	}
	dst, _ := m.view(buf).Sub(0, n)
	return cuda.CopyDeviceAsync(dst, src, m.streams[peer])
}

// mark has peer's copy stream write the next number to peer's word, or
// records peer's event k on it.
func (m *cudaIPC) mark(peer, k int) error {
	if m.tally == nil {
		return m.marks[peer][k].Record(m.streams[peer])
	}
	v, err := m.tally.write(peer, m.streams[peer])
	if err == nil {
		m.markWant[peer][k] = v
	}
	return err
}

// marked reports whether peer's word has reached mark k's number (or
// queries the event). A failed copy never writes the word: every
// tallyAsk-th look that finds it short asks the stream, whose error (a
// failed copy, a lost context) it returns, and which, idle, says the
// write has run.
func (m *cudaIPC) marked(peer, k int) (bool, error) {
	if m.tally == nil {
		return m.marks[peer][k].Query()
	}
	if m.tally.reached(peer, m.markWant[peer][k]) {
		m.looks[peer] = 0
		return true, nil
	}
	if m.looks[peer]++; m.looks[peer] < tallyAsk {
		return false, nil
	}
	m.looks[peer] = 0
	return m.streams[peer].Query()
}

// tallyAsk is how many looks at a mark's word that find it short marked
// makes before it asks the stream.
const tallyAsk = 256

// awaitMark waits for mark k of peer: polled, yielding between looks, for
// up to ipcPollFor, then blocked in the driver on its event (awaitEvent)
// or, with the words, polled with naps of ipcStreamNap between looks (the
// stream's synchronization would wait for the later batches too).
func (m *cudaIPC) awaitMark(peer, k int) error {
	if m.tally == nil {
		return awaitEvent(m.marks[peer][k])
	}
	start, napping := time.Now(), false
	for i := 0; ; i++ {
		done, err := m.marked(peer, k)
		if err != nil || done {
			return err
		}
		napping = napping || i%64 == 63 && time.Since(start) > ipcPollFor
		if napping {
			time.Sleep(ipcStreamNap)
		} else {
			runtime.Gosched()
		}
	}
}

// awaitEvent waits for ev: polled, yielding between looks, for up to
// ipcPollFor, then blocked in the driver. Polled, not blocked from the
// start: a rank that mpirun binds to one core has one thread to run on,
// and a driver call that spins there (as cuStreamSynchronize does) takes
// turns with the goroutines that spin for the messages in time slices of
// milliseconds; polling from Go takes turns with them at every look.
func awaitEvent(ev *cuda.Event) error {
	start := time.Now()
	for i := 0; ; i++ {
		done, err := ev.Query()
		if err != nil || done {
			return err
		}
		if i%64 == 63 && time.Since(start) > ipcPollFor {
			return ev.Synchronize()
		}
		runtime.Gosched()
	}
}

// ipcPollFor is how long awaitEvent polls before it blocks.
const ipcPollFor = 20 * time.Millisecond

// mapping returns the open mapping of r's allocation of peer's, opening
// it (and closing the least recently used one past ipcCacheMax) if need
// be. Only peer's copier calls it for peer.
func (m *cudaIPC) mapping(peer int, r cuda.IPCRegion) (cuda.Slice[byte], error) {
	c := m.maps[peer]
	if e, ok := c.byID[r.ID]; ok {
		c.lru.MoveToFront(e)
		return e.Value.(*ipcMapping).s, nil
	}
	s, err := cuda.OpenIPC[byte](m.dev, r.Handle, r.Size)
	if err != nil {
		return s, fmt.Errorf("opening the sender's memory (allocation %d, %d bytes): %w", r.ID, r.Size, err)
	}
	c.byID[r.ID] = c.lru.PushFront(&ipcMapping{id: r.ID, s: s})
	c.n.Add(1)
	for c.lru.Len() > ipcCacheMax {
		// A copy queued from the mapping may not have run yet.
		if err := m.streams[peer].Synchronize(); err != nil {
			return s, err
		}
		c.drop(c.lru.Back())
	}
	return s, nil
}

// forget implements ipcMem: the copier calls it after the copies before
// it have run (settle), so the mapping is closed at once.
func (m *cudaIPC) forget(peer int, id uint64) {
	c := m.maps[peer]
	if e, ok := c.byID[id]; ok {
		c.drop(e)
	}
}

// drop closes the mapping of e and leaves it out of the cache; no copy
// queued from it may be still to run.
func (c *ipcCache) drop(e *list.Element) {
	old := c.lru.Remove(e).(*ipcMapping)
	c.n.Add(-1)
	delete(c.byID, old.id)
	old.s.CloseIPC()
}

// open reports how many mappings of peer's memory are open (tests): from
// any goroutine, while the copier opens and closes them.
func (m *cudaIPC) open(peer int) int { return int(m.maps[peer].n.Load()) }

func (m *cudaIPC) newSlot() (int, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.vals == nil {
		w, err := cuda.HostAlloc[uint64](ipcSlots)
		if err != nil {
			return 0, 0, fmt.Errorf("nccl: allocating the IPC path's completion words: %w", err)
		}
		base, err := w.DevicePtr()
		if err != nil {
			w.Free()
			return 0, 0, fmt.Errorf("nccl: the IPC path's completion words: %w", err)
		}
		// Page-locked memory comes as it was left (the fake GPU's reuses a
		// freed allocation): a word already past the value a stream waits
		// for would let the stream go before its request completes.
		clear(w.Slice())
		m.words, m.base, m.vals = w, base, make([]uint64, ipcSlots)
		for i := ipcSlots - 1; i >= 0; i-- {
			m.free = append(m.free, i)
		}
	}
	if len(m.free) == 0 {
		return 0, 0, fmt.Errorf("%w: more than %d stream-ordered operations in flight on the IPC path", backend.ErrNotSupported, ipcSlots)
	}
	k := m.free[len(m.free)-1]
	m.free = m.free[:len(m.free)-1]
	m.vals[k]++
	return k, m.vals[k], nil
}

func (m *cudaIPC) signal(slot int, v uint64) {
	atomic.StoreUint64(&m.words.Slice()[slot], v)
	m.mu.Lock()
	m.free = append(m.free, slot)
	m.mu.Unlock()
}

func (m *cudaIPC) waitSlot(s *cuda.Stream, slot int, v uint64) error {
	return s.WaitValue64(m.base+uintptr(slot)*8, v)
}

func (m *cudaIPC) close() error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for p, c := range m.maps {
		if c == nil {
			continue
		}
		for e := c.lru.Front(); e != nil; e = e.Next() {
			keep(e.Value.(*ipcMapping).s.CloseIPC())
		}
		m.maps[p] = nil
	}
	for p, s := range m.streams {
		if s != nil {
			keep(s.Synchronize())
			keep(s.Destroy())
			m.streams[p] = nil
		}
	}
	for p, es := range m.marks {
		for _, e := range es {
			if e != nil {
				keep(e.Destroy())
			}
		}
		m.marks[p] = nil
	}
	for _, s := range m.all {
		keep(s.Free())
	}
	m.all, m.stage = nil, nil
	if m.vals != nil {
		keep(m.words.Free())
		m.vals = nil
	}
	if m.tally != nil {
		keep(m.tally.free())
		m.tally = nil
	}
	return first
}
