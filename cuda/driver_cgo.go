//go:build cgo

package cuda

// This file and driver_nocgo.go are the only place the package touches C.
//
// The CUDA driver is loaded at run time with dlopen, so the package builds
// and links on machines without CUDA (and without cuda.h: the few types and
// prototypes it needs are written below). Every entry point is looked up
// once, into a struct of function pointers; small static wrappers call
// through them.
//
// The CUDA current context is per OS thread and goroutines move between
// threads, so every wrapper that needs a context pushes the device's
// primary context, makes its driver call and pops the context again, all in
// one C call: the Go side never depends on, nor changes, thread state.

/*
#cgo LDFLAGS: -ldl

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The driver types courier uses, as cuda.h declares them on 64-bit Linux.
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef int CUjit_option;

enum {
	COURIER_CU_JIT_ERROR_LOG_BUFFER = 5,
	COURIER_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
	COURIER_CUDA_MAX_ARGS = 256,
	COURIER_CUDA_NOT_SUPPORTED = 801, // CUDA_ERROR_NOT_SUPPORTED
};

// X(field, symbol, parameters): every entry point courier needs. A library
// that lacks one of them is refused at load time.
#define COURIER_CUDA_FUNCS(X) \
	X(cuInit, "cuInit", (unsigned int flags)) \
	X(cuDriverGetVersion, "cuDriverGetVersion", (int *version)) \
	X(cuGetErrorName, "cuGetErrorName", (CUresult code, const char **name)) \
	X(cuGetErrorString, "cuGetErrorString", (CUresult code, const char **msg)) \
	X(cuDeviceGetCount, "cuDeviceGetCount", (int *count)) \
	X(cuDeviceGet, "cuDeviceGet", (CUdevice *dev, int ordinal)) \
	X(cuDeviceGetName, "cuDeviceGetName", (char *name, int len, CUdevice dev)) \
	X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", (size_t *bytes, CUdevice dev)) \
	X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", (char *id, int len, CUdevice dev)) \
	X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *value, int attr, CUdevice dev)) \
	X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *ctx, CUdevice dev)) \
	X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext ctx)) \
	X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext *ctx)) \
	X(cuCtxSynchronize, "cuCtxSynchronize", (void)) \
	X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *p, size_t bytes)) \
	X(cuMemFree, "cuMemFree_v2", (CUdeviceptr p)) \
	X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr dst, const void *src, size_t bytes)) \
	X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *dst, CUdeviceptr src, size_t bytes)) \
	X(cuMemcpyDtoD, "cuMemcpyDtoD_v2", (CUdeviceptr dst, CUdeviceptr src, size_t bytes)) \
	X(cuMemcpyPeer, "cuMemcpyPeer", (CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t bytes)) \
	X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", (CUdeviceptr dst, const void *src, size_t bytes, CUstream s)) \
	X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void *dst, CUdeviceptr src, size_t bytes, CUstream s)) \
	X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s)) \
	X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", (CUdeviceptr dst, CUcontext dstCtx, CUdeviceptr src, CUcontext srcCtx, size_t bytes, CUstream s)) \
	X(cuMemsetD8, "cuMemsetD8_v2", (CUdeviceptr p, unsigned char v, size_t n)) \
	X(cuMemsetD8Async, "cuMemsetD8Async", (CUdeviceptr p, unsigned char v, size_t n, CUstream s)) \
	X(cuMemHostAlloc, "cuMemHostAlloc", (void **p, size_t bytes, unsigned int flags)) \
	X(cuMemFreeHost, "cuMemFreeHost", (void *p)) \
	X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", (CUdeviceptr *d, void *p, unsigned int flags)) \
	X(cuStreamCreate, "cuStreamCreate", (CUstream *s, unsigned int flags)) \
	X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream s)) \
	X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream s)) \
	X(cuStreamQuery, "cuStreamQuery", (CUstream s)) \
	X(cuStreamWaitEvent, "cuStreamWaitEvent", (CUstream s, CUevent e, unsigned int flags)) \
	X(cuEventCreate, "cuEventCreate", (CUevent *e, unsigned int flags)) \
	X(cuEventDestroy, "cuEventDestroy_v2", (CUevent e)) \
	X(cuEventRecord, "cuEventRecord", (CUevent e, CUstream s)) \
	X(cuEventQuery, "cuEventQuery", (CUevent e)) \
	X(cuEventSynchronize, "cuEventSynchronize", (CUevent e)) \
	X(cuModuleLoadDataEx, "cuModuleLoadDataEx", (CUmodule *m, const void *image, unsigned int n, CUjit_option *opts, void **vals)) \
	X(cuModuleUnload, "cuModuleUnload", (CUmodule m)) \
	X(cuModuleGetFunction, "cuModuleGetFunction", (CUfunction *f, CUmodule m, const char *name)) \
	X(cuLaunchKernel, "cuLaunchKernel", (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, \
		unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **params, void **extra))

typedef struct {
	void *lib;
#define COURIER_FIELD(field, sym, params) CUresult (*field) params;
	COURIER_CUDA_FUNCS(COURIER_FIELD)
#undef COURIER_FIELD
	// cuEventElapsedTime_v2 (CUDA 12.8+) where the driver has it, else the
	// original entry point: the same signature.
	CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
	// Stream memory operations: the _v2 entry points (CUDA 11.7+) where the
	// driver has them, else the originals (the same signature); NULL when
	// the driver has neither, and the wrappers answer
	// CUDA_ERROR_NOT_SUPPORTED.
	CUresult (*cuStreamWriteValue64)(CUstream s, CUdeviceptr addr, uint64_t v, unsigned int flags);
	CUresult (*cuStreamWaitValue64)(CUstream s, CUdeviceptr addr, uint64_t v, unsigned int flags);
} courier_cuda;

// courier_cuda_open loads the library at path, looks up every entry point
// and calls cuInit(0). On failure it returns NULL and the reason in err
// (with *code the CUresult of cuInit when that is what failed, else 0).
static courier_cuda *courier_cuda_open(const char *path, char *err, size_t errlen, int *code) {
	*code = 0;
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e != NULL ? e : "dlopen failed");
		return NULL;
	}
	courier_cuda *c = calloc(1, sizeof *c);
	if (c == NULL) {
		dlclose(h);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->lib = h;
#define COURIER_LOAD(field, sym, params) \
	*(void **)(&c->field) = dlsym(h, sym); \
	if (c->field == NULL) { \
		snprintf(err, errlen, "%s: missing symbol %s (driver too old?)", path, sym); \
		free(c); \
		dlclose(h); \
		return NULL; \
	}
	COURIER_CUDA_FUNCS(COURIER_LOAD)
#undef COURIER_LOAD
	*(void **)(&c->cuEventElapsedTime) = dlsym(h, "cuEventElapsedTime_v2");
	if (c->cuEventElapsedTime == NULL) {
		*(void **)(&c->cuEventElapsedTime) = dlsym(h, "cuEventElapsedTime");
	}
	if (c->cuEventElapsedTime == NULL) {
		snprintf(err, errlen, "%s: missing symbol cuEventElapsedTime (driver too old?)", path);
		free(c);
		dlclose(h);
		return NULL;
	}
	*(void **)(&c->cuStreamWriteValue64) = dlsym(h, "cuStreamWriteValue64_v2");
	if (c->cuStreamWriteValue64 == NULL) {
		*(void **)(&c->cuStreamWriteValue64) = dlsym(h, "cuStreamWriteValue64");
	}
	*(void **)(&c->cuStreamWaitValue64) = dlsym(h, "cuStreamWaitValue64_v2");
	if (c->cuStreamWaitValue64 == NULL) {
		*(void **)(&c->cuStreamWaitValue64) = dlsym(h, "cuStreamWaitValue64");
	}
	// When cuInit fails, *code says so and the library stays loaded for
	// the caller to name the error (cuGetErrorName) and close it.
	*code = c->cuInit(0);
	return c;
}

static void courier_cuda_close(courier_cuda *c) {
	dlclose(c->lib);
	free(c);
}

static uintptr_t courier_cuda_symbol(const courier_cuda *c, const char *name) {
	return (uintptr_t)dlsym(c->lib, name);
}

// courier_status is the outcome of one wrapper: the CUresult and which step
// produced it.
typedef struct {
	int code;
	int stage;
} courier_status;

enum {
	COURIER_STAGE_CALL = 0, // the driver call itself
	COURIER_STAGE_PUSH = 1, // cuCtxPushCurrent
	COURIER_STAGE_POP = 2,  // cuCtxPopCurrent
	COURIER_STAGE_SYNC = 3, // the cuStreamSynchronize after the call
};

#define COURIER_PUSH(c, ctx) \
	courier_status st_ = {0, COURIER_STAGE_CALL}; \
	{ \
		CUresult r_ = (c)->cuCtxPushCurrent((CUcontext)(ctx)); \
		if (r_ != 0) { \
			st_.code = r_; \
			st_.stage = COURIER_STAGE_PUSH; \
			return st_; \
		} \
	}

#define COURIER_POP(c) \
	{ \
		CUcontext old_; \
		CUresult r_ = (c)->cuCtxPopCurrent(&old_); \
		if (st_.code == 0 && r_ != 0) { \
			st_.code = r_; \
			st_.stage = COURIER_STAGE_POP; \
		} \
	} \
	return st_;

// COURIER_CTX_CALL runs one driver call with ctx current.
#define COURIER_CTX_CALL(c, ctx, call) \
	COURIER_PUSH(c, ctx) \
	st_.code = (call); \
	COURIER_POP(c)

// COURIER_CTX_CALL_SYNC runs one driver call with ctx current and, when it
// succeeded and sync is set, waits for stream s.
#define COURIER_CTX_CALL_SYNC(c, ctx, call, sync, s) \
	COURIER_PUSH(c, ctx) \
	st_.code = (call); \
	if (st_.code == 0 && (sync)) { \
		st_.code = (c)->cuStreamSynchronize((CUstream)(s)); \
		if (st_.code != 0) st_.stage = COURIER_STAGE_SYNC; \
	} \
	COURIER_POP(c)

static courier_status courier_plain(CUresult r) {
	courier_status st = {r, COURIER_STAGE_CALL};
	return st;
}

static void courier_error_text(const courier_cuda *c, int code, const char **name, const char **msg) {
	*name = NULL;
	*msg = NULL;
	if (c->cuGetErrorName(code, name) != 0) *name = NULL;
	if (c->cuGetErrorString(code, msg) != 0) *msg = NULL;
}

static courier_status courier_driver_version(const courier_cuda *c, int *v) {
	return courier_plain(c->cuDriverGetVersion(v));
}

static courier_status courier_device_count(const courier_cuda *c, int *n) {
	return courier_plain(c->cuDeviceGetCount(n));
}

static courier_status courier_device_get(const courier_cuda *c, int ordinal, int *dev) {
	CUdevice d = 0;
	CUresult r = c->cuDeviceGet(&d, ordinal);
	*dev = d;
	return courier_plain(r);
}

static courier_status courier_device_name(const courier_cuda *c, int dev, char *buf, int len) {
	return courier_plain(c->cuDeviceGetName(buf, len, dev));
}

static courier_status courier_device_total_mem(const courier_cuda *c, int dev, int64_t *bytes) {
	size_t n = 0;
	CUresult r = c->cuDeviceTotalMem(&n, dev);
	*bytes = (int64_t)n;
	return courier_plain(r);
}

static courier_status courier_device_pci_bus_id(const courier_cuda *c, int dev, char *buf, int len) {
	return courier_plain(c->cuDeviceGetPCIBusId(buf, len, dev));
}

static courier_status courier_device_attribute(const courier_cuda *c, int dev, int attr, int *v) {
	return courier_plain(c->cuDeviceGetAttribute(v, attr, dev));
}

static courier_status courier_primary_ctx_retain(const courier_cuda *c, int dev, uintptr_t *ctx) {
	CUcontext x = NULL;
	CUresult r = c->cuDevicePrimaryCtxRetain(&x, dev);
	*ctx = (uintptr_t)x;
	return courier_plain(r);
}

static courier_status courier_ctx_synchronize(const courier_cuda *c, uintptr_t ctx) {
	COURIER_CTX_CALL(c, ctx, c->cuCtxSynchronize())
}

static courier_status courier_mem_alloc(const courier_cuda *c, uintptr_t ctx, uint64_t bytes, uint64_t *p) {
	CUdeviceptr d = 0;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuMemAlloc(&d, (size_t)bytes);
	*p = (uint64_t)d;
	COURIER_POP(c)
}

static courier_status courier_mem_free(const courier_cuda *c, uintptr_t ctx, uint64_t p) {
	COURIER_CTX_CALL(c, ctx, c->cuMemFree((CUdeviceptr)p))
}

// From pageable memory, cuMemcpyHtoD returns once the data is staged, before
// it reaches the device; waiting for the legacy default stream makes the
// copy complete, so work queued afterwards on any stream sees the data.
static courier_status courier_memcpy_htod(const courier_cuda *c, uintptr_t ctx, uint64_t dst, const void *src, uint64_t bytes) {
	COURIER_CTX_CALL_SYNC(c, ctx, c->cuMemcpyHtoD((CUdeviceptr)dst, src, (size_t)bytes), 1, 0)
}

static courier_status courier_memcpy_dtoh(const courier_cuda *c, uintptr_t ctx, void *dst, uint64_t src, uint64_t bytes) {
	COURIER_CTX_CALL(c, ctx, c->cuMemcpyDtoH(dst, (CUdeviceptr)src, (size_t)bytes))
}

// Device-to-device copies and memsets are asynchronous to the CPU even in
// their "synchronous" form, so the blocking wrappers wait for the legacy
// default stream (0), where those forms run.
static courier_status courier_memcpy_dtod(const courier_cuda *c, uintptr_t ctx, uint64_t dst, uint64_t src, uint64_t bytes) {
	COURIER_CTX_CALL_SYNC(c, ctx, c->cuMemcpyDtoD((CUdeviceptr)dst, (CUdeviceptr)src, (size_t)bytes), 1, 0)
}

static courier_status courier_memcpy_peer(const courier_cuda *c, uintptr_t dstCtx, uint64_t dst, uintptr_t srcCtx, uint64_t src, uint64_t bytes) {
	COURIER_CTX_CALL_SYNC(c, dstCtx,
		c->cuMemcpyPeerAsync((CUdeviceptr)dst, (CUcontext)dstCtx, (CUdeviceptr)src, (CUcontext)srcCtx, (size_t)bytes, (CUstream)0), 1, 0)
}

static courier_status courier_memset_d8(const courier_cuda *c, uintptr_t ctx, uint64_t p, unsigned char v, uint64_t bytes) {
	COURIER_CTX_CALL_SYNC(c, ctx, c->cuMemsetD8((CUdeviceptr)p, v, (size_t)bytes), 1, 0)
}

static courier_status courier_memcpy_htod_async(const courier_cuda *c, uintptr_t ctx, uint64_t dst, const void *src, uint64_t bytes, uintptr_t s, int sync) {
	COURIER_CTX_CALL_SYNC(c, ctx, c->cuMemcpyHtoDAsync((CUdeviceptr)dst, src, (size_t)bytes, (CUstream)s), sync, s)
}

static courier_status courier_memcpy_dtoh_async(const courier_cuda *c, uintptr_t ctx, void *dst, uint64_t src, uint64_t bytes, uintptr_t s, int sync) {
	COURIER_CTX_CALL_SYNC(c, ctx, c->cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, (size_t)bytes, (CUstream)s), sync, s)
}

static courier_status courier_memcpy_dtod_async(const courier_cuda *c, uintptr_t ctx, uint64_t dst, uint64_t src, uint64_t bytes, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, (size_t)bytes, (CUstream)s))
}

static courier_status courier_memcpy_peer_async(const courier_cuda *c, uintptr_t ctx, uintptr_t dstCtx, uint64_t dst, uintptr_t srcCtx, uint64_t src, uint64_t bytes, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx,
		c->cuMemcpyPeerAsync((CUdeviceptr)dst, (CUcontext)dstCtx, (CUdeviceptr)src, (CUcontext)srcCtx, (size_t)bytes, (CUstream)s))
}

static courier_status courier_memset_d8_async(const courier_cuda *c, uintptr_t ctx, uint64_t p, unsigned char v, uint64_t bytes, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuMemsetD8Async((CUdeviceptr)p, v, (size_t)bytes, (CUstream)s))
}

static courier_status courier_mem_host_alloc(const courier_cuda *c, uintptr_t ctx, uint64_t bytes, unsigned int flags, void **p) {
	COURIER_CTX_CALL(c, ctx, c->cuMemHostAlloc(p, (size_t)bytes, flags))
}

static courier_status courier_mem_free_host(const courier_cuda *c, uintptr_t ctx, void *p) {
	COURIER_CTX_CALL(c, ctx, c->cuMemFreeHost(p))
}

static courier_status courier_mem_host_device_pointer(const courier_cuda *c, uintptr_t ctx, void *p, uint64_t *d) {
	CUdeviceptr x = 0;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuMemHostGetDevicePointer(&x, p, 0);
	*d = (uint64_t)x;
	COURIER_POP(c)
}

static courier_status courier_stream_create(const courier_cuda *c, uintptr_t ctx, unsigned int flags, uintptr_t *s) {
	CUstream x = NULL;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuStreamCreate(&x, flags);
	*s = (uintptr_t)x;
	COURIER_POP(c)
}

static courier_status courier_stream_destroy(const courier_cuda *c, uintptr_t ctx, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuStreamDestroy((CUstream)s))
}

static courier_status courier_stream_synchronize(const courier_cuda *c, uintptr_t ctx, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuStreamSynchronize((CUstream)s))
}

static courier_status courier_stream_query(const courier_cuda *c, uintptr_t ctx, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuStreamQuery((CUstream)s))
}

static courier_status courier_stream_wait_event(const courier_cuda *c, uintptr_t ctx, uintptr_t s, uintptr_t e) {
	COURIER_CTX_CALL(c, ctx, c->cuStreamWaitEvent((CUstream)s, (CUevent)e, 0))
}

// CU_STREAM_WRITE_VALUE_DEFAULT: the write is preceded by a system-wide
// memory fence, so what the stream's earlier work wrote is visible to
// whoever sees the value.
static courier_status courier_stream_write_value64(const courier_cuda *c, uintptr_t ctx, uintptr_t s, uint64_t addr, uint64_t v) {
	if (c->cuStreamWriteValue64 == NULL) return courier_plain(COURIER_CUDA_NOT_SUPPORTED);
	COURIER_CTX_CALL(c, ctx, c->cuStreamWriteValue64((CUstream)s, (CUdeviceptr)addr, v, 0))
}

// CU_STREAM_WAIT_VALUE_GEQ (0): the stream waits until the word is at
// least v (compared as unsigned 64-bit integers).
static courier_status courier_stream_wait_value64(const courier_cuda *c, uintptr_t ctx, uintptr_t s, uint64_t addr, uint64_t v) {
	if (c->cuStreamWaitValue64 == NULL) return courier_plain(COURIER_CUDA_NOT_SUPPORTED);
	COURIER_CTX_CALL(c, ctx, c->cuStreamWaitValue64((CUstream)s, (CUdeviceptr)addr, v, 0))
}

static courier_status courier_event_create(const courier_cuda *c, uintptr_t ctx, unsigned int flags, uintptr_t *e) {
	CUevent x = NULL;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuEventCreate(&x, flags);
	*e = (uintptr_t)x;
	COURIER_POP(c)
}

static courier_status courier_event_destroy(const courier_cuda *c, uintptr_t ctx, uintptr_t e) {
	COURIER_CTX_CALL(c, ctx, c->cuEventDestroy((CUevent)e))
}

static courier_status courier_event_record(const courier_cuda *c, uintptr_t ctx, uintptr_t e, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuEventRecord((CUevent)e, (CUstream)s))
}

static courier_status courier_event_query(const courier_cuda *c, uintptr_t ctx, uintptr_t e) {
	COURIER_CTX_CALL(c, ctx, c->cuEventQuery((CUevent)e))
}

static courier_status courier_event_synchronize(const courier_cuda *c, uintptr_t ctx, uintptr_t e) {
	COURIER_CTX_CALL(c, ctx, c->cuEventSynchronize((CUevent)e))
}

static courier_status courier_event_elapsed(const courier_cuda *c, uintptr_t ctx, uintptr_t start, uintptr_t end, float *ms) {
	COURIER_CTX_CALL(c, ctx, c->cuEventElapsedTime(ms, (CUevent)start, (CUevent)end))
}

static courier_status courier_module_load(const courier_cuda *c, uintptr_t ctx, const char *image, char *log, unsigned int loglen, uintptr_t *m) {
	CUjit_option opts[2] = {COURIER_CU_JIT_ERROR_LOG_BUFFER, COURIER_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {log, (void *)(uintptr_t)loglen};
	CUmodule x = NULL;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuModuleLoadDataEx(&x, image, 2, opts, vals);
	*m = (uintptr_t)x;
	COURIER_POP(c)
}

static courier_status courier_module_unload(const courier_cuda *c, uintptr_t ctx, uintptr_t m) {
	COURIER_CTX_CALL(c, ctx, c->cuModuleUnload((CUmodule)m))
}

static courier_status courier_module_get_function(const courier_cuda *c, uintptr_t ctx, uintptr_t m, const char *name, uintptr_t *f) {
	CUfunction x = NULL;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuModuleGetFunction(&x, (CUmodule)m, name);
	*f = (uintptr_t)x;
	COURIER_POP(c)
}

// courier_launch passes kernel argument i as a pointer to slots[i]; the
// driver copies the values before cuLaunchKernel returns.
static courier_status courier_launch(const courier_cuda *c, uintptr_t ctx, uintptr_t f,
		unsigned int gx, unsigned int gy, unsigned int gz,
		unsigned int bx, unsigned int by, unsigned int bz,
		unsigned int shared, uintptr_t s, uint64_t *slots, int n) {
	void *params[COURIER_CUDA_MAX_ARGS];
	if (n < 0 || n > COURIER_CUDA_MAX_ARGS) {
		return courier_plain(1); // CUDA_ERROR_INVALID_VALUE; Go checks first
	}
	for (int i = 0; i < n; i++) {
		params[i] = &slots[i];
	}
	COURIER_CTX_CALL(c, ctx, c->cuLaunchKernel((CUfunction)f, gx, gy, gz, bx, by, bz, shared, (CUstream)s, n > 0 ? params : NULL, NULL))
}
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
