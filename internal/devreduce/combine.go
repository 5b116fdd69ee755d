package devreduce

import (
	"errors"
	"fmt"
	"sync"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// Combine queues on stream s the kernel that sets dst to a op b, element
// by element: dst[i] = a[i] op b[i] for i below dst's count. The three are
// device buffers of one element type on s's device, a and b of at least
// dst's count; dst may be a or b itself (the same memory, not a part of
// it). An empty dst queues nothing.
//
// It returns once the kernel is queued: the GPU runs it after the work
// queued on s before it, and the three buffers must stay allocated, and
// a and b unchanged, until it has (synchronize s, or wait for an event
// recorded after it). It blocks the CPU only the first time it meets the
// type on the device, while the driver compiles that type's module
// (once per device and type in a process, for every caller).
//
// Arguments that do not fit (host memory, another device, types or counts
// that differ, an operator that does not apply to the type) are an error
// matching backend.ErrInvalid, before anything is queued; the driver's
// errors (no GPU: one matching backend.ErrNotSupported) come back as they
// are.
func Combine(dst, a, b backend.Buffer, op backend.ReduceOp, s *cuda.Stream) error {
	if err := check(dst, a, b, op, s); err != nil || dst.Count == 0 {
		return err
	}
	f, err := function(s.Device(), dst.Type, op)
	if err != nil {
		return err
	}
	n := dst.Count
	blocks := min((n+threads-1)/threads, maxBlocks)
	return f.Launch([3]uint32{uint32(blocks), 1, 1}, [3]uint32{threads, 1, 1}, 0, s,
		devicePtr(dst), devicePtr(a), devicePtr(b), n)
}

// The launch: blocks of threads threads, at most maxBlocks of them (the
// kernels loop over the rest): enough to keep every multiprocessor of a
// GPU busy on a pass over memory.
const (
	threads   = 256
	maxBlocks = 8192
)

// check validates Combine's arguments.
func check(dst, a, b backend.Buffer, op backend.ReduceOp, s *cuda.Stream) error {
	switch {
	case !op.AppliesTo(dst.Type):
		return invalid("%v is not defined on %v", op, dst.Type)
	case a.Type != dst.Type || b.Type != dst.Type:
		return invalid("the operands are %v and %v, the destination %v", a.Type, b.Type, dst.Type)
	case dst.Count < 0 || a.Count < dst.Count || b.Count < dst.Count:
		return invalid("the operands have %d and %d elements, the destination %d", a.Count, b.Count, dst.Count)
	}
	if s == nil || s.Handle() == 0 {
		return invalid("nil or destroyed stream")
	}
	if dst.Count == 0 {
		return nil
	}
	dev := int(s.Device())
	for _, x := range []backend.Buffer{dst, a, b} {
		if x.Mem != backend.Device || x.Ptr == nil {
			return invalid("a buffer in host memory (the kernels combine device memory)")
		}
		if x.Device != dev {
			return invalid("a buffer on cuda:%d, the stream on cuda:%d", x.Device, dev)
		}
	}
	return nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("devreduce: %w: %s", backend.ErrInvalid, fmt.Sprintf(format, args...))
}

// devicePtr is the device address of buffer b (held in Ptr's bits).
func devicePtr(b backend.Buffer) uintptr { return uintptr(b.Ptr) }

// module is one type's kernels loaded on one device, or why they are not.
type module struct {
	once sync.Once
	fns  [backend.Max + 1]*cuda.Function // by operator
	err  error
}

// modules holds every module loaded in the process, by device and type.
// A module is loaded once, on first use, and kept for the process's life
// (its kernels cost the device a few kilobytes); a failure to load is kept
// too, so that every later call reports it at once.
var modules struct {
	mu sync.Mutex
	m  map[moduleKey]*module
}

type moduleKey struct {
	dev cuda.Device
	t   backend.DType
}

// function returns the kernel of t and op on device d, loading the
// type's module there on first use. Safe for concurrent use: callers that
// meet a module being loaded wait for it.
func function(d cuda.Device, t backend.DType, op backend.ReduceOp) (*cuda.Function, error) {
	modules.mu.Lock()
	if modules.m == nil {
		modules.m = make(map[moduleKey]*module)
	}
	k := moduleKey{d, t}
	m := modules.m[k]
	if m == nil {
		m = new(module)
		modules.m[k] = m
	}
	modules.mu.Unlock()
	m.once.Do(func() { m.err = m.load(d, t) })
	if m.err != nil {
		return nil, m.err
	}
	return m.fns[op], nil
}

// load compiles t's module on device d and takes its kernels.
func (m *module) load(d cuda.Device, t backend.DType) error {
	mod, err := cuda.LoadPTX(d, PTX(t))
	if err != nil {
		return fmt.Errorf("devreduce: loading the %v kernels on %v: %w", t, d, err)
	}
	for _, op := range ops {
		if !op.AppliesTo(t) {
			continue
		}
		f, err := mod.Function(Name(t, op))
		if err != nil {
			return errors.Join(fmt.Errorf("devreduce: the %v module on %v: %w", t, d, err), mod.Unload())
		}
		m.fns[op] = f
	}
	return nil
}
