/*
 * p2p.c: NCCL point-to-point written directly in C, the floor courier's NCCL
 * backend is measured against. Two ranks under mpirun, one GPU each (the
 * local rank picks it); MPI only broadcasts the unique ID.
 *
 *   latency   - blocking ping-pong of one message (send, synchronize, then
 *               receive, synchronize), one way = half the round trip;
 *   bandwidth - `iters` back-to-back sends of one size on one stream, then
 *               one synchronize; the receiver mirrors with receives;
 *   init      - ncclCommInitRank, measured on rank 0 ("init"), and from
 *               before the CUDA context exists to a communicator that has
 *               moved its first bytes, allocation of the 512 MiB buffer
 *               included ("init+ctx": what courier's Init
 *               does, beside its own bootstrap).
 *
 * Options, to tell NCCL's share of courier's overhead from courier's own:
 *   -nonblocking  the communicator is non-blocking (config.blocking = 0):
 *                 ncclCommGetAsyncError is polled after every call until
 *                 it is no longer ncclInProgress (implies -group);
 *   -group        every latency operation goes in ncclGroupStart /
 *                 ncclGroupEnd, as courier's NCCL backend issues it (and
 *                 -wait query, unless -wait says otherwise);
 *   -wait HOW     how a latency operation is waited for:
 *                   stream  cudaStreamSynchronize (the default);
 *                   query   an event recorded, cudaEventQuery polled;
 *                   evsync  an event recorded, cudaEventSynchronize;
 *                   squery  cudaStreamQuery polled;
 *                   word    cuStreamWriteValue64 of the operation's number
 *                           to a word of mapped page-locked memory, the
 *                           word polled (courier's completion words);
 *                   word32  the same with cuStreamWriteValue32;
 *                   mixed   receives as word, sends as query;
 *   -onestream    with -twocomms, both communicators on one stream (a
 *                 program that posts a receive before the send it waits
 *                 for could deadlock: the ping-pong does not);
 *   -iters N      round trips per latency figure (default 2000);
 *   -bwgroup K    the bandwidth sends (and receives) go K to an NCCL group
 *                 (courier issues all those posted before a wait as one);
 *   -ctx          the primary context pushed before and popped after each
 *                 launch (cuCtxPushCurrent / cuCtxPopCurrent), as courier
 *                 does;
 *   -twocomms     one communicator (and stream) per direction, as courier
 *                 has: sends on one, receives on the other.
 * The latency rows also give the mean time one launch call takes (from
 * before ncclSend or ncclGroupStart until the call, and any polling for
 * ncclInProgress, returned).
 *
 * Build and run on the GPU machine:
 *   mpicc -O2 -o p2p p2p.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -lnccl
 *   mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 ./p2p
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define CHECK_NCCL(x) do { ncclResult_t r = (x); if (r != ncclSuccess) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, ncclGetErrorString(r)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

static int rank;
static ncclComm_t comms[2];   /* [0]: rank 0 sends on it; [1]: rank 1 does (the same one without -twocomms) */
static cudaStream_t streams[2];
static ncclComm_t comm;       /* the one being polled by settle */
static int nonblocking, grouped, twocomms, pushctx, onestream, latIters = 2000, bwGroup;
enum { WAIT_STREAM, WAIT_QUERY, WAIT_EVSYNC, WAIT_SQUERY, WAIT_WORD, WAIT_WORD32, WAIT_MIXED };
static int waitHow = -1;
static cudaEvent_t event;
/* Driver entry points, from libcuda.so.1 at run time (-wait word, -ctx). */
typedef int (*writeValue64_fn)(void *stream, uint64_t addr, uint64_t value, unsigned flags);
typedef int (*writeValue32_fn)(void *stream, uint64_t addr, uint32_t value, unsigned flags);
typedef int (*ctxPush_fn)(void *ctx);
typedef int (*ctxPop_fn)(void **ctx);
typedef int (*ctxGet_fn)(void **ctx);
static writeValue64_fn writeValue64;
static writeValue32_fn writeValue32;
static ctxPush_fn ctxPush;
static ctxPop_fn ctxPop;
static void *primaryCtx;
static volatile uint64_t *words; /* one per stream, host view */
static uint64_t wordsDev;          /* device view */
static uint64_t seq;
static double launchTime;
static long launches;

/* settle polls a non-blocking communicator until its last call is done. */
static void settle(ncclResult_t r) {
	if (r == ncclInProgress) {
		ncclResult_t state;
		do {
			CHECK_NCCL(ncclCommGetAsyncError(comm, &state));
		} while (state == ncclInProgress);
		r = state;
	}
	CHECK_NCCL(r);
}

static double now(void) { return MPI_Wtime(); }

/* which is the index of the communicator (and stream) that carries a
 * transfer from rank `from`. */
static int which(int from) { return twocomms ? from : 0; }

/* driverSym finds a driver entry point or stops the program. */
static void *driverSym(const char *name) {
	static void *h;
	if (!h && !(h = dlopen("libcuda.so.1", RTLD_NOW))) {
		fprintf(stderr, "p2p: dlopen libcuda.so.1: %s\n", dlerror());
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	void *f = dlsym(h, name);
	if (!f) {
		fprintf(stderr, "p2p: no %s in libcuda.so.1\n", name);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	return f;
}

#define CHECK_CU(x) do { int e = (x); if (e != 0) { \
	fprintf(stderr, "%s:%d: CUresult %d\n", __FILE__, __LINE__, e); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

/* op sends or receives n bytes and waits for it. */
static void op(int recv, char *buf, size_t n, int peer) {
	int k = which(recv ? peer : rank);
	comm = comms[k];
	cudaStream_t stream = streams[k];
	double t0 = now();
	if (pushctx) CHECK_CU(ctxPush(primaryCtx));
	if (grouped) CHECK_NCCL(ncclGroupStart());
	ncclResult_t r = recv ? ncclRecv(buf, n, ncclUint8, peer, comm, stream) : ncclSend(buf, n, ncclUint8, peer, comm, stream);
	if (grouped) {
		if (r != ncclSuccess && r != ncclInProgress) CHECK_NCCL(r);
		r = ncclGroupEnd();
	}
	settle(r);
	uint64_t want = ++seq;
	int how = waitHow;
	if (how == WAIT_MIXED) how = recv ? WAIT_WORD : WAIT_QUERY;
	switch (how) {
	case WAIT_QUERY:
	case WAIT_EVSYNC:
		CHECK_CUDA(cudaEventRecord(event, stream));
		break;
	case WAIT_WORD:
		CHECK_CU(writeValue64(stream, wordsDev + 8 * k, want, 0));
		break;
	case WAIT_WORD32:
		CHECK_CU(writeValue32(stream, wordsDev + 8 * k, (uint32_t)want, 0));
		break;
	}
	if (pushctx) {
		void *old;
		CHECK_CU(ctxPop(&old));
	}
	launchTime += now() - t0;
	launches++;
	cudaError_t e;
	switch (how) {
	case WAIT_STREAM:
		CHECK_CUDA(cudaStreamSynchronize(stream));
		break;
	case WAIT_QUERY:
		while ((e = cudaEventQuery(event)) == cudaErrorNotReady) {
		}
		CHECK_CUDA(e);
		break;
	case WAIT_EVSYNC:
		CHECK_CUDA(cudaEventSynchronize(event));
		break;
	case WAIT_SQUERY:
		while ((e = cudaStreamQuery(stream)) == cudaErrorNotReady) {
		}
		CHECK_CUDA(e);
		break;
	case WAIT_WORD:
		while (words[k] < want) {
		}
		break;
	case WAIT_WORD32:
		while (((volatile uint32_t *)words)[2 * k] != (uint32_t)want) {
		}
		break;
	}
}

static double latency(char *buf, size_t n, int iters) {
	int peer = 1 - rank;
	double start = 0;
	for (int i = -10; i < iters; i++) {
		if (i == 0) {
			start = now();
			launchTime = 0;
			launches = 0;
		}
		op(rank != 0, buf, n, peer);
		op(rank == 0, buf, n, peer);
	}
	return (now() - start) / (2.0 * iters);
}

static double bandwidth(char *buf, size_t n, int iters) {
	int peer = 1 - rank;
	MPI_Barrier(MPI_COMM_WORLD);
	double start = now();
	comm = comms[which(0)];
	cudaStream_t stream = streams[which(0)];
	for (int i = 0; i < iters; i++) {
		if (bwGroup > 0 && i % bwGroup == 0) CHECK_NCCL(ncclGroupStart());
		ncclResult_t r;
		if (rank == 0) r = ncclSend(buf, n, ncclUint8, peer, comm, stream);
		else r = ncclRecv(buf, n, ncclUint8, peer, comm, stream);
		if (bwGroup > 0 && (i % bwGroup == bwGroup - 1 || i == iters - 1)) {
			if (r != ncclSuccess && r != ncclInProgress) CHECK_NCCL(r);
			r = ncclGroupEnd();
		} else if (bwGroup > 0) {
			if (r != ncclSuccess && r != ncclInProgress) CHECK_NCCL(r);
			continue;
		}
		settle(r);
	}
	CHECK_CUDA(cudaStreamSynchronize(stream));
	double t = now() - start;
	double worst;
	MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return (double)n * iters / worst;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-nonblocking") == 0) nonblocking = grouped = 1;
		else if (strcmp(argv[i], "-group") == 0) grouped = 1;
		else if (strcmp(argv[i], "-twocomms") == 0) twocomms = 1;
		else if (strcmp(argv[i], "-ctx") == 0) pushctx = 1;
		else if (strcmp(argv[i], "-onestream") == 0) onestream = 1;
		else if (strcmp(argv[i], "-bwgroup") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) bwGroup = atoi(argv[++i]);
		else if (strcmp(argv[i], "-iters") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) latIters = atoi(argv[++i]);
		else if (strcmp(argv[i], "-wait") == 0 && i + 1 < argc) {
			const char *w = argv[++i];
			const char *names[] = {"stream", "query", "evsync", "squery", "word", "word32", "mixed"};
			waitHow = -2;
			for (int j = 0; j < 7; j++)
				if (strcmp(w, names[j]) == 0) waitHow = j;
			if (waitHow == -2) {
				if (rank == 0) fprintf(stderr, "p2p: -wait %s: have stream, query, evsync, squery, word, word32, mixed\n", w);
				MPI_Abort(MPI_COMM_WORLD, 2);
			}
		} else {
			if (rank == 0) fprintf(stderr, "p2p: unknown option %s (options: -nonblocking, -group, -twocomms, -onestream, -wait HOW, -ctx, -iters N, -bwgroup K)\n", argv[i]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	if (waitHow == -1) waitHow = grouped ? WAIT_QUERY : WAIT_STREAM;
	if (size != 2) {
		if (rank == 0) fprintf(stderr, "p2p needs 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
	MPI_Barrier(MPI_COMM_WORLD);
	double t00 = now();
	CHECK_CUDA(cudaSetDevice(lr ? atoi(lr) : rank));
	CHECK_CUDA(cudaFree(0));
	int ncomms = twocomms ? 2 : 1;
	for (int k = 0; k < ncomms; k++) CHECK_CUDA(cudaStreamCreateWithFlags(&streams[k], cudaStreamNonBlocking));
	if (onestream) streams[1] = streams[0];
	CHECK_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
	if (waitHow == WAIT_WORD || waitHow == WAIT_WORD32 || waitHow == WAIT_MIXED) {
		void *host, *dev;
		writeValue64 = (writeValue64_fn)driverSym("cuStreamWriteValue64_v2");
		writeValue32 = (writeValue32_fn)driverSym("cuStreamWriteValue32_v2");
		CHECK_CUDA(cudaHostAlloc(&host, 64, cudaHostAllocMapped | cudaHostAllocPortable));
		memset(host, 0, 64);
		CHECK_CUDA(cudaHostGetDevicePointer(&dev, host, 0));
		words = (volatile uint64_t *)host;
		wordsDev = (uint64_t)(uintptr_t)dev;
	}
	if (pushctx) {
		ctxPush = (ctxPush_fn)driverSym("cuCtxPushCurrent_v2");
		ctxPop = (ctxPop_fn)driverSym("cuCtxPopCurrent_v2");
		CHECK_CU(((ctxGet_fn)driverSym("cuCtxGetCurrent"))(&primaryCtx));
	}
	ncclUniqueId ids[2];
	if (rank == 0)
		for (int k = 0; k < ncomms; k++) CHECK_NCCL(ncclGetUniqueId(&ids[k]));
	MPI_Bcast(ids, sizeof ids, MPI_BYTE, 0, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = now();
	/* Every communicator of the rank in one group: their inits run at once. */
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = !nonblocking;
	CHECK_NCCL(ncclGroupStart());
	for (int k = 0; k < ncomms; k++) {
		ncclResult_t r = ncclCommInitRankConfig(&comms[k], 2, ids[k], rank, &config);
		if (r != ncclInProgress) CHECK_NCCL(r);
	}
	ncclResult_t rg = ncclGroupEnd();
	for (int k = 0; k < ncomms; k++) {
		comm = comms[k];
		settle(rg);
	}
	if (!twocomms) {
		comms[1] = comms[0];
		streams[1] = streams[0];
	}
	double init = now() - t0;
	size_t maxn = (size_t)512 << 20;
	char *buf;
	CHECK_CUDA(cudaMalloc((void **)&buf, maxn));
	CHECK_CUDA(cudaMemset(buf, rank, maxn));
	/* First contact in both directions, symmetric, before timing: one group
	 * (over both communicators with -twocomms). */
	CHECK_NCCL(ncclGroupStart());
	ncclResult_t r0 = ncclSend(buf, 1, ncclUint8, 1 - rank, comms[which(rank)], streams[which(rank)]);
	if (r0 != ncclInProgress) CHECK_NCCL(r0);
	r0 = ncclRecv(buf + 1, 1, ncclUint8, 1 - rank, comms[which(1 - rank)], streams[which(1 - rank)]);
	if (r0 != ncclInProgress) CHECK_NCCL(r0);
	rg = ncclGroupEnd();
	for (int k = 0; k < ncomms; k++) {
		comm = comms[k];
		settle(rg);
		CHECK_CUDA(cudaStreamSynchronize(streams[k]));
	}
	double whole = now() - t00;
	if (rank == 0) {
		int v;
		ncclGetVersion(&v);
		const char *waits[] = {"cudaStreamSynchronize", "cudaEventQuery polled", "cudaEventSynchronize", "cudaStreamQuery polled",
				       "completion words", "32-bit completion words", "words for receives, events for sends"};
		printf("# C + NCCL %d, 2 ranks, %s communicator%s%s%s, waits: %s\n", v, nonblocking ? "non-blocking" : "blocking",
		       twocomms ? (onestream ? ", one per direction, one stream" : ", one per direction") : "", grouped ? ", grouped operations" : "", pushctx ? ", context pushed" : "", waits[waitHow]);
		printf("%-10s %12s %14s %10s %12s\n", "kind", "bytes", "latency (µs)", "GB/s", "launch (µs)");
		printf("%-10s %12s %14.1f %10s\n", "init", "-", init * 1e6, "-");
		printf("%-10s %12s %14.1f %10s\n", "init+ctx", "-", whole * 1e6, "-");
	}
	size_t lat[] = {8, 128 << 10};
	for (int i = 0; i < 2; i++) {
		double t = latency(buf, lat[i], latIters);
		if (rank == 0) printf("%-10s %12zu %14.2f %10.3f %12.2f\n", "latency", lat[i], t * 1e6, lat[i] / t / 1e9, launchTime / launches * 1e6);
	}
	size_t bw[] = {(size_t)2 << 20, (size_t)32 << 20, (size_t)128 << 20, (size_t)512 << 20};
	for (int i = 0; i < 4; i++) {
		int iters = (int)(((size_t)8 << 30) / bw[i]);
		if (iters > 200) iters = 200;
		bandwidth(buf, bw[i], 3); /* warm up */
		double b = bandwidth(buf, bw[i], iters);
		if (rank == 0) printf("%-10s %12zu %14s %10.3f\n", "bandwidth", bw[i], "-", b / 1e9);
	}
	CHECK_CUDA(cudaFree(buf));
	for (int k = 0; k < ncomms; k++) ncclCommDestroy(comms[k]);
	MPI_Finalize();
	return 0;
}
