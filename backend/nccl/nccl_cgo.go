//go:build cgo

package nccl

// This file and nccl_nocgo.go are the only place the package touches C.
//
// libnccl.so.2 is loaded at run time with dlopen, so the package builds,
// links and runs on machines without NCCL (and without nccl.h: the few
// types it needs are declared below). cgo is needed, not a pure-Go loader,
// because ncclCommInitRankConfig takes the 128-byte ncclUniqueId by value,
// which pure-Go call trampolines get wrong on amd64.
//
// NCCL's group state and the CUDA current context belong to the calling
// OS thread, and goroutines move between threads. So each wrapper that
// needs a device does everything in one C call: push the device's primary
// context, make the NCCL calls (for a flush: ncclGroupStart, every
// ncclSend/ncclRecv, ncclGroupEnd), pop the context. The Go side never
// depends on, nor changes, thread state, and no goroutine is locked to a
// thread.
//
// This file does not open libcuda.so.1 itself: the cuda package has it
// loaded, and lends the addresses of cuCtxPushCurrent_v2,
// cuCtxPopCurrent_v2 and cuMemcpy (cuda.Symbol) and the device's primary
// context (cuda.Device.PrimaryContext).

/*
#cgo LDFLAGS: -ldl

#include <dlfcn.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// NCCL's types, as nccl.h of NCCL 2.28 declares them.
typedef int ncclResult_t;            // enum: ncclSuccess = 0 ... ncclInProgress = 7
typedef int ncclDataType_t;          // enum: ncclInt8 = 0 ... ncclBfloat16 = 9
typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;

// ncclConfig_t as NCCL 2.28 lays it out (struct ncclConfig_v22800). NCCL
// copies min(size, its own sizeof) bytes of it and resets every field newer
// than .version to its default, so declaring exactly the 2.28 fields with
// version 2.28.3 is right for 2.28 and for every later NCCL.
typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cgaClusterSize;
	int minCTAs;
	int maxCTAs;
	const char *netName;
	int splitShare;
	int trafficClass;
	const char *commName;
	int collnetEnable;
	int CTAPolicy;
	int shrinkShare;
	int nvlsCTAs;
	int nChannelsPerNetPeer;
	int nvlinkCentricSched;
} courier_nccl_config;

#define COURIER_NCCL_API_MAGIC 0xcafebeef
#define COURIER_NCCL_CONFIG_VERSION 22803 // NCCL_VERSION(2,28,3)
#define COURIER_NCCL_UNDEF_INT INT_MIN    // NCCL_CONFIG_UNDEF_INT

// The CUDA driver entry points the wrappers call through (from cuda.Symbol).
typedef int (*courier_nccl_ctx_push_fn)(void *ctx);
typedef int (*courier_nccl_ctx_pop_fn)(void **ctx);
typedef int (*courier_nccl_memcpy_fn)(unsigned long long dst, unsigned long long src, size_t bytes);
typedef int (*courier_nccl_write_value64_fn)(void *stream, unsigned long long addr, uint64_t v, unsigned int flags);
typedef int (*courier_nccl_event_record_fn)(void *event, void *stream);

typedef struct {
	void *h;
	ncclResult_t (*getVersion)(int *version);
	ncclResult_t (*getUniqueId)(ncclUniqueId *id);
	ncclResult_t (*commInitRankConfig)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, courier_nccl_config *config);
	ncclResult_t (*commAbort)(ncclComm_t comm);
	ncclResult_t (*commDestroy)(ncclComm_t comm);
	ncclResult_t (*commFinalize)(ncclComm_t comm);
	ncclResult_t (*commGetAsyncError)(ncclComm_t comm, ncclResult_t *state);
	const char *(*getErrorString)(ncclResult_t result);
	const char *(*getLastError)(ncclComm_t comm);
	ncclResult_t (*groupStart)(void);
	ncclResult_t (*groupEnd)(void);
	ncclResult_t (*send)(const void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, void *stream);
	ncclResult_t (*recv)(void *buf, size_t count, ncclDataType_t type, int peer, ncclComm_t comm, void *stream);
	ncclResult_t (*allReduce)(const void *send, void *recv, size_t count, ncclDataType_t type, int op, ncclComm_t comm, void *stream);
	ncclResult_t (*broadcast)(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, void *stream);
	ncclResult_t (*reduce)(const void *send, void *recv, size_t count, ncclDataType_t type, int op, int root, ncclComm_t comm, void *stream);
	ncclResult_t (*allGather)(const void *send, void *recv, size_t sendcount, ncclDataType_t type, ncclComm_t comm, void *stream);
	ncclResult_t (*reduceScatter)(const void *send, void *recv, size_t recvcount, ncclDataType_t type, int op, ncclComm_t comm, void *stream);
} courier_nccl_lib;

// How a thread reaches the device: the context to push and the driver
// functions to push, pop and copy with, and to mark a group's end with
// (writeValue64 is 0 where the driver has no stream memory operations).
typedef struct {
	uintptr_t ctx;
	uintptr_t push;
	uintptr_t pop;
	uintptr_t memcpy;
	uintptr_t writeValue64;
	uintptr_t eventRecord;
} courier_nccl_dev;

// What to queue on a stream right after a group, in the same call (the
// group's seal, when nothing else must come between): nothing, a write of
// value to the word at target, or a record of the event target.
enum { COURIER_AFTER_NONE = 0, COURIER_AFTER_WRITE = 1, COURIER_AFTER_RECORD = 2 };
typedef struct {
	int32_t kind;
	int32_t pad;
	uint64_t stream;
	uint64_t target;
	uint64_t value;
} courier_nccl_after;

// One operation of a group, with the communicator and stream it goes on
// (a group may span several communicators): a send, a receive, or a
// collective.
enum {
	COURIER_OP_SEND = 0,
	COURIER_OP_RECV = 1,
	COURIER_OP_ALLREDUCE = 2,
	COURIER_OP_BROADCAST = 3,
	COURIER_OP_REDUCE = 4,
	COURIER_OP_ALLGATHER = 5,
	COURIER_OP_REDUCESCATTER = 6,
};
typedef struct {
	uint64_t buf;    // device address (a collective's send buffer)
	uint64_t buf2;   // a collective's receive buffer
	uint64_t count;  // elements of type (ncclAllGather: sent; ncclReduceScatter: received)
	uint64_t comm;   // ncclComm_t
	uint64_t stream; // CUstream
	int32_t peer;    // the peer, or a collective's root
	int32_t type;    // ncclDataType_t
	int32_t recv;    // the kind: COURIER_OP_*
	int32_t redop;   // ncclRedOp_t of a reduction
} courier_nccl_op;

// Result codes the wrappers add to NCCL's (which are small non-negative
// numbers): a failed context push or pop, with the CUresult beside it.
#define COURIER_NCCL_PUSH_FAILED -1
#define COURIER_NCCL_POP_FAILED  -2

static courier_nccl_lib *courier_nccl_open(const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return NULL;
	}
	static courier_nccl_lib zero;
	courier_nccl_lib *l = (courier_nccl_lib *)malloc(sizeof *l);
	if (l == NULL) {
		snprintf(err, errlen, "out of memory");
		dlclose(h);
		return NULL;
	}
	*l = zero;
	l->h = h;
#define COURIER_NCCL_SYM(field, name) \
	do { \
		*(void **)(&l->field) = dlsym(h, name); \
		if (l->field == NULL) { \
			snprintf(err, errlen, "%s: no symbol %s (NCCL older than 2.14?)", path, name); \
			free(l); \
			dlclose(h); \
			return NULL; \
		} \
	} while (0)
	COURIER_NCCL_SYM(getVersion, "ncclGetVersion");
	COURIER_NCCL_SYM(getUniqueId, "ncclGetUniqueId");
	COURIER_NCCL_SYM(commInitRankConfig, "ncclCommInitRankConfig");
	COURIER_NCCL_SYM(commAbort, "ncclCommAbort");
	// ncclCommDestroy and ncclCommFinalize are not called (Close aborts:
	// see engine.close), but a library without them is not one courier
	// was written for.
	COURIER_NCCL_SYM(commDestroy, "ncclCommDestroy");
	COURIER_NCCL_SYM(commFinalize, "ncclCommFinalize");
	COURIER_NCCL_SYM(commGetAsyncError, "ncclCommGetAsyncError");
	COURIER_NCCL_SYM(getErrorString, "ncclGetErrorString");
	COURIER_NCCL_SYM(getLastError, "ncclGetLastError");
	COURIER_NCCL_SYM(groupStart, "ncclGroupStart");
	COURIER_NCCL_SYM(groupEnd, "ncclGroupEnd");
	COURIER_NCCL_SYM(send, "ncclSend");
	COURIER_NCCL_SYM(recv, "ncclRecv");
	COURIER_NCCL_SYM(allReduce, "ncclAllReduce");
	COURIER_NCCL_SYM(broadcast, "ncclBroadcast");
	COURIER_NCCL_SYM(reduce, "ncclReduce");
	COURIER_NCCL_SYM(allGather, "ncclAllGather");
	COURIER_NCCL_SYM(reduceScatter, "ncclReduceScatter");
#undef COURIER_NCCL_SYM
	return l;
}

static int courier_nccl_push(const courier_nccl_dev *d, int *cu) {
	*cu = ((courier_nccl_ctx_push_fn)d->push)((void *)d->ctx);
	return *cu == 0;
}

static void courier_nccl_pop(const courier_nccl_dev *d, int *cu) {
	void *old = NULL;
	int r = ((courier_nccl_ctx_pop_fn)d->pop)(&old);
	if (*cu == 0) {
		*cu = r;
	}
}

static ncclResult_t courier_nccl_version(courier_nccl_lib *l, int *v) {
	return l->getVersion(v);
}

static ncclResult_t courier_nccl_unique_id(courier_nccl_lib *l, void *out) {
	ncclUniqueId id;
	ncclResult_t r = l->getUniqueId(&id);
	memcpy(out, &id, sizeof id);
	return r;
}

// courier_nccl_init creates a communicator on the device of d,
// non-blocking unless blocking is 1. Only .size, .magic, .version and .blocking of the configuration are
// set; every other field is left undefined as NCCL_CONFIG_INITIALIZER
// leaves it (NCCL_CONFIG_UNDEF_INT, or NULL for the pointers), so NCCL
// picks its defaults and honours its environment variables.
static ncclResult_t courier_nccl_init(courier_nccl_lib *l, const courier_nccl_dev *d,
		uintptr_t *comm, int nranks, const void *idbytes, int rank, int blocking, int *cu) {
	courier_nccl_config cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.size = sizeof cfg;
	cfg.magic = COURIER_NCCL_API_MAGIC;
	cfg.version = COURIER_NCCL_CONFIG_VERSION;
	cfg.blocking = blocking;
	cfg.cgaClusterSize = COURIER_NCCL_UNDEF_INT;
	cfg.minCTAs = COURIER_NCCL_UNDEF_INT;
	cfg.maxCTAs = COURIER_NCCL_UNDEF_INT;
	cfg.netName = NULL;
	cfg.splitShare = COURIER_NCCL_UNDEF_INT;
	cfg.trafficClass = COURIER_NCCL_UNDEF_INT;
	cfg.commName = NULL;
	cfg.collnetEnable = COURIER_NCCL_UNDEF_INT;
	cfg.CTAPolicy = COURIER_NCCL_UNDEF_INT;
	cfg.shrinkShare = COURIER_NCCL_UNDEF_INT;
	cfg.nvlsCTAs = COURIER_NCCL_UNDEF_INT;
	cfg.nChannelsPerNetPeer = COURIER_NCCL_UNDEF_INT;
	cfg.nvlinkCentricSched = COURIER_NCCL_UNDEF_INT;

	ncclUniqueId id;
	memcpy(&id, idbytes, sizeof id);
	ncclComm_t c = NULL;
	if (!courier_nccl_push(d, cu)) {
		return COURIER_NCCL_PUSH_FAILED;
	}
	ncclResult_t r = l->commInitRankConfig(&c, nranks, id, rank, &cfg);
	courier_nccl_pop(d, cu);
	*comm = (uintptr_t)c;
	if (r == 0 && *cu != 0) {
		return COURIER_NCCL_POP_FAILED;
	}
	return r;
}

// courier_nccl_out carries what a hot-path wrapper reports, returned by
// value (out-parameters in Go memory would make Go allocate on every call).
typedef struct {
	int32_t r;      // the ncclResult_t of the call
	int32_t state;  // ncclCommGetAsyncError's state
	int32_t failed; // courier_nccl_group: the index of the op that failed, or -1
	int32_t cu;     // the CUresult of a failed context push or pop
	int64_t ns;     // courier_nccl_group with timed set: nanoseconds from ncclGroupStart until ncclGroupEnd returned
	int32_t after;  // courier_nccl_group: the CUresult of the write or record after the group, or -1 if it was not made
	int32_t pad;
} courier_nccl_out;

static courier_nccl_out courier_nccl_async_error(courier_nccl_lib *l, uintptr_t comm) {
	courier_nccl_out o = {0, 0, -1, 0, 0, -1, 0};
	ncclResult_t state = 0;
	o.r = l->commGetAsyncError((ncclComm_t)comm, &state);
	o.state = state;
	return o;
}

static int64_t courier_nccl_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// courier_nccl_group issues ops[0..n) as one NCCL group, each op on its
// communicator and stream, with the device's context current. If an op
// fails, the group is still ended (NCCL's group state must not leak to the
// next call on this thread) and the op's error is returned, with its index
// in .failed. With timed set, .ns is the time NCCL's calls took. When the
// group is on its stream (ncclGroupEnd said ncclSuccess), *after is queued
// behind it and .after is its CUresult.
static courier_nccl_out courier_nccl_group(courier_nccl_lib *l, const courier_nccl_dev *d,
		const courier_nccl_op *ops, int n, int timed, const courier_nccl_after *after) {
	courier_nccl_out out = {0, 0, -1, 0, 0, -1, 0};
	int failedv = -1, cuv = 0;
	int *failed = &failedv, *cu = &cuv;
	if (!courier_nccl_push(d, cu)) {
		out.r = COURIER_NCCL_PUSH_FAILED;
		out.cu = cuv;
		return out;
	}
	int64_t t0 = timed ? courier_nccl_now() : 0;
	ncclResult_t r = l->groupStart();
	if (r == 0) {
		ncclResult_t first = 0;
		for (int i = 0; i < n; i++) {
			const courier_nccl_op *o = &ops[i];
			ncclComm_t comm = (ncclComm_t)(uintptr_t)o->comm;
			void *stream = (void *)(uintptr_t)o->stream;
			const void *in = (const void *)(uintptr_t)o->buf;
			void *out = (void *)(uintptr_t)o->buf2;
			size_t count = (size_t)o->count;
			ncclResult_t e;
			switch (o->recv) {
			case COURIER_OP_RECV:
				e = l->recv((void *)(uintptr_t)o->buf, count, o->type, o->peer, comm, stream);
				break;
			case COURIER_OP_SEND:
				e = l->send(in, count, o->type, o->peer, comm, stream);
				break;
			case COURIER_OP_ALLREDUCE:
				e = l->allReduce(in, out, count, o->type, o->redop, comm, stream);
				break;
			case COURIER_OP_BROADCAST:
				e = l->broadcast(in, out, count, o->type, o->peer, comm, stream);
				break;
			case COURIER_OP_REDUCE:
				e = l->reduce(in, out, count, o->type, o->redop, o->peer, comm, stream);
				break;
			case COURIER_OP_ALLGATHER:
				e = l->allGather(in, out, count, o->type, comm, stream);
				break;
			case COURIER_OP_REDUCESCATTER:
				e = l->reduceScatter(in, out, count, o->type, o->redop, comm, stream);
				break;
			default:
				e = 4; // ncclInvalidArgument
			}
			// In a group a non-blocking communicator may answer
			// ncclInProgress for an op; only ncclGroupEnd's answer counts.
			if (e != 0 && e != 7 && first == 0) {
				first = e;
				*failed = i;
				break;
			}
		}
		ncclResult_t end = l->groupEnd();
		r = first != 0 ? first : end;
	}
	if (timed) {
		out.ns = courier_nccl_now() - t0;
	}
	if (r == 0 && after->kind == COURIER_AFTER_WRITE && d->writeValue64 != 0) {
		out.after = ((courier_nccl_write_value64_fn)d->writeValue64)((void *)(uintptr_t)after->stream, after->target, after->value, 0);
	} else if (r == 0 && after->kind == COURIER_AFTER_RECORD) {
		out.after = ((courier_nccl_event_record_fn)d->eventRecord)((void *)(uintptr_t)after->target, (void *)(uintptr_t)after->stream);
	}
	courier_nccl_pop(d, cu);
	if ((r == 0 || r == 7) && *cu != 0) {
		r = COURIER_NCCL_POP_FAILED;
	}
	out.r = r;
	out.failed = failedv;
	out.cu = cuv;
	return out;
}

static ncclResult_t courier_nccl_abort(courier_nccl_lib *l, const courier_nccl_dev *d, uintptr_t comm, int *cu) {
	if (!courier_nccl_push(d, cu)) {
		return COURIER_NCCL_PUSH_FAILED;
	}
	ncclResult_t r = l->commAbort((ncclComm_t)comm);
	courier_nccl_pop(d, cu);
	return r;
}

static const char *courier_nccl_error_string(courier_nccl_lib *l, ncclResult_t r) {
	return l->getErrorString(r);
}

static const char *courier_nccl_last_error(courier_nccl_lib *l, uintptr_t comm) {
	return l->getLastError((ncclComm_t)comm);
}

// courier_nccl_memcpy copies bytes between any two addresses the driver
// knows (unified addressing: device memory, or host memory), with the
// device's context current, on the legacy default stream, which does not
// wait for the communicator's non-blocking stream. It blocks until done.
static int courier_nccl_memcpy(const courier_nccl_dev *d, void *dst, const void *src, size_t bytes, int *cu) {
	if (!courier_nccl_push(d, cu)) {
		return COURIER_NCCL_PUSH_FAILED;
	}
	int r = ((courier_nccl_memcpy_fn)d->memcpy)((unsigned long long)(uintptr_t)dst, (unsigned long long)(uintptr_t)src, bytes);
	courier_nccl_pop(d, cu);
	return r;
}

// courier_nccl_memcpy_from is courier_nccl_memcpy from a device address.
static int courier_nccl_memcpy_from(const courier_nccl_dev *d, void *dst, uint64_t src, size_t bytes, int *cu) {
	return courier_nccl_memcpy(d, dst, (const void *)(uintptr_t)src, bytes, cu);
}
*/
import "C"

import (
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/courier-mp/courier/backend"
	"github.com/courier-mp/courier/cuda"
)

// Result codes of ncclResult_t the package tells apart (nccl.h).
const (
	ncclSuccess     = 0
	ncclRemoteError = 6
	ncclInProgress  = 7

	resPushFailed = C.COURIER_NCCL_PUSH_FAILED
	resPopFailed  = C.COURIER_NCCL_POP_FAILED
)

// library is a loaded libnccl. Libraries are never unloaded: NCCL keeps
// threads and CUDA state that do not survive dlclose.
type library struct {
	c       *C.courier_nccl_lib
	path    string
	version int
}

// openLibrary dlopens path and looks up every entry point courier uses.
// The error matches backend.ErrNotSupported and carries the loader's
// reason, which names the path.
func openLibrary(path string) (*library, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var errbuf [1024]C.char
	c := C.courier_nccl_open(cpath, &errbuf[0], C.size_t(len(errbuf)))
	if c == nil {
		return nil, fmt.Errorf("nccl: %w: %s", backend.ErrNotSupported, C.GoString(&errbuf[0]))
	}
	l := &library{c: c, path: path}
	var v C.int
	if r := C.courier_nccl_version(c, &v); r != ncclSuccess {
		return nil, fmt.Errorf("nccl: %w: %s: ncclGetVersion: %s", backend.ErrNotSupported, path, l.resultString(int(r)))
	}
	l.version = int(v)
	return l, nil
}

// resultString is NCCL's name for a result code.
func (l *library) resultString(r int) string {
	switch r {
	case resPushFailed:
		return "could not make the device's CUDA context current"
	case resPopFailed:
		return "could not restore the thread's CUDA context"
	}
	if s := C.courier_nccl_error_string(l.c, C.ncclResult_t(r)); s != nil {
		return C.GoString(s)
	}
	return fmt.Sprintf("ncclResult_t(%d)", r)
}

// lastError is NCCL's description of its last error on comm ("" if none).
func (l *library) lastError(comm uintptr) string {
	if s := C.courier_nccl_last_error(l.c, C.uintptr_t(comm)); s != nil {
		return strings.TrimSpace(C.GoString(s))
	}
	return ""
}

// check turns a result code into an error (nil for ncclSuccess), with
// NCCL's last-error text for comm and the CUresult of a failed context
// switch.
func (l *library) check(r int, op string, comm uintptr, cu C.int) error {
	if r == ncclSuccess {
		return nil
	}
	e := &Error{Code: r, Name: resultName(r), Op: op, Msg: l.resultString(r)}
	if r == resPushFailed || r == resPopFailed {
		e.Msg += fmt.Sprintf(" (CUresult %d)", int(cu))
	} else if comm != 0 || r != ncclInProgress {
		e.Detail = l.lastError(comm)
	}
	return e
}

// devHooks is how C reaches a device: its primary context and the driver
// functions that push and pop it and copy memory.
type devHooks struct {
	c C.courier_nccl_dev
}

// newDevHooks asks the cuda package for device d's primary context and
// the driver entry points the wrappers need.
func newDevHooks(d cuda.Device) (*devHooks, error) {
	ctx, err := d.PrimaryContext()
	if err != nil {
		return nil, err
	}
	h := &devHooks{}
	h.c.ctx = C.uintptr_t(ctx)
	for _, s := range []struct {
		name string
		dst  *C.uintptr_t
	}{
		{"cuCtxPushCurrent_v2", &h.c.push},
		{"cuCtxPopCurrent_v2", &h.c.pop},
		{"cuMemcpy", &h.c.memcpy},
		{"cuEventRecord", &h.c.eventRecord},
	} {
		p, err := cuda.Symbol(s.name)
		if err != nil {
			return nil, err
		}
		*s.dst = C.uintptr_t(p)
	}
	// As the cuda package loads it: the _v2 entry point where the driver
	// has one (0 if neither: completion words are then not used).
	for _, name := range []string{"cuStreamWriteValue64_v2", "cuStreamWriteValue64"} {
		if p, err := cuda.Symbol(name); err == nil && p != 0 {
			h.c.writeValue64 = C.uintptr_t(p)
			break
		}
	}
	return h, nil
}

// uniqueID calls ncclGetUniqueId.
func (l *library) uniqueID() ([idBytes]byte, error) {
	var id [idBytes]byte
	r := C.courier_nccl_unique_id(l.c, unsafe.Pointer(&id[0]))
	return id, l.check(int(r), "ncclGetUniqueId", 0, 0)
}

// initComm starts ncclCommInitRankConfig for a non-blocking communicator
// on the device of h. It returns the communicator as soon as NCCL does:
// its initialization then goes on in NCCL's threads until asyncError stops
// saying ncclInProgress.
//
// With blocking set, the communicator is a blocking one, and initComm
// returns only once it is ready (every rank of it has joined).
func (l *library) initComm(h *devHooks, nranks, rank int, id [idBytes]byte, blocking bool) (uintptr, error) {
	var comm C.uintptr_t
	var cu C.int
	b := C.int(0)
	if blocking {
		b = 1
	}
	r := C.courier_nccl_init(l.c, &h.c, &comm, C.int(nranks), unsafe.Pointer(&id[0]), C.int(rank), b, &cu)
	if r == ncclInProgress {
		return uintptr(comm), nil
	}
	return uintptr(comm), l.check(int(r), "ncclCommInitRankConfig", uintptr(comm), cu)
}

// asyncState calls ncclCommGetAsyncError: it returns inProgress while NCCL
// still works on the last call (initialization, a group), and the
// communicator's error, if it has one.
func (l *library) asyncState(comm uintptr) (inProgress bool, err error) {
	o := C.courier_nccl_async_error(l.c, C.uintptr_t(comm))
	if o.r != ncclSuccess {
		return false, l.check(int(o.r), "ncclCommGetAsyncError", comm, 0)
	}
	if o.state == ncclInProgress {
		return true, nil
	}
	return false, l.check(int(o.state), "communicator", comm, 0)
}

// group issues ops as one group (ncclGroupStart, the sends and receives,
// each on its communicator and stream, ncclGroupEnd) in one C call with the
// device's context current. inProgress reports ncclGroupEnd's
// ncclInProgress: the operations reach the streams only once asyncState
// stops saying so. If timed is set, nccl is how long NCCL's calls took
// (the rest of the call is the context's push and pop, and cgo).
func (l *library) group(h *devHooks, ops cOps, timed bool) (inProgress bool, nccl time.Duration, err error) {
	inProgress, nccl, _, err = l.groupThen(h, ops, timed, nil)
	return inProgress, nccl, err
}

// after is what groupThen queues behind a group in the same call.
type after = C.courier_nccl_after

// noAfter is nothing to queue (never written: C only reads it, and a
// package variable does not make each call allocate).
var noAfter after

// afterWrite and afterRecord describe a write of v to the word at addr,
// and a record of event ev, on stream.
func afterWrite(stream, addr uintptr, v uint64) after {
	return after{kind: C.COURIER_AFTER_WRITE, stream: C.uint64_t(stream), target: C.uint64_t(addr), value: C.uint64_t(v)}
}

func afterRecord(stream, ev uintptr) after {
	return after{kind: C.COURIER_AFTER_RECORD, stream: C.uint64_t(stream), target: C.uint64_t(ev)}
}

// groupThen is group that, once the group is on its stream, also queues
// *then behind it (if not nil) in the same C call: done reports that it
// was queued (an error in queueing it is err).
func (l *library) groupThen(h *devHooks, ops cOps, timed bool, then *after) (inProgress bool, nccl time.Duration, done bool, err error) {
	if len(ops) == 0 {
		return false, 0, false, nil
	}
	t := C.int(0)
	if timed {
		t = 1
	}
	if then == nil {
		then = &noAfter
	}
	out := C.courier_nccl_group(l.c, &h.c, &ops[0], C.int(len(ops)), t, then)
	r, failed, cu := out.r, out.failed, C.int(out.cu)
	nccl = time.Duration(out.ns)
	if r == ncclInProgress {
		return true, nccl, false, nil
	}
	if r == ncclSuccess && out.after > 0 {
		what := "cuStreamWriteValue64"
		if then.kind == C.COURIER_AFTER_RECORD {
			what = "cuEventRecord"
		}
		return false, nccl, false, fmt.Errorf("nccl: %s after a group: CUresult %d", what, int(out.after))
	}
	done = r == ncclSuccess && out.after == 0
	op := "ncclGroupEnd"
	comm := uintptr(ops[0].comm)
	if failed >= 0 {
		o := ops[failed]
		comm = uintptr(o.comm)
		switch o.recv {
		case C.COURIER_OP_RECV:
			op = fmt.Sprintf("ncclRecv(%d elements from NCCL rank %d)", uint64(o.count), int(o.peer))
		case C.COURIER_OP_SEND:
			op = fmt.Sprintf("ncclSend(%d elements to NCCL rank %d)", uint64(o.count), int(o.peer))
		default:
			op = fmt.Sprintf("%s(%d elements)", collCallNames[o.recv], uint64(o.count))
		}
	}
	return false, nccl, done, l.check(int(r), op, comm, cu)
}

// abort calls ncclCommAbort: NCCL stops the communicator's work on the
// device and frees it, without waiting for the other ranks (measured:
// about 0.5 s with a receive pending). On a non-blocking communicator NCCL
// may answer ncclInProgress and free it in the background: the handle is
// gone either way.
func (l *library) abort(h *devHooks, comm uintptr) error {
	var cu C.int
	r := C.courier_nccl_abort(l.c, &h.c, C.uintptr_t(comm), &cu)
	if r == ncclInProgress {
		return nil
	}
	return l.check(int(r), "ncclCommAbort", 0, cu)
}

// copyBytes copies n bytes from src to dst, either of which may be device
// or host memory (cuMemcpy with unified addressing), and returns when the
// copy is done.
func (h *devHooks) copyBytes(dst, src unsafe.Pointer, n int64) error {
	if n == 0 {
		return nil
	}
	var cu C.int
	r := C.courier_nccl_memcpy(&h.c, dst, src, C.size_t(n), &cu)
	return copyErr(r, cu, n)
}

// copyFrom is copyBytes from device address src.
func (h *devHooks) copyFrom(dst unsafe.Pointer, src uintptr, n int64) error {
	if n == 0 {
		return nil
	}
	var cu C.int
	r := C.courier_nccl_memcpy_from(&h.c, dst, C.uint64_t(src), C.size_t(n), &cu)
	return copyErr(r, cu, n)
}

// copyErr explains a failed copy.
func copyErr(r, cu C.int, n int64) error {
	switch {
	case r == resPushFailed:
		return fmt.Errorf("nccl: copying %d bytes: could not make the device's CUDA context current (CUresult %d)", n, int(cu))
	case r != 0:
		return fmt.Errorf("nccl: copying %d bytes: cuMemcpy: CUresult %d", n, int(r))
	case cu != 0:
		return fmt.Errorf("nccl: copying %d bytes: could not restore the thread's CUDA context (CUresult %d)", n, int(cu))
	}
	return nil
}

// cOps is a reusable array of C op descriptors for one flush.
type cOps []C.courier_nccl_op

// add appends one send or receive, on communicator comm and stream.
func (o *cOps) add(comm, stream, buf uintptr, count uint64, peer int, typ ncclType, recv bool) {
	var r C.int32_t = C.COURIER_OP_SEND
	if recv {
		r = C.COURIER_OP_RECV
	}
	*o = append(*o, C.courier_nccl_op{
		buf:    C.uint64_t(buf),
		count:  C.uint64_t(count),
		comm:   C.uint64_t(comm),
		stream: C.uint64_t(stream),
		peer:   C.int32_t(peer),
		_type:  C.int32_t(typ),
		recv:   r,
	})
}

// collCallNames names the NCCL call of each collective kind of op.
var collCallNames = map[C.int32_t]string{
	C.COURIER_OP_ALLREDUCE: "ncclAllReduce", C.COURIER_OP_BROADCAST: "ncclBroadcast", C.COURIER_OP_REDUCE: "ncclReduce",
	C.COURIER_OP_ALLGATHER: "ncclAllGather", C.COURIER_OP_REDUCESCATTER: "ncclReduceScatter",
}

// addColl appends a collective (not Alltoall, which is sends and
// receives), on communicator comm and stream: count as the NCCL call
// takes it, root for Bcast and Reduce.
func (o *cOps) addColl(comm, stream uintptr, kind backend.CollKind, send, recv uintptr, count uint64, typ ncclType, op ncclRedOp, root int) {
	var k C.int32_t
	switch kind {
	case backend.Allreduce:
		k = C.COURIER_OP_ALLREDUCE
	case backend.Bcast:
		k = C.COURIER_OP_BROADCAST
	case backend.Reduce:
		k = C.COURIER_OP_REDUCE
	case backend.Allgather:
		k = C.COURIER_OP_ALLGATHER
	case backend.ReduceScatter:
		k = C.COURIER_OP_REDUCESCATTER
	default:
		k = -1 // the C side answers ncclInvalidArgument
	}
	*o = append(*o, C.courier_nccl_op{
		buf:    C.uint64_t(send),
		buf2:   C.uint64_t(recv),
		count:  C.uint64_t(count),
		comm:   C.uint64_t(comm),
		stream: C.uint64_t(stream),
		peer:   C.int32_t(root),
		_type:  C.int32_t(typ),
		recv:   k,
		redop:  C.int32_t(op),
	})
}
