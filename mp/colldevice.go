package mp

import (
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
	"github.com/courier-mp/courier/internal/devreduce"
	"github.com/courier-mp/courier/internal/reduce"
)

// The collectives over point-to-point messages on device memory: where
// the transport moves device buffers from device to device
// (backend.DeviceDirect: on nccl, ranks that all share one GPU, whose
// messages take the CUDA IPC path), the algorithms of collp2p.go run on
// the device buffers themselves, with their copies on the GPU (a copy
// queued on a stream of the communicator's), their combining in a
// kernel (internal/devreduce) and their scratch memory on the GPU, so
// that no byte of the collective passes through host memory. Elsewhere a
// collective of device buffers is staged: copied to host memory once,
// run there, and copied back (stagedColl), which costs less than sending
// device memory one message at a time through a transport that stages
// each message through the host itself (tcp).
//
// Each copy or kernel is followed by a synchronize of the stream, so its
// result is in place before the next message reads it or the next
// message's receive writes over what it read.

// deviceCollEnv names the variable that picks how the collectives that
// courier runs over point-to-point messages treat device buffers:
// "direct" on the device, "staged" through host memory, "auto" (or
// unset) direct where the transport moves device memory device to device
// (backend.DeviceDirect), else staged.
const deviceCollEnv = "COURIER_DEVICE_COLL"

// devCollMode is deviceCollEnv's value.
type devCollMode uint8

const (
	devCollAuto devCollMode = iota
	devCollStaged
	devCollDirect
)

// parseDeviceColl reads deviceCollEnv's value.
func parseDeviceColl(s string) (devCollMode, error) {
	switch strings.TrimSpace(strings.ToLower(s)) {
	case "", "auto":
		return devCollAuto, nil
	case "staged":
		return devCollStaged, nil
	case "direct":
		return devCollDirect, nil
	}
	return devCollAuto, invalidf("%s=%q: want auto, direct or staged", deviceCollEnv, s)
}

// onDevice reports whether a collective of device buffers runs on the
// device (otherwise it is staged through host memory).
func (c *Comm) onDevice() bool {
	switch c.devMode {
	case devCollStaged:
		return false
	case devCollDirect:
		return true
	}
	d, ok := c.conn.(backend.DeviceDirect)
	return ok && d.DeviceDirect()
}

// deviceCollFrom is the size (a rank's block: its send buffer, Scatter's
// receive buffer) from which, unless deviceCollEnv says otherwise, a
// collective of device buffers runs on the device rather than staged
// through host memory. Measured on an H200 with 2 ranks on its GPU
// (docs/benchmarks.md, "Collectives of device buffers on the GPU"): each
// message on the device costs a copy and a synchronization on the GPU the
// ranks time-share, some 500 µs an Allreduce, Allgather or ReduceScatter
// up to 256 KiB, where staging took 180-560 µs; from 1 MiB the device
// won (790 µs against 1,210-1,330 at 1 MiB, 1,100 against 127,000 at 128
// MiB). A Bcast was faster on the device at every size (18 µs against
// 274 at 8 bytes).
const deviceCollFrom = 512 << 10

// onDeviceFor is onDevice for collective co (not a v-form): where the
// mode is auto, a Bcast on the device at any size, the others from
// deviceCollFrom. Every rank decides alike (the sizes it looks at agree).
func (c *Comm) onDeviceFor(co backend.Coll) bool {
	if !c.onDevice() {
		return false
	}
	if c.devMode == devCollDirect || co.Kind == backend.Bcast {
		return true
	}
	n := co.Send.Len()
	if co.Kind == backend.Scatter {
		n = co.Recv.Len()
	}
	return n >= deviceCollFrom
}

// isDevice reports whether a collective's buffers lie in device memory.
func isDevice(send, recv backend.Buffer) bool {
	return send.Mem == backend.Device || recv.Mem == backend.Device
}

// copyBuf copies src into dst (buffers of one shape in one memory),
// unless they are the same memory.
func (c *Comm) copyBuf(dst, src backend.Buffer) error {
	if dst.Mem != backend.Device {
		copyHost(dst, src)
		return nil
	}
	if dst.Ptr == src.Ptr || dst.Count == 0 {
		return nil
	}
	return c.dev.copy(dst, src)
}

// combine sets dst to a op b (buffers of one shape in one memory),
// element by element: dst[i] = a[i] op b[i], with internal/reduce's
// kernels on the host (which the shared-memory collectives use too) and
// internal/devreduce's, which compute the same bits, on the GPU (the
// exception, a NaN that Sum or Prod makes, is in devreduce's doc). dst
// may be a or b itself (the same memory, not a part of it). The operator
// applies to the type (checkColl made sure). Which operand is a matters
// for the bits of a floating-point result (a NaN's payload, a complex
// product), so every algorithm passes the value of the lower ranks as a:
// ranks that combine the same two values get the same bits.
func (c *Comm) combine(dst, a, b backend.Buffer, op Op) error {
	if dst.Mem != backend.Device {
		reduce.Combine(dst, a, b, op.reduceOp())
		return nil
	}
	return c.dev.combine(dst, a, b, op)
}

// scratchFor borrows at least n bytes of scratch memory in the memory of
// like: host memory from the pools (collscratch.go), or device memory on
// like's GPU from the communicator's own (an allocation only when none of
// the size is kept).
func (c *Comm) scratchFor(like backend.Buffer, n int64) (*scratch, error) {
	if like.Mem != backend.Device {
		return getScratch(n), nil
	}
	return c.dev.get(like.Device, n)
}

// devColl is a communicator's device side of the collectives: for each
// GPU whose memory its collectives have used, a CUDA stream for their
// copies and kernels, and the scratch memory it keeps there.
//
// Scratch memory is allocated on first use in power-of-two sizes and
// kept for the next collective, up to devKeptPerClass buffers of a size
// and devKeptBytes in all, so that a steady stream of collectives
// allocates nothing (and a peer that maps this memory through CUDA IPC
// keeps its mapping); what is over those bounds is freed when the
// collective ends. Close frees the rest, and the streams.
type devColl struct {
	mu     sync.Mutex
	gpus   []*devGPU // by ordinal
	closed bool
	err    error // the first failure to free, for Close
}

// devGPU is devColl's part on one GPU.
type devGPU struct {
	dev    cuda.Device
	stream *cuda.Stream
	free   [devClasses][]cuda.Slice[byte] // kept, by size class
	kept   int64                          // bytes in free
	// lost is scratch memory a failed collective borrowed: a transport
	// may still write into it, until it is closed.
	lost []cuda.Slice[byte]
}

const (
	devMinLog       = 8  // the smallest size class: 256 bytes
	devClasses      = 33 // up to 1 TiB; larger is allocated to measure
	devKeptPerClass = 2  // a collective borrows at most two at once
	devKeptBytes    = 1 << 30
)

// gpuLocked returns the part on device d, making its stream on first use.
// The caller holds the mutex.
func (dc *devColl) gpuLocked(d int) (*devGPU, error) {
	if dc.closed {
		return nil, fmt.Errorf("%w: the communicator is closed", ErrClosed)
	}
	if d < 0 {
		return nil, invalidf("device %d", d)
	}
	for len(dc.gpus) <= d {
		dc.gpus = append(dc.gpus, nil)
	}
	g := dc.gpus[d]
	if g == nil {
		s, err := cuda.NewStream(cuda.Device(d))
		if err != nil {
			return nil, fmt.Errorf("a stream for the collectives on %v: %w", cuda.Device(d), err)
		}
		g = &devGPU{dev: cuda.Device(d), stream: s}
		dc.gpus[d] = g
	}
	return g, nil
}

// stream is the stream of device d.
func (dc *devColl) stream(d int) (*cuda.Stream, error) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	g, err := dc.gpuLocked(d)
	if err != nil {
		return nil, err
	}
	return g.stream, nil
}

// view8 is device buffer b as bytes, for package cuda's copies.
func view8(b backend.Buffer) cuda.Slice[byte] {
	return cuda.ByteView(uintptr(b.Ptr), b.Len(), cuda.Device(b.Device))
}

// copy copies device buffer src into dst on dst's GPU: queued on the
// stream, which is then synchronized.
func (dc *devColl) copy(dst, src backend.Buffer) error {
	s, err := dc.stream(dst.Device)
	if err != nil {
		return err
	}
	if err := cuda.CopyDeviceAsync(view8(dst), view8(src), s); err != nil {
		return fmt.Errorf("a copy on the device: %w", err)
	}
	if err := s.Synchronize(); err != nil {
		return fmt.Errorf("a copy on the device: %w", err)
	}
	return nil
}

// combine runs dst = a op b on dst's GPU: the kernel queued on the
// stream, which is then synchronized.
func (dc *devColl) combine(dst, a, b backend.Buffer, op Op) error {
	if dst.Count == 0 {
		return nil
	}
	s, err := dc.stream(dst.Device)
	if err != nil {
		return err
	}
	if err := devreduce.Combine(dst, a, b, op.reduceOp(), s); err != nil {
		return fmt.Errorf("combining on the device: %w", err)
	}
	if err := s.Synchronize(); err != nil {
		return fmt.Errorf("combining on the device: %w", err)
	}
	return nil
}

// devClass is the size class of n bytes, or -1 past the largest.
func devClass(n int64) int {
	k := 0
	if n > 1<<devMinLog {
		k = bits.Len64(uint64(n-1)) - devMinLog
	}
	if k >= devClasses {
		return -1
	}
	return k
}

// get borrows at least n bytes of device memory on device d.
func (dc *devColl) get(d int, n int64) (*scratch, error) {
	k := devClass(n)
	size := n
	if k >= 0 {
		size = 1 << (k + devMinLog)
	}
	dc.mu.Lock()
	g, err := dc.gpuLocked(d)
	if err == nil && k >= 0 {
		if l := g.free[k]; len(l) > 0 {
			m := l[len(l)-1]
			g.free[k] = l[:len(l)-1]
			g.kept -= size
			dc.mu.Unlock()
			return &scratch{class: k, dev: dc, dmem: m}, nil
		}
	}
	dc.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m, err := cuda.Alloc[byte](cuda.Device(d), size)
	if err != nil {
		return nil, fmt.Errorf("scratch memory for a collective on the device: %w", err)
	}
	return &scratch{class: k, dev: dc, dmem: m}, nil
}

// put takes back scratch memory s: kept when err is nil and there is
// room (else freed), and after a failure held until Close.
func (dc *devColl) put(s *scratch, err error) {
	m := s.dmem
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.closed {
		dc.freeLocked(m)
		return
	}
	g := dc.gpus[m.Device()]
	if err != nil {
		g.lost = append(g.lost, m)
		return
	}
	if k := s.class; k >= 0 && len(g.free[k]) < devKeptPerClass && g.kept+m.Len() <= devKeptBytes {
		g.free[k] = append(g.free[k], m)
		g.kept += m.Len()
		return
	}
	dc.freeLocked(m)
}

// freeLocked frees m, keeping the first failure for Close.
func (dc *devColl) freeLocked(m cuda.Slice[byte]) {
	if err := m.Free(); err != nil && dc.err == nil {
		dc.err = fmt.Errorf("freeing the collectives' scratch memory: %w", err)
	}
}

// close frees every buffer kept or lost and destroys the streams, once
// the transport is closed (it writes into no buffer any more). It returns
// the first failure, of these or of an earlier free.
func (dc *devColl) close() error {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.closed {
		return nil
	}
	dc.closed = true
	for _, g := range dc.gpus {
		if g == nil {
			continue
		}
		for k := range g.free {
			for _, m := range g.free[k] {
				dc.freeLocked(m)
			}
			g.free[k] = nil
		}
		for _, m := range g.lost {
			dc.freeLocked(m)
		}
		g.lost = nil
		if err := g.stream.Destroy(); err != nil && dc.err == nil {
			dc.err = fmt.Errorf("destroying the collectives' stream: %w", err)
		}
	}
	dc.gpus = nil
	return dc.err
}

// devBuf is count elements of type t of device memory m, from byte
// offset off.
func devBuf(m cuda.Slice[byte], off int64, t backend.DType, count int64) backend.Buffer {
	b := backend.Buffer{Count: count, Type: t, Mem: backend.Device, Device: int(m.Device())}
	if count > 0 {
		p := m.Ptr() + uintptr(off)
		// The device address travels in Ptr's bits (backend.Buffer's
		// doc), as describe puts it there.
		b.Ptr = *(*unsafe.Pointer)(unsafe.Pointer(&p))
	}
	return b
}
