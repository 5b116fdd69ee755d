package cuda

import (
	"encoding/binary"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
)

// Module is GPU code loaded onto one device (a CUmodule), from which
// kernels are taken with [Module.Function].
type Module struct {
	l   *lib
	dev Device
	ctx uintptr
	h   atomic.Uintptr
}

// LoadPTX compiles PTX text for device d and loads it (cuModuleLoadDataEx;
// the driver's JIT compiler targets the device, so PTX written for
// .target sm_70 runs on any device of capability 7.0 or above). It blocks
// the CPU while the driver compiles. A compilation error is an [*Error]
// whose Log holds the compiler's messages.
func LoadPTX(d Device, ptx string) (*Module, error) {
	const op = "LoadPTX"
	if strings.TrimSpace(ptx) == "" {
		return nil, errInvalid(op, "empty PTX")
	}
	if strings.IndexByte(ptx, 0) >= 0 {
		return nil, errInvalid(op, "PTX text contains a NUL byte")
	}
	l, ctx, err := ctxFor(d, op)
	if err != nil {
		return nil, err
	}
	h, err := l.drv.moduleLoadData(ctx, ptx)
	if err != nil {
		return nil, err
	}
	m := &Module{l: l, dev: d, ctx: ctx}
	m.h.Store(h)
	return m, nil
}

func (m *Module) use(op string) (uintptr, error) {
	if m == nil {
		return 0, errInvalid(op, "nil module")
	}
	h := m.h.Load()
	if h == 0 {
		return 0, errInvalid(op, "module unloaded")
	}
	return h, nil
}

// Device returns the device the module is loaded on.
func (m *Module) Device() Device {
	if m == nil {
		return 0
	}
	return m.dev
}

// Function returns the kernel named name (its .entry name in PTX; for
// CUDA C++, the mangled name unless declared extern "C").
func (m *Module) Function(name string) (*Function, error) {
	const op = "Module.Function"
	h, err := m.use(op)
	if err != nil {
		return nil, err
	}
	if name == "" || strings.IndexByte(name, 0) >= 0 {
		return nil, errInvalid(op, "bad kernel name %q", name)
	}
	f, err := m.l.drv.moduleGetFunction(m.ctx, h, name)
	if err != nil {
		return nil, err
	}
	return &Function{m: m, h: f, name: name}, nil
}

// Unload unloads the module (cuModuleUnload). Kernels already launched
// finish; its Functions cannot be launched after it. Unload is idempotent.
func (m *Module) Unload() error {
	if m == nil {
		return nil
	}
	h := m.h.Swap(0)
	if h == 0 {
		return nil
	}
	return m.l.drv.moduleUnload(m.ctx, h)
}

// Function is a kernel of a loaded [Module] (a CUfunction).
type Function struct {
	m    *Module
	h    uintptr
	name string
}

// Name returns the kernel's name.
func (f *Function) Name() string {
	if f == nil {
		return ""
	}
	return f.name
}

// Handle returns the CUfunction, for C code; 0 for a nil Function.
func (f *Function) Handle() uintptr {
	if f == nil {
		return 0
	}
	return f.h
}

// Launch queues the kernel on stream s, which must be on the module's
// device, with a grid of grid blocks of block threads (x, y, z; none may
// be 0) and sharedBytes of dynamic shared memory per block
// (cuLaunchKernel). It returns at once; the kernel runs after the work
// queued on s before it. Errors in the kernel itself show up later, in
// [Stream.Synchronize] or [Event.Query].
//
// The arguments are the kernel's parameters in order, each of one of
// these types:
//
//	uintptr             a device pointer (.u64 in PTX)
//	cuda.Slice[T]       passed as its device pointer (.u64)
//	int32, uint32       .s32, .u32
//	int64, uint64       .s64, .u64
//	float32, float64    .f32, .f64
//
// Go's int and uint are refused, since their size in the kernel would be a
// guess; so is any other type, with an error naming the argument's
// position and type. The values are copied before Launch returns, so
// they may be changed at once; the memory they point to must stay
// allocated until the kernel has run.
func (f *Function) Launch(grid, block [3]uint32, sharedBytes uint32, s *Stream, args ...any) error {
	const op = "Function.Launch"
	for i := range 3 {
		if grid[i] == 0 || block[i] == 0 {
			return errInvalid(op, "grid %v and block %v must have no zero dimension", grid, block)
		}
	}
	slots, err := marshalArgs(op, args)
	if err != nil {
		return err
	}
	if f == nil {
		return errInvalid(op, "nil function")
	}
	if _, err := f.m.use(op); err != nil {
		return err
	}
	sh, err := s.use(op, f.m.dev)
	if err != nil {
		return err
	}
	return f.m.l.drv.launchKernel(s.ctx, f.h, grid, block, sharedBytes, sh, slots)
}

// marshalArgs lays the kernel arguments out one per 8-byte slot, each
// value in its slot's first bytes, as the driver reads them.
func marshalArgs(op string, args []any) ([]uint64, error) {
	if len(args) > maxLaunchArgs {
		return nil, errInvalid(op, "%d arguments, more than %d", len(args), maxLaunchArgs)
	}
	if len(args) == 0 {
		return nil, nil
	}
	slots := make([]uint64, len(args))
	var b [8]byte
	for i, a := range args {
		clear(b[:])
		switch v := a.(type) {
		case uintptr:
			binary.NativeEndian.PutUint64(b[:], uint64(v))
		case int32:
			binary.NativeEndian.PutUint32(b[:], uint32(v))
		case uint32:
			binary.NativeEndian.PutUint32(b[:], v)
		case int64:
			binary.NativeEndian.PutUint64(b[:], uint64(v))
		case uint64:
			binary.NativeEndian.PutUint64(b[:], v)
		case float32:
			binary.NativeEndian.PutUint32(b[:], math.Float32bits(v))
		case float64:
			binary.NativeEndian.PutUint64(b[:], math.Float64bits(v))
		case devicePointer:
			// Only Slice[T] values implement devicePointer; a *Slice[T]
			// does too, through its method set, and may be nil.
			if reflect.TypeOf(a).Kind() == reflect.Pointer {
				return nil, errInvalid(op, "argument %d has type %T: pass the Slice itself, not a pointer to it", i, a)
			}
			binary.NativeEndian.PutUint64(b[:], uint64(v.devicePtr()))
		case int, uint:
			return nil, errInvalid(op, "argument %d has type %T: say its size in the kernel with int32/uint32 or int64/uint64", i, a)
		default:
			return nil, errInvalid(op, "argument %d has type %T: want uintptr, a cuda.Slice, int32, uint32, int64, uint64, float32 or float64", i, a)
		}
		slots[i] = binary.NativeEndian.Uint64(b[:])
	}
	return slots, nil
}
