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
 *   -group        every latency operation goes as courier's NCCL backend
 *                 issues it: ncclGroupStart, the send or receive,
 *                 ncclGroupEnd, an event recorded and cudaEventQuery
 *                 polled (a spin, no sleep);
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
static int nonblocking, grouped, twocomms;
static cudaEvent_t event;
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

/* op sends or receives n bytes and waits for it. */
static void op(int recv, char *buf, size_t n, int peer) {
	int k = which(recv ? peer : rank);
	comm = comms[k];
	cudaStream_t stream = streams[k];
	double t0 = now();
	if (!grouped) {
		if (recv) CHECK_NCCL(ncclRecv(buf, n, ncclUint8, peer, comm, stream));
		else CHECK_NCCL(ncclSend(buf, n, ncclUint8, peer, comm, stream));
		launchTime += now() - t0;
		launches++;
		CHECK_CUDA(cudaStreamSynchronize(stream));
		return;
	}
	CHECK_NCCL(ncclGroupStart());
	ncclResult_t r = recv ? ncclRecv(buf, n, ncclUint8, peer, comm, stream) : ncclSend(buf, n, ncclUint8, peer, comm, stream);
	if (r != ncclSuccess && r != ncclInProgress) CHECK_NCCL(r);
	settle(ncclGroupEnd());
	launchTime += now() - t0;
	launches++;
	CHECK_CUDA(cudaEventRecord(event, stream));
	cudaError_t e;
	while ((e = cudaEventQuery(event)) == cudaErrorNotReady) {
	}
	CHECK_CUDA(e);
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
		ncclResult_t r;
		if (rank == 0) r = ncclSend(buf, n, ncclUint8, peer, comm, stream);
		else r = ncclRecv(buf, n, ncclUint8, peer, comm, stream);
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
		else {
			if (rank == 0) fprintf(stderr, "p2p: unknown option %s (options: -nonblocking, -group, -twocomms)\n", argv[i]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
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
	CHECK_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
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
		printf("# C + NCCL %d, 2 ranks, %s communicator%s%s\n", v, nonblocking ? "non-blocking" : "blocking",
		       twocomms ? ", one per direction" : "", grouped ? ", grouped operations polled on events" : "");
		printf("%-10s %12s %14s %10s %12s\n", "kind", "bytes", "latency (µs)", "GB/s", "launch (µs)");
		printf("%-10s %12s %14.1f %10s\n", "init", "-", init * 1e6, "-");
		printf("%-10s %12s %14.1f %10s\n", "init+ctx", "-", whole * 1e6, "-");
	}
	size_t lat[] = {8, 128 << 10};
	for (int i = 0; i < 2; i++) {
		double t = latency(buf, lat[i], 2000);
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
