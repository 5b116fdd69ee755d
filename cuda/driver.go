package cuda

// driverAPI is what the rest of the package needs from the C layer
// (driver_cgo.go over driver.c, or driver_nocgo.go when cgo is off). It
// exists so the two Go files cannot drift apart: both must give *driver
// exactly these methods.
//
// Handles (contexts, streams, events, modules, functions) and device
// pointers travel as uintptr; host memory travels as []byte, never empty.
// Every call that needs a context takes ctx, the device's primary context,
// and makes it current only for the duration of that one C call.
type driverAPI interface {
	close()
	symbol(name string) uintptr

	driverVersion() (int, error)
	deviceCount() (int, error)
	deviceGet(ordinal int) (int32, error)
	deviceName(dev int32) (string, error)
	deviceTotalMem(dev int32) (int64, error)
	devicePCIBusID(dev int32) (string, error)
	deviceAttribute(dev int32, attr int) (int, error)
	primaryCtxRetain(dev int32) (uintptr, error)
	ctxSynchronize(ctx uintptr) error

	memAlloc(ctx uintptr, bytes int64) (uintptr, error)
	memFree(ctx, p uintptr) error
	memcpyHtoD(ctx, dst uintptr, src []byte) error
	memcpyDtoH(ctx uintptr, dst []byte, src uintptr) error
	memcpyDtoD(ctx, dst, src uintptr, bytes int64) error
	memcpyPeer(dstCtx, dst, srcCtx, src uintptr, bytes int64) error
	memsetD8(ctx, p uintptr, v uint8, bytes int64) error
	memcpyHtoDAsync(ctx, dst uintptr, src []byte, stream uintptr, wait bool) error
	memcpyDtoHAsync(ctx uintptr, dst []byte, src, stream uintptr, wait bool) error
	memcpyDtoDAsync(ctx, dst, src uintptr, bytes int64, stream uintptr) error
	memcpyPeerAsync(ctx, dstCtx, dst, srcCtx, src uintptr, bytes int64, stream uintptr) error
	memsetD8Async(ctx, p uintptr, v uint8, bytes int64, stream uintptr) error
	memHostAlloc(ctx uintptr, bytes int64, flags uint32) ([]byte, error)
	memFreeHost(ctx uintptr, b []byte) error
	memHostDevicePointer(ctx uintptr, b []byte) (uintptr, error)
	memGetAddressRange(ctx, p uintptr) (base uintptr, bytes int64, err error)
	ipcGetMemHandle(ctx, p uintptr) (IPCHandle, error)
	ipcOpenMemHandle(ctx uintptr, h IPCHandle) (uintptr, error)
	ipcCloseMemHandle(ctx, p uintptr) error

	streamCreate(ctx uintptr, flags uint32) (uintptr, error)
	streamDestroy(ctx, s uintptr) error
	streamSynchronize(ctx, s uintptr) error
	streamQuery(ctx, s uintptr) (bool, error)
	streamWaitEvent(ctx, s, e uintptr) error
	streamWriteValue64(ctx, s, addr uintptr, v uint64) error
	streamWaitValue64(ctx, s, addr uintptr, v uint64) error
	eventCreate(ctx uintptr, flags uint32) (uintptr, error)
	eventDestroy(ctx, e uintptr) error
	eventRecord(ctx, e, s uintptr) error
	eventQuery(ctx, e uintptr) (bool, error)
	eventSynchronize(ctx, e uintptr) error
	eventElapsed(ctx, start, end uintptr) (float32, error)

	moduleLoadData(ctx uintptr, image string) (uintptr, error)
	moduleUnload(ctx, m uintptr) error
	moduleGetFunction(ctx, m uintptr, name string) (uintptr, error)
	launchKernel(ctx, f uintptr, grid, block [3]uint32, shared uint32, stream uintptr, slots []uint64) error
}

var _ driverAPI = (*driver)(nil)

// Driver constants (values from cuda.h).
const (
	cuStreamNonBlocking     = 0x1 // CU_STREAM_NON_BLOCKING
	cuEventDefault          = 0x0 // CU_EVENT_DEFAULT
	cuEventDisableTiming    = 0x2 // CU_EVENT_DISABLE_TIMING
	cuMemHostAllocPortable  = 0x1 // CU_MEMHOSTALLOC_PORTABLE
	cuMemHostAllocDeviceMap = 0x2 // CU_MEMHOSTALLOC_DEVICEMAP

	cuDeviceAttributeComputeCapabilityMajor = 75
	cuDeviceAttributeComputeCapabilityMinor = 76
)
