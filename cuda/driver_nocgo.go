//go:build !cgo

package cuda

import (
	"fmt"
)

// Without cgo the driver cannot be loaded: load reports why, and so every
// entry point of the package does. The methods below exist only so that the
// package compiles; nothing reaches them, since no *driver is ever made.

// maxLaunchArgs is the most kernel arguments Launch passes.
const maxLaunchArgs = 256

type driver struct{}

func errNoCgo() error {
	return fmt.Errorf("cuda: %w: courier was built without cgo", ErrNotSupported)
}

func load(path string) (*driver, error) {
	return nil, fmt.Errorf("cuda: %w: courier was built without cgo (cannot load %s)", ErrNotSupported, path)
}

func (d *driver) close()                     {}
func (d *driver) symbol(name string) uintptr { return 0 }

func (d *driver) driverVersion() (int, error)                      { return 0, errNoCgo() }
func (d *driver) deviceCount() (int, error)                        { return 0, errNoCgo() }
func (d *driver) deviceGet(ordinal int) (int32, error)             { return 0, errNoCgo() }
func (d *driver) deviceName(dev int32) (string, error)             { return "", errNoCgo() }
func (d *driver) deviceTotalMem(dev int32) (int64, error)          { return 0, errNoCgo() }
func (d *driver) devicePCIBusID(dev int32) (string, error)         { return "", errNoCgo() }
func (d *driver) deviceAttribute(dev int32, attr int) (int, error) { return 0, errNoCgo() }
func (d *driver) primaryCtxRetain(dev int32) (uintptr, error)      { return 0, errNoCgo() }
func (d *driver) ctxSynchronize(ctx uintptr) error                 { return errNoCgo() }

func (d *driver) memAlloc(ctx uintptr, bytes int64) (uintptr, error)             { return 0, errNoCgo() }
func (d *driver) memFree(ctx, p uintptr) error                                   { return errNoCgo() }
func (d *driver) memcpyHtoD(ctx, dst uintptr, src []byte) error                  { return errNoCgo() }
func (d *driver) memcpyDtoH(ctx uintptr, dst []byte, src uintptr) error          { return errNoCgo() }
func (d *driver) memcpyDtoD(ctx, dst, src uintptr, bytes int64) error            { return errNoCgo() }
func (d *driver) memcpyPeer(dstCtx, dst, srcCtx, src uintptr, bytes int64) error { return errNoCgo() }
func (d *driver) memsetD8(ctx, p uintptr, v uint8, bytes int64) error            { return errNoCgo() }
func (d *driver) memcpyHtoDAsync(ctx, dst uintptr, src []byte, stream uintptr, wait bool) error {
	return errNoCgo()
}
func (d *driver) memcpyDtoHAsync(ctx uintptr, dst []byte, src, stream uintptr, wait bool) error {
	return errNoCgo()
}
func (d *driver) memcpyDtoDAsync(ctx, dst, src uintptr, bytes int64, stream uintptr) error {
	return errNoCgo()
}
func (d *driver) memcpyPeerAsync(ctx, dstCtx, dst, srcCtx, src uintptr, bytes int64, stream uintptr) error {
	return errNoCgo()
}
func (d *driver) memsetD8Async(ctx, p uintptr, v uint8, bytes int64, stream uintptr) error {
	return errNoCgo()
}
func (d *driver) memHostAlloc(ctx uintptr, bytes int64, flags uint32) ([]byte, error) {
	return nil, errNoCgo()
}
func (d *driver) memFreeHost(ctx uintptr, b []byte) error { return errNoCgo() }
func (d *driver) memGetAddressRange(ctx, p uintptr) (uintptr, int64, error) {
	return 0, 0, errNoCgo()
}
func (d *driver) ipcGetMemHandle(ctx, p uintptr) (IPCHandle, error)          { return IPCHandle{}, errNoCgo() }
func (d *driver) ipcOpenMemHandle(ctx uintptr, h IPCHandle) (uintptr, error) { return 0, errNoCgo() }
func (d *driver) ipcCloseMemHandle(ctx, p uintptr) error                     { return errNoCgo() }
func (d *driver) memHostDevicePointer(ctx uintptr, b []byte) (uintptr, error) {
	return 0, errNoCgo()
}
func (d *driver) streamWriteValue64(ctx, s, addr uintptr, v uint64) error { return errNoCgo() }
func (d *driver) streamWaitValue64(ctx, s, addr uintptr, v uint64) error  { return errNoCgo() }

func (d *driver) streamCreate(ctx uintptr, flags uint32) (uintptr, error) { return 0, errNoCgo() }
func (d *driver) streamDestroy(ctx, s uintptr) error                      { return errNoCgo() }
func (d *driver) streamSynchronize(ctx, s uintptr) error                  { return errNoCgo() }
func (d *driver) streamQuery(ctx, s uintptr) (bool, error)                { return false, errNoCgo() }
func (d *driver) streamWaitEvent(ctx, s, e uintptr) error                 { return errNoCgo() }
func (d *driver) eventCreate(ctx uintptr, flags uint32) (uintptr, error)  { return 0, errNoCgo() }
func (d *driver) eventDestroy(ctx, e uintptr) error                       { return errNoCgo() }
func (d *driver) eventRecord(ctx, e, s uintptr) error                     { return errNoCgo() }
func (d *driver) eventQuery(ctx, e uintptr) (bool, error)                 { return false, errNoCgo() }
func (d *driver) eventSynchronize(ctx, e uintptr) error                   { return errNoCgo() }
func (d *driver) eventElapsed(ctx, start, end uintptr) (float32, error)   { return 0, errNoCgo() }

func (d *driver) moduleLoadData(ctx uintptr, image string) (uintptr, error) { return 0, errNoCgo() }
func (d *driver) moduleUnload(ctx, m uintptr) error                         { return errNoCgo() }
func (d *driver) moduleGetFunction(ctx, m uintptr, name string) (uintptr, error) {
	return 0, errNoCgo()
}
func (d *driver) launchKernel(ctx, f uintptr, grid, block [3]uint32, shared uint32, stream uintptr, slots []uint64) error {
	return errNoCgo()
}
