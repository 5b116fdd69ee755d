// Package cuda is the small part of the CUDA driver API that courier needs:
// devices, device memory as [Slice], page-locked host memory as [Pinned],
// copies, [Stream]s, [Event]s, and loading a PTX [Module] to launch a
// kernel.
//
// # Loading
//
// The driver library (libcuda.so.1, or the path in COURIER_CUDA_LIBRARY)
// is loaded at run time, on first use, once per process. Programs that use
// this package therefore build, link and run on machines without a GPU or
// CUDA: there every function returns an error matching [ErrNotSupported]
// (the same value as mp.ErrNotSupported) that says why, for example
//
//	cuda: not supported: libcuda.so.1: cannot open shared object file: No such file or directory
//
// A build with CGO_ENABLED=0 reports ErrNotSupported in the same way.
// Errors the driver itself returns are [*Error]s, named by the driver.
// Arguments that are wrong (lengths that differ, a nil stream, bounds out
// of range) are reported before any driver call, as errors matching
// [ErrInvalid]. The package never panics or logs.
//
// # Contexts and threads
//
// Each device is used through its primary context, retained on first use
// and kept for the life of the process. The CUDA "current context" is a
// property of an OS thread, and goroutines move between threads, so every
// call that needs a context makes the device's context current inside the
// same C call that does the work, and restores the thread's previous
// context before returning. Callers never set, and never depend on, a
// current context; any goroutine may use any device.
//
// # What blocks
//
// Every doc comment says what the CPU waits for, what the GPU waits for and
// when a buffer may be reused. In short: the blocking copies and [Memset]
// return when the work is done and run on the device's legacy default
// stream, which does not wait for work queued on a [Stream] (streams here
// are non-blocking); the Async forms and [Function.Launch] queue work on a
// Stream and return at once; [Stream.Synchronize], [Event.Synchronize] and
// [Device.Synchronize] block the CPU; [Stream.WaitEvent] makes the GPU wait
// without blocking the CPU.
package cuda

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

const (
	// LibraryEnv names the environment variable that overrides the
	// driver library's path.
	LibraryEnv = "COURIER_CUDA_LIBRARY"
	// DefaultLibrary is the driver library loaded when LibraryEnv is unset.
	DefaultLibrary = "libcuda.so.1"
)

// lib is the loaded driver with the package's own bookkeeping.
type lib struct {
	drv     *driver
	devices []deviceState
	mem     memTable
	bounces bouncePool // for the Async copies of pageable memory
}

// deviceState is one device: its CUdevice and, once retained, its primary
// context.
type deviceState struct {
	handle int32
	mu     sync.Mutex
	ctx    atomic.Uintptr
}

type libState struct {
	l   *lib
	err error
}

var (
	loadOnce sync.Once
	// current is the driver every entry point uses. Tests swap it.
	current atomic.Pointer[libState]
)

// libraryPath is $COURIER_CUDA_LIBRARY, or libcuda.so.1.
func libraryPath() string {
	if p := os.Getenv(LibraryEnv); p != "" {
		return p
	}
	return DefaultLibrary
}

// open loads the driver at path and learns its devices.
func open(path string) (*lib, error) {
	d, err := load(path)
	if err != nil {
		return nil, err
	}
	n, err := d.deviceCount()
	if err != nil {
		d.close()
		return nil, err
	}
	l := &lib{drv: d, devices: make([]deviceState, n)}
	for i := range l.devices {
		h, err := d.deviceGet(i)
		if err != nil {
			d.close()
			return nil, err
		}
		l.devices[i].handle = h
	}
	return l, nil
}

// getLib returns the process's driver, loading it on first use.
func getLib() (*lib, error) {
	s := current.Load()
	if s == nil {
		loadOnce.Do(func() {
			l, err := open(libraryPath())
			current.CompareAndSwap(nil, &libState{l: l, err: err})
		})
		s = current.Load()
		if s == nil {
			return nil, fmt.Errorf("cuda: %w: no driver loaded", ErrNotSupported)
		}
	}
	return s.l, s.err
}

// device returns the state of device d, or an error naming op when d is
// out of range.
func (l *lib) device(d Device, op string) (*deviceState, error) {
	if d < 0 || int(d) >= len(l.devices) {
		return nil, errInvalid(op, "device %d out of range (%d devices)", int(d), len(l.devices))
	}
	return &l.devices[d], nil
}

// context returns device d's primary context, retaining it on first use.
func (l *lib) context(d Device, op string) (uintptr, error) {
	st, err := l.device(d, op)
	if err != nil {
		return 0, err
	}
	if ctx := st.ctx.Load(); ctx != 0 {
		return ctx, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if ctx := st.ctx.Load(); ctx != 0 {
		return ctx, nil
	}
	ctx, err := l.drv.primaryCtxRetain(st.handle)
	if err != nil {
		return 0, err
	}
	st.ctx.Store(ctx)
	return ctx, nil
}

// ctxFor loads the driver and returns device d's primary context.
func ctxFor(d Device, op string) (*lib, uintptr, error) {
	l, err := getLib()
	if err != nil {
		return nil, 0, err
	}
	ctx, err := l.context(d, op)
	if err != nil {
		return nil, 0, err
	}
	return l, ctx, nil
}

// Init loads the CUDA driver library ($COURIER_CUDA_LIBRARY, or
// libcuda.so.1) and initializes it (cuInit). It runs once per process and
// its result is kept: later calls return the same error, and every other
// function of the package calls it implicitly, so calling Init is needed
// only to find out early whether CUDA works here.
//
// The error matches ErrNotSupported when the library is absent or
// unusable (the loader's reason is in the message), when there is no
// device, and when the package was built without cgo. Other driver
// failures are an [*Error].
func Init() error {
	_, err := getLib()
	return err
}

// DriverVersion returns the CUDA version the driver supports, as
// 1000*major + 10*minor (13000 for CUDA 13.0). It does not block.
func DriverVersion() (int, error) {
	l, err := getLib()
	if err != nil {
		return 0, err
	}
	return l.drv.driverVersion()
}

// DeviceCount returns the number of CUDA devices, learned once when the
// driver was loaded. Device ordinals run from 0 to DeviceCount()-1.
func DeviceCount() (int, error) {
	l, err := getLib()
	if err != nil {
		return 0, err
	}
	return len(l.devices), nil
}

// Symbol returns the address of an entry point of the loaded driver
// library, for C code in other packages that must call the driver inside
// its own C call (backend/nccl makes a context current in the same call
// that issues an NCCL group). The error matches ErrNotSupported
// when the library has no such symbol.
func Symbol(name string) (uintptr, error) {
	l, err := getLib()
	if err != nil {
		return 0, err
	}
	p := l.drv.symbol(name)
	if p == 0 {
		return 0, fmt.Errorf("cuda: %w: the driver has no symbol %s", ErrNotSupported, name)
	}
	return p, nil
}

// Device is a CUDA device ordinal: 0 to DeviceCount()-1. Methods on a
// device out of that range return an error matching ErrInvalid.
type Device int

// String returns "cuda:N".
func (d Device) String() string { return "cuda:" + strconv.Itoa(int(d)) }

func (d Device) handle(op string) (*lib, int32, error) {
	l, err := getLib()
	if err != nil {
		return nil, 0, err
	}
	st, err := l.device(d, op)
	if err != nil {
		return nil, 0, err
	}
	return l, st.handle, nil
}

// Name returns the device's product name, e.g. "NVIDIA H200".
func (d Device) Name() (string, error) {
	l, h, err := d.handle("Device.Name")
	if err != nil {
		return "", err
	}
	return l.drv.deviceName(h)
}

// TotalMemory returns the device's memory in bytes.
func (d Device) TotalMemory() (int64, error) {
	l, h, err := d.handle("Device.TotalMemory")
	if err != nil {
		return 0, err
	}
	return l.drv.deviceTotalMem(h)
}

// PCIBusID returns the device's PCI address, "domain:bus:device.function"
// in hexadecimal (e.g. "0000:19:00.0"); it tells which ranks share a GPU.
func (d Device) PCIBusID() (string, error) {
	l, h, err := d.handle("Device.PCIBusID")
	if err != nil {
		return "", err
	}
	return l.drv.devicePCIBusID(h)
}

// ComputeCapability returns the device's compute capability (9, 0 for an
// H100 or H200). PTX for .target sm_XY runs on devices of capability X.Y
// and above.
func (d Device) ComputeCapability() (major, minor int, err error) {
	l, h, err := d.handle("Device.ComputeCapability")
	if err != nil {
		return 0, 0, err
	}
	if major, err = l.drv.deviceAttribute(h, cuDeviceAttributeComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = l.drv.deviceAttribute(h, cuDeviceAttributeComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// PrimaryContext returns the device's primary context (a CUcontext),
// retained on first use and kept until the process exits. It is for C code
// in other packages that makes the context current inside its own C call
// (see [Symbol]); Go code never needs it.
func (d Device) PrimaryContext() (uintptr, error) {
	_, ctx, err := ctxFor(d, "Device.PrimaryContext")
	return ctx, err
}

// Synchronize blocks the CPU until all work queued on the device, on every
// stream, has finished (cuCtxSynchronize). It returns the first error of
// that work, if any.
func (d Device) Synchronize() error {
	l, ctx, err := ctxFor(d, "Device.Synchronize")
	if err != nil {
		return err
	}
	return l.drv.ctxSynchronize(ctx)
}
