// driver.h: the C side of package cuda, shared by driver_cgo.go (through
// cgo), driver.c and the fake driver of the tests (testdata/fakecuda.c,
// which takes the CUDA types from here).
//
// No cuda.h is needed: the few CUDA types courier uses are written below,
// and the driver itself is loaded at run time (driver.c). Each wrapper
// below makes one driver call; those given a context (ctx, a CUcontext as
// uintptr_t) push it, make the call and pop it again, so the Go side never
// depends on, nor changes, the calling thread's current context.

#ifndef COURIER_CUDA_DRIVER_H
#define COURIER_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

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
// CUipcMemHandle is cuda.h's interprocess memory handle: 64 opaque bytes.
typedef struct {
	char reserved[64];
} CUipcMemHandle;

enum {
	COURIER_CU_JIT_ERROR_LOG_BUFFER = 5,
	COURIER_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
	COURIER_CUDA_MAX_ARGS = 256,
	COURIER_CUDA_NOT_SUPPORTED = 801, // CUDA_ERROR_NOT_SUPPORTED
	COURIER_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1,
	COURIER_IPC_HANDLE_SIZE = 64,
};

// courier_cuda is one loaded copy of the driver library: its handle and
// the entry points looked up in it (driver.c).
typedef struct courier_cuda courier_cuda;

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

// Loading.

// courier_cuda_open loads the library at path, looks up every entry point
// and calls cuInit(0). On failure it returns NULL and the reason in err
// (with *code the CUresult of cuInit when that is what failed, else 0).
courier_cuda *courier_cuda_open(const char *path, char *err, size_t errlen, int *code);
void courier_cuda_close(courier_cuda *c);
uintptr_t courier_cuda_symbol(const courier_cuda *c, const char *name);
void courier_error_text(const courier_cuda *c, int code, const char **name, const char **msg);

// Devices and contexts.

courier_status courier_driver_version(const courier_cuda *c, int *v);
courier_status courier_device_count(const courier_cuda *c, int *n);
courier_status courier_device_get(const courier_cuda *c, int ordinal, int *dev);
courier_status courier_device_name(const courier_cuda *c, int dev, char *buf, int len);
courier_status courier_device_total_mem(const courier_cuda *c, int dev, int64_t *bytes);
courier_status courier_device_pci_bus_id(const courier_cuda *c, int dev, char *buf, int len);
courier_status courier_device_attribute(const courier_cuda *c, int dev, int attr, int *v);
courier_status courier_primary_ctx_retain(const courier_cuda *c, int dev, uintptr_t *ctx);
courier_status courier_ctx_synchronize(const courier_cuda *c, uintptr_t ctx);

// Memory.

courier_status courier_mem_alloc(const courier_cuda *c, uintptr_t ctx, uint64_t bytes, uint64_t *p);
courier_status courier_mem_free(const courier_cuda *c, uintptr_t ctx, uint64_t p);
courier_status courier_memcpy_htod(const courier_cuda *c, uintptr_t ctx, uint64_t dst, const void *src, uint64_t bytes);
courier_status courier_memcpy_dtoh(const courier_cuda *c, uintptr_t ctx, void *dst, uint64_t src, uint64_t bytes);
courier_status courier_memcpy_dtod(const courier_cuda *c, uintptr_t ctx, uint64_t dst, uint64_t src, uint64_t bytes);
courier_status courier_memcpy_peer(const courier_cuda *c, uintptr_t dstCtx, uint64_t dst, uintptr_t srcCtx, uint64_t src, uint64_t bytes);
courier_status courier_memset_d8(const courier_cuda *c, uintptr_t ctx, uint64_t p, unsigned char v, uint64_t bytes);
courier_status courier_memcpy_htod_async(const courier_cuda *c, uintptr_t ctx, uint64_t dst, const void *src, uint64_t bytes, uintptr_t s, int sync);
courier_status courier_memcpy_dtoh_async(const courier_cuda *c, uintptr_t ctx, void *dst, uint64_t src, uint64_t bytes, uintptr_t s, int sync);
courier_status courier_memcpy_dtod_async(const courier_cuda *c, uintptr_t ctx, uint64_t dst, uint64_t src, uint64_t bytes, uintptr_t s);
courier_status courier_memcpy_peer_async(const courier_cuda *c, uintptr_t ctx, uintptr_t dstCtx, uint64_t dst, uintptr_t srcCtx, uint64_t src, uint64_t bytes, uintptr_t s);
courier_status courier_memset_d8_async(const courier_cuda *c, uintptr_t ctx, uint64_t p, unsigned char v, uint64_t bytes, uintptr_t s);
courier_status courier_mem_host_alloc(const courier_cuda *c, uintptr_t ctx, uint64_t bytes, unsigned int flags, void **p);
courier_status courier_mem_free_host(const courier_cuda *c, uintptr_t ctx, void *p);
courier_status courier_mem_host_device_pointer(const courier_cuda *c, uintptr_t ctx, void *p, uint64_t *d);

// Streams and events.

courier_status courier_stream_create(const courier_cuda *c, uintptr_t ctx, unsigned int flags, uintptr_t *s);
courier_status courier_stream_destroy(const courier_cuda *c, uintptr_t ctx, uintptr_t s);
courier_status courier_stream_synchronize(const courier_cuda *c, uintptr_t ctx, uintptr_t s);
courier_status courier_stream_query(const courier_cuda *c, uintptr_t ctx, uintptr_t s);
courier_status courier_stream_wait_event(const courier_cuda *c, uintptr_t ctx, uintptr_t s, uintptr_t e);
courier_status courier_stream_write_value64(const courier_cuda *c, uintptr_t ctx, uintptr_t s, uint64_t addr, uint64_t v);
courier_status courier_stream_wait_value64(const courier_cuda *c, uintptr_t ctx, uintptr_t s, uint64_t addr, uint64_t v);
courier_status courier_event_create(const courier_cuda *c, uintptr_t ctx, unsigned int flags, uintptr_t *e);
courier_status courier_event_destroy(const courier_cuda *c, uintptr_t ctx, uintptr_t e);
courier_status courier_event_record(const courier_cuda *c, uintptr_t ctx, uintptr_t e, uintptr_t s);
courier_status courier_event_query(const courier_cuda *c, uintptr_t ctx, uintptr_t e);
courier_status courier_event_synchronize(const courier_cuda *c, uintptr_t ctx, uintptr_t e);
courier_status courier_event_elapsed(const courier_cuda *c, uintptr_t ctx, uintptr_t start, uintptr_t end, float *ms);

// Modules and kernels.

courier_status courier_module_load(const courier_cuda *c, uintptr_t ctx, const char *image, char *log, unsigned int loglen, uintptr_t *m);
courier_status courier_module_unload(const courier_cuda *c, uintptr_t ctx, uintptr_t m);
courier_status courier_module_get_function(const courier_cuda *c, uintptr_t ctx, uintptr_t m, const char *name, uintptr_t *f);
courier_status courier_launch(const courier_cuda *c, uintptr_t ctx, uintptr_t f,
		unsigned int gx, unsigned int gy, unsigned int gz,
		unsigned int bx, unsigned int by, unsigned int bz,
		unsigned int shared, uintptr_t s, uint64_t *slots, int n);

// Interprocess memory (cuIpc*): a handle to an allocation, which another
// process on this host opens as a mapping of its own (handle: 64 bytes).

courier_status courier_ipc_get_mem_handle(const courier_cuda *c, uintptr_t ctx, uint64_t p, void *handle);
courier_status courier_ipc_open_mem_handle(const courier_cuda *c, uintptr_t ctx, const void *handle, uint64_t *p);
courier_status courier_ipc_close_mem_handle(const courier_cuda *c, uintptr_t ctx, uint64_t p);
// courier_mem_range: the allocation holding p (its base and size),
// returned by value: a caller in Go passes no pointer to its own memory,
// which would move its variables to the heap on every call (the CUDA IPC
// path asks once a message).
typedef struct {
	courier_status st;
	uint64_t base, bytes;
} courier_mem_range_result;
courier_mem_range_result courier_mem_range(const courier_cuda *c, uintptr_t ctx, uint64_t p);

#endif
