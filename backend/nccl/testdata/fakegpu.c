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
// the k-th receive at b from a). The sends and receives a group puts on a
// stream, one after another, count as at its head together (they run in
// one kernel on a GPU), so a group may send to and receive from a peer
// that does the same, as an all-to-all does. A send smaller than its
// receive leaves the receive hanging, as NCCL does. So a stream blocked by
// an NCCL operation blocks everything queued after it, as on a GPU.
//
// Collectives (ncclAllReduce, ncclBroadcast, ncclReduce, ncclAllGather,
// ncclReduceScatter) are work of the same kind: the k-th collective of a
// communicator on each rank pairs with the k-th of every other rank of it,
// and they run together only when every rank's is at the head of its
// stream and the rank's collectives before it have run, so a collective
// blocks what is queued after it (sends and receives too) and waits for
// what is queued before it. They compute element-wise in rank order (rank
// 0 op rank 1 op ...): integers wrap around, float32 in float, float64 in
// double, float16 and bfloat16 in float and rounded once, to nearest even,
// at the end; ncclAvg is the sum divided by the number of ranks (integer
// division for integers); ncclMax and ncclMin propagate NaN. Results go
// through a temporary, so NCCL's in-place layouts come out right. A count
// of 0 moves nothing but is work like any other: it pairs, and orders its
// stream. Outside a group a collective is a group of its own (so a
// non-blocking communicator's may answer ncclInProgress as every third
// ncclGroupEnd does, below); inside one it lands with the group, in the
// group's order.
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
//     device, and so must a collective's buffers (the ones NCCL reads or
//     writes: broadcast's send buffer and reduce's receive buffer only at
//     the root), which may overlap only in NCCL's in-place layouts; its
//     type, reduction (ncclSum to ncclAvg) and root must be valid;
//   - ranks that disagree on their k-th collective (which one, count,
//     type, reduction or root) are misuse, reported when the collectives
//     meet at their stream heads, which they then never leave (NCCL would
//     hang or corrupt memory);
//   - with FAKEGPU_FAULT=1 in the environment, stream and event queries
//     of unfinished work fail with CUDA_ERROR_ILLEGAL_ADDRESS (a fault);
//   - with FAKEGPU_INIT_NEVER=1 in the environment, a blocking
//     communicator's initialization as NCCL rank 1 never returns;
//   - stream memory operations (cuStreamWriteValue64, cuStreamWaitValue64)
//     on device memory or page-locked host memory; once one has been
//     used, a thread of the fake's runs the streams every few
//     microseconds, as a GPU would, so that a CPU polling memory sees the
//     work finish; with FAKEGPU_NO_MEMOPS=1 in the environment they answer
//     CUDA_ERROR_NOT_SUPPORTED; a stream synchronized while it waits for
//     a word waits for the word (up to 10 s), one held by anything else
//     fails at once;
//   - device memory is a memory file, so that CUDA IPC works in one
//     process and between processes of one user: cuIpcGetMemHandle of an
//     allocation's start, and cuIpcOpenMemHandle maps the file again at
//     an address of its own (through /proc/PID/fd from another process; a
//     handle of freed memory is refused; a mapping open when its memory is
//     freed stays valid until cuIpcCloseMemHandle);
//   - modules: any PTX text with a .version loads, and the one kernel
//     the fake runs is the seed examples' sgemm(u64 c, u64 a, u64 b, u32
//     n) (examples/seed/internal/work): c = a×b for n×n row-major float32
//     matrices in device memory of the module's device, queued on its
//     stream as work like a copy, one element of c per thread of column x
//     < grid.x·block.x and row y < grid.y·block.y (the others are left
//     alone, so a grid too small shows);
//   - ncclCommFinalize completes only once every rank of the communicator
//     has called it (NCCL's finalize ends with a barrier of the ranks on
//     a host), and ncclCommDestroy of a communicator not finalized, which
//     would run that barrier inside, is an error.
//
// Kernels: cuModuleLoadDataEx takes PTX text (it must hold ".version"
// and an ".entry") and keeps it; cuModuleGetFunction finds only the
// kernels of internal/devreduce, named courier_combine_<type>_<op>, and
// only those the module's text declares (".entry NAME("): anything else
// is CUDA_ERROR_NOT_FOUND. cuLaunchKernel of one queues, in stream order
// as a copy is, the C twin of the kernel (dst[i] = a[i] op b[i] for i
// below n, its parameters read as the driver reads them), which computes
// what internal/reduce computes on the host (see combine below); its
// buffers must be device memory of the stream's device.
//
// Counters a test reads through the library's symbol table
// (fakegpu_counts, with cuda.Symbol): the copies made or queued whose
// source or destination is not device memory (host memory, page-locked
// or not), their bytes, and the kernels launched.

#define _GNU_SOURCE
#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <unistd.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// NCCL's types and codes, as the real loader sees them (the tests compile
// this file with -I naming the package directory).
#include "nccl_types.h"

#ifndef FAKE_NDEV
#define FAKE_NDEV 4
#endif

typedef int CUresult;

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
	NCCL_OK = ncclSuccess,
	NCCL_INTERNAL = ncclInternalError,
	NCCL_INVALID_ARGUMENT = ncclInvalidArgument,
	NCCL_INVALID_USAGE = ncclInvalidUsage,
	NCCL_IN_PROGRESS = ncclInProgress,
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
	// Device memory is a memory file mapped here (fd), so that an IPC
	// handle of it can be mapped again at another address (cuIpcOpenMemHandle,
	// within this process: the ranks of the tests share it). serial names
	// the allocation in its handles; opened marks such a mapping, which
	// cuIpcCloseMemHandle, not cuMemFree, ends.
	int fd;
	uint64_t serial;
	int opened;
	struct mem *next;
};

static uint64_t mem_serials;

// The address and size of the last device allocation freed, kept reserved:
// the next allocation of the same size takes the same address, as a GPU's
// allocator often does, so the tests meet memory reused at an address a
// peer has seen (and may have a stale mapping of).
static void *freed_at;
static size_t freed_n;

static struct mem *mems;

static int inside(const void *p, size_t n, int dev) {
	uintptr_t a = (uintptr_t)p;
	for (struct mem *m = mems; m != NULL; m = m->next) {
		uintptr_t s = (uintptr_t)m->p;
		if (m->dev == dev && a >= s && a - s <= m->n && n <= m->n - (a - s)) return 1;
	}
	return 0;
}

// is_device reports whether the n bytes at p lie in device memory of any
// device (an allocation, or a mapping of one opened through IPC).
static int is_device(const void *p, size_t n) {
	for (int d = 0; d < FAKE_NDEV; d++) {
		if (inside(p, n, d)) return 1;
	}
	return 0;
}

// fakegpu_counts: [0] copies made or queued whose source or destination
// is not device memory, [1] their bytes, [2] kernels launched. Updated
// atomically; read by the tests through the symbol table.
uint64_t fakegpu_counts[3];

// --- streams and their work ---

struct comm;
struct event;
struct kernel;

// combine runs a kernel (see cuLaunchKernel).
static void combine(const struct kernel *k, void *dst, const void *src, const void *src2, size_t n);

enum { W_COPY, W_RECORD, W_WAIT, W_NCCL, W_WRITE64, W_WAIT64, W_COLL, W_SGEMM, W_KERNEL };

// The collectives (struct work's and struct op's coll; 0: a send or a
// receive).
enum { C_ALLREDUCE = 1, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCESCATTER };

static const char *const coll_names[] = {"send/receive", "ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter"};

// The reductions (ncclRedOp_t).
enum { R_SUM = ncclSum, R_PROD = ncclProd, R_MAX = ncclMax, R_MIN = ncclMin, R_AVG = ncclAvg, R_COUNT };

struct work {
	int kind;
	void *dst; // W_COLL: the receive buffer
	const void *src; // W_COLL: the send buffer
	size_t n;
	struct event *ev;
	unsigned long seq; // W_RECORD: the record's number; W_WAIT: the record waited for; W_WRITE64, W_WAIT64: the value; W_COLL: the collective's number on its communicator, from 1
	// W_NCCL and W_COLL
	struct comm *comm;
	unsigned long issued; // the order of issue, over all streams
	// W_NCCL
	int peer, recv;
	int hung; // a receive whose send was smaller: never finishes
	unsigned long batch; // the landing that put it on its stream (see in_head_batch)
	// W_COLL: which, and its arguments (redop and root -1 where they
	// have no meaning); count is in elements: sendcount for
	// ncclAllGather, recvcount for ncclReduceScatter
	int coll, type, redop, root;
	size_t count;
	// W_SGEMM: dst = src × src2, n×n; the columns and rows its grid covers
	// W_KERNEL: dst = src op src2 over n elements of kernel kern
	const void *src2;
	size_t cols, rows;
	const struct kernel *kern;
	struct work *next;
};

static int is_nccl(const struct work *w) { return w->kind == W_NCCL || w->kind == W_COLL; }

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
	double at_ms;       // when it ran (CLOCK_MONOTONIC): the fake GPU's time, for cuEventElapsedTime
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

#define ID_BYTES COURIER_NCCL_UNIQUE_ID_BYTES

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
	void *buf; // a collective's receive buffer
	size_t count;
	struct stream *stream;
	// a collective (coll 0: a send or receive)
	int coll, redop, root;
	const void *sendbuf;
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
	// Collectives landed on streams, and collectives run.
	unsigned long colls, colls_done;
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

// A send or receive pairs only while it is in the batch at the head of its
// stream: the sends and receives one ncclGroupEnd (or the poll that lands
// its group) put on that stream, one after another, with nothing else
// between. They run together, as in one kernel on a GPU, so a group may
// send to and receive from a peer that does the same (an all-to-all).
// in_head_batch returns the stream at whose head w's batch is, if it is.
static struct stream *in_head_batch(struct work *w) {
	for (struct stream *s = streams; s; s = s->next) {
		struct work *h = s->head;
		if (h == NULL || h->kind != W_NCCL) continue;
		for (struct work *b = h; b && b->kind == W_NCCL && b->batch == h->batch; b = b->next) {
			if (b == w) return s;
		}
	}
	return NULL;
}

// remove_work takes w off stream s, wherever it is in the queue.
static void remove_work(struct stream *s, struct work *w) {
	struct work **pw = &s->head, *prev = NULL;
	while (*pw != w) {
		prev = *pw;
		pw = &(*pw)->next;
	}
	*pw = w->next;
	if (s->tail == w) s->tail = prev;
	free(w);
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

// oldest returns the first unfinished send (recv 0) or receive of comm c
// with peer, in order of issue: the k-th such work pairs with the k-th of
// the partner. Each comm's operations with one peer in one direction are
// in issue order on its streams.
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

// --- collectives: the arithmetic ---

// half_to_float converts an IEEE binary16 to float (exactly).
static float half_to_float(uint16_t h) {
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
	if (e == 0) {
		float f = (float)m * (1.0f / 16777216.0f); // m × 2^-24: a subnormal, or zero
		return sign ? -f : f;
	}
	if (e == 31) {
		x = sign | 0x7f800000 | (m << 13); // infinity or NaN
	} else {
		x = sign | ((e - 15 + 127) << 23) | (m << 13);
	}
	float f;
	memcpy(&f, &x, 4);
	return f;
}

// float_to_half rounds a float to the nearest binary16, ties to even.
static uint16_t float_to_half(float f) {
	uint32_t x;
	memcpy(&x, &f, 4);
	uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
	uint32_t ax = x & 0x7fffffff;
	if (ax > 0x7f800000) return sign | 0x7e00; // NaN
	if (ax >= 0x47800000) return sign | 0x7c00; // at least 2^16: infinity
	if (ax >= 0x38800000) { // at least 2^-14: normal (or rounded up to infinity)
		uint32_t h = ((((ax >> 23) - 127 + 15)) << 10) | ((ax & 0x7fffff) >> 13), rem = ax & 0x1fff;
		if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
		return (uint16_t)(sign | h);
	}
	if (ax <= 0x33000000) return sign; // at most 2^-25: zero (2^-25 ties to even)
	// subnormal: m × 2^(e-23) in units of 2^-24
	uint32_t m = (ax & 0x7fffff) | 0x800000;
	int shift = -1 - ((int)(ax >> 23) - 127); // 14 to 24
	uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
	if (rem > half || (rem == half && (h & 1))) h++;
	return (uint16_t)(sign | h);
}

static float bf16_to_float(uint16_t h) {
	uint32_t x = (uint32_t)h << 16;
	float f;
	memcpy(&f, &x, 4);
	return f;
}

// float_to_bf16 rounds a float to the nearest bfloat16, ties to even.
static uint16_t float_to_bf16(float f) {
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); // NaN, kept quiet
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

// load_f and store_f read and write element i of a float16, bfloat16 or
// float32 array (through memcpy: NCCL does not require alignment).
static float load_f(int type, const char *p, size_t i) {
	uint16_t h;
	float f;
	switch (type) {
	case 6: memcpy(&h, p + 2 * i, 2); return half_to_float(h);
	case 9: memcpy(&h, p + 2 * i, 2); return bf16_to_float(h);
	}
	memcpy(&f, p + 4 * i, 4);
	return f;
}

static void store_f(int type, char *p, size_t i, float f) {
	uint16_t h;
	switch (type) {
	case 6: h = float_to_half(f); memcpy(p + 2 * i, &h, 2); return;
	case 9: h = float_to_bf16(f); memcpy(p + 2 * i, &h, 2); return;
	}
	memcpy(p + 4 * i, &f, 4);
}

// FLOAT_OP is a op b for a float type: Max and Min propagate NaN (the
// first operand's where both are), and keep a on ties (±0).
#define FLOAT_OP(T, name) \
	static T name(int op, T a, T b) { \
		switch (op) { \
		case R_PROD: return a * b; \
		case R_MAX: return a != a ? a : b != b ? b : b > a ? b : a; \
		case R_MIN: return a != a ? a : b != b ? b : b < a ? b : a; \
		} \
		return a + b; /* R_SUM, R_AVG */ \
	}
FLOAT_OP(float, op_f)
FLOAT_OP(double, op_d)

// REDUCE_INT reduces count elements of integer type T (UT: its unsigned
// twin, in which Sum and Prod wrap around without undefined behaviour).
#define REDUCE_INT(T, UT) \
	for (size_t i = 0; i < count; i++) { \
		T acc, x; \
		memcpy(&acc, src[0] + i * sizeof(T), sizeof(T)); \
		for (int r = 1; r < n; r++) { \
			memcpy(&x, src[r] + i * sizeof(T), sizeof(T)); \
			switch (op) { \
			case R_PROD: acc = (T)(UT)((UT)acc * (UT)x); break; \
			case R_MAX: if (x > acc) acc = x; break; \
			case R_MIN: if (x < acc) acc = x; break; \
			default: acc = (T)(UT)((UT)acc + (UT)x); break; \
			} \
		} \
		if (op == R_AVG) acc = (T)(acc / (T)n); \
		memcpy(out + i * sizeof(T), &acc, sizeof(T)); \
	} \
	break

// reduce computes out[i] = src[0][i] op src[1][i] op ... op src[n-1][i]
// for i below count, in rank order.
static void reduce(int type, int op, int n, const char *const *src, size_t count, char *out) {
	switch (type) {
	case 0: REDUCE_INT(int8_t, uint8_t);
	case 1: REDUCE_INT(uint8_t, uint8_t);
	case 2: REDUCE_INT(int32_t, uint32_t);
	case 3: REDUCE_INT(uint32_t, uint32_t);
	case 4: REDUCE_INT(int64_t, uint64_t);
	case 5: REDUCE_INT(uint64_t, uint64_t);
	case 8:
		for (size_t i = 0; i < count; i++) {
			double acc, x;
			memcpy(&acc, src[0] + 8 * i, 8);
			for (int r = 1; r < n; r++) {
				memcpy(&x, src[r] + 8 * i, 8);
				acc = op_d(op, acc, x);
			}
			if (op == R_AVG) acc /= n;
			memcpy(out + 8 * i, &acc, 8);
		}
		break;
	default: // float16, float32, bfloat16: in float, rounded once
		for (size_t i = 0; i < count; i++) {
			float acc = load_f(type, src[0], i);
			for (int r = 1; r < n; r++) acc = op_f(op, acc, load_f(type, src[r], i));
			if (op == R_AVG) acc /= (float)n;
			store_f(type, out, i, acc);
		}
	}
}

// --- collectives: matching and running ---

// coll_differs describes in msg how b's collective differs from a's, if
// it does.
static int coll_differs(const struct work *a, const struct work *b, char *msg, size_t len) {
	int ra = a->comm->rank, rb = b->comm->rank;
	if (a->coll != b->coll) {
		snprintf(msg, len, "collective #%lu of a communicator: rank %d called %s where rank %d called %s", a->seq, rb,
			coll_names[b->coll], ra, coll_names[a->coll]);
	} else if (a->count != b->count) {
		snprintf(msg, len, "collective #%lu of a communicator (%s): rank %d has count %zu where rank %d has %zu", a->seq,
			coll_names[a->coll], rb, b->count, ra, a->count);
	} else if (a->type != b->type) {
		snprintf(msg, len, "collective #%lu of a communicator (%s): rank %d has data type %d where rank %d has %d", a->seq,
			coll_names[a->coll], rb, b->type, ra, a->type);
	} else if (a->redop != b->redop) {
		snprintf(msg, len, "collective #%lu of a communicator (%s): rank %d has reduction op %d where rank %d has %d", a->seq,
			coll_names[a->coll], rb, b->redop, ra, a->redop);
	} else if (a->root != b->root) {
		snprintf(msg, len, "collective #%lu of a communicator (%s): rank %d has root %d where rank %d has %d", a->seq,
			coll_names[a->coll], rb, b->root, ra, a->root);
	} else {
		return 0;
	}
	return 1;
}

// run_coll runs collective w, at the head of its stream, with its
// partners (the collectives of the same number of every rank of its
// communicator) if they are all at the heads of their streams, and takes
// them all off: it reports whether it did. Ranks that disagree are
// misuse, and their collectives stay where they are.
static int run_coll(struct work *w) {
	struct comm *c = w->comm;
	struct clique *cl = c->cl;
	int n = cl->nranks;
	if (w->seq != c->colls_done + 1) return 0; // an earlier one is on another stream
	struct work *ws[8] = {0};
	struct stream *ss[8] = {0};
	for (int r = 0; r < n; r++) {
		struct comm *pc = cl->ranks[r];
		if (pc == NULL || pc->aborted) return 0;
		ws[r] = NULL;
		for (struct stream *t = streams; t && ws[r] == NULL; t = t->next) {
			struct work *h = t->head;
			if (h != NULL && h->kind == W_COLL && h->comm == pc && h->seq == w->seq) {
				ws[r] = h;
				ss[r] = t;
			}
		}
		if (ws[r] == NULL) return 0;
	}
	for (int r = 1; r < n; r++) {
		char msg[400];
		if (coll_differs(ws[0], ws[r], msg, sizeof msg)) {
			fail_usage(msg);
			return 0;
		}
	}
	size_t sz = type_size(w->type), count = w->count, bytes = count * sz;
	if (count > 0) {
		// Everything is read into tmp before anything is written, so
		// in-place calls (and ranks sharing memory) come out right.
		size_t tmpn = w->coll == C_ALLGATHER || w->coll == C_REDUCESCATTER ? bytes * (size_t)n : bytes;
		char *tmp = malloc(tmpn);
		if (tmp == NULL) {
			fail_usage("out of host memory for a collective");
			return 0;
		}
		const char *src[8] = {0};
		for (int r = 0; r < n; r++) src[r] = ws[r]->src;
		switch (w->coll) {
		case C_ALLREDUCE:
			reduce(w->type, w->redop, n, src, count, tmp);
			for (int r = 0; r < n; r++) memcpy(ws[r]->dst, tmp, bytes);
			break;
		case C_REDUCE:
			reduce(w->type, w->redop, n, src, count, tmp);
			memcpy(ws[w->root]->dst, tmp, bytes);
			break;
		case C_BROADCAST:
			memcpy(tmp, src[w->root], bytes);
			for (int r = 0; r < n; r++) memcpy(ws[r]->dst, tmp, bytes);
			break;
		case C_ALLGATHER:
			for (int r = 0; r < n; r++) memcpy(tmp + (size_t)r * bytes, src[r], bytes);
			for (int r = 0; r < n; r++) memcpy(ws[r]->dst, tmp, bytes * (size_t)n);
			break;
		case C_REDUCESCATTER:
			reduce(w->type, w->redop, n, src, count * (size_t)n, tmp);
			for (int r = 0; r < n; r++) memcpy(ws[r]->dst, tmp + (size_t)r * bytes, bytes);
			break;
		}
		free(tmp);
	}
	for (int r = 0; r < n; r++) {
		pop_work(ss[r]);
		cl->ranks[r]->colls_done++;
	}
	return 1;
}

// run_p2p runs send or receive w, in the head batch of stream s, with its
// partner if that is in the head batch of its stream, and takes off what
// finished: it reports whether it did.
static int run_p2p(struct stream *s, struct work *w) {
	if (w->hung) return 0;
	struct comm *peer = w->comm->cl->ranks[w->peer];
	if (peer == NULL || peer->aborted) return 0;
	struct work *p = oldest(peer, w->comm->rank, !w->recv);
	if (p == NULL || oldest(w->comm, w->peer, w->recv) != w) return 0;
	struct stream *ps = in_head_batch(p);
	if (ps == NULL) return 0;
	struct work *snd = w->recv ? p : w, *rcv = w->recv ? w : p;
	size_t n = snd->n < rcv->n ? snd->n : rcv->n;
	memmove(rcv->dst, snd->src, n);
	if (snd->n < rcv->n) {
		rcv->hung = 1;
		remove_work(snd == w ? s : ps, snd);
		return 1;
	}
	remove_work(ps, p);
	remove_work(s, w);
	return 1;
}

// advance runs every stream as far as it can go.
// run_sgemm runs the kernel of a W_SGEMM work.
static void run_sgemm(const struct work *w) {
	float *c = w->dst;
	const float *a = w->src, *b = w->src2;
	size_t n = w->n, rows = w->rows < n ? w->rows : n, cols = w->cols < n ? w->cols : n;
	for (size_t i = 0; i < rows; i++) {
		for (size_t j = 0; j < cols; j++) {
			float sum = 0;
			for (size_t k = 0; k < n; k++) sum += a[i * n + k] * b[k * n + j];
			c[i * n + j] = sum;
		}
	}
}

static void advance(void) {
	for (int progress = 1; progress;) {
		progress = 0;
		for (struct stream *s = streams; s; s = s->next) {
			while (s->head) {
				struct work *w = s->head;
				if (w->kind == W_COPY) {
					memmove(w->dst, w->src, w->n);
				} else if (w->kind == W_RECORD) {
					if (w->seq > w->ev->done) {
						w->ev->done = w->seq;
						struct timespec ts;
						clock_gettime(CLOCK_MONOTONIC, &ts);
						w->ev->at_ms = ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
					}
				} else if (w->kind == W_WAIT) {
					if (w->ev->done < w->seq) break;
				} else if (w->kind == W_WRITE64) {
					__atomic_store_n((uint64_t *)w->dst, (uint64_t)w->seq, __ATOMIC_RELEASE);
				} else if (w->kind == W_WAIT64) {
					if (__atomic_load_n((uint64_t *)w->dst, __ATOMIC_ACQUIRE) < (uint64_t)w->seq) break;
				} else if (w->kind == W_SGEMM) {
					run_sgemm(w);
				} else if (w->kind == W_KERNEL) {
					combine(w->kern, w->dst, w->src, w->src2, w->n);
				} else if (w->kind == W_COLL) {
					if (!run_coll(w)) break;
					progress = 1;
					continue; // (run_coll took w, and its partners, off)
				} else { // W_NCCL: any send or receive of the head batch
					struct work *b = w;
					int ran = 0;
					while (b && b->kind == W_NCCL && b->batch == w->batch) {
						if ((ran = run_p2p(s, b)) != 0) break; // (b, and w, may be gone)
						b = b->next;
					}
					if (!ran) break;
					progress = 1;
					continue;
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
	struct mem *m = calloc(1, sizeof *m);
	LOCK();
	uint64_t serial = ++mem_serials;
	UNLOCK();
	char name[64];
	snprintf(name, sizeof name, "fakegpu-%llu", (unsigned long long)serial);
	m->fd = memfd_create(name, MFD_CLOEXEC);
	if (m->fd < 0 || ftruncate(m->fd, (off_t)n) != 0) {
		if (m->fd >= 0) close(m->fd);
		free(m);
		return CU_OUT_OF_MEMORY;
	}
	m->p = MAP_FAILED;
	LOCK();
	if (freed_at != NULL && freed_n == n) {
		// The range is still reserved (see free_mem): nothing else
		// can have been mapped there, so the address is reused for
		// certain, whatever else was allocated in between.
		m->p = mmap(freed_at, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m->fd, 0);
		if (m->p != MAP_FAILED) freed_at = NULL, freed_n = 0;
	}
	UNLOCK();
	if (m->p == MAP_FAILED) m->p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
	if (m->p == MAP_FAILED) {
		close(m->fd);
		free(m);
		return CU_OUT_OF_MEMORY;
	}
	m->n = n;
	LOCK();
	m->serial = serial;
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
		if (m->p == p && m->dev == dev && !m->opened) {
			*pm = m->next;
			if (dev >= 0) {
				// The last freed range stays reserved, unreadable,
				// until an allocation of its size takes it: the
				// next such allocation gets the same address (as a
				// real allocator often gives), and a stale access
				// still faults.
				if (freed_at != NULL) munmap(freed_at, freed_n);
				if (mmap(m->p, m->n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
					munmap(m->p, m->n);
					freed_at = NULL, freed_n = 0;
				} else {
					freed_at = m->p, freed_n = m->n;
				}
				close(m->fd);
			} else {
				free(m->p);
			}
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

// --- interprocess memory ---
//
// A handle holds the allocation's serial number, its memory file, its
// size and the exporting process. Opening one maps the file again, at an
// address of its own, on the opening context's device; the allocation
// must still be live then (a handle of freed memory is CU_INVALID_VALUE:
// its file is closed, and its number may be reused), but a mapping open
// when it is freed stays valid until closed, as on a GPU. Opening on the
// device that exported it, in the process that did, is allowed here (the
// tests' ranks share one process); on a GPU only another process can.
// Another process opens the file through /proc/PID/fd/FD, and knows it by
// its name, which holds the serial number ("memfd:fakegpu-SERIAL").

struct ipc_handle {
	char magic[8]; // "fakegpu"
	uint64_t serial;
	uint64_t size;
	int32_t fd;
	int32_t pid;
	char pad[32];
};

// open_foreign opens the memory file of a handle from another process,
// or returns -1 when that allocation is gone.
static int open_foreign(const struct ipc_handle *h) {
	char path[64], want[64], got[128];
	snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
	snprintf(want, sizeof want, "/memfd:fakegpu-%llu (deleted)", (unsigned long long)h->serial);
	ssize_t k = readlink(path, got, sizeof got - 1);
	if (k < 0) return -1;
	got[k] = 0;
	if (strcmp(got, want) != 0) return -1;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) return -1;
	off_t n = lseek(fd, 0, SEEK_END);
	if (n < 0 || (uint64_t)n != h->size) {
		close(fd);
		return -1;
	}
	return fd;
}

CUresult cuMemGetAddressRange_v2(unsigned long long *base, size_t *size, unsigned long long p) {
	CUresult r = need_ctx();
	if (r) return r;
	LOCK();
	for (struct mem *m = mems; m != NULL; m = m->next) {
		uintptr_t s = (uintptr_t)m->p, a = (uintptr_t)p;
		if (m->dev >= 0 && a >= s && a - s < m->n) {
			if (base) *base = (unsigned long long)s;
			if (size) *size = m->n;
			UNLOCK();
			return CU_OK;
		}
	}
	UNLOCK();
	return CU_INVALID_VALUE;
}

CUresult cuIpcGetMemHandle(struct ipc_handle *h, unsigned long long p) {
	CUresult r = need_ctx();
	if (r) return r;
	LOCK();
	for (struct mem *m = mems; m != NULL; m = m->next) {
		if (m->dev >= 0 && (uintptr_t)m->p == (uintptr_t)p && !m->opened) {
			memset(h, 0, sizeof *h);
			memcpy(h->magic, "fakegpu", 8);
			h->serial = m->serial;
			h->size = m->n;
			h->fd = m->fd;
			h->pid = (int32_t)getpid();
			UNLOCK();
			return CU_OK;
		}
	}
	UNLOCK();
	return CU_INVALID_VALUE;
}

CUresult cuIpcOpenMemHandle_v2(unsigned long long *p, struct ipc_handle h, unsigned int flags) {
	(void)flags;
	CUresult r = need_ctx();
	if (r) return r;
	if (memcmp(h.magic, "fakegpu", 8) != 0) return CU_INVALID_VALUE;
	int fd = -1;
	if (h.pid != (int32_t)getpid()) {
		if ((fd = open_foreign(&h)) < 0) return CU_INVALID_VALUE; // freed, or never exported
	}
	LOCK();
	if (fd < 0) {
		struct mem *src = NULL;
		for (struct mem *m = mems; m != NULL; m = m->next) {
			if (m->dev >= 0 && !m->opened && m->serial == h.serial) src = m;
		}
		if (src == NULL || src->n != h.size || src->fd != h.fd) {
			UNLOCK();
			return CU_INVALID_VALUE; // freed, or never exported
		}
		fd = dup(src->fd);
	}
	struct mem *m = calloc(1, sizeof *m);
	m->fd = fd;
	m->n = h.size;
	m->serial = h.serial;
	m->opened = 1;
	m->dev = cur()->dev;
	m->p = mmap(NULL, m->n, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
	if (m->p == MAP_FAILED) {
		close(m->fd);
		free(m);
		UNLOCK();
		return CU_OUT_OF_MEMORY;
	}
	m->next = mems;
	mems = m;
	UNLOCK();
	*p = (unsigned long long)(uintptr_t)m->p;
	return CU_OK;
}

CUresult cuIpcCloseMemHandle(unsigned long long p) {
	CUresult r = need_ctx();
	if (r) return r;
	LOCK();
	for (struct mem **pm = &mems; *pm; pm = &(*pm)->next) {
		struct mem *m = *pm;
		if (m->opened && (uintptr_t)m->p == (uintptr_t)p) {
			*pm = m->next;
			munmap(m->p, m->n);
			close(m->fd);
			free(m);
			UNLOCK();
			return CU_OK;
		}
	}
	UNLOCK();
	return CU_INVALID_VALUE;
}

CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
	CUresult r = need_ctx();
	if (r) return r;
	(void)flags;
	struct mem *m = calloc(1, sizeof *m);
	m->fd = -1;
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
	if (n > 0 && (!is_device(dst, n) || !is_device(src, n))) {
		__atomic_add_fetch(&fakegpu_counts[0], 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&fakegpu_counts[1], n, __ATOMIC_RELAXED);
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
		while (s->head && !is_nccl(s->head)) pop_work(s);
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
	// A stream held by a wait for a word in memory waits, as on a GPU,
	// for the CPU (or another stream) to write it, up to 10 s; one held
	// by anything else (an NCCL operation whose partner never came)
	// cannot finish, and says so at once.
	for (int i = 0; i < 1000000 && s && s->head && s->head->kind == W_WAIT64; i++) {
		UNLOCK();
		struct timespec ts = {0, 10000};
		nanosleep(&ts, NULL);
		LOCK();
		advance();
	}
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

// cuEventElapsedTime: the time between the runs of the two records (the
// fake's streams run when the driver is called, so its times are those of
// the calls that ran them: in order on a stream, as a GPU's are).
CUresult cuEventElapsedTime(float *ms, struct event *a, struct event *b) {
	CUresult r = need_ctx();
	if (r) return r;
	if (a == NULL || a->magic != EVENT_MAGIC || b == NULL || b->magic != EVENT_MAGIC) return CU_INVALID_HANDLE;
	LOCK();
	advance();
	if (a->rec == 0 || b->rec == 0 || a->done < a->rec || b->done < b->rec) {
		UNLOCK();
		return CU_NOT_READY;
	}
	*ms = (float)(b->at_ms - a->at_ms);
	UNLOCK();
	return CU_OK;
}

// --- kernels ---
//
// The fake runs two kinds of kernel: sgemm (the seed examples' matrix
// multiply, run_sgemm) and internal/devreduce's kernels, in C: what each computes is what
// internal/reduce computes on the host (Go on amd64): integers wrap
// around; float32 and float64 are added and multiplied once; float16 and
// bfloat16 are combined in float and rounded back (float_to_half,
// float_to_bf16); min and max are the bitwise OR of t1 = (x < y ? x : y)
// and t2 = (t1 < x ? t1 : x), max through negated operands (Go's lowering
// on amd64, NaN payloads and signed zeros included); complex numbers add
// part by part and multiply as (ac - bd) + (ad + bc)i in double.

enum { K_SUM, K_PROD, K_MIN, K_MAX };
enum { T_I8, T_U8, T_I16, T_U16, T_I32, T_U32, T_I64, T_U64, T_F16, T_BF16, T_F32, T_F64, T_C64, T_C128, T_COUNT };

static const char *const kernel_types[T_COUNT] = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
	"float16", "bfloat16", "float32", "float64", "complex64", "complex128"};
static const size_t kernel_sizes[T_COUNT] = {1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8, 8, 16};
static const char *const kernel_ops[4] = {"sum", "prod", "min", "max"};

#define MODULE_MAGIC 0x6d6f646c
#define KERNEL_MAGIC 0x6b726e6c

struct kernel {
	int magic;
	int sgemm; // sgemm(c, a, b, n); else courier_combine_<type>_<op>
	int type, op;
	size_t size;
	struct kernel *next;
};

struct module {
	int magic;
	int dev;
	char *ptx;
	struct kernel *kernels; // the functions taken from it, freed with it
};

static uint32_t bits32(float f) { uint32_t b; memcpy(&b, &f, 4); return b; }
static float from32(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }
static uint64_t bits64(double f) { uint64_t b; memcpy(&b, &f, 8); return b; }
static double from64(uint64_t b) { double f; memcpy(&f, &b, 8); return f; }

static uint32_t min32(uint32_t x, uint32_t y) {
	uint32_t t1 = from32(x) < from32(y) ? x : y;
	uint32_t t2 = from32(t1) < from32(x) ? t1 : x;
	return t1 | t2;
}
static uint64_t min64(uint64_t x, uint64_t y) {
	uint64_t t1 = from64(x) < from64(y) ? x : y;
	uint64_t t2 = from64(t1) < from64(x) ? t1 : x;
	return t1 | t2;
}

// op32 and op64 combine the floats whose bits are x and y.
static uint32_t op32(int op, uint32_t x, uint32_t y) {
	switch (op) {
	case K_SUM: return bits32(from32(x) + from32(y));
	case K_PROD: return bits32(from32(x) * from32(y));
	case K_MIN: return min32(x, y);
	}
	return min32(x ^ 0x80000000u, y ^ 0x80000000u) ^ 0x80000000u;
}
static uint64_t op64(int op, uint64_t x, uint64_t y) {
	const uint64_t sign = (uint64_t)1 << 63;
	switch (op) {
	case K_SUM: return bits64(from64(x) + from64(y));
	case K_PROD: return bits64(from64(x) * from64(y));
	case K_MIN: return min64(x, y);
	}
	return min64(x ^ sign, y ^ sign) ^ sign;
}

#define COMBINE_INT(T, UT) \
	for (size_t i = 0; i < n; i++) { \
		T x, y, z; \
		memcpy(&x, a + i * sizeof(T), sizeof(T)); \
		memcpy(&y, b + i * sizeof(T), sizeof(T)); \
		switch (k->op) { \
		case K_SUM: z = (T)(UT)((UT)x + (UT)y); break; \
		case K_PROD: z = (T)(UT)((UT)x * (UT)y); break; \
		case K_MIN: z = y < x ? y : x; break; \
		default: z = y > x ? y : x; break; \
		} \
		memcpy(d + i * sizeof(T), &z, sizeof(T)); \
	} \
	break

// combine runs kernel k: dst[i] = a[i] op b[i] for i below n (dst may be
// a or b).
static void combine(const struct kernel *k, void *dst, const void *src, const void *src2, size_t n) {
	char *d = dst;
	const char *a = src, *b = src2;
	switch (k->type) {
	case T_I8: COMBINE_INT(int8_t, uint8_t);
	case T_U8: COMBINE_INT(uint8_t, uint8_t);
	case T_I16: COMBINE_INT(int16_t, uint16_t);
	case T_U16: COMBINE_INT(uint16_t, uint16_t);
	case T_I32: COMBINE_INT(int32_t, uint32_t);
	case T_U32: COMBINE_INT(uint32_t, uint32_t);
	case T_I64: COMBINE_INT(int64_t, uint64_t);
	case T_U64: COMBINE_INT(uint64_t, uint64_t);
	case T_F16:
	case T_BF16:
		for (size_t i = 0; i < n; i++) {
			uint16_t x, y, z;
			memcpy(&x, a + 2 * i, 2);
			memcpy(&y, b + 2 * i, 2);
			int half = k->type == T_F16;
			uint32_t r = op32(k->op, bits32(half ? half_to_float(x) : bf16_to_float(x)), bits32(half ? half_to_float(y) : bf16_to_float(y)));
			z = half ? float_to_half(from32(r)) : float_to_bf16(from32(r));
			memcpy(d + 2 * i, &z, 2);
		}
		break;
	case T_F32:
		for (size_t i = 0; i < n; i++) {
			uint32_t x, y, z;
			memcpy(&x, a + 4 * i, 4);
			memcpy(&y, b + 4 * i, 4);
			z = op32(k->op, x, y);
			memcpy(d + 4 * i, &z, 4);
		}
		break;
	case T_F64:
		for (size_t i = 0; i < n; i++) {
			uint64_t x, y, z;
			memcpy(&x, a + 8 * i, 8);
			memcpy(&y, b + 8 * i, 8);
			z = op64(k->op, x, y);
			memcpy(d + 8 * i, &z, 8);
		}
		break;
	case T_C64:
		for (size_t i = 0; i < n; i++) {
			float x[2], y[2], z[2];
			memcpy(x, a + 8 * i, 8);
			memcpy(y, b + 8 * i, 8);
			if (k->op == K_SUM) {
				z[0] = x[0] + y[0], z[1] = x[1] + y[1];
			} else {
				double ar = x[0], ai = x[1], br = y[0], bi = y[1];
				double re = ar * br - ai * bi, im = ar * bi + ai * br;
				z[0] = (float)re, z[1] = (float)im;
			}
			memcpy(d + 8 * i, z, 8);
		}
		break;
	case T_C128:
		for (size_t i = 0; i < n; i++) {
			double x[2], y[2], z[2];
			memcpy(x, a + 16 * i, 16);
			memcpy(y, b + 16 * i, 16);
			if (k->op == K_SUM) {
				z[0] = x[0] + y[0], z[1] = x[1] + y[1];
			} else {
				double ac = x[0] * y[0], bd = x[1] * y[1], ad = x[0] * y[1], bc = x[1] * y[0];
				z[0] = ac - bd, z[1] = ad + bc;
			}
			memcpy(d + 16 * i, z, 16);
		}
		break;
	}
}

CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned int n, int *opts, void **vals) {
	(void)n, (void)opts, (void)vals;
	CUresult r = need_ctx();
	if (r) return r;
	if (m == NULL || image == NULL) return CU_INVALID_VALUE;
	const char *text = image;
	if (strstr(text, ".version") == NULL || strstr(text, ".entry") == NULL) return CU_INVALID_PTX;
	struct module *mod = calloc(1, sizeof *mod);
	mod->magic = MODULE_MAGIC;
	mod->dev = cur()->dev;
	mod->ptx = strdup(text);
	*m = mod;
	return CU_OK;
}

CUresult cuModuleUnload(void *m) {
	CUresult r = need_ctx();
	if (r) return r;
	struct module *mod = m;
	if (mod == NULL || mod->magic != MODULE_MAGIC) return CU_INVALID_HANDLE;
	LOCK();
	advance(); // kernels queued from it run first
	for (struct kernel *k = mod->kernels, *next; k; k = next) {
		next = k->next;
		k->magic = 0;
		free(k);
	}
	UNLOCK();
	mod->magic = 0;
	free(mod->ptx);
	free(mod);
	return CU_OK;
}

// cuModuleGetFunction finds sgemm, or courier_combine_<type>_<op>, where
// the module's text declares it.
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
	CUresult r = need_ctx();
	if (r) return r;
	struct module *mod = m;
	if (f == NULL || name == NULL) return CU_INVALID_VALUE;
	if (mod == NULL || mod->magic != MODULE_MAGIC) return CU_INVALID_HANDLE;
	if (mod->dev != cur()->dev) return CU_INVALID_CONTEXT;
	if (strcmp(name, "sgemm") == 0) {
		if (strstr(mod->ptx, ".entry sgemm(") == NULL) return CU_NOT_FOUND;
		struct kernel *k = calloc(1, sizeof *k);
		k->magic = KERNEL_MAGIC;
		k->sgemm = 1;
		LOCK();
		k->next = mod->kernels;
		mod->kernels = k;
		UNLOCK();
		*f = k;
		return CU_OK;
	}
	const char *prefix = "courier_combine_";
	size_t pn = strlen(prefix);
	if (strncmp(name, prefix, pn) != 0) return CU_NOT_FOUND;
	const char *rest = name + pn, *us = strrchr(rest, '_');
	if (us == NULL) return CU_NOT_FOUND;
	int type = -1, op = -1;
	for (int t = 0; t < T_COUNT; t++) {
		if (strlen(kernel_types[t]) == (size_t)(us - rest) && strncmp(rest, kernel_types[t], (size_t)(us - rest)) == 0) type = t;
	}
	for (int o = 0; o < 4; o++) {
		if (strcmp(us + 1, kernel_ops[o]) == 0) op = o;
	}
	if (type < 0 || op < 0) return CU_NOT_FOUND;
	char decl[128];
	snprintf(decl, sizeof decl, ".entry %s(", name);
	if (strstr(mod->ptx, decl) == NULL) return CU_NOT_FOUND;
	struct kernel *k = calloc(1, sizeof *k);
	k->magic = KERNEL_MAGIC;
	k->type = type;
	k->op = op;
	k->size = kernel_sizes[type];
	LOCK();
	k->next = mod->kernels;
	mod->kernels = k;
	UNLOCK();
	*f = k;
	return CU_OK;
}

// launch_sgemm is cuLaunchKernel of sgemm(c, a, b, n): the three n×n
// matrices must lie in device memory of the current device.
static CUresult launch_sgemm(unsigned gx, unsigned gy, unsigned bx, unsigned by, struct stream *s, void **params) {
	CUresult r;
	uint64_t c, a, b;
	uint32_t n;
	memcpy(&c, params[0], 8);
	memcpy(&a, params[1], 8);
	memcpy(&b, params[2], 8);
	memcpy(&n, params[3], 4);
	LOCK();
	if ((r = stream_ok(s)) != CU_OK) {
		UNLOCK();
		return r;
	}
	size_t bytes = (size_t)n * n * 4;
	int dev = cur()->dev;
	if (n > 0 && (!inside(DEV(c), bytes, dev) || !inside(DEV(a), bytes, dev) || !inside(DEV(b), bytes, dev))) {
		UNLOCK();
		return CU_ILLEGAL_ADDRESS;
	}
	struct work *w = calloc(1, sizeof *w);
	if (w == NULL) {
		UNLOCK();
		return CU_OUT_OF_MEMORY;
	}
	w->kind = W_SGEMM;
	w->dst = DEV(c);
	w->src = DEV(a);
	w->src2 = DEV(b);
	w->n = n;
	w->cols = (size_t)gx * bx;
	w->rows = (size_t)gy * by;
	__atomic_add_fetch(&fakegpu_counts[2], 1, __ATOMIC_RELAXED);
	if (s == NULL) {
		run_sgemm(w);
		free(w);
	} else {
		if (pending_launch_on(s)) fail_usage("a kernel queued on a stream while an NCCL group for it was still in progress");
		push_work(s, w);
	}
	UNLOCK();
	return CU_OK;
}

// cuLaunchKernel queues a kernel of cuModuleGetFunction (runs it at once
// on the legacy stream): a combine's parameters are (dst, a, b u64 device
// pointers, n u64), sgemm's (c, a, b u64, n u32), read as the driver
// reads them (params[i] points at argument i); the memory must lie in
// device memory of the current device.
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shared, void *s, void **params, void **extra) {
	(void)shared;
	CUresult r = need_ctx();
	if (r) return r;
	struct kernel *k = f;
	if (k == NULL || k->magic != KERNEL_MAGIC) return CU_INVALID_HANDLE;
	if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 || bx * by * bz > 1024) return CU_INVALID_VALUE;
	if (params == NULL || extra != NULL) return CU_INVALID_VALUE;
	if (k->sgemm) return launch_sgemm(gx, gy, bx, by, s, params);
	uint64_t dst, a, b, n;
	memcpy(&dst, params[0], 8);
	memcpy(&a, params[1], 8);
	memcpy(&b, params[2], 8);
	memcpy(&n, params[3], 8);
	if (n > ((uint64_t)1 << 40)) return CU_INVALID_VALUE;
	size_t bytes = (size_t)n * k->size;
	LOCK();
	struct stream *st = s;
	if ((r = stream_ok(st)) != CU_OK) {
		UNLOCK();
		return r;
	}
	int dev = cur()->dev;
	if (n > 0 && (!inside(DEV(dst), bytes, dev) || !inside(DEV(a), bytes, dev) || !inside(DEV(b), bytes, dev))) {
		UNLOCK();
		return CU_INVALID_VALUE; // on a GPU, a fault at the next synchronize
	}
	__atomic_add_fetch(&fakegpu_counts[2], 1, __ATOMIC_RELAXED);
	if (st == NULL) {
		combine(k, DEV(dst), DEV(a), DEV(b), (size_t)n);
		UNLOCK();
		return CU_OK;
	}
	if (pending_launch_on(st)) fail_usage("a kernel queued on a stream while an NCCL group for it was still in progress");
	struct work *w = calloc(1, sizeof *w);
	w->kind = W_KERNEL;
	w->dst = DEV(dst);
	w->src = DEV(a);
	w->src2 = DEV(b);
	w->n = (size_t)n;
	w->kern = k;
	push_work(st, w);
	UNLOCK();
	return CU_OK;
}

// --- NCCL ---

static unsigned ids_made;

// id_sum is the checksum an ID made here carries in its last 4 bytes.
static uint32_t id_sum(const char *idc) {
	const unsigned char *id = (const unsigned char *)idc;
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

ncclResult_t ncclCommInitRankConfig(struct comm **out, int nranks, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
	if (misuse) return NCCL_INVALID_USAGE;
	if (cur() == NULL) return bad(NCCL_INVALID_USAGE, "ncclCommInitRankConfig without a current CUDA context");
	if (cfg == NULL || cfg->size != sizeof(ncclConfig_t) || cfg->magic != COURIER_NCCL_API_MAGIC ||
			cfg->version != COURIER_NCCL_CONFIG_VERSION)
		return bad(NCCL_INVALID_ARGUMENT, "config: size, magic or version wrong");
	if (cfg->blocking != 0 && cfg->blocking != 1) return bad(NCCL_INVALID_ARGUMENT, "config: blocking is neither 0 nor 1");
	const int *ints[] = {&cfg->cgaClusterSize, &cfg->minCTAs, &cfg->maxCTAs, &cfg->splitShare, &cfg->trafficClass,
		&cfg->collnetEnable, &cfg->CTAPolicy, &cfg->shrinkShare, &cfg->nvlsCTAs, &cfg->nChannelsPerNetPeer,
		&cfg->nvlinkCentricSched};
	for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
		if (*ints[i] != COURIER_NCCL_UNDEF_INT) return bad(NCCL_INVALID_ARGUMENT, "config: a field other than blocking is set");
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

// batches counts landings (struct work's batch).
static unsigned long batches;

// land puts a launched group's operations on their streams, its sends and
// receives in batch.
static void land(struct comm *c, unsigned long batch) {
	for (int i = 0; i < c->npending; i++) {
		struct op *o = &c->pending[i];
		struct work *w = calloc(1, sizeof *w);
		w->issued = ++issued;
		w->comm = o->comm;
		if (o->coll) {
			w->kind = W_COLL;
			w->seq = ++o->comm->colls;
			w->coll = o->coll;
			w->type = o->type;
			w->redop = o->redop;
			w->root = o->root;
			w->count = o->count;
			w->src = o->sendbuf;
			w->dst = o->buf;
			push_work(o->stream, w);
			continue;
		}
		w->kind = W_NCCL;
		w->batch = batch;
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
			land(c, ++batches);
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

ncclResult_t ncclGroupEnd(void);

// overlap reports whether n bytes at a and m bytes at b overlap.
static int overlap(const void *a, size_t n, const void *b, size_t m) {
	uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
	return n > 0 && m > 0 && x < y + m && y < x + n;
}

// coll checks a collective and adds it to the thread's group, or, outside
// a group, makes it a group of its own (as NCCL does). redop and root are
// -1 where the collective has none.
static ncclResult_t coll(int kind, const void *sendbuf, void *recvbuf, size_t count, int type, int redop, int root,
		struct comm *c, struct stream *s) {
	const char *name = coll_names[kind];
	char msg[300];
	if (misuse) return NCCL_INVALID_USAGE;
	if (cur() == NULL) {
		snprintf(msg, sizeof msg, "%s without a current CUDA context", name);
		return bad(NCCL_INVALID_USAGE, msg);
	}
	if (c == NULL || !c->ready || c->aborted) {
		snprintf(msg, sizeof msg, "%s: communicator not ready", name);
		return bad(NCCL_INVALID_USAGE, msg);
	}
	if (c->npending) {
		snprintf(msg, sizeof msg, "%s while the last group is still in progress", name);
		return bad(NCCL_INVALID_USAGE, msg);
	}
	int nranks = c->cl->nranks;
	size_t sz = type_size(type);
	if (sz == 0) {
		snprintf(msg, sizeof msg, "%s: data type %d", name, type);
		return bad(NCCL_INVALID_ARGUMENT, msg);
	}
	int reduces = kind == C_ALLREDUCE || kind == C_REDUCE || kind == C_REDUCESCATTER;
	int rooted = kind == C_BROADCAST || kind == C_REDUCE;
	if (reduces && (redop < 0 || redop >= R_COUNT)) {
		snprintf(msg, sizeof msg, "%s: reduction op %d (the fake knows ncclSum to ncclAvg)", name, redop);
		return bad(NCCL_INVALID_ARGUMENT, msg);
	}
	if (rooted && (root < 0 || root >= nranks)) {
		snprintf(msg, sizeof msg, "%s: root %d of %d ranks", name, root, nranks);
		return bad(NCCL_INVALID_ARGUMENT, msg);
	}
	if (s == NULL || s->magic != STREAM_MAGIC || s->dev != c->dev) {
		snprintf(msg, sizeof msg, "%s: stream", name);
		return bad(NCCL_INVALID_ARGUMENT, msg);
	}
	if (count > SIZE_MAX / sz / (size_t)nranks) {
		snprintf(msg, sizeof msg, "%s: count %zu too large", name, count);
		return bad(NCCL_INVALID_ARGUMENT, msg);
	}
	// The bytes of each buffer NCCL uses (0: not used by this rank), and
	// where the send buffer must be if it overlaps the receive buffer.
	size_t bytes = count * sz, sendn = bytes, recvn = bytes;
	uintptr_t inplace = (uintptr_t)recvbuf;
	int rank = c->rank;
	switch (kind) {
	case C_BROADCAST:
		if (rank != root) sendn = 0;
		break;
	case C_REDUCE:
		if (rank != root) recvn = 0;
		break;
	case C_ALLGATHER:
		recvn = bytes * (size_t)nranks;
		inplace = (uintptr_t)recvbuf + (size_t)rank * bytes;
		break;
	case C_REDUCESCATTER:
		sendn = bytes * (size_t)nranks;
		inplace = (uintptr_t)recvbuf - (size_t)rank * bytes; // sendbuf + rank*bytes == recvbuf
		break;
	}
	if (count > 0) {
		LOCK();
		int sok = sendn == 0 || inside(sendbuf, sendn, c->dev), rok = recvn == 0 || inside(recvbuf, recvn, c->dev);
		UNLOCK();
		if (!sok || !rok) {
			snprintf(msg, sizeof msg, "%s: %s buffer not in device memory of the communicator's GPU (%zu bytes)", name,
				sok ? "receive" : "send", sok ? recvn : sendn);
			return bad(NCCL_INVALID_ARGUMENT, msg);
		}
		if (overlap(sendbuf, sendn, recvbuf, recvn) && (uintptr_t)sendbuf != inplace) {
			snprintf(msg, sizeof msg, "%s: the send and receive buffers overlap, but not as NCCL's in-place layout has them", name);
			return bad(NCCL_INVALID_ARGUMENT, msg);
		}
	}
	struct op o = {.comm = c, .peer = -1, .type = type, .buf = recvbuf, .count = count, .stream = s,
		.coll = kind, .redop = redop, .root = root, .sendbuf = sendbuf};
	if (group_depth > 0) {
		if (group_n == MAX_GROUP) return bad(NCCL_INTERNAL, "too many operations in a group");
		group_ops[group_n++] = o;
		return NCCL_OK;
	}
	ncclResult_t r = ncclGroupStart();
	if (r != NCCL_OK) return r;
	group_ops[group_n++] = o;
	return ncclGroupEnd();
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op, struct comm *comm,
		struct stream *stream) {
	return coll(C_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, -1, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, int datatype, int root, struct comm *comm,
		struct stream *stream) {
	return coll(C_BROADCAST, sendbuff, recvbuff, count, datatype, -1, root, comm, stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op, int root,
		struct comm *comm, struct stream *stream) {
	return coll(C_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, int datatype, struct comm *comm,
		struct stream *stream) {
	return coll(C_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, -1, -1, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, int datatype, int op,
		struct comm *comm, struct stream *stream) {
	return coll(C_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream);
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
		unsigned long batch = ++batches; // one group: one batch
		for (int i = 0; i < group_n; i++) {
			struct comm *ci = group_ops[i].comm;
			ci->pending = malloc(sizeof(struct op));
			ci->pending[0] = group_ops[i];
			ci->npending = 1;
			land(ci, batch);
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
		land(c, ++batches);
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
			if (is_nccl(w) && w->comm == c) {
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
			if (is_nccl(w) && w->comm == c) fail_usage("ncclCommDestroy with operations on a stream (courier aborts those)");
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
