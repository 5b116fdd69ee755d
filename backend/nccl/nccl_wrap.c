//go:build cgo

// nccl_wrap.c: the wrappers nccl_wrap.h declares (see there for what each
// does). cgo compiles this file into the package; nccl_cgo.go calls it.

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl_wrap.h"

// The CUDA driver entry points the wrappers call through (from cuda.Symbol).
typedef int (*courier_nccl_ctx_push_fn)(void *ctx);
typedef int (*courier_nccl_ctx_pop_fn)(void **ctx);
typedef int (*courier_nccl_memcpy_fn)(unsigned long long dst, unsigned long long src, size_t bytes);
typedef int (*courier_nccl_write_value64_fn)(void *stream, unsigned long long addr, uint64_t v, unsigned int flags);
typedef int (*courier_nccl_event_record_fn)(void *event, void *stream);

struct courier_nccl_lib {
	void *h;
	ncclResult_t (*getVersion)(int *version);
	ncclResult_t (*getUniqueId)(ncclUniqueId *id);
	ncclResult_t (*commInitRankConfig)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config);
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
	ncclResult_t (*allReduce)(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, void *stream);
	ncclResult_t (*broadcast)(const void *send, void *recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm, void *stream);
	ncclResult_t (*reduce)(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root, ncclComm_t comm, void *stream);
	ncclResult_t (*allGather)(const void *send, void *recv, size_t sendcount, ncclDataType_t type, ncclComm_t comm, void *stream);
	ncclResult_t (*reduceScatter)(const void *send, void *recv, size_t recvcount, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm, void *stream);
};

courier_nccl_lib *courier_nccl_open(const char *path, char *err, size_t errlen) {
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

ncclResult_t courier_nccl_version(courier_nccl_lib *l, int *v) {
	return l->getVersion(v);
}

ncclResult_t courier_nccl_unique_id(courier_nccl_lib *l, void *out) {
	ncclUniqueId id;
	ncclResult_t r = l->getUniqueId(&id);
	memcpy(out, &id, sizeof id);
	return r;
}

ncclResult_t courier_nccl_init(courier_nccl_lib *l, const courier_nccl_dev *d,
		uintptr_t *comm, int nranks, const void *idbytes, int rank, int blocking, int *cu) {
	ncclConfig_t cfg;
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

courier_nccl_out courier_nccl_async_error(courier_nccl_lib *l, uintptr_t comm) {
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

courier_nccl_out courier_nccl_group(courier_nccl_lib *l, const courier_nccl_dev *d,
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
				e = ncclInvalidArgument;
			}
			// In a group a non-blocking communicator may answer
			// ncclInProgress for an op; only ncclGroupEnd's answer counts.
			if (e != 0 && e != ncclInProgress && first == 0) {
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
	if ((r == 0 || r == ncclInProgress) && *cu != 0) {
		r = COURIER_NCCL_POP_FAILED;
	}
	out.r = r;
	out.failed = failedv;
	out.cu = cuv;
	return out;
}

ncclResult_t courier_nccl_abort(courier_nccl_lib *l, const courier_nccl_dev *d, uintptr_t comm, int *cu) {
	if (!courier_nccl_push(d, cu)) {
		return COURIER_NCCL_PUSH_FAILED;
	}
	ncclResult_t r = l->commAbort((ncclComm_t)comm);
	courier_nccl_pop(d, cu);
	return r;
}

const char *courier_nccl_error_string(courier_nccl_lib *l, ncclResult_t r) {
	return l->getErrorString(r);
}

const char *courier_nccl_last_error(courier_nccl_lib *l, uintptr_t comm) {
	return l->getLastError((ncclComm_t)comm);
}

int courier_nccl_memcpy(const courier_nccl_dev *d, void *dst, const void *src, size_t bytes, int *cu) {
	if (!courier_nccl_push(d, cu)) {
		return COURIER_NCCL_PUSH_FAILED;
	}
	int r = ((courier_nccl_memcpy_fn)d->memcpy)((unsigned long long)(uintptr_t)dst, (unsigned long long)(uintptr_t)src, bytes);
	courier_nccl_pop(d, cu);
	return r;
}

int courier_nccl_memcpy_from(const courier_nccl_dev *d, void *dst, uint64_t src, size_t bytes, int *cu) {
	return courier_nccl_memcpy(d, dst, (const void *)(uintptr_t)src, bytes, cu);
}
