/*
 * coll.c: NCCL collectives written directly in C, the floor courier's
 * collectives on the NCCL backend are measured against. Any number of ranks
 * under mpirun, one GPU each (the local rank picks it: a rank whose local
 * rank has no GPU of its own stops with an error, two ranks never share
 * one); MPI only broadcasts the unique ID and gathers the times. One
 * blocking communicator of all ranks, float32 data, sum as the reduction.
 *
 * For each collective of -coll and each size of -sizes, one row:
 *
 *   NAME BYTES TIME_US ALGBW BUSBW
 *
 *   BYTES    what the size stands for (after the rounding below):
 *              allreduce      the buffer;
 *              allgather      the whole receive buffer (each rank gives
 *                             1/N of it);
 *              alltoall       the whole send buffer of one rank (1/N of it
 *                             to each rank, itself included);
 *              reducescatter  the whole send buffer (each rank gets 1/N of
 *                             the reduction);
 *              bcast          the buffer (from rank 0).
 *            Where a size is split N ways, each rank's share is rounded
 *            down to whole elements (at least one), and BYTES is N times
 *            that share: what was actually moved.
 *   TIME_US  microseconds per operation. By default every operation is
 *            issued and then waited for (cudaStreamSynchronize) before the
 *            next, what a blocking call gives its caller; with -nosync the
 *            operations of a figure go back to back and one synchronize
 *            ends it (the figure's time divided by their number). A figure
 *            is timed on every rank from a common start (MPI_Barrier, then
 *            a one-element allreduce waited for) and the slowest rank's
 *            time is the figure's; the row gives the median of -reps such
 *            figures.
 *   ALGBW    BYTES / TIME, in GB/s (1e9 bytes a second).
 *   BUSBW    ALGBW times what each rank has to move over its links for a
 *            given BYTES, with the best algorithm, so that the figure can
 *            be set against a link's speed whatever N is:
 *              allreduce      2(N-1)/N: the reduction of every part of the
 *                             buffer needs the other N-1 ranks' shares of
 *                             it brought to one place (a reduce-scatter)
 *                             and the N-1 reduced parts held elsewhere
 *                             brought back (an all-gather);
 *              allgather      (N-1)/N: a rank already has its own share and
 *                             must receive the other N-1;
 *              reducescatter  (N-1)/N: a rank must send out the N-1 parts
 *                             that others reduce;
 *              alltoall       (N-1)/N: of a rank's N chunks, only the one
 *                             for itself stays at home;
 *              bcast          1: every rank but the root receives the whole
 *                             buffer once (pipelined, each link carries it
 *                             once).
 *
 * alltoall is a group of sends and receives (ncclGroupStart, for each rank p
 * an ncclSend of the p-th chunk and an ncclRecv into the p-th chunk,
 * ncclGroupEnd), the form every NCCL release has.
 *
 * Each figure repeats the operation `iters` times: 5 operations warm up a
 * (collective, size) first, and from the time they took (the slowest rank's)
 * `iters` is chosen so that a figure lasts about 0.2 s, at least 5 and at
 * most 100000 (-iters forces it), as courier bench does. After the figures, the result is checked
 * once: the inputs filled with small whole numbers that depend on the rank
 * and the index (exact in float32, sums included), one operation, the
 * output copied back and compared on every rank with what it must be; a
 * mismatch stops every rank (MPI_Abort).
 *
 * Before the rows, rank 0 prints "init - T": ncclCommInitRank on rank 0,
 * in microseconds.
 *
 * Options:
 *   -coll LIST   collectives, comma-separated, in the order wanted
 *                (allreduce, allgather, alltoall, reducescatter, bcast;
 *                default allreduce,allgather,alltoall);
 *   -sizes LIST  sizes in bytes, comma-separated, each with an optional
 *                k, m or g (KiB, MiB, GiB; default 8,128k,2m,32m,128m,512m);
 *   -iters N     operations per figure, instead of about 0.2 s of them;
 *   -reps R      figures per row, the median reported (default 5);
 *   -nosync      operations back to back, one synchronize per figure.
 * The send and receive buffers are allocated once, for the largest need.
 *
 * Build and run on the GPU machine:
 *   mpicc -O2 -o coll coll.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcudart -lnccl
 *   mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 ./coll
 */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)
#define CHECK_NCCL(x) do { ncclResult_t r = (x); if (r != ncclSuccess) { \
	fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, ncclGetErrorString(r)); MPI_Abort(MPI_COMM_WORLD, 1); } } while (0)

enum { ALLREDUCE, ALLGATHER, ALLTOALL, REDUCESCATTER, BCAST, NCOLLS };
static const char *collNames[NCOLLS] = {"allreduce", "allgather", "alltoall", "reducescatter", "bcast"};

static int rank, nranks;
static ncclComm_t comm;
static cudaStream_t stream;
static float *sendDev, *recvDev, *tinyDev;
static float *sendHost, *recvHost;

/* A shape is one (collective, size): the count passed to NCCL, the elements
 * of the send and receive buffers it uses, and the bytes it stands for. */
struct shape {
	int coll;
	size_t count, sendn, recvn, bytes;
};

static struct shape shapeOf(int coll, size_t bytes) {
	struct shape s = {coll, 0, 0, 0, 0};
	size_t n = (size_t)nranks;
	size_t whole = bytes / sizeof(float), share = whole / n;
	if (whole < 1) whole = 1;
	if (share < 1) share = 1;
	switch (coll) {
	case ALLREDUCE:
	case BCAST:
		s.count = s.sendn = s.recvn = whole;
		s.bytes = whole * sizeof(float);
		break;
	case ALLGATHER: /* count: what each rank gives */
		s.count = s.sendn = share;
		s.recvn = share * n;
		s.bytes = share * n * sizeof(float);
		break;
	case ALLTOALL: /* count: one chunk, to or from one rank */
		s.count = share;
		s.sendn = s.recvn = share * n;
		s.bytes = share * n * sizeof(float);
		break;
	case REDUCESCATTER: /* count: what each rank gets */
		s.count = s.recvn = share;
		s.sendn = share * n;
		s.bytes = share * n * sizeof(float);
		break;
	}
	return s;
}

static double busFactor(int coll) {
	double n = nranks;
	switch (coll) {
	case ALLREDUCE: return 2 * (n - 1) / n;
	case BCAST: return 1;
	default: return (n - 1) / n;
	}
}

/* issue queues one operation of shape s on the stream. */
static void issue(const struct shape *s) {
	switch (s->coll) {
	case ALLREDUCE:
		CHECK_NCCL(ncclAllReduce(sendDev, recvDev, s->count, ncclFloat, ncclSum, comm, stream));
		break;
	case ALLGATHER:
		CHECK_NCCL(ncclAllGather(sendDev, recvDev, s->count, ncclFloat, comm, stream));
		break;
	case ALLTOALL:
		CHECK_NCCL(ncclGroupStart());
		for (int p = 0; p < nranks; p++) {
			CHECK_NCCL(ncclSend(sendDev + (size_t)p * s->count, s->count, ncclFloat, p, comm, stream));
			CHECK_NCCL(ncclRecv(recvDev + (size_t)p * s->count, s->count, ncclFloat, p, comm, stream));
		}
		CHECK_NCCL(ncclGroupEnd());
		break;
	case REDUCESCATTER:
		CHECK_NCCL(ncclReduceScatter(sendDev, recvDev, s->count, ncclFloat, ncclSum, comm, stream));
		break;
	case BCAST:
		CHECK_NCCL(ncclBroadcast(sendDev, recvDev, s->count, ncclFloat, 0, comm, stream));
		break;
	}
}

/* run issues k operations, each waited for unless nosync (then one wait at
 * the end), and gives the slowest rank's seconds per operation. */
static double run(const struct shape *s, int k, int nosync) {
	double t0 = MPI_Wtime();
	for (int i = 0; i < k; i++) {
		issue(s);
		if (!nosync) CHECK_CUDA(cudaStreamSynchronize(stream));
	}
	if (nosync) CHECK_CUDA(cudaStreamSynchronize(stream));
	double t = (MPI_Wtime() - t0) / k, worst;
	MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return worst;
}

/* together brings the ranks to a common start: hosts, then GPUs. */
static void together(void) {
	MPI_Barrier(MPI_COMM_WORLD);
	CHECK_NCCL(ncclAllReduce(tinyDev, tinyDev, 1, ncclFloat, ncclSum, comm, stream));
	CHECK_CUDA(cudaStreamSynchronize(stream));
}

/* pattern is the input of rank r at index i: a whole number in [0, 255],
 * so that sums over any number of ranks the machine can hold stay exact. */
static float pattern(int r, size_t i) {
	uint64_t h = (uint64_t)i * 0x9E3779B1u + (uint64_t)(r + 1) * 0x85EBCA77u;
	return (float)((h >> 13) & 255);
}

/* expected is element i of rank `rank`'s output for shape s. */
static float expected(const struct shape *s, size_t i) {
	size_t c = s->count;
	float sum = 0;
	switch (s->coll) {
	case ALLREDUCE:
		for (int q = 0; q < nranks; q++) sum += pattern(q, i);
		return sum;
	case ALLGATHER: /* chunk q of the output is rank q's input */
		return pattern((int)(i / c), i % c);
	case ALLTOALL: /* chunk q is what rank q sent to this rank */
		return pattern((int)(i / c), (size_t)rank * c + i % c);
	case REDUCESCATTER: /* this rank's chunk of the sum */
		for (int q = 0; q < nranks; q++) sum += pattern(q, (size_t)rank * c + i);
		return sum;
	case BCAST:
		return pattern(0, i);
	}
	return 0;
}

/* check runs one operation of shape s on known inputs and stops every rank
 * if any output element of any rank is not what it must be. */
static void check(const struct shape *s) {
	for (size_t i = 0; i < s->sendn; i++) sendHost[i] = pattern(rank, i);
	CHECK_CUDA(cudaMemcpy(sendDev, sendHost, s->sendn * sizeof(float), cudaMemcpyHostToDevice));
	/* all bits set: NaN, so an element left unwritten cannot pass */
	CHECK_CUDA(cudaMemset(recvDev, 0xff, s->recvn * sizeof(float)));
	CHECK_CUDA(cudaDeviceSynchronize());
	MPI_Barrier(MPI_COMM_WORLD);
	issue(s);
	CHECK_CUDA(cudaStreamSynchronize(stream));
	CHECK_CUDA(cudaMemcpy(recvHost, recvDev, s->recvn * sizeof(float), cudaMemcpyDeviceToHost));
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < s->recvn; i++) {
		if (recvHost[i] != expected(s, i)) {
			if (bad++ == 0) first = i;
		}
	}
	if (bad > 0) {
		fprintf(stderr, "coll: rank %d: %s of %zu bytes: %zu of %zu elements wrong, the first at %zu: %g, want %g\n", rank,
			collNames[s->coll], s->bytes, bad, s->recvn, first, (double)recvHost[first], (double)expected(s, first));
		MPI_Abort(MPI_COMM_WORLD, 3);
	}
	/* every rank done checking before the next figures start */
	MPI_Barrier(MPI_COMM_WORLD);
}

static int cmpDouble(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n) {
	qsort(v, (size_t)n, sizeof *v, cmpDouble);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char usage[] =
	"usage: coll [-coll LIST] [-sizes LIST] [-iters N] [-reps R] [-nosync]\n"
	"  -coll LIST   collectives, comma-separated: allreduce, allgather, alltoall,\n"
	"               reducescatter, bcast (default allreduce,allgather,alltoall)\n"
	"  -sizes LIST  bytes, comma-separated, each with an optional k, m or g suffix\n"
	"               (KiB, MiB, GiB; default 8,128k,2m,32m,128m,512m)\n"
	"  -iters N     operations per figure (default: about 0.2 s of them, 5 to 100000)\n"
	"  -reps R      figures per row, the median reported (default 5)\n"
	"  -nosync      operations back to back, one synchronize per figure (default:\n"
	"               each operation synchronized)\n";

/* parseSize reads "512", "128k", "2m" or "1g"; 0 when it is not one. */
static size_t parseSize(const char *s) {
	char *end;
	if (*s < '0' || *s > '9') return 0;
	unsigned long long v = strtoull(s, &end, 10);
	int shift = 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	}
	if (*end != '\0' || v == 0 || v > (1ULL << 40) >> shift) return 0;
	return (size_t)(v << shift);
}

/* parsePositive reads a whole number from 1 to 1000000000; 0 when not. */
static int parsePositive(const char *s) {
	char *end;
	if (*s < '0' || *s > '9') return 0;
	long v = strtol(s, &end, 10);
	if (*end != '\0' || v < 1 || v > 1000000000L) return 0;
	return (int)v;
}

/* splitList calls add on each comma-separated item of list; 0 when add
 * refuses one or an item is empty. */
static int splitList(const char *list, int (*add)(const char *)) {
	char *copy = strdup(list), *save = NULL;
	int ok = copy != NULL && *list != '\0' && list[strlen(list) - 1] != ',' && strstr(list, ",,") == NULL && list[0] != ',';
	for (char *tok = ok ? strtok_r(copy, ",", &save) : NULL; ok && tok; tok = strtok_r(NULL, ",", &save)) ok = add(tok);
	free(copy);
	return ok;
}

static int colls[64], ncolls;
static size_t sizes[64];
static int nsizes;

static int addColl(const char *name) {
	if (ncolls == 64) return 0;
	for (int c = 0; c < NCOLLS; c++)
		if (strcmp(name, collNames[c]) == 0) {
			colls[ncolls++] = c;
			return 1;
		}
	return 0;
}

static int addSize(const char *text) {
	size_t b = parseSize(text);
	if (b == 0 || nsizes == 64) return 0;
	sizes[nsizes++] = b;
	return 1;
}

/* badUsage ends every rank (each parsed the same arguments) with status 2. */
static int badUsage(const char *why, const char *arg) {
	if (rank == 0) fprintf(stderr, "coll: %s%s\n%s", why, arg, usage);
	MPI_Finalize();
	return 2;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	const char *collList = "allreduce,allgather,alltoall", *sizeList = "8,128k,2m,32m,128m,512m";
	int forcedIters = 0, reps = 5, nosync = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int hasValue = i + 1 < argc;
		if (strcmp(a, "-nosync") == 0) nosync = 1;
		else if (strcmp(a, "-coll") == 0 && hasValue) collList = argv[++i];
		else if (strcmp(a, "-sizes") == 0 && hasValue) sizeList = argv[++i];
		else if (strcmp(a, "-iters") == 0 && hasValue) {
			if (!(forcedIters = parsePositive(argv[++i]))) return badUsage("-iters wants a positive number, not ", argv[i]);
		} else if (strcmp(a, "-reps") == 0 && hasValue) {
			if (!(reps = parsePositive(argv[++i]))) return badUsage("-reps wants a positive number, not ", argv[i]);
		} else if (strcmp(a, "-h") == 0 || strcmp(a, "-help") == 0 || strcmp(a, "--help") == 0) {
			if (rank == 0) fputs(usage, stdout);
			MPI_Finalize();
			return 0;
		} else if (a[0] == '-' && !hasValue && (strcmp(a, "-coll") == 0 || strcmp(a, "-sizes") == 0 || strcmp(a, "-iters") == 0 || strcmp(a, "-reps") == 0)) {
			return badUsage("missing value after ", a);
		} else {
			return badUsage("unknown option ", a);
		}
	}
	if (!splitList(collList, addColl)) return badUsage("-coll: want a comma-separated list of allreduce, allgather, alltoall, reducescatter, bcast, not ", collList);
	if (!splitList(sizeList, addSize)) return badUsage("-sizes: want a comma-separated list of byte counts (k, m, g suffixes; from 1 B to 1 TiB), not ", sizeList);

	/* One GPU per rank, never shared. */
	const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
	int local = lr ? atoi(lr) : rank, ndev = 0;
	CHECK_CUDA(cudaGetDeviceCount(&ndev));
	if (local < 0 || local >= ndev) {
		fprintf(stderr, "coll: rank %d is local rank %d on its host, which has %d GPU(s): at most one rank per GPU\n", rank, local, ndev);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	CHECK_CUDA(cudaSetDevice(local));
	CHECK_CUDA(cudaFree(0));
	CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

	ncclUniqueId id;
	if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&id));
	MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	CHECK_NCCL(ncclCommInitRank(&comm, nranks, id, rank));
	double init = MPI_Wtime() - t0;

	/* The buffers, once, for the largest need. */
	size_t maxSend = 1, maxRecv = 1;
	for (int c = 0; c < ncolls; c++)
		for (int j = 0; j < nsizes; j++) {
			struct shape s = shapeOf(colls[c], sizes[j]);
			if (s.sendn > maxSend) maxSend = s.sendn;
			if (s.recvn > maxRecv) maxRecv = s.recvn;
		}
	CHECK_CUDA(cudaMalloc((void **)&sendDev, maxSend * sizeof(float)));
	CHECK_CUDA(cudaMalloc((void **)&recvDev, maxRecv * sizeof(float)));
	CHECK_CUDA(cudaMalloc((void **)&tinyDev, sizeof(float)));
	CHECK_CUDA(cudaMemset(sendDev, 0, maxSend * sizeof(float)));
	CHECK_CUDA(cudaMemset(recvDev, 0, maxRecv * sizeof(float)));
	CHECK_CUDA(cudaMemset(tinyDev, 0, sizeof(float)));
	CHECK_CUDA(cudaDeviceSynchronize());
	sendHost = malloc(maxSend * sizeof(float));
	recvHost = malloc(maxRecv * sizeof(float));
	if (!sendHost || !recvHost) {
		fprintf(stderr, "coll: rank %d: no host memory for %zu + %zu bytes\n", rank, maxSend * sizeof(float), maxRecv * sizeof(float));
		MPI_Abort(MPI_COMM_WORLD, 1);
	}

	if (rank == 0) {
		int v;
		CHECK_NCCL(ncclGetVersion(&v));
		printf("# C + NCCL %d, %d rank%s, blocking communicator, float32 sum, %s; time: the slowest rank's, median of %d figure%s\n", v, nranks,
		       nranks == 1 ? "" : "s", nosync ? "operations back to back, one synchronize per figure" : "each operation synchronized", reps, reps == 1 ? "" : "s");
		printf("# %-11s %12s %12s %12s %12s\n", "name", "bytes", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
		printf("%-13s %12s %12.1f\n", "init", "-", init * 1e6);
		fflush(stdout);
	}

	double *figs = malloc((size_t)reps * sizeof *figs);
	if (!figs) MPI_Abort(MPI_COMM_WORLD, 1);
	for (int c = 0; c < ncolls; c++)
		for (int j = 0; j < nsizes; j++) {
			struct shape s = shapeOf(colls[c], sizes[j]);
			/* Warm up: the first operation alone (connections, if any, are
			 * made there), then 4 timed as the figures will be. */
			together();
			run(&s, 1, 0);
			double w = run(&s, 4, nosync);
			int iters = forcedIters;
			if (!iters) {
				double k = w > 0 ? 0.2 / w : 100000;
				iters = k < 5 ? 5 : k > 100000 ? 100000 : (int)k;
			}
			for (int r = 0; r < reps; r++) {
				together();
				figs[r] = run(&s, iters, nosync);
			}
			check(&s);
			if (rank == 0) {
				double t = median(figs, reps);
				double algbw = (double)s.bytes / t / 1e9;
				printf("%-13s %12zu %12.2f %12.2f %12.2f\n", collNames[s.coll], s.bytes, t * 1e6, algbw, algbw * busFactor(s.coll));
				fflush(stdout);
			}
		}

	free(figs);
	free(sendHost);
	free(recvHost);
	CHECK_CUDA(cudaFree(sendDev));
	CHECK_CUDA(cudaFree(recvDev));
	CHECK_CUDA(cudaFree(tinyDev));
	CHECK_NCCL(ncclCommDestroy(comm));
	CHECK_CUDA(cudaStreamDestroy(stream));
	MPI_Finalize();
	return 0;
}
