//go:build !cgo

package nccl

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// Without cgo, libnccl cannot be loaded: openLibrary says why, and so
// Driver.Available and Driver.Open do. The methods below exist only so
// that the package compiles (their set is lib's, library.go); nothing
// reaches them, since no *library or *devHooks is ever made.

// library stands in for a loaded libnccl.
type library struct {
	path    string
	version int
}

func errNoCgo() error {
	return fmt.Errorf("nccl: %w: courier was built without cgo (CGO_ENABLED=0)", backend.ErrNotSupported)
}

// openLibrary reports that NCCL cannot be loaded without cgo.
func openLibrary(path string) (*library, error) {
	return nil, fmt.Errorf("nccl: %w: courier was built without cgo (CGO_ENABLED=0), so %s cannot be loaded", backend.ErrNotSupported, path)
}

// devHooks stands in for the C view of a device.
type devHooks struct{}

func newDevHooks(cuda.Device) (*devHooks, error) { return nil, errNoCgo() }

func (l *library) uniqueID() ([idBytes]byte, error) { return [idBytes]byte{}, errNoCgo() }
func (l *library) initComm(*devHooks, int, int, [idBytes]byte, bool) (uintptr, error) {
	return 0, errNoCgo()
}
func (l *library) asyncState(uintptr) (bool, error) { return false, errNoCgo() }
func (l *library) group(*devHooks, cOps, bool) (bool, time.Duration, error) {
	return false, 0, errNoCgo()
}

type after struct{}

func afterWrite(uintptr, uintptr, uint64) after { return after{} }
func afterRecord(uintptr, uintptr) after        { return after{} }

func (l *library) groupThen(*devHooks, cOps, bool, *after) (bool, time.Duration, bool, error) {
	return false, 0, false, errNoCgo()
}
func (l *library) abort(*devHooks, uintptr) error                           { return errNoCgo() }
func (h *devHooks) copyBytes(dst, src unsafe.Pointer, n int64) error        { return errNoCgo() }
func (h *devHooks) copyFrom(dst unsafe.Pointer, src uintptr, n int64) error { return errNoCgo() }

// cOps stands in for the array of C op descriptors.
type cOps []struct{}

func (o *cOps) add(uintptr, uintptr, uintptr, uint64, int, ncclType, bool) {}
func (o *cOps) addColl(uintptr, uintptr, backend.CollKind, uintptr, uintptr, uint64, ncclType, ncclRedOp, int) {
}
