package cuda

import (
	"sync/atomic"
	"time"
)

// Stream is a queue of GPU work on one device (a CUstream): copies,
// memsets, kernels, event records and NCCL operations queued on it run in
// order, and concurrently with other streams' work.
//
// Streams are non-blocking (CU_STREAM_NON_BLOCKING): they do not wait for
// the device's legacy default stream, where the blocking copies run, nor
// does it wait for them. Order work across streams with [Event]s
// ([Stream.WaitEvent]).
//
// The methods are safe for concurrent use. A nil or destroyed Stream makes
// every method that would use it return an error matching
// ErrInvalid.
type Stream struct {
	l   *lib
	dev Device
	ctx uintptr
	h   atomic.Uintptr
}

// NewStream creates a non-blocking stream on device d (cuStreamCreate with
// CU_STREAM_NON_BLOCKING). Destroy it when done.
func NewStream(d Device) (*Stream, error) {
	l, ctx, err := ctxFor(d, "NewStream")
	if err != nil {
		return nil, err
	}
	h, err := l.drv.streamCreate(ctx, cuStreamNonBlocking)
	if err != nil {
		return nil, err
	}
	s := &Stream{l: l, dev: d, ctx: ctx}
	s.h.Store(h)
	return s, nil
}

// use returns s's handle for operation op, checking that s is live and on
// device want.
func (s *Stream) use(op string, want Device) (uintptr, error) {
	if s == nil {
		return 0, errInvalid(op, "nil stream")
	}
	h := s.h.Load()
	if h == 0 {
		return 0, errInvalid(op, "stream destroyed")
	}
	if s.dev != want {
		return 0, errInvalid(op, "stream is on device %d, memory on device %d", int(s.dev), int(want))
	}
	return h, nil
}

// Handle returns the CUstream, for C code such as NCCL's; 0 for a nil or
// destroyed Stream (0 would mean the legacy default stream to CUDA: do not
// pass it on).
func (s *Stream) Handle() uintptr {
	if s == nil {
		return 0
	}
	return s.h.Load()
}

// Device returns the device the stream runs on.
func (s *Stream) Device() Device {
	if s == nil {
		return 0
	}
	return s.dev
}

// Synchronize blocks the CPU until all work queued on s so far has
// finished (cuStreamSynchronize), and returns the first error of that
// work. Buffers used by that work may be reused when it returns.
func (s *Stream) Synchronize() error {
	const op = "Stream.Synchronize"
	h, err := s.use(op, s.Device())
	if err != nil {
		return err
	}
	return s.l.drv.streamSynchronize(s.ctx, h)
}

// Query reports, without blocking, whether all work queued on s so far has
// finished (cuStreamQuery).
func (s *Stream) Query() (done bool, err error) {
	const op = "Stream.Query"
	h, err := s.use(op, s.Device())
	if err != nil {
		return false, err
	}
	return s.l.drv.streamQuery(s.ctx, h)
}

// WriteValue64 queues on s a write of v to the 8-byte word at addr
// (cuStreamWriteValue64): once the work queued on s before it has
// finished, with a memory fence first, so that whoever sees v (the CPU
// reading page-locked memory, or a stream in WaitValue64) also sees what
// that work wrote. It is a cheap completion signal: the CPU polls the word
// in memory instead of asking the driver. addr is a device address, 8-byte
// aligned: device memory of s's device, or page-locked host memory
// ([Pinned.DevicePtr]). Where the driver or the device has no stream
// memory operations, the error matches ErrNotSupported.
func (s *Stream) WriteValue64(addr uintptr, v uint64) error {
	h, err := s.useWord("Stream.WriteValue64", addr)
	if err != nil {
		return err
	}
	return s.l.drv.streamWriteValue64(s.ctx, h, addr, v)
}

// useWord is use for a stream memory operation on the word at addr.
func (s *Stream) useWord(op string, addr uintptr) (uintptr, error) {
	h, err := s.use(op, s.Device())
	if err == nil && (addr == 0 || addr%8 != 0) {
		err = errInvalid(op, "address %#x is not an aligned 8-byte word", addr)
	}
	return h, err
}

// WaitValue64 makes the work queued on s after this call wait, on the GPU,
// until the 8-byte word at addr is at least v, as unsigned integers
// (cuStreamWaitValue64 with CU_STREAM_WAIT_VALUE_GEQ); the CPU does not
// block. With a counter that only grows, written by WriteValue64 on
// another stream, it orders s after that stream's work up to the write.
// addr is as for WriteValue64, and so is the error where the driver
// cannot.
func (s *Stream) WaitValue64(addr uintptr, v uint64) error {
	h, err := s.useWord("Stream.WaitValue64", addr)
	if err != nil {
		return err
	}
	return s.l.drv.streamWaitValue64(s.ctx, h, addr, v)
}

// WaitEvent makes all work queued on s after this call wait, on the GPU,
// until e has fired (cuStreamWaitEvent): the CPU does not block. e may be
// on another device. If e has never been recorded, nothing waits.
func (s *Stream) WaitEvent(e *Event) error {
	const op = "Stream.WaitEvent"
	h, err := s.use(op, s.Device())
	if err != nil {
		return err
	}
	eh, err := e.use(op)
	if err != nil {
		return err
	}
	return s.l.drv.streamWaitEvent(s.ctx, h, eh)
}

// Destroy releases the stream (cuStreamDestroy). It does not block: work
// already queued still runs, and its resources are released when it is
// done. Destroy is idempotent; other methods fail after it.
func (s *Stream) Destroy() error {
	if s == nil {
		return nil
	}
	h := s.h.Swap(0)
	if h == 0 {
		return nil
	}
	return s.l.drv.streamDestroy(s.ctx, h)
}

// Event marks a point in a stream's work (a CUevent): it fires when the
// work queued before [Event.Record] has finished. Events let the CPU poll
// or wait for GPU work, make another stream wait ([Stream.WaitEvent]), and
// time GPU work ([Elapsed]).
//
// The methods are safe for concurrent use. A nil or destroyed Event makes
// every method that would use it return an error matching
// ErrInvalid.
type Event struct {
	l      *lib
	dev    Device
	ctx    uintptr
	timing bool
	h      atomic.Uintptr
}

// NewEvent creates an event on device d that records time, for [Elapsed].
func NewEvent(d Device) (*Event, error) {
	return newEvent(d, "NewEvent", cuEventDefault, true)
}

// NewEventNoTiming creates an event on device d that records no time
// (CU_EVENT_DISABLE_TIMING): cheaper to record and query, for tracking
// completion.
func NewEventNoTiming(d Device) (*Event, error) {
	return newEvent(d, "NewEventNoTiming", cuEventDisableTiming, false)
}

func newEvent(d Device, op string, flags uint32, timing bool) (*Event, error) {
	l, ctx, err := ctxFor(d, op)
	if err != nil {
		return nil, err
	}
	h, err := l.drv.eventCreate(ctx, flags)
	if err != nil {
		return nil, err
	}
	e := &Event{l: l, dev: d, ctx: ctx, timing: timing}
	e.h.Store(h)
	return e, nil
}

func (e *Event) use(op string) (uintptr, error) {
	if e == nil {
		return 0, errInvalid(op, "nil event")
	}
	h := e.h.Load()
	if h == 0 {
		return 0, errInvalid(op, "event destroyed")
	}
	return h, nil
}

// Handle returns the CUevent, for C code; 0 for a nil or destroyed Event.
func (e *Event) Handle() uintptr {
	if e == nil {
		return 0
	}
	return e.h.Load()
}

// Device returns the device the event belongs to.
func (e *Event) Device() Device {
	if e == nil {
		return 0
	}
	return e.dev
}

// Record queues the event on stream s, which must be on the event's device
// (cuEventRecord): the event fires when all work queued on s before it has
// finished. It does not block. Recording again moves the event: queries
// and waits then concern the latest record.
func (e *Event) Record(s *Stream) error {
	const op = "Event.Record"
	eh, err := e.use(op)
	if err != nil {
		return err
	}
	sh, err := s.use(op, e.dev)
	if err != nil {
		return err
	}
	return e.l.drv.eventRecord(e.ctx, eh, sh)
}

// Query reports, without blocking, whether the event has fired
// (cuEventQuery): done is false while the work before the latest Record is
// still running, and true once it has finished or if the event was never
// recorded. An error is one of that work's errors, or the driver's.
func (e *Event) Query() (done bool, err error) {
	const op = "Event.Query"
	h, err := e.use(op)
	if err != nil {
		return false, err
	}
	return e.l.drv.eventQuery(e.ctx, h)
}

// Synchronize blocks the CPU until the event has fired
// (cuEventSynchronize); it returns at once if the event was never
// recorded. Buffers used by the work before the Record may be reused when
// it returns.
func (e *Event) Synchronize() error {
	const op = "Event.Synchronize"
	h, err := e.use(op)
	if err != nil {
		return err
	}
	return e.l.drv.eventSynchronize(e.ctx, h)
}

// Destroy releases the event (cuEventDestroy). It does not block: a
// pending record completes on its own. Destroy is idempotent; other
// methods fail after it.
func (e *Event) Destroy() error {
	if e == nil {
		return nil
	}
	h := e.h.Swap(0)
	if h == 0 {
		return nil
	}
	return e.l.drv.eventDestroy(e.ctx, h)
}

// Elapsed returns the GPU time between two fired events
// (cuEventElapsedTime), with a resolution of about half a microsecond.
// Both must have been created by [NewEvent] (with timing), recorded, and
// have fired (an *Error with CUDA_ERROR_NOT_READY otherwise). It does not
// block.
func Elapsed(start, end *Event) (time.Duration, error) {
	const op = "Elapsed"
	sh, err := start.use(op)
	if err != nil {
		return 0, err
	}
	eh, err := end.use(op)
	if err != nil {
		return 0, err
	}
	if !start.timing || !end.timing {
		return 0, errInvalid(op, "an event made by NewEventNoTiming records no time")
	}
	ms, err := start.l.drv.eventElapsed(start.ctx, sh, eh)
	if err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
