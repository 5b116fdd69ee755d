/*
 * ipc.c: the floor of a copy between two processes through CUDA IPC, the
 * path courier's nccl backend takes between ranks that share a GPU (and,
 * above a threshold, between GPUs of one host). Two ranks under mpirun;
 * MPI only carries the memory handles and the tokens.
 *
 * Each rank allocates a buffer of the largest size and exports it
 * (cudaIpcGetMemHandle); each opens the other's (cudaIpcOpenMemHandle, the
 * time of which is printed: "open"). Then, per size:
 *
 *   latency   - a ping-pong: rank 0 copies the message into rank 1's
 *               buffer (cudaMemcpyAsync on its stream, then
 *               cudaStreamSynchronize) and tells rank 1 it is there (a
 *               token); rank 1 copies it back the same way; one way = half
 *               the round trip;
 *   bandwidth - rank 0 copies `iters` messages back to back into rank 1's
 *               buffer on one stream, synchronizes once, and sends one
 *               token; bytes × iters / time (what a stream of sends moves);
 *   both      - both ranks copy into each other's buffer at once, each on
 *               its stream (per direction).
 *
 * The token is a word in host memory both processes map (-token shm,
 * the default: a POSIX shared-memory file, polled), or an MPI message
 * (-token mpi).
 *
 * Variants of the latency, to see what the parts of a message cost:
 * -pull (each rank copies the other's buffer into its own after taking
 * the token, as courier's receiver does, instead of writing into the
 * other's), and -wait poll (a copy is waited for by an event recorded
 * after it and polled, yielding the CPU between looks, as courier does,
 * instead of cudaStreamSynchronize).
 *
 * Options: -dev D (both ranks on GPU D; default: the local rank's GPU
 * modulo the GPU count, so two ranks on a 1-GPU machine share it);
 * -lat SIZES, -bw SIZES (bytes, with k or m suffixes); -iters N; -pull;
 * -wait sync|poll.
 *
 * Build and run on the GPU machine:
 *   mpicc -O2 -o ipc bench/cuda/ipc.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -lrt
 *   mpirun --allow-run-as-root -np 2 ./ipc
 */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                          \
	do {                                                                               \
		cudaError_t e_ = (x);                                                          \
		if (e_ != cudaSuccess) {                                                       \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
			MPI_Abort(MPI_COMM_WORLD, 1);                                              \
		}                                                                              \
	} while (0)

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int rank, use_mpi;
static volatile uint64_t *words; // [0]: rank 0's token to rank 1; [8]: rank 1's to rank 0

/* give tells the other rank that step n is done; take waits for its n. */
static void give(uint64_t n) {
	if (use_mpi) {
		MPI_Send(&n, 1, MPI_UINT64_T, 1 - rank, 7, MPI_COMM_WORLD);
		return;
	}
	__atomic_store_n(&words[rank * 8], n, __ATOMIC_RELEASE);
}

static void take(uint64_t n) {
	if (use_mpi) {
		uint64_t got;
		MPI_Recv(&got, 1, MPI_UINT64_T, 1 - rank, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		return;
	}
	while (__atomic_load_n(&words[(1 - rank) * 8], __ATOMIC_ACQUIRE) < n) {
	}
}

static uint64_t step;
static int poll_wait;
static cudaEvent_t mark;

/* settle waits for the work queued on s: cudaStreamSynchronize, or (-wait
 * poll) an event recorded after it, polled. */
static void settle(cudaStream_t s) {
	if (!poll_wait) {
		CK(cudaStreamSynchronize(s));
		return;
	}
	CK(cudaEventRecord(mark, s));
	cudaError_t e;
	while ((e = cudaEventQuery(mark)) == cudaErrorNotReady) {
		sched_yield();
	}
	CK(e);
}

static size_t parse_size(const char *s) {
	char *end;
	double v = strtod(s, &end);
	if (*end == 'k' || *end == 'K') v *= 1024;
	if (*end == 'm' || *end == 'M') v *= 1024 * 1024;
	if (*end == 'g' || *end == 'G') v *= 1024 * 1024 * 1024;
	return (size_t)v;
}

static int parse_list(const char *s, size_t *out, int max) {
	int n = 0;
	char *copy = strdup(s), *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok != NULL && n < max; tok = strtok_r(NULL, ",", &save)) {
		out[n++] = parse_size(tok);
	}
	free(copy);
	return n;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (rank == 0) fprintf(stderr, "ipc: run with 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	size_t lat[32] = {8, 4096, 131072}, bw[32] = {2 << 20, 32 << 20, 128 << 20, 512 << 20};
	int nlat = 3, nbw = 4, iters = 0, dev = -1, pull = 0;
	const char *token = "shm";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-lat") && i + 1 < argc) nlat = parse_list(argv[++i], lat, 32);
		else if (!strcmp(argv[i], "-bw") && i + 1 < argc) nbw = parse_list(argv[++i], bw, 32);
		else if (!strcmp(argv[i], "-iters") && i + 1 < argc) iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-dev") && i + 1 < argc) dev = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-token") && i + 1 < argc) token = argv[++i];
		else if (!strcmp(argv[i], "-pull")) pull = 1;
		else if (!strcmp(argv[i], "-wait") && i + 1 < argc && (!strcmp(argv[i + 1], "sync") || !strcmp(argv[i + 1], "poll")))
			poll_wait = !strcmp(argv[++i], "poll");
		else {
			if (rank == 0) fprintf(stderr, "ipc: unknown argument %s\n", argv[i]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
	}
	use_mpi = !strcmp(token, "mpi");
	int ngpu = 0;
	CK(cudaGetDeviceCount(&ngpu));
	if (dev < 0) {
		const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
		dev = (lr ? atoi(lr) : rank) % ngpu;
	}
	CK(cudaSetDevice(dev));

	/* The token words: a shared-memory file rank 0 makes and rank 1 opens. */
	char name[64];
	snprintf(name, sizeof name, "/courier-ipc-bench-%d", (int)getppid());
	if (rank == 0) {
		int fd = shm_open(name, O_CREAT | O_RDWR | O_TRUNC, 0600);
		if (fd < 0 || ftruncate(fd, 4096) != 0) MPI_Abort(MPI_COMM_WORLD, 3);
		close(fd);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	int fd = shm_open(name, O_RDWR, 0600);
	if (fd < 0) MPI_Abort(MPI_COMM_WORLD, 3);
	words = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0) shm_unlink(name);

	size_t maxb = 8;
	for (int i = 0; i < nlat; i++) maxb = lat[i] > maxb ? lat[i] : maxb;
	for (int i = 0; i < nbw; i++) maxb = bw[i] > maxb ? bw[i] : maxb;
	char *mine;
	CK(cudaMalloc((void **)&mine, maxb));
	CK(cudaMemset(mine, rank, maxb));
	cudaIpcMemHandle_t h, theirs_h;
	CK(cudaIpcGetMemHandle(&h, mine));
	MPI_Sendrecv(&h, sizeof h, MPI_BYTE, 1 - rank, 1, &theirs_h, sizeof theirs_h, MPI_BYTE, 1 - rank, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	char *theirs;
	double t0 = now();
	CK(cudaIpcOpenMemHandle((void **)&theirs, theirs_h, cudaIpcMemLazyEnablePeerAccess));
	double open_us = (now() - t0) * 1e6;
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming));
	if (rank == 0) {
		printf("# ipc.c: 2 ranks, GPU %d and the other rank's GPU via IPC, %d GPU(s) here, token %s, latency by %s, waits by %s\n", dev, ngpu, token,
		       pull ? "pull" : "push", poll_wait ? "a polled event" : "cudaStreamSynchronize");
		printf("%-10s %12s %14s %12s\n", "kind", "bytes", "latency (us)", "GB/s");
		printf("%-10s %12s %14.1f %12s\n", "open", "-", open_us, "-");
	}
	MPI_Barrier(MPI_COMM_WORLD);

	for (int i = 0; i < nlat; i++) {
		size_t n = lat[i];
		int it = iters > 0 ? iters : 2000;
		for (int warm = 0; warm < 2; warm++) {
			int reps = warm == 0 ? 50 : it;
			MPI_Barrier(MPI_COMM_WORLD);
			double t = now();
			for (int k = 0; k < reps; k++) {
				if (pull && rank == 0) {
					give(++step);
					take(step);
					CK(cudaMemcpyAsync(mine, theirs, n, cudaMemcpyDeviceToDevice, s));
					settle(s);
				} else if (pull) {
					take(++step);
					CK(cudaMemcpyAsync(mine, theirs, n, cudaMemcpyDeviceToDevice, s));
					settle(s);
					give(step);
				} else if (rank == 0) {
					CK(cudaMemcpyAsync(theirs, mine, n, cudaMemcpyDeviceToDevice, s));
					settle(s);
					give(++step);
					take(step);
				} else {
					take(++step);
					CK(cudaMemcpyAsync(theirs, mine, n, cudaMemcpyDeviceToDevice, s));
					settle(s);
					give(step);
				}
			}
			double us = (now() - t) * 1e6 / reps / 2;
			if (warm == 1 && rank == 0) printf("%-10s %12zu %14.2f %12.3f\n", "latency", n, us, n / us / 1e3);
		}
	}
	for (int i = 0; i < nbw; i++) {
		size_t n = bw[i];
		int it = iters > 0 ? iters : (int)(((size_t)8 << 30) / n);
		it = it < 5 ? 5 : it > 2000 ? 2000 : it;
		for (int both = 0; both < 2; both++) {
			for (int warm = 0; warm < 2; warm++) {
				int reps = warm == 0 ? 2 : it;
				MPI_Barrier(MPI_COMM_WORLD);
				double t = now();
				if (rank == 0 || both) {
					for (int k = 0; k < reps; k++) {
						CK(cudaMemcpyAsync(theirs, mine, n, cudaMemcpyDeviceToDevice, s));
					}
					CK(cudaStreamSynchronize(s));
				}
				give(++step);
				take(step);
				double sec = now() - t, worst;
				MPI_Allreduce(&sec, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
				if (warm == 1 && rank == 0) {
					printf("%-10s %12zu %14s %12.1f\n", both ? "both" : "bandwidth", n, "-", (double)n * reps / worst / 1e9);
				}
			}
		}
	}
	CK(cudaEventDestroy(mark));
	CK(cudaStreamDestroy(s));
	CK(cudaIpcCloseMemHandle(theirs));
	MPI_Barrier(MPI_COMM_WORLD);
	CK(cudaFree(mine));
	munmap((void *)words, 4096);
	MPI_Finalize();
	return 0;
}
