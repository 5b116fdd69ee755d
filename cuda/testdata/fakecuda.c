// fakecuda.c: a stand-in for libcuda.so.1 that the tests build with the C
// compiler and load through COURIER's own loader, so that the package's Go
// and C layers run end to end on machines without a GPU.
//
// "Device memory" is host memory; streams really queue their work, which
// runs only when something waits for it (a synchronize, a query, an event),
// so a test can tell a copy that waited from one that did not. It is
// strict where the real driver is lenient, to catch mistakes in the
// package:
//   - every call that needs a context fails without one, and the context
//     stack of a thread must be empty when a context is pushed (a push
//     without its pop shows up at the next call);
//   - memory passed to a call must lie inside a live allocation of the
//     current context's device;
//   - streams, events and modules must belong to the current context.
//
// Build variants (-D): FAKE_INIT_RESULT=n makes cuInit fail with n;
// FAKE_OMIT_LAUNCH leaves cuLaunchKernel out; FAKE_OMIT_MEMOPS leaves the
// stream memory operations (cuStreamWriteValue64, cuStreamWaitValue64)
// out; FAKE_NDEV=n sets the device count (default 2); FAKE_OMIT_IPC leaves
// the interprocess memory handles (cuIpc*) out.
//
// Device memory is a memory file (memfd) mapped shared, so that another
// process may open it through an IPC handle: the handle names the
// exporting process and the file's descriptor there, which the opener
// reaches through /proc/<pid>/fd (a process of the same user), and maps.
// The CUDA types come from the package's driver.h, which the tests copy
// beside this file before they compile it (by hand, from the repository
// root: cc -shared -fPIC -Icuda -o libfakecuda.so cuda/testdata/fakecuda.c
// -lpthread).

#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"

#ifndef FAKE_NDEV
#define FAKE_NDEV 2
#endif
#ifndef FAKE_INIT_RESULT
#define FAKE_INIT_RESULT 0
#endif

enum {
	OK = 0,
	E_INVALID_VALUE = 1,
	E_NOT_INITIALIZED = 3,
	E_NO_DEVICE = 100,
	E_INVALID_DEVICE = 101,
	E_INVALID_CONTEXT = 201,
	E_INVALID_PTX = 218,
	E_INVALID_HANDLE = 400,
	E_NOT_FOUND = 500,
	E_NOT_READY = 600,
	E_ILLEGAL_ADDRESS = 700,
	E_UNKNOWN = 999,
};

enum { MAGIC_STREAM = 0x5354, MAGIC_EVENT = 0x4556, MAGIC_MODULE = 0x4d4f, MAGIC_FUNC = 0x4655 };

struct ctx {
	int dev;
};

struct alloc {
	uintptr_t start;
	size_t bytes;
	int dev; // -1 for page-locked host memory
	int mapped; // page-locked memory allocated with CU_MEMHOSTALLOC_DEVICEMAP
	int fd;     // device memory: its memory file
	int opened; // another process's memory, opened with cuIpcOpenMemHandle
	struct alloc *next;
};

struct event;

enum { OP_COPY, OP_SET, OP_ADD_SCALAR, OP_STORE_ARGS, OP_RECORD, OP_WRITE64 };

struct op {
	int kind;
	void *dst;
	const void *src;
	size_t n;
	unsigned char byte;
	float value;
	uint64_t args[7];
	struct event *event;
};

struct stream {
	int magic;
	int dev;
	struct op *ops;
	size_t len, cap;
	struct stream *next;
};

struct event {
	int magic;
	int dev;
	unsigned int flags;
	int recorded;
	int fired;
	struct stream *stream; // where the pending record is queued
	struct timespec when;
};

struct module {
	int magic;
	int dev;
	char *image;
};

struct function {
	int magic;
	struct module *mod;
	char name[64];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static struct ctx ctxs[FAKE_NDEV];
static struct alloc *allocs;
static struct stream *streams;
static __thread struct ctx *stack[4];
static __thread int depth;

#define LOCK() pthread_mutex_lock(&mu)
#define UNLOCK() pthread_mutex_unlock(&mu)
#define RETURN(r) do { CUresult r_ = (r); UNLOCK(); return r_; } while (0)

static struct ctx *cur(void) { return depth > 0 ? stack[depth - 1] : NULL; }

// need_ctx: the checks every call that needs a context makes first.
static CUresult need_ctx(void) {
	if (!initialized) return E_NOT_INITIALIZED;
	if (cur() == NULL) return E_INVALID_CONTEXT;
	return OK;
}

static struct alloc *find(uintptr_t p, size_t n, int dev) {
	for (struct alloc *a = allocs; a != NULL; a = a->next) {
		if (a->dev == dev && p >= a->start && p - a->start < a->bytes && n <= a->bytes - (p - a->start)) {
			return a;
		}
	}
	return NULL;
}

static int dev_ok(CUdeviceptr p, size_t n, int dev) { return find((uintptr_t)p, n, dev) != NULL; }

static void run(struct op *o) {
	switch (o->kind) {
	case OP_COPY:
		memmove(o->dst, o->src, o->n);
		break;
	case OP_SET:
		memset(o->dst, o->byte, o->n);
		break;
	case OP_ADD_SCALAR: {
		float *x = o->dst;
		for (size_t i = 0; i < o->n; i++) x[i] += o->value;
		break;
	}
	case OP_STORE_ARGS: {
		uint64_t *out = o->dst;
		int32_t a;
		uint32_t b;
		float e;
		memcpy(&a, &o->args[1], 4);
		memcpy(&b, &o->args[2], 4);
		memcpy(&e, &o->args[5], 4);
		out[0] = (uint64_t)(int64_t)a;
		out[1] = b;
		out[2] = o->args[3];
		out[3] = o->args[4];
		memcpy(&out[4], &e, 4);
		out[5] = o->args[6];
		break;
	}
	case OP_WRITE64:
		__atomic_store_n((uint64_t *)o->dst, o->args[0], __ATOMIC_RELEASE);
		break;
	case OP_RECORD:
		o->event->fired = 1;
		o->event->stream = NULL;
		clock_gettime(CLOCK_MONOTONIC, &o->event->when);
		break;
	}
}

static void flush(struct stream *s) {
	for (size_t i = 0; i < s->len; i++) run(&s->ops[i]);
	s->len = 0;
}

static void flush_dev(int dev) {
	for (struct stream *s = streams; s != NULL; s = s->next) {
		if (dev < 0 || s->dev == dev) flush(s);
	}
}

// stream_ok checks a stream argument: NULL (the legacy stream) or a live
// stream of the current context.
static CUresult stream_ok(struct stream *s) {
	if (s == NULL) return OK;
	if (s->magic != MAGIC_STREAM) return E_INVALID_HANDLE;
	if (s->dev != cur()->dev) return E_INVALID_CONTEXT;
	return OK;
}

// submit runs o at once on the legacy stream, or queues it on s.
static CUresult submit(struct stream *s, struct op o) {
	if (s == NULL) {
		run(&o);
		return OK;
	}
	if (s->len == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 8;
		struct op *ops = realloc(s->ops, cap * sizeof *ops);
		if (ops == NULL) return E_UNKNOWN;
		s->ops = ops;
		s->cap = cap;
	}
	s->ops[s->len++] = o;
	return OK;
}

CUresult cuInit(unsigned int flags) {
	if (flags != 0) return E_INVALID_VALUE;
	if (FAKE_INIT_RESULT != 0) return FAKE_INIT_RESULT;
	LOCK();
	for (int i = 0; i < FAKE_NDEV; i++) ctxs[i].dev = i;
	initialized = 1;
	RETURN(OK);
}

CUresult cuDriverGetVersion(int *v) {
	*v = 13000;
	return OK;
}

CUresult cuGetErrorName(CUresult code, const char **name) {
	switch (code) {
	case OK: *name = "CUDA_SUCCESS"; return OK;
	case E_INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return OK;
	case E_NOT_INITIALIZED: *name = "CUDA_ERROR_NOT_INITIALIZED"; return OK;
	case E_NO_DEVICE: *name = "CUDA_ERROR_NO_DEVICE"; return OK;
	case E_INVALID_DEVICE: *name = "CUDA_ERROR_INVALID_DEVICE"; return OK;
	case E_INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
	case E_INVALID_PTX: *name = "CUDA_ERROR_INVALID_PTX"; return OK;
	case E_INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; return OK;
	case E_NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; return OK;
	case E_NOT_READY: *name = "CUDA_ERROR_NOT_READY"; return OK;
	case E_ILLEGAL_ADDRESS: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; return OK;
	case E_UNKNOWN: *name = "CUDA_ERROR_UNKNOWN"; return OK;
	}
	return E_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult code, const char **msg) {
	switch (code) {
	case OK: *msg = "no error"; return OK;
	case E_INVALID_VALUE: *msg = "invalid argument"; return OK;
	case E_NOT_INITIALIZED: *msg = "initialization error"; return OK;
	case E_NO_DEVICE: *msg = "no CUDA-capable device is detected"; return OK;
	case E_INVALID_DEVICE: *msg = "invalid device ordinal"; return OK;
	case E_INVALID_CONTEXT: *msg = "invalid device context"; return OK;
	case E_INVALID_PTX: *msg = "a PTX JIT compilation failed"; return OK;
	case E_INVALID_HANDLE: *msg = "invalid resource handle"; return OK;
	case E_NOT_FOUND: *msg = "named symbol not found"; return OK;
	case E_NOT_READY: *msg = "device not ready"; return OK;
	case E_ILLEGAL_ADDRESS: *msg = "an illegal memory access was encountered"; return OK;
	case E_UNKNOWN: *msg = "fake: context stack not empty at push (a push without its pop?)"; return OK;
	}
	return E_INVALID_VALUE;
}

CUresult cuDeviceGetCount(int *n) {
	if (!initialized) return E_NOT_INITIALIZED;
	*n = FAKE_NDEV;
	return OK;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	if (!initialized) return E_NOT_INITIALIZED;
	if (ordinal < 0 || ordinal >= FAKE_NDEV) return E_INVALID_DEVICE;
	*d = ordinal;
	return OK;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
	if (d < 0 || d >= FAKE_NDEV) return E_INVALID_DEVICE;
	snprintf(name, (size_t)len, "Fake CUDA Device %d", d);
	return OK;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
	if (d < 0 || d >= FAKE_NDEV) return E_INVALID_DEVICE;
	*bytes = (size_t)16 << 30;
	return OK;
}

CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d) {
	if (d < 0 || d >= FAKE_NDEV) return E_INVALID_DEVICE;
	snprintf(id, (size_t)len, "0000:%02x:00.0", 0x10 + d);
	return OK;
}

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
	if (d < 0 || d >= FAKE_NDEV) return E_INVALID_DEVICE;
	switch (attr) {
	case 75: *v = 7; return OK; // compute capability major
	case 76: *v = 0; return OK; // minor
	}
	return E_INVALID_VALUE;
}

CUresult cuDevicePrimaryCtxRetain(struct ctx **c, CUdevice d) {
	if (!initialized) return E_NOT_INITIALIZED;
	if (d < 0 || d >= FAKE_NDEV) return E_INVALID_DEVICE;
	*c = &ctxs[d];
	return OK;
}

CUresult cuCtxPushCurrent_v2(struct ctx *c) {
	if (c < &ctxs[0] || c >= &ctxs[FAKE_NDEV]) return E_INVALID_CONTEXT;
	if (depth != 0) return E_UNKNOWN;
	stack[depth++] = c;
	return OK;
}

CUresult cuCtxPopCurrent_v2(struct ctx **c) {
	if (depth == 0) return E_INVALID_CONTEXT;
	*c = stack[--depth];
	return OK;
}

CUresult cuCtxSynchronize(void) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	flush_dev(cur()->dev);
	RETURN(OK);
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (bytes == 0) return E_INVALID_VALUE;
	struct alloc *a = calloc(1, sizeof *a);
	int fd = memfd_create("fakecuda", MFD_CLOEXEC);
	void *m = MAP_FAILED;
	if (fd >= 0 && ftruncate(fd, (off_t)bytes) == 0) {
		m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	}
	if (a == NULL || m == MAP_FAILED) {
		free(a);
		if (fd >= 0) close(fd);
		return 2; // out of memory
	}
	LOCK();
	a->start = (uintptr_t)m;
	a->bytes = bytes;
	a->dev = cur()->dev;
	a->fd = fd;
	a->next = allocs;
	allocs = a;
	*p = (CUdeviceptr)(uintptr_t)m;
	RETURN(OK);
}

static CUresult free_alloc(uintptr_t p, int dev) {
	for (struct alloc **pa = &allocs; *pa != NULL; pa = &(*pa)->next) {
		struct alloc *a = *pa;
		if (a->start == p && a->dev == dev && !a->opened) {
			*pa = a->next;
			munmap((void *)a->start, a->bytes);
			close(a->fd);
			free(a);
			return OK;
		}
	}
	return E_INVALID_VALUE;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	flush_dev(-1);
	RETURN(free_alloc((uintptr_t)p, cur()->dev));
}

CUresult cuMemHostAlloc(void **p, size_t bytes, unsigned int flags) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (bytes == 0 || flags != 3) return E_INVALID_VALUE; // courier always asks for portable, mapped memory
	size_t rounded = (bytes + 4095) / 4096 * 4096;
	struct alloc *a = calloc(1, sizeof *a);
	void *m = aligned_alloc(4096, rounded);
	if (a == NULL || m == NULL) {
		free(a);
		free(m);
		return 2;
	}
	LOCK();
	a->start = (uintptr_t)m;
	a->bytes = bytes;
	a->dev = -1;
	a->mapped = (flags & 2) != 0;
	a->next = allocs;
	allocs = a;
	*p = m;
	RETURN(OK);
}

// cuMemHostGetDevicePointer_v2: with unified addressing, the host address.
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (flags != 0) return E_INVALID_VALUE;
	LOCK();
	struct alloc *a = find((uintptr_t)p, 1, -1);
	if (a == NULL || !a->mapped) RETURN(E_INVALID_VALUE);
	*d = (CUdeviceptr)(uintptr_t)p;
	RETURN(OK);
}

#ifndef FAKE_OMIT_MEMOPS
// word_ok: an aligned 8-byte word in device memory of the current device
// or in mapped page-locked memory.
static int word_ok(CUdeviceptr addr) {
	if (addr % 8 != 0) return 0;
	if (dev_ok(addr, 8, cur()->dev)) return 1;
	struct alloc *a = find((uintptr_t)addr, 8, -1);
	return a != NULL && a->mapped;
}

// memop_begin makes the checks both memory operations share and, when
// they pass, returns OK with the lock held.
static CUresult memop_begin(struct stream *s, CUdeviceptr addr, unsigned int flags) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (flags != 0) return E_INVALID_VALUE;
	LOCK();
	if ((r = stream_ok(s)) != OK) RETURN(r);
	if (!word_ok(addr)) RETURN(E_INVALID_VALUE);
	return OK;
}

CUresult cuStreamWriteValue64_v2(struct stream *s, CUdeviceptr addr, uint64_t v, unsigned int flags) {
	CUresult r = memop_begin(s, addr, flags);
	if (r != OK) return r;
	struct op o = {.kind = OP_WRITE64, .dst = (void *)(uintptr_t)addr};
	o.args[0] = v;
	RETURN(submit(s, o));
}

// cuStreamWaitValue64_v2 (GEQ only): the fake runs every stream's queued
// work first (one order the GPU might choose), and the wait is then
// satisfied or it is an error (a real GPU would wait for a later write;
// the fake cannot).
CUresult cuStreamWaitValue64_v2(struct stream *s, CUdeviceptr addr, uint64_t v, unsigned int flags) {
	CUresult r = memop_begin(s, addr, flags);
	if (r != OK) return r;
	flush_dev(-1);
	if (__atomic_load_n((uint64_t *)(uintptr_t)addr, __ATOMIC_ACQUIRE) < v) RETURN(E_INVALID_VALUE);
	RETURN(OK);
}
#endif

CUresult cuMemFreeHost(void *p) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	flush_dev(-1);
	RETURN(free_alloc((uintptr_t)p, -1));
}

static struct op copy_op(void *dst, const void *src, size_t n) {
	struct op o = {.kind = OP_COPY, .dst = dst, .src = src, .n = n};
	return o;
}

static CUresult htod(CUdeviceptr dst, const void *src, size_t n, struct stream *s) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = stream_ok(s)) != OK) RETURN(r);
	if (!dev_ok(dst, n, cur()->dev)) RETURN(E_INVALID_VALUE);
	RETURN(submit(s, copy_op((void *)(uintptr_t)dst, src, n)));
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, struct stream *s) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = stream_ok(s)) != OK) RETURN(r);
	if (!dev_ok(src, n, cur()->dev)) RETURN(E_INVALID_VALUE);
	RETURN(submit(s, copy_op(dst, (const void *)(uintptr_t)src, n)));
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, struct stream *s) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = stream_ok(s)) != OK) RETURN(r);
	if (!dev_ok(dst, n, cur()->dev) || !dev_ok(src, n, cur()->dev)) RETURN(E_INVALID_VALUE);
	RETURN(submit(s, copy_op((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n)));
}

static CUresult peer(CUdeviceptr dst, struct ctx *dctx, CUdeviceptr src, struct ctx *sctx, size_t n, struct stream *s) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (dctx < &ctxs[0] || dctx >= &ctxs[FAKE_NDEV] || sctx < &ctxs[0] || sctx >= &ctxs[FAKE_NDEV]) return E_INVALID_CONTEXT;
	LOCK();
	if ((r = stream_ok(s)) != OK) RETURN(r);
	if (!dev_ok(dst, n, dctx->dev) || !dev_ok(src, n, sctx->dev)) RETURN(E_INVALID_VALUE);
	RETURN(submit(s, copy_op((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n)));
}

static CUresult memset8(CUdeviceptr p, unsigned char v, size_t n, struct stream *s) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = stream_ok(s)) != OK) RETURN(r);
	if (!dev_ok(p, n, cur()->dev)) RETURN(E_INVALID_VALUE);
	struct op o = {.kind = OP_SET, .dst = (void *)(uintptr_t)p, .n = n, .byte = v};
	RETURN(submit(s, o));
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return htod(dst, src, n, NULL); }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return dtoh(dst, src, n, NULL); }
CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return dtod(dst, src, n, NULL); }
CUresult cuMemcpyPeer(CUdeviceptr dst, struct ctx *dc, CUdeviceptr src, struct ctx *sc, size_t n) {
	return peer(dst, dc, src, sc, n, NULL);
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, struct stream *s) { return htod(dst, src, n, s); }
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, struct stream *s) { return dtoh(dst, src, n, s); }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, struct stream *s) { return dtod(dst, src, n, s); }
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, struct ctx *dc, CUdeviceptr src, struct ctx *sc, size_t n, struct stream *s) {
	return peer(dst, dc, src, sc, n, s);
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { return memset8(p, v, n, NULL); }
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, struct stream *s) { return memset8(p, v, n, s); }

CUresult cuStreamCreate(struct stream **out, unsigned int flags) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (flags != 1) return E_INVALID_VALUE; // courier's streams are non-blocking
	struct stream *s = calloc(1, sizeof *s);
	if (s == NULL) return 2;
	LOCK();
	s->magic = MAGIC_STREAM;
	s->dev = cur()->dev;
	s->next = streams;
	streams = s;
	*out = s;
	RETURN(OK);
}

CUresult cuStreamDestroy_v2(struct stream *s) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if (s == NULL || (r = stream_ok(s)) != OK) RETURN(s == NULL ? E_INVALID_HANDLE : r);
	flush(s);
	for (struct stream **ps = &streams; *ps != NULL; ps = &(*ps)->next) {
		if (*ps == s) {
			*ps = s->next;
			break;
		}
	}
	s->magic = 0;
	free(s->ops);
	free(s);
	RETURN(OK);
}

CUresult cuStreamSynchronize(struct stream *s) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = stream_ok(s)) != OK) RETURN(r);
	if (s != NULL) flush(s);
	RETURN(OK);
}

// cuStreamQuery reports pending work as not ready once, and runs it.
CUresult cuStreamQuery(struct stream *s) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = stream_ok(s)) != OK) RETURN(r);
	if (s != NULL && s->len > 0) {
		flush(s);
		RETURN(E_NOT_READY);
	}
	RETURN(OK);
}

static CUresult event_ok(struct event *e) {
	if (e == NULL || e->magic != MAGIC_EVENT) return E_INVALID_HANDLE;
	if (e->dev != cur()->dev) return E_INVALID_CONTEXT;
	return OK;
}

CUresult cuStreamWaitEvent(struct stream *s, struct event *e, unsigned int flags) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (flags != 0) return E_INVALID_VALUE;
	LOCK();
	if ((r = stream_ok(s)) != OK) RETURN(r);
	if (e == NULL || e->magic != MAGIC_EVENT) RETURN(E_INVALID_HANDLE); // may be another device's
	// Running the event's stream now is one order the GPU might choose.
	if (e->stream != NULL) flush(e->stream);
	RETURN(OK);
}

CUresult cuEventCreate(struct event **out, unsigned int flags) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (flags != 0 && flags != 2) return E_INVALID_VALUE;
	struct event *e = calloc(1, sizeof *e);
	if (e == NULL) return 2;
	e->magic = MAGIC_EVENT;
	e->dev = cur()->dev;
	e->flags = flags;
	*out = e;
	return OK;
}

CUresult cuEventDestroy_v2(struct event *e) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = event_ok(e)) != OK) RETURN(r);
	if (e->stream != NULL) flush(e->stream);
	e->magic = 0;
	free(e);
	RETURN(OK);
}

CUresult cuEventRecord(struct event *e, struct stream *s) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = event_ok(e)) != OK || (r = stream_ok(s)) != OK) RETURN(r);
	if (e->stream != NULL) flush(e->stream);
	e->recorded = 1;
	e->fired = 0;
	e->stream = s;
	struct op o = {.kind = OP_RECORD, .event = e};
	RETURN(submit(s, o));
}

// cuEventQuery reports an unfired event as not ready once, and runs the
// work before it.
CUresult cuEventQuery(struct event *e) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = event_ok(e)) != OK) RETURN(r);
	if (e->recorded && !e->fired) {
		flush(e->stream);
		RETURN(E_NOT_READY);
	}
	RETURN(OK);
}

CUresult cuEventSynchronize(struct event *e) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = event_ok(e)) != OK) RETURN(r);
	if (e->stream != NULL) flush(e->stream);
	RETURN(OK);
}

static CUresult elapsed(float *ms, struct event *a, struct event *b) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	if ((r = event_ok(a)) != OK || (r = event_ok(b)) != OK) RETURN(r);
	if ((a->flags & 2) || (b->flags & 2) || !a->recorded || !b->recorded) RETURN(E_INVALID_HANDLE);
	if (!a->fired || !b->fired) RETURN(E_NOT_READY);
	*ms = (float)((double)(b->when.tv_sec - a->when.tv_sec) * 1e3 + (double)(b->when.tv_nsec - a->when.tv_nsec) / 1e6);
	RETURN(OK);
}

CUresult cuEventElapsedTime(float *ms, struct event *a, struct event *b) { return elapsed(ms, a, b); }
CUresult cuEventElapsedTime_v2(float *ms, struct event *a, struct event *b) { return elapsed(ms, a, b); }

// cuModuleLoadDataEx "compiles" PTX by looking for its .entry names;
// text containing "bogus" fails with a log, as a syntax error would.
CUresult cuModuleLoadDataEx(struct module **out, const void *image, unsigned int n, CUjit_option *opts, void **vals) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	char *log = NULL;
	size_t loglen = 0;
	for (unsigned int i = 0; i < n; i++) {
		if (opts[i] == COURIER_CU_JIT_ERROR_LOG_BUFFER) log = vals[i];
		if (opts[i] == COURIER_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) loglen = (size_t)(uintptr_t)vals[i];
	}
	const char *text = image;
	const char *bad = strstr(text, "bogus");
	if (bad != NULL || strstr(text, ".version") == NULL) {
		if (log != NULL && loglen > 0) {
			snprintf(log, loglen, "fake ptxas: syntax error near '%.20s'", bad != NULL ? bad : text);
		}
		return E_INVALID_PTX;
	}
	struct module *m = calloc(1, sizeof *m);
	if (m == NULL) return 2;
	m->magic = MAGIC_MODULE;
	m->dev = cur()->dev;
	m->image = strdup(text);
	*out = m;
	return OK;
}

CUresult cuModuleUnload(struct module *m) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (m == NULL || m->magic != MAGIC_MODULE) return E_INVALID_HANDLE;
	if (m->dev != cur()->dev) return E_INVALID_CONTEXT;
	m->magic = 0;
	free(m->image);
	free(m);
	return OK;
}

CUresult cuModuleGetFunction(struct function **out, struct module *m, const char *name) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (m == NULL || m->magic != MAGIC_MODULE) return E_INVALID_HANDLE;
	if (m->dev != cur()->dev) return E_INVALID_CONTEXT;
	char pattern[96];
	snprintf(pattern, sizeof pattern, ".entry %s(", name);
	if (strlen(name) >= 64 || strstr(m->image, pattern) == NULL) return E_NOT_FOUND;
	struct function *f = calloc(1, sizeof *f);
	if (f == NULL) return 2;
	f->magic = MAGIC_FUNC;
	f->mod = m;
	snprintf(f->name, sizeof f->name, "%s", name);
	*out = f;
	return OK;
}

#ifndef FAKE_OMIT_LAUNCH
// cuLaunchKernel runs the two kernels the tests know: add_scalar(u64 data,
// f32 value, u64 n) over grid.x*block.x threads, and store_args(u64 out,
// s32, u32, s64, u64, f32, f64), which stores its arguments.
CUresult cuLaunchKernel(struct function *f, unsigned int gx, unsigned int gy, unsigned int gz,
		unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
		struct stream *s, void **params, void **extra) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	if (f == NULL || f->magic != MAGIC_FUNC || f->mod->magic != MAGIC_MODULE) return E_INVALID_HANDLE;
	if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || extra != NULL) return E_INVALID_VALUE;
	(void)shared;
	LOCK();
	if ((r = stream_ok(s)) != OK) RETURN(r);
	if (f->mod->dev != cur()->dev) RETURN(E_INVALID_CONTEXT);
	struct op o = {0};
	if (strcmp(f->name, "add_scalar") == 0) {
		uint64_t data, n;
		memcpy(&data, params[0], 8);
		memcpy(&o.value, params[1], 4);
		memcpy(&n, params[2], 8);
		uint64_t threads = (uint64_t)gx * bx;
		o.kind = OP_ADD_SCALAR;
		o.dst = (void *)(uintptr_t)data;
		o.n = (size_t)(n < threads ? n : threads);
		if (o.n > 0 && !dev_ok(data, o.n * 4, cur()->dev)) RETURN(E_ILLEGAL_ADDRESS);
	} else if (strcmp(f->name, "store_args") == 0) {
		static const size_t sizes[7] = {8, 4, 4, 8, 8, 4, 8};
		for (int i = 0; i < 7; i++) memcpy(&o.args[i], params[i], sizes[i]);
		o.kind = OP_STORE_ARGS;
		o.dst = (void *)(uintptr_t)o.args[0];
		if (!dev_ok(o.args[0], 48, cur()->dev)) RETURN(E_ILLEGAL_ADDRESS);
	} else {
		RETURN(E_NOT_FOUND);
	}
	RETURN(submit(s, o));
}
#endif

// cuMemGetAddressRange_v2: the allocation of the current device holding p.
CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	struct alloc *a = find((uintptr_t)p, 1, cur()->dev);
	if (a == NULL) RETURN(E_NOT_FOUND);
	if (base != NULL) *base = (CUdeviceptr)a->start;
	if (size != NULL) *size = a->bytes;
	RETURN(OK);
}

#ifndef FAKE_OMIT_IPC
// The fake's IPC handle: a magic, the exporting process, its memory
// file's descriptor there, the allocation's size and device.
struct fake_ipc {
	char magic[8];
	int32_t pid, fd;
	uint64_t bytes;
	int32_t dev;
};

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	struct alloc *a = find((uintptr_t)p, 1, cur()->dev);
	if (a == NULL || a->start != (uintptr_t)p || a->opened) RETURN(E_INVALID_VALUE);
	// Field by field into zeroed memory: an initializer leaves the
	// struct's tail padding as the stack had it, and a handle is compared
	// as 64 bytes (two handles of one allocation must be equal).
	struct fake_ipc f;
	memset(&f, 0, sizeof f);
	memcpy(f.magic, "FAKEIPC1", sizeof f.magic);
	f.pid = (int32_t)getpid();
	f.fd = a->fd;
	f.bytes = a->bytes;
	f.dev = a->dev;
	memset(h, 0, sizeof *h);
	memcpy(h, &f, sizeof f);
	RETURN(OK);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags) {
	(void)flags;
	CUresult r = need_ctx();
	if (r != OK) return r;
	struct fake_ipc f;
	memcpy(&f, &h, sizeof f);
	if (memcmp(f.magic, "FAKEIPC1", 8) != 0 || f.bytes == 0) return E_INVALID_VALUE;
	if (f.pid == (int32_t)getpid()) return E_INVALID_CONTEXT; // as the driver: not in the exporting process
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)f.pid, (int)f.fd);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) return E_INVALID_HANDLE;
	void *m = mmap(NULL, (size_t)f.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		close(fd);
		return E_INVALID_HANDLE;
	}
	struct alloc *a = calloc(1, sizeof *a);
	LOCK();
	a->start = (uintptr_t)m;
	a->bytes = (size_t)f.bytes;
	a->dev = cur()->dev;
	a->fd = fd;
	a->opened = 1;
	a->next = allocs;
	allocs = a;
	*p = (CUdeviceptr)(uintptr_t)m;
	RETURN(OK);
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
	CUresult r = need_ctx();
	if (r != OK) return r;
	LOCK();
	flush_dev(-1);
	for (struct alloc **pa = &allocs; *pa != NULL; pa = &(*pa)->next) {
		struct alloc *a = *pa;
		if (a->start == (uintptr_t)p && a->opened) {
			*pa = a->next;
			munmap((void *)a->start, a->bytes);
			close(a->fd);
			free(a);
			RETURN(OK);
		}
	}
	RETURN(E_INVALID_VALUE);
}
#endif
