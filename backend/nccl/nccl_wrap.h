// nccl_wrap.h: the C side of the package's boundary with NCCL, which
// nccl_cgo.go calls: libnccl.so.2 loaded at run time (dlopen), and
// wrappers that each make the device's CUDA context current, make their
// NCCL calls and restore the context, in one C call (nccl_wrap.c).

#ifndef COURIER_NCCL_WRAP_H
#define COURIER_NCCL_WRAP_H

#include <stddef.h>
#include <stdint.h>

#include "nccl_types.h"

// A loaded libnccl: its handle and the entry points courier calls.
typedef struct courier_nccl_lib courier_nccl_lib;

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

// courier_nccl_open dlopens path (RTLD_NOW | RTLD_GLOBAL) and looks up
// every entry point courier uses. It returns NULL, with the reason in err,
// if the library or one of them is missing. A library is never closed.
courier_nccl_lib *courier_nccl_open(const char *path, char *err, size_t errlen);

// courier_nccl_version calls ncclGetVersion.
ncclResult_t courier_nccl_version(courier_nccl_lib *l, int *v);

// courier_nccl_unique_id calls ncclGetUniqueId and copies the ID to out
// (COURIER_NCCL_UNIQUE_ID_BYTES bytes).
ncclResult_t courier_nccl_unique_id(courier_nccl_lib *l, void *out);

// courier_nccl_init creates a communicator on the device of d,
// non-blocking unless blocking is 1. Only .size, .magic, .version and .blocking of the configuration are
// set; every other field is left undefined as NCCL_CONFIG_INITIALIZER
// leaves it (NCCL_CONFIG_UNDEF_INT, or NULL for the pointers), so NCCL
// picks its defaults and honours its environment variables.
ncclResult_t courier_nccl_init(courier_nccl_lib *l, const courier_nccl_dev *d,
		uintptr_t *comm, int nranks, const void *idbytes, int rank, int blocking, int *cu);

// courier_nccl_async_error calls ncclCommGetAsyncError: .r is its result,
// .state the communicator's.
courier_nccl_out courier_nccl_async_error(courier_nccl_lib *l, uintptr_t comm);

// courier_nccl_group issues ops[0..n) as one NCCL group, each op on its
// communicator and stream, with the device's context current. If an op
// fails, the group is still ended (NCCL's group state must not leak to the
// next call on this thread) and the op's error is returned, with its index
// in .failed. With timed set, .ns is the time NCCL's calls took. When the
// group is on its stream (ncclGroupEnd said ncclSuccess), *after is queued
// behind it and .after is its CUresult.
courier_nccl_out courier_nccl_group(courier_nccl_lib *l, const courier_nccl_dev *d,
		const courier_nccl_op *ops, int n, int timed, const courier_nccl_after *after);

// courier_nccl_abort calls ncclCommAbort with the device's context
// current.
ncclResult_t courier_nccl_abort(courier_nccl_lib *l, const courier_nccl_dev *d, uintptr_t comm, int *cu);

// courier_nccl_error_string and courier_nccl_last_error call
// ncclGetErrorString and ncclGetLastError.
const char *courier_nccl_error_string(courier_nccl_lib *l, ncclResult_t r);
const char *courier_nccl_last_error(courier_nccl_lib *l, uintptr_t comm);

// courier_nccl_memcpy copies bytes between any two addresses the driver
// knows (unified addressing: device memory, or host memory), with the
// device's context current, on the legacy default stream, which does not
// wait for the communicator's non-blocking stream. It blocks until done.
int courier_nccl_memcpy(const courier_nccl_dev *d, void *dst, const void *src, size_t bytes, int *cu);

// courier_nccl_memcpy_from is courier_nccl_memcpy from a device address.
int courier_nccl_memcpy_from(const courier_nccl_dev *d, void *dst, uint64_t src, size_t bytes, int *cu);

#endif
