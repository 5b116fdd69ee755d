package cuda

import (
	"fmt"
	"strconv"

	"github.com/courier-mp/courier/internal/errs"
)

// The sentinel errors of the package, matched with errors.Is. They are the
// same values as package mp's and package backend's (cuda.ErrNotSupported
// == mp.ErrNotSupported), so a program that uses both matches either name.
var (
	// ErrNotSupported: CUDA cannot work here: no driver library, no device,
	// a driver too old, a feature the device lacks, or a build without cgo.
	// The wrapped error says why.
	ErrNotSupported = errs.ErrNotSupported
	// ErrInvalid: an argument is wrong (lengths that differ, a nil or
	// destroyed stream, event or slice, bounds out of range), found before
	// any driver call.
	ErrInvalid = errs.ErrInvalid
)

// Error is a CUDA driver error: the result code a driver function
// returned, with the driver's own name and description of it.
//
// An Error whose code means that CUDA cannot work on this machine at all
// (no device, a driver too old for the library, the stub library, a
// feature the device lacks) matches ErrNotSupported with
// errors.Is. Others match nothing but themselves: compare Code, or Name,
// after errors.As.
type Error struct {
	Code int    // the CUresult, e.g. 2
	Name string // the driver's name for it, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Msg  string // the driver's description, e.g. "out of memory"
	Op   string // the driver function that returned it, e.g. "cuMemAlloc"
	// Log is the JIT compiler's error log when LoadPTX fails (empty
	// otherwise).
	Log string
}

// Error returns "cuda: Op: NAME (code): description", and the JIT log on
// the lines after it when there is one.
func (e *Error) Error() string {
	s := "cuda: " + e.Op + ": " + e.Name + " (" + strconv.Itoa(e.Code) + "): " + e.Msg
	if e.Log != "" {
		s += "\n" + e.Log
	}
	return s
}

// Is reports whether e matches target: ErrNotSupported for the
// codes that say CUDA cannot run here.
func (e *Error) Is(target error) bool {
	if target != ErrNotSupported {
		return false
	}
	switch e.Code {
	case cudaErrorStubLibrary, cudaErrorInsufficientDriver, cudaErrorNoDevice,
		cudaErrorNotSupported, cudaErrorSystemDriverMismatch, cudaErrorCompatNotSupportedOnDevice:
		return true
	}
	return false
}

// fill names codes the driver could not name.
func (e *Error) fill() *Error {
	if e.Name == "" {
		e.Name = "CUresult(" + strconv.Itoa(e.Code) + ")"
	}
	if e.Msg == "" {
		e.Msg = "unknown error"
	}
	return e
}

// CUresult values the package treats specially (from cuda.h).
const (
	cudaErrorInvalidValue               = 1
	cudaErrorStubLibrary                = 34
	cudaErrorInsufficientDriver         = 35
	cudaErrorNoDevice                   = 100
	cudaErrorNotReady                   = 600
	cudaErrorNotSupported               = 801
	cudaErrorSystemDriverMismatch       = 803
	cudaErrorCompatNotSupportedOnDevice = 804
)

// errInvalid is an argument error, found before any driver call; it
// matches ErrInvalid.
func errInvalid(op, format string, args ...any) error {
	return fmt.Errorf("cuda: %s: %s: %w", op, fmt.Sprintf(format, args...), ErrInvalid)
}
