//go:build cgo

// driver.c: the loader of the CUDA driver and courier's wrappers around its
// entry points (declared in driver.h); cgo compiles it into package cuda.
//
// The CUDA driver is loaded at run time with dlopen, so the package builds
// and links on machines without CUDA. Every entry point is looked up once,
// into a struct of function pointers; small wrappers call through them.
//
// The CUDA current context is per OS thread and goroutines move between
// threads, so every wrapper that needs a context pushes the device's
// primary context, makes its driver call and pops the context again, all in
// one C call.

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver.h"

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

struct courier_cuda {
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
	// Interprocess memory handles: NULL when the driver lacks them, and
	// the wrappers answer CUDA_ERROR_NOT_SUPPORTED.
	CUresult (*cuIpcGetMemHandle)(CUipcMemHandle *h, CUdeviceptr p);
	CUresult (*cuIpcOpenMemHandle)(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags);
	CUresult (*cuIpcCloseMemHandle)(CUdeviceptr p);
	CUresult (*cuMemGetAddressRange)(CUdeviceptr *base, size_t *size, CUdeviceptr p);
};

courier_cuda *courier_cuda_open(const char *path, char *err, size_t errlen, int *code) {
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
	*(void **)(&c->cuIpcGetMemHandle) = dlsym(h, "cuIpcGetMemHandle");
	*(void **)(&c->cuIpcOpenMemHandle) = dlsym(h, "cuIpcOpenMemHandle_v2");
	if (c->cuIpcOpenMemHandle == NULL) {
		*(void **)(&c->cuIpcOpenMemHandle) = dlsym(h, "cuIpcOpenMemHandle");
	}
	*(void **)(&c->cuIpcCloseMemHandle) = dlsym(h, "cuIpcCloseMemHandle");
	*(void **)(&c->cuMemGetAddressRange) = dlsym(h, "cuMemGetAddressRange_v2");
	// When cuInit fails, *code says so and the library stays loaded for
	// the caller to name the error (cuGetErrorName) and close it.
	*code = c->cuInit(0);
	return c;
}

void courier_cuda_close(courier_cuda *c) {
	dlclose(c->lib);
	free(c);
}

uintptr_t courier_cuda_symbol(const courier_cuda *c, const char *name) {
	return (uintptr_t)dlsym(c->lib, name);
}

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

void courier_error_text(const courier_cuda *c, int code, const char **name, const char **msg) {
	*name = NULL;
	*msg = NULL;
	if (c->cuGetErrorName(code, name) != 0) *name = NULL;
	if (c->cuGetErrorString(code, msg) != 0) *msg = NULL;
}

courier_status courier_driver_version(const courier_cuda *c, int *v) {
	return courier_plain(c->cuDriverGetVersion(v));
}

courier_status courier_device_count(const courier_cuda *c, int *n) {
	return courier_plain(c->cuDeviceGetCount(n));
}

courier_status courier_device_get(const courier_cuda *c, int ordinal, int *dev) {
	CUdevice d = 0;
	CUresult r = c->cuDeviceGet(&d, ordinal);
	*dev = d;
	return courier_plain(r);
}

courier_status courier_device_name(const courier_cuda *c, int dev, char *buf, int len) {
	return courier_plain(c->cuDeviceGetName(buf, len, dev));
}

courier_status courier_device_total_mem(const courier_cuda *c, int dev, int64_t *bytes) {
	size_t n = 0;
	CUresult r = c->cuDeviceTotalMem(&n, dev);
	*bytes = (int64_t)n;
	return courier_plain(r);
}

courier_status courier_device_pci_bus_id(const courier_cuda *c, int dev, char *buf, int len) {
	return courier_plain(c->cuDeviceGetPCIBusId(buf, len, dev));
}

courier_status courier_device_attribute(const courier_cuda *c, int dev, int attr, int *v) {
	return courier_plain(c->cuDeviceGetAttribute(v, attr, dev));
}

courier_status courier_primary_ctx_retain(const courier_cuda *c, int dev, uintptr_t *ctx) {
	CUcontext x = NULL;
	CUresult r = c->cuDevicePrimaryCtxRetain(&x, dev);
	*ctx = (uintptr_t)x;
	return courier_plain(r);
}

courier_status courier_ctx_synchronize(const courier_cuda *c, uintptr_t ctx) {
	COURIER_CTX_CALL(c, ctx, c->cuCtxSynchronize())
}

courier_status courier_mem_alloc(const courier_cuda *c, uintptr_t ctx, uint64_t bytes, uint64_t *p) {
	CUdeviceptr d = 0;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuMemAlloc(&d, (size_t)bytes);
	*p = (uint64_t)d;
	COURIER_POP(c)
}

courier_status courier_mem_free(const courier_cuda *c, uintptr_t ctx, uint64_t p) {
	COURIER_CTX_CALL(c, ctx, c->cuMemFree((CUdeviceptr)p))
}

// From pageable memory, cuMemcpyHtoD returns once the data is staged, before
// it reaches the device; waiting for the legacy default stream makes the
// copy complete, so work queued afterwards on any stream sees the data.
courier_status courier_memcpy_htod(const courier_cuda *c, uintptr_t ctx, uint64_t dst, const void *src, uint64_t bytes) {
	COURIER_CTX_CALL_SYNC(c, ctx, c->cuMemcpyHtoD((CUdeviceptr)dst, src, (size_t)bytes), 1, 0)
}

courier_status courier_memcpy_dtoh(const courier_cuda *c, uintptr_t ctx, void *dst, uint64_t src, uint64_t bytes) {
	COURIER_CTX_CALL(c, ctx, c->cuMemcpyDtoH(dst, (CUdeviceptr)src, (size_t)bytes))
}

// Device-to-device copies and memsets are asynchronous to the CPU even in
// their "synchronous" form, so the blocking wrappers wait for the legacy
// default stream (0), where those forms run.
courier_status courier_memcpy_dtod(const courier_cuda *c, uintptr_t ctx, uint64_t dst, uint64_t src, uint64_t bytes) {
	COURIER_CTX_CALL_SYNC(c, ctx, c->cuMemcpyDtoD((CUdeviceptr)dst, (CUdeviceptr)src, (size_t)bytes), 1, 0)
}

courier_status courier_memcpy_peer(const courier_cuda *c, uintptr_t dstCtx, uint64_t dst, uintptr_t srcCtx, uint64_t src, uint64_t bytes) {
	COURIER_CTX_CALL_SYNC(c, dstCtx,
		c->cuMemcpyPeerAsync((CUdeviceptr)dst, (CUcontext)dstCtx, (CUdeviceptr)src, (CUcontext)srcCtx, (size_t)bytes, (CUstream)0), 1, 0)
}

courier_status courier_memset_d8(const courier_cuda *c, uintptr_t ctx, uint64_t p, unsigned char v, uint64_t bytes) {
	COURIER_CTX_CALL_SYNC(c, ctx, c->cuMemsetD8((CUdeviceptr)p, v, (size_t)bytes), 1, 0)
}

courier_status courier_memcpy_htod_async(const courier_cuda *c, uintptr_t ctx, uint64_t dst, const void *src, uint64_t bytes, uintptr_t s, int sync) {
	COURIER_CTX_CALL_SYNC(c, ctx, c->cuMemcpyHtoDAsync((CUdeviceptr)dst, src, (size_t)bytes, (CUstream)s), sync, s)
}

courier_status courier_memcpy_dtoh_async(const courier_cuda *c, uintptr_t ctx, void *dst, uint64_t src, uint64_t bytes, uintptr_t s, int sync) {
	COURIER_CTX_CALL_SYNC(c, ctx, c->cuMemcpyDtoHAsync(dst, (CUdeviceptr)src, (size_t)bytes, (CUstream)s), sync, s)
}

courier_status courier_memcpy_dtod_async(const courier_cuda *c, uintptr_t ctx, uint64_t dst, uint64_t src, uint64_t bytes, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuMemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, (size_t)bytes, (CUstream)s))
}

courier_status courier_memcpy_peer_async(const courier_cuda *c, uintptr_t ctx, uintptr_t dstCtx, uint64_t dst, uintptr_t srcCtx, uint64_t src, uint64_t bytes, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx,
		c->cuMemcpyPeerAsync((CUdeviceptr)dst, (CUcontext)dstCtx, (CUdeviceptr)src, (CUcontext)srcCtx, (size_t)bytes, (CUstream)s))
}

courier_status courier_memset_d8_async(const courier_cuda *c, uintptr_t ctx, uint64_t p, unsigned char v, uint64_t bytes, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuMemsetD8Async((CUdeviceptr)p, v, (size_t)bytes, (CUstream)s))
}

courier_status courier_mem_host_alloc(const courier_cuda *c, uintptr_t ctx, uint64_t bytes, unsigned int flags, void **p) {
	COURIER_CTX_CALL(c, ctx, c->cuMemHostAlloc(p, (size_t)bytes, flags))
}

courier_status courier_mem_free_host(const courier_cuda *c, uintptr_t ctx, void *p) {
	COURIER_CTX_CALL(c, ctx, c->cuMemFreeHost(p))
}

courier_status courier_mem_host_device_pointer(const courier_cuda *c, uintptr_t ctx, void *p, uint64_t *d) {
	CUdeviceptr x = 0;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuMemHostGetDevicePointer(&x, p, 0);
	*d = (uint64_t)x;
	COURIER_POP(c)
}

courier_status courier_stream_create(const courier_cuda *c, uintptr_t ctx, unsigned int flags, uintptr_t *s) {
	CUstream x = NULL;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuStreamCreate(&x, flags);
	*s = (uintptr_t)x;
	COURIER_POP(c)
}

courier_status courier_stream_destroy(const courier_cuda *c, uintptr_t ctx, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuStreamDestroy((CUstream)s))
}

courier_status courier_stream_synchronize(const courier_cuda *c, uintptr_t ctx, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuStreamSynchronize((CUstream)s))
}

courier_status courier_stream_query(const courier_cuda *c, uintptr_t ctx, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuStreamQuery((CUstream)s))
}

courier_status courier_stream_wait_event(const courier_cuda *c, uintptr_t ctx, uintptr_t s, uintptr_t e) {
	COURIER_CTX_CALL(c, ctx, c->cuStreamWaitEvent((CUstream)s, (CUevent)e, 0))
}

// CU_STREAM_WRITE_VALUE_DEFAULT: the write is preceded by a system-wide
// memory fence, so what the stream's earlier work wrote is visible to
// whoever sees the value.
courier_status courier_stream_write_value64(const courier_cuda *c, uintptr_t ctx, uintptr_t s, uint64_t addr, uint64_t v) {
	if (c->cuStreamWriteValue64 == NULL) return courier_plain(COURIER_CUDA_NOT_SUPPORTED);
	COURIER_CTX_CALL(c, ctx, c->cuStreamWriteValue64((CUstream)s, (CUdeviceptr)addr, v, 0))
}

// CU_STREAM_WAIT_VALUE_GEQ (0): the stream waits until the word is at
// least v (compared as unsigned 64-bit integers).
courier_status courier_stream_wait_value64(const courier_cuda *c, uintptr_t ctx, uintptr_t s, uint64_t addr, uint64_t v) {
	if (c->cuStreamWaitValue64 == NULL) return courier_plain(COURIER_CUDA_NOT_SUPPORTED);
	COURIER_CTX_CALL(c, ctx, c->cuStreamWaitValue64((CUstream)s, (CUdeviceptr)addr, v, 0))
}

courier_status courier_event_create(const courier_cuda *c, uintptr_t ctx, unsigned int flags, uintptr_t *e) {
	CUevent x = NULL;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuEventCreate(&x, flags);
	*e = (uintptr_t)x;
	COURIER_POP(c)
}

courier_status courier_event_destroy(const courier_cuda *c, uintptr_t ctx, uintptr_t e) {
	COURIER_CTX_CALL(c, ctx, c->cuEventDestroy((CUevent)e))
}

courier_status courier_event_record(const courier_cuda *c, uintptr_t ctx, uintptr_t e, uintptr_t s) {
	COURIER_CTX_CALL(c, ctx, c->cuEventRecord((CUevent)e, (CUstream)s))
}

courier_status courier_event_query(const courier_cuda *c, uintptr_t ctx, uintptr_t e) {
	COURIER_CTX_CALL(c, ctx, c->cuEventQuery((CUevent)e))
}

courier_status courier_event_synchronize(const courier_cuda *c, uintptr_t ctx, uintptr_t e) {
	COURIER_CTX_CALL(c, ctx, c->cuEventSynchronize((CUevent)e))
}

courier_status courier_event_elapsed(const courier_cuda *c, uintptr_t ctx, uintptr_t start, uintptr_t end, float *ms) {
	COURIER_CTX_CALL(c, ctx, c->cuEventElapsedTime(ms, (CUevent)start, (CUevent)end))
}

courier_status courier_module_load(const courier_cuda *c, uintptr_t ctx, const char *image, char *log, unsigned int loglen, uintptr_t *m) {
	CUjit_option opts[2] = {COURIER_CU_JIT_ERROR_LOG_BUFFER, COURIER_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {log, (void *)(uintptr_t)loglen};
	CUmodule x = NULL;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuModuleLoadDataEx(&x, image, 2, opts, vals);
	*m = (uintptr_t)x;
	COURIER_POP(c)
}

courier_status courier_module_unload(const courier_cuda *c, uintptr_t ctx, uintptr_t m) {
	COURIER_CTX_CALL(c, ctx, c->cuModuleUnload((CUmodule)m))
}

courier_status courier_module_get_function(const courier_cuda *c, uintptr_t ctx, uintptr_t m, const char *name, uintptr_t *f) {
	CUfunction x = NULL;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuModuleGetFunction(&x, (CUmodule)m, name);
	*f = (uintptr_t)x;
	COURIER_POP(c)
}

// courier_launch passes kernel argument i as a pointer to slots[i]; the
// driver copies the values before cuLaunchKernel returns.
courier_status courier_launch(const courier_cuda *c, uintptr_t ctx, uintptr_t f,
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

courier_status courier_ipc_get_mem_handle(const courier_cuda *c, uintptr_t ctx, uint64_t p, void *handle) {
	if (c->cuIpcGetMemHandle == NULL) return courier_plain(COURIER_CUDA_NOT_SUPPORTED);
	CUipcMemHandle h;
	memset(&h, 0, sizeof h);
	COURIER_PUSH(c, ctx)
	st_.code = c->cuIpcGetMemHandle(&h, (CUdeviceptr)p);
	memcpy(handle, &h, sizeof h);
	COURIER_POP(c)
}

courier_status courier_ipc_open_mem_handle(const courier_cuda *c, uintptr_t ctx, const void *handle, uint64_t *p) {
	if (c->cuIpcOpenMemHandle == NULL) return courier_plain(COURIER_CUDA_NOT_SUPPORTED);
	CUipcMemHandle h;
	memcpy(&h, handle, sizeof h);
	CUdeviceptr d = 0;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuIpcOpenMemHandle(&d, h, COURIER_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	*p = (uint64_t)d;
	COURIER_POP(c)
}

courier_status courier_ipc_close_mem_handle(const courier_cuda *c, uintptr_t ctx, uint64_t p) {
	if (c->cuIpcCloseMemHandle == NULL) return courier_plain(COURIER_CUDA_NOT_SUPPORTED);
	COURIER_CTX_CALL(c, ctx, c->cuIpcCloseMemHandle((CUdeviceptr)p))
}

// mem_get_address_range: the allocation holding p (its base and size);
// courier_mem_range returns its results by value.
static courier_status mem_get_address_range(const courier_cuda *c, uintptr_t ctx, uint64_t p, uint64_t *base, uint64_t *bytes) {
	if (c->cuMemGetAddressRange == NULL) return courier_plain(COURIER_CUDA_NOT_SUPPORTED);
	CUdeviceptr b = 0;
	size_t n = 0;
	COURIER_PUSH(c, ctx)
	st_.code = c->cuMemGetAddressRange(&b, &n, (CUdeviceptr)p);
	*base = (uint64_t)b;
	*bytes = (uint64_t)n;
	COURIER_POP(c)
}

courier_mem_range_result courier_mem_range(const courier_cuda *c, uintptr_t ctx, uint64_t p) {
	courier_mem_range_result r = {0};
	r.st = mem_get_address_range(c, ctx, p, &r.base, &r.bytes);
	return r;
}
