// fakegpu.c: a stand-in for both libcuda.so.1 and libnccl.so.2 in one
// library, which the tests build with the C compiler and load through the
// real loaders (COURIER_CUDA_LIBRARY and COURIER_NCCL_LIBRARY name it), so
// that the nccl backend's C layer and device engine run end to end on
// machines without a GPU, with several ranks in one process.
//
// "Device memory" is host memory. Streams hold queues of work that runs in
// order whenever the fake is asked about anything (a query, a
// synchronize): copies and event records at once, NCCL operations only
// when the matching operation of the peer is at the head of its own
// stream (the k-th send from NCCL rank a to b of a communicator pairs with
// the k-th receive at b from a). A send smaller than its receive leaves the
// receive hanging, as NCCL does. So a stream blocked by an NCCL operation
// blocks everything queued after it, as on a GPU.
//
// It is strict where NCCL and CUDA are lenient, to catch mistakes:
//   - calls that need a context fail without one, and a thread's context
//     stack must be empty when a context is pushed;
//   - ncclCommInitRankConfig checks the configuration's layout and values
//     (size, magic, version 2.28.3, blocking 0 or 1, every other field unset),
//     and that the unique ID it gets by value is one ncclGetUniqueId made;
//   - a non-blocking communicator's initialization and every third
//     ncclGroupEnd answer ncclInProgress, and the group reaches the streams
//     only when ncclCommGetAsyncError has been asked (twice); queueing
//     anything on such a stream before then is an error the fake reports
//     from then on (ncclInvalidUsage from every NCCL call); a blocking
//     one's initialization returns once every rank has joined, and its
//     groups reach the streams inside ncclGroupEnd;
//   - a send or receive must lie in device memory of the communicator's
//     device;
//   - with FAKEGPU_FAULT=1 in the environment, stream and event queries
//     of unfinished work fail with CUDA_ERROR_ILLEGAL_ADDRESS (a fault);
//   - with FAKEGPU_INIT_NEVER=1 in the environment, a blocking
//     communicator's initialization as NCCL rank 1 never returns;
//   - stream memory operations (cuStreamWriteValue64, cuStreamWaitValue64)
//     on device memory or page-locked host memory; once one has been
//     used, a thread of the fake's runs the streams every few
//     microseconds, as a GPU would, so that a CPU polling memory sees the
//     work finish; with FAKEGPU_NO_MEMOPS=1 in the environment they answer
//     CUDA_ERROR_NOT_SUPPORTED;
//   - ncclCommFinalize completes only once every rank of the communicator
//     has called it (NCCL's finalize ends with a barrier of the ranks on
//     a host), and ncclCommDestroy of a communicator not finalized, which
//     would run that barrier inside, is an error.

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef FAKE_NDEV
#define FAKE_NDEV 4
#endif

typedef int CUresult;
typedef int ncclResult_t;

enum {
	CU_OK = 0,
	CU_INVALID_VALUE = 1,
	CU_OUT_OF_MEMORY = 2,
	CU_NOT_INITIALIZED = 3,
	CU_INVALID_DEVICE = 101,
	CU_INVALID_CONTEXT = 201,
	CU_INVALID_PTX = 218,
	CU_INVALID_HANDLE = 400,
	CU_NOT_FOUND = 500,
	CU_NOT_READY = 600,
	CU_ILLEGAL_ADDRESS = 700,
	CU_LAUNCH_TIMEOUT = 702,
	CU_NOT_SUPPORTED = 801,
	CU_UNKNOWN = 999,
};

enum {
	NCCL_OK = 0,
	NCCL_INTERNAL = 3,
	NCCL_INVALID_ARGUMENT = 4,
	NCCL_INVALID_USAGE = 5,
	NCCL_IN_PROGRESS = 7,
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&mu)
#define UNLOCK() pthread_mutex_unlock(&mu)

static char last_error[512];
static int misuse; // set once the caller broke a rule: every NCCL call fails

static void fail_usage(const char *what) {
	if (!misuse) {
		snprintf(last_error, sizeof last_error, "fake nccl: %s", what);
	}
	misuse = 1;
}

// --- contexts ---

struct ctx {
	int dev;
};

static int initialized;
static struct ctx ctxs[FAKE_NDEV];
static __thread struct ctx *ctx_stack[4];
static __thread int ctx_depth;

static struct ctx *cur(void) { return ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL; }

static CUresult need_ctx(void) {
	if (!initialized) return CU_NOT_INITIALIZED;
	if (cur() == NULL) return CU_INVALID_CONTEXT;
	return CU_OK;
}

// --- memory ---

struct mem {
	char *p;
	size_t n;
	int dev; // -1: page-locked host memory
	struct mem *next;
};

static struct mem *mems;

static int inside(const void *p, size_t n, int dev) {
	uintptr_t a = (uintptr_t)p;
	for (struct mem *m = mems; m != NULL; m = m->next) {
		uintptr_t s = (uintptr_t)m->p;
		if (m->dev == dev && a >= s && a - s <= m->n && n <= m->n - (a - s)) return 1;
	}
	return 0;
}

// --- streams and their work ---

struct comm;
struct event;

enum { W_COPY, W_RECORD, W_WAIT, W_NCCL, W_WRITE64, W_WAIT64 };

struct work {
	int kind;
	void *dst;
	const void *src;
	size_t n;
	struct event *ev;
	unsigned long seq; // W_RECORD: the record's number; W_WAIT: the record waited for; W_WRITE64, W_WAIT64: the value
	// W_NCCL
	struct comm *comm;
	int peer, recv;
	int hung; // a receive whose send was smaller: never finishes
	unsigned long issued; // W_NCCL: the order of issue, over all streams
	struct work *next;
};

struct stream {
	int magic;
	int dev;
	struct work *head, *tail;
	struct stream *next;
};

struct event {
	int magic;
	int dev;
	unsigned long rec;  // records queued so far
	unsigned long done; // the last record that has run
};

#define STREAM_MAGIC 0x73747265
#define EVENT_MAGIC 0x65766e74

static struct stream *streams;

// pending_launch_on reports whether a communicator has a launched group
// not yet on stream s.
static int pending_launch_on(struct stream *s);

static pthread_cond_t gpu_cond = PTHREAD_COND_INITIALIZER;

static void push_work(struct stream *s, struct work *w) {
	pthread_cond_signal(&gpu_cond); // the caller holds the lock
	w->next = NULL;
	if (s->tail) {
		s->tail->next = w;
	} else {
		s->head = w;
	}
	s->tail = w;
}

static void pop_work(struct stream *s) {
	struct work *w = s->head;
	s->head = w->next;
	if (s->head == NULL) s->tail = NULL;
	free(w);
}

// --- NCCL communicators ---

#define ID_BYTES 128

struct clique {
	unsigned char id[ID_BYTES];
	int nranks;
	int joined;
	struct comm *ranks[8];
	struct clique *next;
};

struct op {
	struct comm *comm;
	int peer, recv, type;
	void *buf;
	size_t count;
	struct stream *stream;
};

struct comm {
	struct clique *cl;
	int rank, dev;
	int init_polls; // polls before initialization is reported done
	int ready;
	// A group launched with ncclInProgress: its operations, and the
	// polls left before they reach their streams.
	struct op *pending;
	int npending, pending_polls;
	int finalize_polls, finalized, final_done;
	int aborted;
	int blocking;
};

static struct clique *cliques;

static int pending_launch_on(struct stream *s) {
	for (struct clique *cl = cliques; cl; cl = cl->next) {
		for (int r = 0; r < cl->nranks; r++) {
			struct comm *c = cl->ranks[r];
			if (c == NULL || c->npending == 0) continue;
			for (int i = 0; i < c->npending; i++) {
				if (c->pending[i].stream == s) return 1;
			}
		}
	}
	return 0;
}

// first_nccl returns the first NCCL work on any stream of comm c with
// peer and direction given, in stream order of issue: the k-th such work
// pairs with the k-th of the partner. Work is matched only at stream
// heads, and each comm's operations with one peer in one direction are in
// issue order on its streams (courier uses one stream per communicator).
static int at_head(struct work *w) {
	for (struct stream *s = streams; s; s = s->next) {
		if (s->head == w) return 1;
	}
	return 0;
}

static size_t type_size(int t) {
	switch (t) {
	case 0: case 1: return 1;
	case 2: case 3: case 7: return 4;
	case 4: case 5: case 8: return 8;
	case 6: case 9: return 2;
	}
	return 0;
}

// partner_of finds, for NCCL work w at a stream head, the oldest
// unfinished work of the peer that pairs with it (in issue order: the
// oldest work in the peer's queue for this direction), if it is at the
// head of its stream.
static struct stream *stream_with_head(struct work *w) {
	for (struct stream *s = streams; s; s = s->next) {
		if (s->head == w) return s;
	}
	return NULL;
}

static struct work *oldest(struct comm *c, int peer, int recv) {
	// A communicator's work may be on several streams (courier moves a
	// channel between its own stream and a shared one): the oldest is the
	// first issued.
	struct work *best = NULL;
	for (struct stream *s = streams; s; s = s->next) {
		for (struct work *w = s->head; w; w = w->next) {
			if (w->kind == W_NCCL && w->comm == c && w->peer == peer && w->recv == recv && !w->hung) {
				if (best == NULL || w->issued < best->issued) best = w;
				break; // later ones on this stream were issued later
			}
		}
	}
	return best;
}

// advance runs every stream as far as it can go.
static void advance(void) {
	for (int progress = 1; progress;) {
		progress = 0;
		for (struct stream *s = streams; s; s = s->next) {
			while (s->head) {
				struct work *w = s->head;
				if (w->kind == W_COPY) {
					memmove(w->dst, w->src, w->n);
				} else if (w->kind == W_RECORD) {
					if (w->seq > w->ev->done) w->ev->done = w->seq;
				} else if (w->kind == W_WAIT) {
					if (w->ev->done < w->seq) break;
				} else if (w->kind == W_WRITE64) {
					__atomic_store_n((uint64_t *)w->dst, (uint64_t)w->seq, __ATOMIC_RELEASE);
				} else if (w->kind == W_WAIT64) {
					if (__atomic_load_n((uint64_t *)w->dst, __ATOMIC_ACQUIRE) < (uint64_t)w->seq) break;
				} else {
					if (w->hung) break;
					struct comm *peer = w->comm->cl->ranks[w->peer];
					if (peer == NULL || peer->aborted) break;
					struct work *p = oldest(peer, w->comm->rank, !w->recv);
					if (p == NULL || !at_head(p) || oldest(w->comm, w->peer, w->recv) != w) break;
					struct work *snd = w->recv ? p : w, *rcv = w->recv ? w : p;
					size_t n = snd->n < rcv->n ? snd->n : rcv->n;
					memmove(rcv->dst, snd->src, n);
					struct stream *ps = stream_with_head(p);
					if (snd->n < rcv->n) {
						rcv->hung = 1;
						if (snd == w) {
							pop_work(s);
						} else {
							pop_work(ps);
						}
						progress = 1;
						continue;
					}
					pop_work(ps);
					if (ps == s) continue; // (a self pair: both popped from s)
				}
				pop_work(s);
				progress = 1;
			}
		}
	}
}

// --- CUDA driver API ---

CUresult cuInit(unsigned int flags) {
	if (flags != 0) return CU_INVALID_VALUE;
	LOCK();
	for (int i = 0; i < FAKE_NDEV; i++) ctxs[i].dev = i;
	initialized = 1;
	UNLOCK();
	return CU_OK;
}

CUresult cuDriverGetVersion(int *v) { *v = 13000; return CU_OK; }

CUresult cuGetErrorName(CUresult code, const char **name) {
	static char buf[64];
	snprintf(buf, sizeof buf, "FAKE_CUDA_ERROR_%d", code);
	*name = code == 0 ? "CUDA_SUCCESS" : buf;
	return CU_OK;
}

CUresult cuGetErrorString(CUresult code, const char **msg) {
	*msg = code == CU_LAUNCH_TIMEOUT ? "fake: a stream cannot finish (an NCCL operation never matched)" : "fake error";
	return CU_OK;
}

CUresult cuDeviceGetCount(int *n) {
	if (!initialized) return CU_NOT_INITIALIZED;
	*n = FAKE_NDEV;
	return CU_OK;
}

CUresult cuDeviceGet(int *d, int ordinal) {
	if (ordinal < 0 || ordinal >= FAKE_NDEV) return CU_INVALID_DEVICE;
	*d = ordinal;
	return CU_OK;
}

CUresult cuDeviceGetName(char *name, int len, int d) {
	snprintf(name, (size_t)len, "Fake GPU %d", d);
	return CU_OK;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, int d) { (void)d; *bytes = (size_t)1 << 34; return CU_OK; }

CUresult cuDeviceGetPCIBusId(char *id, int len, int d) {
	snprintf(id, (size_t)len, "0000:%02x:00.0", 0x20 + d);
	return CU_OK;
}

CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
	(void)d;
	*v = attr == 75 ? 9 : 0;
	return CU_OK;
}

CUresult cuDevicePrimaryCtxRetain(struct ctx **c, int d) {
	if (!initialized) return CU_NOT_INITIALIZED;
	if (d < 0 || d >= FAKE_NDEV) return CU_INVALID_DEVICE;
	*c = &ctxs[d];
	return CU_OK;
}

CUresult cuCtxPushCurrent_v2(struct ctx *c) {
	if (c < &ctxs[0] || c >= &ctxs[FAKE_NDEV]) return CU_INVALID_CONTEXT;
	if (ctx_depth != 0) return CU_UNKNOWN; // a push without its pop
	ctx_stack[ctx_depth++] = c;
	return CU_OK;
}

CUresult cuCtxPopCurrent_v2(struct ctx **c) {
	if (ctx_depth == 0) return CU_INVALID_CONTEXT;
	*c = ctx_stack[--ctx_depth];
	return CU_OK;
}

CUresult cuCtxSynchronize(void) {
	CUresult r = need_ctx();
	if (r) return r;
	LOCK();
	advance();
	UNLOCK();
	return CU_OK;
}

CUresult cuMemAlloc_v2(unsigned long long *p, size_t n) {
	CUresult r = need_ctx();
	if (r) return r;
	if (n == 0) return CU_INVALID_VALUE;
	struct mem *m = malloc(sizeof *m);
	m->p = calloc(1, n);
	m->n = n;
	LOCK();
	m->dev = cur()->dev;
	m->next = mems;
	mems = m;
	UNLOCK();
	*p = (unsigned long long)(uintptr_t)m->p;
	return CU_OK;
}

static CUresult free_mem(void *p, int dev) {
	LOCK();
	for (struct mem **pm = &mems; *pm; pm = &(*pm)->next) {
		struct mem *m = *pm;
		if (m->p == p && m->dev == dev) {
			*pm = m->next;
			free(m->p);
			free(m);
			UNLOCK();
			return CU_OK;
		}
	}
	UNLOCK();
	return CU_INVALID_VALUE;
}

CUresult cuMemFree_v2(unsigned long long p) {
	CUresult r = need_ctx();
	if (r) return r;
	return free_mem((void *)(uintptr_t)p, cur()->dev);
}

CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
	CUresult r = need_ctx();
	if (r) return r;
	(void)flags;
	struct mem *m = malloc(sizeof *m);
	m->p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
	m->n = n;
	m->dev = -1;
	LOCK();
	m->next = mems;
	mems = m;
	UNLOCK();
	*p = m->p;
	return CU_OK;
}

// cuMemHostGetDevicePointer_v2: with unified addressing, the host address.
CUresult cuMemHostGetDevicePointer_v2(unsigned long long *d, void *p, unsigned int flags) {
	CUresult r = need_ctx();
	if (r) return r;
	LOCK();
	int ok = flags == 0 && inside(p, 1, -1);
	UNLOCK();
	if (!ok) return CU_INVALID_VALUE;
	*d = (unsigned long long)(uintptr_t)p;
	return CU_OK;
}

CUresult cuMemFreeHost(void *p) {
	CUresult r = need_ctx();
	if (r) return r;
	return free_mem(p, -1);
}

static CUresult stream_ok(struct stream *s) {
	if (s == NULL) return CU_OK;
	if (s->magic != STREAM_MAGIC) return CU_INVALID_HANDLE;
	if (s->dev != cur()->dev) return CU_INVALID_CONTEXT;
	return CU_OK;
}

// copy runs a copy at once (s NULL: the legacy stream, which does not wait
// for non-blocking streams) or queues it on s.
static CUresult copy(void *dst, const void *src, size_t n, struct stream *s) {
	CUresult r = need_ctx();
	if (r) return r;
	LOCK();
	if ((r = stream_ok(s)) != CU_OK) {
		UNLOCK();
		return r;
	}
	if (s == NULL) {
		memmove(dst, src, n);
		UNLOCK();
		return CU_OK;
	}
	if (pending_launch_on(s)) fail_usage("work queued on a stream while an NCCL group for it was still in progress");
	struct work *w = calloc(1, sizeof *w);
	w->kind = W_COPY;
	w->dst = dst;
	w->src = src;
	w->n = n;
	push_work(s, w);
	UNLOCK();
	return CU_OK;
}

static CUresult devcheck(const void *p, size_t n) { return inside(p, n, cur()->dev) ? CU_OK : CU_INVALID_VALUE; }

#define DEV(p) ((void *)(uintptr_t)(p))

CUresult cuMemcpyHtoD_v2(unsigned long long d, const void *h, size_t n) {
	if (need_ctx() || devcheck(DEV(d), n)) return CU_INVALID_VALUE;
	return copy(DEV(d), h, n, NULL);
}
CUresult cuMemcpyDtoH_v2(void *h, unsigned long long d, size_t n) {
	if (need_ctx() || devcheck(DEV(d), n)) return CU_INVALID_VALUE;
	return copy(h, DEV(d), n, NULL);
}
CUresult cuMemcpyDtoD_v2(unsigned long long d, unsigned long long s, size_t n) { return copy(DEV(d), DEV(s), n, NULL); }
CUresult cuMemcpyPeer(unsigned long long d, struct ctx *dc, unsigned long long s, struct ctx *sc, size_t n) {
	(void)dc, (void)sc;
	return copy(DEV(d), DEV(s), n, NULL);
}
CUresult cuMemcpyHtoDAsync_v2(unsigned long long d, const void *h, size_t n, struct stream *s) {
	if (need_ctx() || devcheck(DEV(d), n)) return CU_INVALID_VALUE;
	return copy(DEV(d), h, n, s);
}
CUresult cuMemcpyDtoHAsync_v2(void *h, unsigned long long d, size_t n, struct stream *s) {
	if (need_ctx() || devcheck(DEV(d), n)) return CU_INVALID_VALUE;
	return copy(h, DEV(d), n, s);
}
CUresult cuMemcpyDtoDAsync_v2(unsigned long long d, unsigned long long s, size_t n, struct stream *st) {
	return copy(DEV(d), DEV(s), n, st);
}
CUresult cuMemcpyPeerAsync(unsigned long long d, struct ctx *dc, unsigned long long s, struct ctx *sc, size_t n, struct stream *st) {
	(void)dc, (void)sc;
	return copy(DEV(d), DEV(s), n, st);
}

// cuMemcpy copies between any two addresses (unified addressing).
CUresult cuMemcpy(unsigned long long d, unsigned long long s, size_t n) { return copy(DEV(d), DEV(s), n, NULL); }

CUresult cuMemsetD8_v2(unsigned long long p, unsigned char v, size_t n) {
	CUresult r = need_ctx();
	if (r) return r;
	memset(DEV(p), v, n);
	return CU_OK;
}

CUresult cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, struct stream *s) {
	CUresult r = need_ctx();
	if (r) return r;
	LOCK();
	advance(); // a simplification: run what is queued, then set
	if (s) {
		while (s->head && s->head->kind != W_NCCL) pop_work(s);
	}
	UNLOCK();
	memset(DEV(p), v, n);
	return CU_OK;
}

CUresult cuStreamCreate(struct stream **out, unsigned int flags) {
	CUresult r = need_ctx();
	if (r) return r;
	if (flags != 1) return CU_INVALID_VALUE; // courier's streams are non-blocking
	struct stream *s = calloc(1, sizeof *s);
	s->magic = STREAM_MAGIC;
	LOCK();
	s->dev = cur()->dev;
	s->next = streams;
	streams = s;
	UNLOCK();
	*out = s;
	return CU_OK;
}

CUresult cuStreamDestroy_v2(struct stream *s) {
	CUresult r = need_ctx();
	if (r) return r;
	LOCK();
	if (s == NULL || (r = stream_ok(s)) != CU_OK) {
		UNLOCK();
		return CU_INVALID_HANDLE;
	}
	advance();
	if (s->head != NULL) {
		fail_usage("a stream destroyed with NCCL work that can never finish");
	}
	while (s->head) pop_work(s);
	for (struct stream **ps = &streams; *ps; ps = &(*ps)->next) {
		if (*ps == s) {
			*ps = s->next;
			break;
		}
	}
	s->magic = 0;
	free(s);
	UNLOCK();
	return CU_OK;
}

CUresult cuStreamSynchronize(struct stream *s) {
	CUresult r = need_ctx();
	if (r) return r;
	LOCK();
	if ((r = stream_ok(s)) != CU_OK) {
		UNLOCK();
		return r;
	}
	advance();
	r = s && s->head ? CU_LAUNCH_TIMEOUT : CU_OK;
	UNLOCK();
	return r;
}

// fault: FAKEGPU_FAULT=1 in the environment makes queries of unfinished
// work fail as after a fault on the GPU (CUDA_ERROR_ILLEGAL_ADDRESS).
static int fault(void) {
	const char *f = getenv("FAKEGPU_FAULT");
	return f != NULL && strcmp(f, "1") == 0;
}

CUresult cuStreamQuery(struct stream *s) {
	CUresult r = need_ctx();
	if (r) return r;
	LOCK();
	advance();
	r = s && s->head ? (fault() ? CU_ILLEGAL_ADDRESS : CU_NOT_READY) : CU_OK;
	UNLOCK();
	return r;
}

// The fake's "GPU": once a stream memory operation has been used, this
// thread runs the streams as far as they go every 20 µs while they hold
// work, and sleeps until work is queued when they do not, so that work
// finishes without anyone asking the driver.
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;

static void *gpu_main(void *arg) {
	(void)arg;
	LOCK();
	for (;;) {
		advance();
		int busy = 0;
		for (struct stream *s = streams; s && !busy; s = s->next) busy = s->head != NULL;
		if (!busy) {
			pthread_cond_wait(&gpu_cond, &mu);
			continue;
		}
		UNLOCK();
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
		LOCK();
	}
	return NULL;
}

static void gpu_start(void) {
	pthread_t t;
	if (pthread_create(&t, NULL, gpu_main, NULL) == 0) pthread_detach(t);
}

// memop queues a write (wait = 0) or a wait for at least v (wait = 1) on
// the 8-byte word at addr, which must be device memory of the current
// device or page-locked memory.
static CUresult memop(struct stream *s, unsigned long long addr, uint64_t v, unsigned int flags, int wait) {
	CUresult r = need_ctx();
	if (r) return r;
	const char *no = getenv("FAKEGPU_NO_MEMOPS");
	if (no != NULL && strcmp(no, "1") == 0) return CU_NOT_SUPPORTED;
	if (flags != 0 || addr % 8 != 0) return CU_INVALID_VALUE;
	pthread_once(&gpu_once, gpu_start);
	LOCK();
	if (s == NULL || (r = stream_ok(s)) != CU_OK) {
		UNLOCK();
		return r ? r : CU_INVALID_HANDLE;
	}
	void *p = (void *)(uintptr_t)addr;
	if (!inside(p, 8, cur()->dev) && !inside(p, 8, -1)) {
		UNLOCK();
		return CU_INVALID_VALUE;
	}
	if (pending_launch_on(s)) fail_usage("work queued on a stream while an NCCL group for it was still in progress");
	struct work *w = calloc(1, sizeof *w);
	w->kind = wait ? W_WAIT64 : W_WRITE64;
	w->dst = p;
	w->seq = v;
	push_work(s, w);
	UNLOCK();
	return CU_OK;
}

CUresult cuStreamWriteValue64_v2(struct stream *s, unsigned long long addr, uint64_t v, unsigned int flags) {
	return memop(s, addr, v, flags, 0);
}

CUresult cuStreamWaitValue64_v2(struct stream *s, unsigned long long addr, uint64_t v, unsigned int flags) {
	return memop(s, addr, v, flags, 1);
}

// cuStreamWaitEvent queues a wait: work queued on s after it runs only
// once the event's latest record (at the time of the call) has run.
CUresult cuStreamWaitEvent(struct stream *s, struct event *e, unsigned int flags) {
	CUresult r = need_ctx();
	if (r) return r;
	if (flags != 0 || e == NULL || e->magic != EVENT_MAGIC) return CU_INVALID_HANDLE;
	LOCK();
	if ((r = stream_ok(s)) != CU_OK || s == NULL) {
		UNLOCK();
		return r ? r : CU_INVALID_HANDLE;
	}
	struct work *w = calloc(1, sizeof *w);
	w->kind = W_WAIT;
	w->ev = e;
	w->seq = e->rec;
	push_work(s, w);
	UNLOCK();
	return CU_OK;
}

CUresult cuEventCreate(struct event **out, unsigned int flags) {
	CUresult r = need_ctx();
	if (r) return r;
	(void)flags;
	struct event *e = calloc(1, sizeof *e);
	e->magic = EVENT_MAGIC;
	e->dev = cur()->dev;
	*out = e;
	return CU_OK;
}

CUresult cuEventDestroy_v2(struct event *e) {
	CUresult r = need_ctx();
	if (r) return r;
	if (e == NULL || e->magic != EVENT_MAGIC) return CU_INVALID_HANDLE;
	LOCK();
	advance();
	if (e->done < e->rec) {
		UNLOCK();
		return CU_OK; // leaked on purpose: its record is still queued
	}
	e->magic = 0;
	free(e);
	UNLOCK();
	return CU_OK;
}

CUresult cuEventRecord(struct event *e, struct stream *s) {
	CUresult r = need_ctx();
	if (r) return r;
	if (e == NULL || e->magic != EVENT_MAGIC) return CU_INVALID_HANDLE;
	LOCK();
	if ((r = stream_ok(s)) != CU_OK || s == NULL) {
		UNLOCK();
		return r ? r : CU_INVALID_HANDLE;
	}
	if (pending_launch_on(s)) fail_usage("an event recorded on a stream while an NCCL group for it was still in progress");
	struct work *w = calloc(1, sizeof *w);
	w->kind = W_RECORD;
	w->ev = e;
	w->seq = ++e->rec;
	push_work(s, w);
	UNLOCK();
	return CU_OK;
}

CUresult cuEventQuery(struct event *e) {
	CUresult r = need_ctx();
	if (r) return r;
	if (e == NULL || e->magic != EVENT_MAGIC) return CU_INVALID_HANDLE;
	LOCK();
	advance();
	r = e->done < e->rec ? (fault() ? CU_ILLEGAL_ADDRESS : CU_NOT_READY) : CU_OK;
	UNLOCK();
	return r;
}

CUresult cuEventSynchronize(struct event *e) {
	CUresult r = cuEventQuery(e);
	return r == CU_NOT_READY ? CU_LAUNCH_TIMEOUT : r;
}

CUresult cuEventElapsedTime(float *ms, struct event *a, struct event *b) {
	(void)a, (void)b;
	*ms = 0;
	return CU_OK;
}

CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned int n, int *opts, void **vals) {
	(void)m, (void)image, (void)n, (void)opts, (void)vals;
	return CU_INVALID_PTX;
}
CUresult cuModuleUnload(void *m) { (void)m; return CU_INVALID_HANDLE; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
	(void)f, (void)m, (void)name;
	return CU_NOT_FOUND;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shared, void *s, void **params, void **extra) {
	(void)f, (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared, (void)s, (void)params, (void)extra;
	return CU_INVALID_HANDLE;
}

// --- NCCL ---

typedef struct { unsigned char internal[ID_BYTES]; } ncclUniqueId;

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
} fake_config; // ncclConfig_v22800

static unsigned ids_made;

// id_sum is the checksum an ID made here carries in its last 4 bytes.
static uint32_t id_sum(const unsigned char *id) {
	uint32_t h = 2166136261u;
	for (int i = 0; i < ID_BYTES - 4; i++) h = (h ^ id[i]) * 16777619u;
	return h;
}

ncclResult_t ncclGetVersion(int *v) { *v = 22803; return NCCL_OK; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
	LOCK();
	memset(id, 0, sizeof *id);
	snprintf((char *)id->internal, 64, "fake nccl id %u", ++ids_made);
	uint32_t h = id_sum(id->internal);
	memcpy(&id->internal[ID_BYTES - 4], &h, 4);
	UNLOCK();
	return NCCL_OK;
}

const char *ncclGetErrorString(ncclResult_t r) {
	switch (r) {
	case NCCL_OK: return "no error";
	case NCCL_INVALID_ARGUMENT: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case NCCL_INVALID_USAGE: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case NCCL_IN_PROGRESS: return "NCCL operation in progress";
	}
	return "fake nccl error";
}

const char *ncclGetLastError(void *comm) {
	(void)comm;
	return last_error;
}

static ncclResult_t bad(ncclResult_t r, const char *what) {
	snprintf(last_error, sizeof last_error, "fake nccl: %s", what);
	return r;
}

ncclResult_t ncclCommInitRankConfig(struct comm **out, int nranks, ncclUniqueId id, int rank, fake_config *cfg) {
	if (misuse) return NCCL_INVALID_USAGE;
	if (cur() == NULL) return bad(NCCL_INVALID_USAGE, "ncclCommInitRankConfig without a current CUDA context");
	if (cfg == NULL || cfg->size != sizeof(fake_config) || cfg->magic != 0xcafebeef || cfg->version != 22803)
		return bad(NCCL_INVALID_ARGUMENT, "config: size, magic or version wrong");
	if (cfg->blocking != 0 && cfg->blocking != 1) return bad(NCCL_INVALID_ARGUMENT, "config: blocking is neither 0 nor 1");
	const int *ints[] = {&cfg->cgaClusterSize, &cfg->minCTAs, &cfg->maxCTAs, &cfg->splitShare, &cfg->trafficClass,
		&cfg->collnetEnable, &cfg->CTAPolicy, &cfg->shrinkShare, &cfg->nvlsCTAs, &cfg->nChannelsPerNetPeer,
		&cfg->nvlinkCentricSched};
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
		if (*ints[i] != INT_MIN) return bad(NCCL_INVALID_ARGUMENT, "config: a field other than blocking is set");
	}
	if (cfg->netName != NULL || cfg->commName != NULL) return bad(NCCL_INVALID_ARGUMENT, "config: a name is set");
	// FAKEGPU_INIT_NEVER=1: a blocking initialization as NCCL rank 1 never
	// returns (a peer that stopped answering), and never joins, so its
	// peer's waits too.
	const char *never = getenv("FAKEGPU_INIT_NEVER");
	if (never != NULL && strcmp(never, "1") == 0 && cfg->blocking && rank == 1) {
		for (;;) {
			struct timespec ts = {1, 0};
			nanosleep(&ts, NULL);
		}
	}
	uint32_t h;
	memcpy(&h, &id.internal[ID_BYTES - 4], 4);
	if (h != id_sum(id.internal)) return bad(NCCL_INVALID_ARGUMENT, "the unique ID was not made by ncclGetUniqueId (passed by value wrongly?)");
	if (nranks < 1 || nranks > 8 || rank < 0 || rank >= nranks) return bad(NCCL_INVALID_ARGUMENT, "nranks or rank");
	LOCK();
	struct clique *cl = cliques;
	while (cl && memcmp(cl->id, id.internal, ID_BYTES) != 0) cl = cl->next;
	if (cl == NULL) {
		cl = calloc(1, sizeof *cl);
		memcpy(cl->id, id.internal, ID_BYTES);
		cl->nranks = nranks;
		cl->next = cliques;
		cliques = cl;
	}
	if (cl->nranks != nranks || cl->ranks[rank] != NULL) {
		UNLOCK();
		return bad(NCCL_INVALID_ARGUMENT, "rank joined twice, or nranks differs");
	}
	struct comm *c = calloc(1, sizeof *c);
	c->cl = cl;
	c->rank = rank;
	c->dev = cur()->dev;
	c->init_polls = 2;
	c->blocking = cfg->blocking;
	cl->ranks[rank] = c;
	cl->joined++;
	if (c->blocking) {
		while (cl->joined < cl->nranks) {
			UNLOCK();
			struct timespec ts = {0, 100000};
			nanosleep(&ts, NULL);
			LOCK();
		}
		c->ready = 1;
		UNLOCK();
		*out = c;
		return NCCL_OK;
	}
	UNLOCK();
	*out = c;
	return NCCL_IN_PROGRESS;
}

// issued counts NCCL work put on streams (the order oldest compares).
static unsigned long issued;

// land puts a launched group's operations on their streams.
static void land(struct comm *c) {
	for (int i = 0; i < c->npending; i++) {
		struct op *o = &c->pending[i];
		struct work *w = calloc(1, sizeof *w);
		w->kind = W_NCCL;
		w->issued = ++issued;
		w->comm = o->comm;
		w->peer = o->peer;
		w->recv = o->recv;
		w->n = o->count * type_size(o->type);
		if (o->recv) {
			w->dst = o->buf;
		} else {
			w->src = o->buf;
		}
		push_work(o->stream, w);
	}
	free(c->pending);
	c->pending = NULL;
	c->npending = 0;
}

ncclResult_t ncclCommGetAsyncError(struct comm *c, ncclResult_t *state) {
	if (c == NULL || c->aborted) return NCCL_INVALID_ARGUMENT;
	LOCK();
	*state = NCCL_OK;
	if (misuse) {
		*state = NCCL_INVALID_USAGE;
	} else if (!c->ready) {
		if (c->cl->joined == c->cl->nranks && --c->init_polls <= 0) {
			c->ready = 1;
		} else {
			*state = NCCL_IN_PROGRESS;
		}
	} else if (c->npending > 0) {
		if (--c->pending_polls <= 0) {
			land(c);
		} else {
			*state = NCCL_IN_PROGRESS;
		}
	} else if (c->finalized && !c->final_done) {
		int all = 1;
		for (int r = 0; r < c->cl->nranks; r++) {
			if (c->cl->ranks[r] == NULL || !c->cl->ranks[r]->finalized) all = 0;
		}
		if (all && --c->finalize_polls <= 0) {
			c->final_done = 1;
		} else {
			*state = NCCL_IN_PROGRESS;
		}
	}
	UNLOCK();
	return NCCL_OK;
}

#define MAX_GROUP 4096
static __thread int group_depth;
static __thread struct op *group_ops; // MAX_GROUP of them, made on first use
static __thread int group_n;
static unsigned group_ends;

ncclResult_t ncclGroupStart(void) {
	if (misuse) return NCCL_INVALID_USAGE;
	if (group_ops == NULL) group_ops = malloc(MAX_GROUP * sizeof *group_ops);
	if (group_depth++ == 0) group_n = 0;
	return NCCL_OK;
}

static ncclResult_t p2p(int recv, void *buf, size_t count, int type, int peer, struct comm *c, struct stream *s) {
	if (misuse) return NCCL_INVALID_USAGE;
	if (group_depth == 0) return bad(NCCL_INVALID_USAGE, "send or receive outside a group (courier always groups)");
	if (cur() == NULL) return bad(NCCL_INVALID_USAGE, "send or receive without a current CUDA context");
	if (c == NULL || !c->ready || c->aborted) return bad(NCCL_INVALID_USAGE, "communicator not ready");
	if (c->npending) return bad(NCCL_INVALID_USAGE, "a call while the last group is still in progress");
	if (peer < 0 || peer >= c->cl->nranks || type_size(type) == 0) return bad(NCCL_INVALID_ARGUMENT, "peer or type");
	if (s == NULL || s->magic != STREAM_MAGIC || s->dev != c->dev) return bad(NCCL_INVALID_ARGUMENT, "stream");
	LOCK();
	int ok = count == 0 || inside(buf, count * type_size(type), c->dev);
	UNLOCK();
	if (!ok) return bad(NCCL_INVALID_ARGUMENT, "buffer not in device memory of the communicator's GPU");
	if (group_n == MAX_GROUP) return bad(NCCL_INTERNAL, "too many operations in a group");
	group_ops[group_n++] = (struct op){.comm = c, .peer = peer, .recv = recv, .type = type, .buf = buf, .count = count, .stream = s};
	return NCCL_OK;
}

ncclResult_t ncclSend(const void *buf, size_t count, int type, int peer, struct comm *c, struct stream *s) {
	return p2p(0, (void *)buf, count, type, peer, c, s);
}

ncclResult_t ncclRecv(void *buf, size_t count, int type, int peer, struct comm *c, struct stream *s) {
	return p2p(1, buf, count, type, peer, c, s);
}

ncclResult_t ncclGroupEnd(void) {
	if (misuse) return NCCL_INVALID_USAGE;
	if (group_depth == 0) return bad(NCCL_INVALID_USAGE, "ncclGroupEnd without ncclGroupStart");
	if (--group_depth > 0) return NCCL_OK;
	if (group_n == 0) return NCCL_OK;
	LOCK();
	struct comm *c = group_ops[0].comm;
	int several = 0;
	for (int i = 1; i < group_n; i++) {
		if (group_ops[i].comm != c) several = 1;
	}
	if (several) {
		// Courier groups several communicators only to connect blocking
		// ones: each communicator's operations land at once.
		for (int i = 0; i < group_n; i++) {
			if (!group_ops[i].comm->blocking) {
				UNLOCK();
				return bad(NCCL_INVALID_USAGE, "a group over several non-blocking communicators (courier groups one)");
			}
		}
		for (int i = 0; i < group_n; i++) {
			struct comm *ci = group_ops[i].comm;
			ci->pending = malloc(sizeof(struct op));
			ci->pending[0] = group_ops[i];
			ci->npending = 1;
			land(ci);
		}
		group_n = 0;
		UNLOCK();
		return NCCL_OK;
	}
	c->pending = malloc((size_t)group_n * sizeof(struct op));
	memcpy(c->pending, group_ops, (size_t)group_n * sizeof(struct op));
	c->npending = group_n;
	group_n = 0;
	ncclResult_t r = NCCL_OK;
	if (!c->blocking && ++group_ends % 3 == 0) {
		c->pending_polls = 2;
		r = NCCL_IN_PROGRESS;
	} else {
		land(c);
	}
	UNLOCK();
	return r;
}

ncclResult_t ncclCommFinalize(struct comm *c) {
	if (misuse) return NCCL_INVALID_USAGE;
	if (c == NULL || c->finalized) return NCCL_INVALID_ARGUMENT;
	if (cur() == NULL) return bad(NCCL_INVALID_USAGE, "ncclCommFinalize without a current CUDA context");
	LOCK();
	c->finalized = 1;
	c->finalize_polls = 2;
	UNLOCK();
	return NCCL_IN_PROGRESS;
}

// drop takes c's operations off every stream and out of its clique.
static void drop(struct comm *c) {
	for (struct stream *s = streams; s; s = s->next) {
		struct work **pw = &s->head, *prev = NULL;
		while (*pw) {
			struct work *w = *pw;
			if (w->kind == W_NCCL && w->comm == c) {
				*pw = w->next;
				free(w);
			} else {
				prev = w;
				pw = &w->next;
			}
		}
		s->tail = prev;
	}
	c->cl->ranks[c->rank] = NULL;
}

ncclResult_t ncclCommDestroy(struct comm *c) {
	if (c == NULL) return NCCL_INVALID_ARGUMENT;
	LOCK();
	if (!c->final_done) fail_usage("ncclCommDestroy of a communicator not finalized: NCCL would wait in a barrier for every rank");
	for (struct stream *s = streams; s; s = s->next) {
		for (struct work *w = s->head; w; w = w->next) {
			if (w->kind == W_NCCL && w->comm == c) fail_usage("ncclCommDestroy with operations on a stream (courier aborts those)");
		}
	}
	drop(c);
	c->aborted = 1; // kept, never freed: a stale handle shows as aborted
	UNLOCK();
	return NCCL_OK;
}

ncclResult_t ncclCommAbort(struct comm *c) {
	if (c == NULL) return NCCL_INVALID_ARGUMENT;
	LOCK();
	free(c->pending);
	c->pending = NULL;
	c->npending = 0;
	drop(c);
	c->aborted = 1;
	UNLOCK();
	return NCCL_OK;
}
