// nccl_types.h: the parts of NCCL's ABI that courier relies on, as NCCL
// 2.28 defines them: the result codes, element types and reduction
// operators, the communicator handle, and the layouts of ncclUniqueId and
// ncclConfig_t.
//
// courier builds without nccl.h (libnccl.so.2 is loaded at run time), so
// it writes these down itself, once: the loader (nccl_wrap.c) and the fake
// GPU of the tests (testdata/fakegpu.c, compiled with -I pointing here)
// both include this file, and the codes the Go side names (library.go,
// dtype.go) are checked against it when the package compiles with cgo
// (nccl_cgo.go).

#ifndef COURIER_NCCL_TYPES_H
#define COURIER_NCCL_TYPES_H

#include <limits.h>
#include <stddef.h>

// ncclResult_t is a call's result. It is an int here, not NCCL's enum,
// so that the wrappers can return codes of their own (negative ones)
// beside NCCL's small non-negative ones.
typedef int ncclResult_t;
enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6, // a peer's process or the network failed
	ncclInProgress = 7,  // a non-blocking communicator's call goes on
};

// ncclDataType_t is an element type: the ones courier uses.
typedef int ncclDataType_t;
enum {
	ncclInt8 = 0,
	ncclUint8 = 1,
	ncclInt32 = 2,
	ncclUint32 = 3,
	ncclInt64 = 4,
	ncclUint64 = 5,
	ncclFloat16 = 6,
	ncclFloat32 = 7,
	ncclFloat64 = 8,
	ncclBfloat16 = 9,
};

// ncclRedOp_t is a reduction operator: the built-in ones.
typedef int ncclRedOp_t;
enum {
	ncclSum = 0,
	ncclProd = 1,
	ncclMax = 2,
	ncclMin = 3,
	ncclAvg = 4,
};

// ncclComm_t is a communicator: a pointer NCCL hands out, opaque.
typedef struct ncclComm *ncclComm_t;

// ncclUniqueId is what the ranks of a communicator exchange to make it:
// 128 bytes, passed to ncclCommInitRankConfig by value.
#define COURIER_NCCL_UNIQUE_ID_BYTES 128
typedef struct {
	char internal[COURIER_NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

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
} ncclConfig_t;

// The values NCCL_CONFIG_INITIALIZER gives .magic and .version (for
// 2.28.3), and the value of an integer field left unset, which NCCL
// replaces with its default (NCCL_CONFIG_UNDEF_INT); pointer fields left
// unset are NULL.
#define COURIER_NCCL_API_MAGIC 0xcafebeef
#define COURIER_NCCL_CONFIG_VERSION 22803 // NCCL_VERSION(2,28,3)
#define COURIER_NCCL_UNDEF_INT INT_MIN

#endif
