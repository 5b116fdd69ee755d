//go:build cgo

package cuda

// This file, driver.c and driver.h are the only place the package touches
// C; driver_nocgo.go stands in for them when cgo is off.
//
// The CUDA driver is loaded at run time with dlopen (driver.c), so the
// package builds and links on machines without CUDA (and without cuda.h:
// the few types and prototypes it needs are in driver.h). The C wrappers
// make one driver call each, with the device's primary context current for
// that one call: the Go side never depends on, nor changes, thread state.

/*
#cgo LDFLAGS: -ldl

#include <stdlib.h>

#include "driver.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// maxLaunchArgs is the most kernel arguments Launch passes.
const maxLaunchArgs = C.COURIER_CUDA_MAX_ARGS

// driver is one loaded copy of the CUDA driver library.
type driver struct {
	c    *C.courier_cuda
	path string
}

// load opens the driver library at path, looks up every entry point and
// calls cuInit(0). It does not touch the package's cached driver, so tests
// can load any path. Errors match ErrNotSupported when the library
// cannot be loaded or lacks an entry point (the loader's reason is in the
// message), and are an *Error from cuInit otherwise (one that matches
// ErrNotSupported when the reason is that there is no usable device).
func load(path string) (*driver, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var errbuf [1024]C.char
	var code C.int
	c := C.courier_cuda_open(cpath, &errbuf[0], C.size_t(len(errbuf)), &code)
	if c == nil {
		return nil, fmt.Errorf("cuda: %w: %s", ErrNotSupported, C.GoString(&errbuf[0]))
	}
	d := &driver{c: c, path: path}
	if code != 0 {
		err := d.error(int(code), "cuInit")
		d.close()
		return nil, err
	}
	return d, nil
}

// close unloads the library. Only tests call it, on drivers from load.
func (d *driver) close() {
	if d.c != nil {
		C.courier_cuda_close(d.c)
		d.c = nil
	}
}

// error builds the *Error for a CUresult, named by the driver itself.
func (d *driver) error(code int, op string) error {
	var name, msg *C.char
	C.courier_error_text(d.c, C.int(code), &name, &msg)
	e := &Error{Code: code, Op: op}
	if name != nil {
		e.Name = C.GoString(name)
	}
	if msg != nil {
		e.Msg = C.GoString(msg)
	}
	return e.fill()
}

// check turns a wrapper's status into an error naming the driver function
// that failed.
func (d *driver) check(st C.courier_status, op string) error {
	if st.code == 0 {
		return nil
	}
	switch st.stage {
	case C.COURIER_STAGE_PUSH:
		op = "cuCtxPushCurrent"
	case C.COURIER_STAGE_POP:
		op = "cuCtxPopCurrent"
	case C.COURIER_STAGE_SYNC:
		op = "cuStreamSynchronize"
	}
	return d.error(int(st.code), op)
}

// ready maps CUDA_ERROR_NOT_READY to false, success to true.
func (d *driver) ready(st C.courier_status, op string) (bool, error) {
	if st.code == cudaErrorNotReady && st.stage == C.COURIER_STAGE_CALL {
		return false, nil
	}
	if err := d.check(st, op); err != nil {
		return false, err
	}
	return true, nil
}

func (d *driver) symbol(name string) uintptr {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return uintptr(C.courier_cuda_symbol(d.c, cname))
}

func (d *driver) driverVersion() (int, error) {
	var v C.int
	return int(v), d.check(C.courier_driver_version(d.c, &v), "cuDriverGetVersion")
}

func (d *driver) deviceCount() (int, error) {
	var n C.int
	return int(n), d.check(C.courier_device_count(d.c, &n), "cuDeviceGetCount")
}

func (d *driver) deviceGet(ordinal int) (int32, error) {
	var dev C.int
	return int32(dev), d.check(C.courier_device_get(d.c, C.int(ordinal), &dev), "cuDeviceGet")
}

func (d *driver) deviceName(dev int32) (string, error) {
	var buf [256]C.char
	if err := d.check(C.courier_device_name(d.c, C.int(dev), &buf[0], C.int(len(buf)-1)), "cuDeviceGetName"); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

func (d *driver) deviceTotalMem(dev int32) (int64, error) {
	var n C.int64_t
	return int64(n), d.check(C.courier_device_total_mem(d.c, C.int(dev), &n), "cuDeviceTotalMem")
}

func (d *driver) devicePCIBusID(dev int32) (string, error) {
	var buf [64]C.char
	if err := d.check(C.courier_device_pci_bus_id(d.c, C.int(dev), &buf[0], C.int(len(buf)-1)), "cuDeviceGetPCIBusId"); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

func (d *driver) deviceAttribute(dev int32, attr int) (int, error) {
	var v C.int
	return int(v), d.check(C.courier_device_attribute(d.c, C.int(dev), C.int(attr), &v), "cuDeviceGetAttribute")
}

func (d *driver) primaryCtxRetain(dev int32) (uintptr, error) {
	var ctx C.uintptr_t
	return uintptr(ctx), d.check(C.courier_primary_ctx_retain(d.c, C.int(dev), &ctx), "cuDevicePrimaryCtxRetain")
}

func (d *driver) ctxSynchronize(ctx uintptr) error {
	return d.check(C.courier_ctx_synchronize(d.c, C.uintptr_t(ctx)), "cuCtxSynchronize")
}

func (d *driver) memAlloc(ctx uintptr, bytes int64) (uintptr, error) {
	var p C.uint64_t
	return uintptr(p), d.check(C.courier_mem_alloc(d.c, C.uintptr_t(ctx), C.uint64_t(bytes), &p), "cuMemAlloc")
}

func (d *driver) memFree(ctx, p uintptr) error {
	return d.check(C.courier_mem_free(d.c, C.uintptr_t(ctx), C.uint64_t(p)), "cuMemFree")
}

func (d *driver) memGetAddressRange(ctx, p uintptr) (uintptr, int64, error) {
	r := C.courier_mem_range(d.c, C.uintptr_t(ctx), C.uint64_t(p)) // by value: nothing escapes
	return uintptr(r.base), int64(r.bytes), d.check(r.st, "cuMemGetAddressRange")
}

func (d *driver) ipcGetMemHandle(ctx, p uintptr) (IPCHandle, error) {
	var h IPCHandle
	err := d.check(C.courier_ipc_get_mem_handle(d.c, C.uintptr_t(ctx), C.uint64_t(p), unsafe.Pointer(&h[0])), "cuIpcGetMemHandle")
	return h, err
}

func (d *driver) ipcOpenMemHandle(ctx uintptr, h IPCHandle) (uintptr, error) {
	var p C.uint64_t
	err := d.check(C.courier_ipc_open_mem_handle(d.c, C.uintptr_t(ctx), unsafe.Pointer(&h[0]), &p), "cuIpcOpenMemHandle")
	return uintptr(p), err
}

func (d *driver) ipcCloseMemHandle(ctx, p uintptr) error {
	return d.check(C.courier_ipc_close_mem_handle(d.c, C.uintptr_t(ctx), C.uint64_t(p)), "cuIpcCloseMemHandle")
}

// hostPtr is the address of b's first byte; callers never pass an empty b.
func hostPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func (d *driver) memcpyHtoD(ctx, dst uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.check(C.courier_memcpy_htod(d.c, C.uintptr_t(ctx), C.uint64_t(dst), hostPtr(src), C.uint64_t(len(src))), "cuMemcpyHtoD")
}

func (d *driver) memcpyDtoH(ctx uintptr, dst []byte, src uintptr) error {
	if len(dst) == 0 {
		return nil
	}
	return d.check(C.courier_memcpy_dtoh(d.c, C.uintptr_t(ctx), hostPtr(dst), C.uint64_t(src), C.uint64_t(len(dst))), "cuMemcpyDtoH")
}

func (d *driver) memcpyDtoD(ctx, dst, src uintptr, bytes int64) error {
	return d.check(C.courier_memcpy_dtod(d.c, C.uintptr_t(ctx), C.uint64_t(dst), C.uint64_t(src), C.uint64_t(bytes)), "cuMemcpyDtoD")
}

func (d *driver) memcpyPeer(dstCtx, dst, srcCtx, src uintptr, bytes int64) error {
	return d.check(C.courier_memcpy_peer(d.c, C.uintptr_t(dstCtx), C.uint64_t(dst), C.uintptr_t(srcCtx), C.uint64_t(src), C.uint64_t(bytes)), "cuMemcpyPeerAsync")
}

func (d *driver) memsetD8(ctx, p uintptr, v uint8, bytes int64) error {
	return d.check(C.courier_memset_d8(d.c, C.uintptr_t(ctx), C.uint64_t(p), C.uchar(v), C.uint64_t(bytes)), "cuMemsetD8")
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func (d *driver) memcpyHtoDAsync(ctx, dst uintptr, src []byte, stream uintptr, wait bool) error {
	if len(src) == 0 {
		return nil
	}
	return d.check(C.courier_memcpy_htod_async(d.c, C.uintptr_t(ctx), C.uint64_t(dst), hostPtr(src), C.uint64_t(len(src)), C.uintptr_t(stream), cbool(wait)), "cuMemcpyHtoDAsync")
}

func (d *driver) memcpyDtoHAsync(ctx uintptr, dst []byte, src, stream uintptr, wait bool) error {
	if len(dst) == 0 {
		return nil
	}
	return d.check(C.courier_memcpy_dtoh_async(d.c, C.uintptr_t(ctx), hostPtr(dst), C.uint64_t(src), C.uint64_t(len(dst)), C.uintptr_t(stream), cbool(wait)), "cuMemcpyDtoHAsync")
}

func (d *driver) memcpyDtoDAsync(ctx, dst, src uintptr, bytes int64, stream uintptr) error {
	return d.check(C.courier_memcpy_dtod_async(d.c, C.uintptr_t(ctx), C.uint64_t(dst), C.uint64_t(src), C.uint64_t(bytes), C.uintptr_t(stream)), "cuMemcpyDtoDAsync")
}

func (d *driver) memcpyPeerAsync(ctx, dstCtx, dst, srcCtx, src uintptr, bytes int64, stream uintptr) error {
	return d.check(C.courier_memcpy_peer_async(d.c, C.uintptr_t(ctx), C.uintptr_t(dstCtx), C.uint64_t(dst), C.uintptr_t(srcCtx), C.uint64_t(src), C.uint64_t(bytes), C.uintptr_t(stream)), "cuMemcpyPeerAsync")
}

func (d *driver) memsetD8Async(ctx, p uintptr, v uint8, bytes int64, stream uintptr) error {
	return d.check(C.courier_memset_d8_async(d.c, C.uintptr_t(ctx), C.uint64_t(p), C.uchar(v), C.uint64_t(bytes), C.uintptr_t(stream)), "cuMemsetD8Async")
}

// memHostAlloc returns page-locked C memory as a byte slice; Go's garbage
// collector neither moves nor frees it.
func (d *driver) memHostAlloc(ctx uintptr, bytes int64, flags uint32) ([]byte, error) {
	var p unsafe.Pointer
	if err := d.check(C.courier_mem_host_alloc(d.c, C.uintptr_t(ctx), C.uint64_t(bytes), C.uint(flags), &p), "cuMemHostAlloc"); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), bytes), nil
}

func (d *driver) memFreeHost(ctx uintptr, b []byte) error {
	return d.check(C.courier_mem_free_host(d.c, C.uintptr_t(ctx), hostPtr(b)), "cuMemFreeHost")
}

func (d *driver) memHostDevicePointer(ctx uintptr, b []byte) (uintptr, error) {
	var p C.uint64_t
	err := d.check(C.courier_mem_host_device_pointer(d.c, C.uintptr_t(ctx), hostPtr(b), &p), "cuMemHostGetDevicePointer")
	return uintptr(p), err
}

func (d *driver) streamWriteValue64(ctx, s, addr uintptr, v uint64) error {
	return d.check(C.courier_stream_write_value64(d.c, C.uintptr_t(ctx), C.uintptr_t(s), C.uint64_t(addr), C.uint64_t(v)), "cuStreamWriteValue64")
}

func (d *driver) streamWaitValue64(ctx, s, addr uintptr, v uint64) error {
	return d.check(C.courier_stream_wait_value64(d.c, C.uintptr_t(ctx), C.uintptr_t(s), C.uint64_t(addr), C.uint64_t(v)), "cuStreamWaitValue64")
}

func (d *driver) streamCreate(ctx uintptr, flags uint32) (uintptr, error) {
	var s C.uintptr_t
	return uintptr(s), d.check(C.courier_stream_create(d.c, C.uintptr_t(ctx), C.uint(flags), &s), "cuStreamCreate")
}

func (d *driver) streamDestroy(ctx, s uintptr) error {
	return d.check(C.courier_stream_destroy(d.c, C.uintptr_t(ctx), C.uintptr_t(s)), "cuStreamDestroy")
}

func (d *driver) streamSynchronize(ctx, s uintptr) error {
	return d.check(C.courier_stream_synchronize(d.c, C.uintptr_t(ctx), C.uintptr_t(s)), "cuStreamSynchronize")
}

func (d *driver) streamQuery(ctx, s uintptr) (bool, error) {
	return d.ready(C.courier_stream_query(d.c, C.uintptr_t(ctx), C.uintptr_t(s)), "cuStreamQuery")
}

func (d *driver) streamWaitEvent(ctx, s, e uintptr) error {
	return d.check(C.courier_stream_wait_event(d.c, C.uintptr_t(ctx), C.uintptr_t(s), C.uintptr_t(e)), "cuStreamWaitEvent")
}

func (d *driver) eventCreate(ctx uintptr, flags uint32) (uintptr, error) {
	var e C.uintptr_t
	return uintptr(e), d.check(C.courier_event_create(d.c, C.uintptr_t(ctx), C.uint(flags), &e), "cuEventCreate")
}

func (d *driver) eventDestroy(ctx, e uintptr) error {
	return d.check(C.courier_event_destroy(d.c, C.uintptr_t(ctx), C.uintptr_t(e)), "cuEventDestroy")
}

func (d *driver) eventRecord(ctx, e, s uintptr) error {
	return d.check(C.courier_event_record(d.c, C.uintptr_t(ctx), C.uintptr_t(e), C.uintptr_t(s)), "cuEventRecord")
}

func (d *driver) eventQuery(ctx, e uintptr) (bool, error) {
	return d.ready(C.courier_event_query(d.c, C.uintptr_t(ctx), C.uintptr_t(e)), "cuEventQuery")
}

func (d *driver) eventSynchronize(ctx, e uintptr) error {
	return d.check(C.courier_event_synchronize(d.c, C.uintptr_t(ctx), C.uintptr_t(e)), "cuEventSynchronize")
}

func (d *driver) eventElapsed(ctx, start, end uintptr) (float32, error) {
	var ms C.float
	return float32(ms), d.check(C.courier_event_elapsed(d.c, C.uintptr_t(ctx), C.uintptr_t(start), C.uintptr_t(end), &ms), "cuEventElapsedTime")
}

// moduleLoadData loads a PTX (or cubin/fatbin) image. A failure carries the
// JIT compiler's error log.
func (d *driver) moduleLoadData(ctx uintptr, image string) (uintptr, error) {
	cimage := C.CString(image)
	defer C.free(unsafe.Pointer(cimage))
	var log [8192]C.char
	var m C.uintptr_t
	err := d.check(C.courier_module_load(d.c, C.uintptr_t(ctx), cimage, &log[0], C.uint(len(log)-1), &m), "cuModuleLoadDataEx")
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Log = C.GoString(&log[0])
		}
		return 0, err
	}
	return uintptr(m), nil
}

func (d *driver) moduleUnload(ctx, m uintptr) error {
	return d.check(C.courier_module_unload(d.c, C.uintptr_t(ctx), C.uintptr_t(m)), "cuModuleUnload")
}

func (d *driver) moduleGetFunction(ctx, m uintptr, name string) (uintptr, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.uintptr_t
	return uintptr(f), d.check(C.courier_module_get_function(d.c, C.uintptr_t(ctx), C.uintptr_t(m), cname, &f), "cuModuleGetFunction")
}

// launchKernel passes slots[i] as kernel argument i (each value in the
// first bytes of its 8-byte slot).
func (d *driver) launchKernel(ctx, f uintptr, grid, block [3]uint32, shared uint32, stream uintptr, slots []uint64) error {
	var p *C.uint64_t
	if len(slots) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(unsafe.SliceData(slots)))
	}
	return d.check(C.courier_launch(d.c, C.uintptr_t(ctx), C.uintptr_t(f),
		C.uint(grid[0]), C.uint(grid[1]), C.uint(grid[2]),
		C.uint(block[0]), C.uint(block[1]), C.uint(block[2]),
		C.uint(shared), C.uintptr_t(stream), p, C.int(len(slots))), "cuLaunchKernel")
}
