/*
 * calls.c: what one CUDA driver call costs the CPU on this machine, for
 * the calls on the CUDA IPC path's way (backend/nccl/ipc.go): the context
 * pushed and popped around each of courier's calls, the lookup of a
 * buffer's allocation, an event's record and query, an 8-byte copy
 * queued, and a copy followed by each way of seeing it done (an event
 * waited for or polled, a word the stream writes into page-locked memory
 * and the CPU polls). One process, one GPU, CALLS calls of each, the
 * mean in nanoseconds; run it bound to a core, as mpirun runs a rank.
 *
 * Build and run on the GPU machine:
 *   gcc -O2 -o calls bench/cuda/calls.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64/stubs -lcuda
 *   taskset -c 2 ./calls
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CALLS 200000

static double now_ns(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void check(CUresult r, const char *what) {
	if (r != CUDA_SUCCESS) {
		const char *name = NULL;
		cuGetErrorName(r, &name);
		fprintf(stderr, "calls: %s: %s (%d)\n", what, name ? name : "?", (int)r);
		exit(1);
	}
}

#define CHECK(x) check((x), #x)

/* TIME runs body CALLS times (i is the call's number) and prints the mean. */
#define TIME(name, body)                                                   \
	do {                                                               \
		double t0_ = now_ns();                                     \
		for (long i = 0; i < CALLS; i++) {                         \
			body;                                              \
		}                                                          \
		printf("%-44s %9.1f ns\n", name, (now_ns() - t0_) / CALLS); \
	} while (0)

int main(void) {
	CUdevice dev;
	CUcontext ctx, cur, old;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));

	TIME("push + pop, no context current", (cuCtxPushCurrent(ctx), cuCtxPopCurrent(&old)));
	TIME("get current", cuCtxGetCurrent(&cur));
	CHECK(cuCtxSetCurrent(ctx));
	TIME("push + pop, the same context current", (cuCtxPushCurrent(ctx), cuCtxPopCurrent(&old)));

	CUstream s;
	CUevent e;
	CUdeviceptr a, b, base;
	size_t size;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
	CHECK(cuMemAlloc(&a, 2 << 20));
	CHECK(cuMemAlloc(&b, 2 << 20));
	TIME("cuMemGetAddressRange", cuMemGetAddressRange(&base, &size, a + 64));
	CHECK(cuEventRecord(e, s));
	CHECK(cuStreamSynchronize(s));
	TIME("cuEventQuery, fired", cuEventQuery(e));
	TIME("cuStreamQuery, idle", cuStreamQuery(s));
	TIME("cuEventRecord", cuEventRecord(e, s));
	CHECK(cuStreamSynchronize(s));
	TIME("cuMemcpyDtoDAsync, 8 B", {
		cuMemcpyDtoDAsync(b, a, 8, s);
		if (i % 64 == 63) cuStreamSynchronize(s);
	});
	CHECK(cuStreamSynchronize(s));

	void *h;
	CUdeviceptr hd;
	CHECK(cuMemHostAlloc(&h, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
	CHECK(cuMemHostGetDevicePointer(&hd, h, 0));
	volatile uint64_t *word = h;
	*word = 0;
	TIME("copy 8 B, event record, cuEventSynchronize", {
		cuMemcpyDtoDAsync(b, a, 8, s);
		cuEventRecord(e, s);
		cuEventSynchronize(e);
	});
	TIME("copy 8 B, event record, cuEventQuery polled", {
		cuMemcpyDtoDAsync(b, a, 8, s);
		cuEventRecord(e, s);
		while (cuEventQuery(e) == CUDA_ERROR_NOT_READY) {
		}
	});
	TIME("copy 8 B, word written, word polled", {
		cuMemcpyDtoDAsync(b, a, 8, s);
		cuStreamWriteValue64(s, hd, (cuuint64_t)i + 1, 0);
		while (*word != (uint64_t)i + 1) {
		}
	});
	CHECK(cuCtxSetCurrent(NULL));
	TIME("the same, each call in push + pop (courier)", {
		cuCtxPushCurrent(ctx);
		cuMemcpyDtoDAsync(b, a, 8, s);
		cuCtxPopCurrent(&old);
		cuCtxPushCurrent(ctx);
		cuEventRecord(e, s);
		cuCtxPopCurrent(&old);
		for (;;) {
			cuCtxPushCurrent(ctx);
			CUresult r = cuEventQuery(e);
			cuCtxPopCurrent(&old);
			if (r != CUDA_ERROR_NOT_READY) break;
		}
	});
	return 0;
}
