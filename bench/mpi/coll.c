/*
 * coll.c: the collectives `courier bench -coll` measures, written against
 * MPI on host memory, so both can run side by side (bench/host-compare.sh):
 * float32 elements, MPI_SUM, every rank of MPI_COMM_WORLD taking part,
 * each call blocking.
 *
 * For each collective of -coll and each size of -sizes, one row:
 *
 *   NAME BYTES TIME_US ALGBW BUSBW
 *
 *   BYTES    what the size stands for, as in courier bench: allreduce's
 *            and bcast's buffer (MPI_Allreduce, MPI_Bcast from rank 0),
 *            allgather's whole receive buffer (MPI_Allgather; each rank
 *            gives 1/N of it), alltoall's whole send buffer of one rank
 *            (MPI_Alltoall; 1/N to each rank), reducescatter's whole send
 *            buffer (MPI_Reduce_scatter_block; each rank gets 1/N of the
 *            sum). A size is first cut to whole elements; one split N ways
 *            is then cut to a whole number of elements per rank (at least
 *            one), and BYTES is what was actually used.
 *   TIME_US  microseconds per call, as courier bench times them: one call,
 *            then four more timed to pick how many calls make a figure of
 *            about 0.2 s (the slowest rank's pace; 5 to 100000 calls); each
 *            figure starts together (MPI_Barrier, then a one-element
 *            MPI_Allreduce) and is timed on every rank, the slowest
 *            counting; the row gives the median of -reps figures (for an
 *            even count the upper middle one, as courier does).
 *   ALGBW    BYTES / TIME, in GB/s (1e9 bytes a second).
 *   BUSBW    ALGBW times 2(N-1)/N for allreduce, 1 for bcast, (N-1)/N for
 *            the others (as nccl-tests and courier bench count it).
 *
 * Options: see usage below; -json writes the run as courier bench -json
 * does (schema courier-bench/1, see bench.h), for courier plot.
 *
 *   mpicc -O2 -o coll coll.c && mpirun -np 4 --mca btl self,vader ./coll
 */
#include "bench.h"

#define TARGET 0.2 /* seconds per figure */
#define MAX_CALLS 100000 /* calls per figure at most */
#define MAX_SIZE ((size_t)1 << 34)

enum { ALLREDUCE, ALLGATHER, ALLTOALL, REDUCESCATTER, BCAST, NCOLLS };
static const char *collNames[NCOLLS] = {"allreduce", "allgather", "alltoall", "reducescatter", "bcast"};

static int rank, nranks;
static float *sendBuf, *recvBuf;

/* call runs one collective of n elements (the size its row names). */
static void call(int coll, int n) {
	int each = n / nranks;
	switch (coll) {
	case ALLREDUCE:
		MPI_Allreduce(sendBuf, recvBuf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		break;
	case ALLGATHER:
		MPI_Allgather(sendBuf, each, MPI_FLOAT, recvBuf, each, MPI_FLOAT, MPI_COMM_WORLD);
		break;
	case ALLTOALL:
		MPI_Alltoall(sendBuf, each, MPI_FLOAT, recvBuf, each, MPI_FLOAT, MPI_COMM_WORLD);
		break;
	case REDUCESCATTER:
		MPI_Reduce_scatter_block(sendBuf, recvBuf, each, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		break;
	case BCAST:
		MPI_Bcast(sendBuf, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
		break;
	}
}

/* elements is the element count of a size for a collective. */
static int elements(int coll, size_t bytes) {
	size_t n = bytes / sizeof(float);
	if (coll != ALLREDUCE && coll != BCAST) {
		size_t share = n / (size_t)nranks;
		n = (share < 1 ? 1 : share) * (size_t)nranks;
	}
	return n < 1 ? 1 : (int)n;
}

static double busFactor(int coll) {
	double n = nranks;
	switch (coll) {
	case ALLREDUCE: return 2 * (n - 1) / n;
	case BCAST: return 1;
	default: return (n - 1) / n;
	}
}

static int cmpDouble(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* measure gives the seconds per call, the median figure. */
static double measure(int coll, int n, int reps, double *figs) {
	call(coll, n);
	double start = MPI_Wtime();
	for (int i = 0; i < 4; i++) call(coll, n);
	double per = (MPI_Wtime() - start) / 4, worst;
	MPI_Allreduce(&per, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	double want = TARGET / (worst > 1e-9 ? worst : 1e-9);
	int iters = want < 5 ? 5 : want > MAX_CALLS ? MAX_CALLS : (int)want;
	for (int r = 0; r < reps; r++) {
		float sync = 1;
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Allreduce(MPI_IN_PLACE, &sync, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		start = MPI_Wtime();
		for (int i = 0; i < iters; i++) call(coll, n);
		double took = MPI_Wtime() - start;
		MPI_Allreduce(&took, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		figs[r] = worst / iters;
	}
	qsort(figs, (size_t)reps, sizeof *figs, cmpDouble);
	return figs[reps / 2];
}

static const char usage[] =
	"usage: coll [-coll LIST] [-sizes SIZES] [-reps N] [-json FILE] [-label TEXT] [-transport NAME]\n"
	"  -coll LIST      collectives, comma-separated, in the order wanted: allreduce,\n"
	"                  allgather, alltoall, reducescatter, bcast\n"
	"                  (default allreduce,bcast,allgather,alltoall)\n"
	"  -sizes SIZES    bytes per call, comma-separated, each with an optional k, m\n"
	"                  or g (default 8,128k,2m,32m,128m,512m, as courier bench)\n"
	"  -reps N         figures per row, the median printed (default 3)\n"
	"  -json FILE      also write the run as JSON (schema courier-bench/1) to FILE;\n"
	"                  - writes it to standard output instead of the table\n"
	"  -label TEXT     the run's name in the JSON (default: the MPI library and\n"
	"                  the transport)\n"
	"  -transport NAME the transport to record in the JSON (default: OMPI_MCA_btl,\n"
	"                  else UCX_TLS, from the environment)\n";

#define MAXLIST 64
static int colls[MAXLIST], ncolls;
static size_t sizes[MAXLIST];
static int nsizes;

static int addColl(const char *name) {
	if (ncolls == MAXLIST) return 0;
	for (int c = 0; c < NCOLLS; c++)
		if (strcmp(name, collNames[c]) == 0) {
			colls[ncolls++] = c;
			return 1;
		}
	return 0;
}

static int addSize(const char *text) {
	size_t b = parseSize(text, MAX_SIZE);
	if (b == 0 || nsizes == MAXLIST) return 0;
	sizes[nsizes++] = b;
	return 1;
}

static int badUsage(const char *why, const char *arg) {
	if (rank == 0) fprintf(stderr, "coll: %s%s\n%s", why, arg, usage);
	MPI_Finalize();
	return 2;
}

int main(int argc, char **argv) {
	struct runHeader h;
	startHeader(&h, "coll.c", argc, argv);
	double t0 = wallSeconds();
	MPI_Init(&argc, &argv);
	h.initMicros = (wallSeconds() - t0) * 1e6;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	h.ranks = nranks;
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *collList = "allreduce,bcast,allgather,alltoall", *sizeList = "8,128k,2m,32m,128m,512m";
	const char *jsonPath = NULL, *label = NULL;
	int reps = 3;
	h.transport = defaultTransport();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "-help") == 0 || strcmp(a, "--help") == 0) {
			if (rank == 0) fputs(usage, stdout);
			MPI_Finalize();
			return 0;
		} else if (i + 1 >= argc) {
			return badUsage("unknown option or missing value: ", a);
		} else if (strcmp(a, "-coll") == 0) collList = argv[++i];
		else if (strcmp(a, "-sizes") == 0) sizeList = argv[++i];
		else if (strcmp(a, "-json") == 0) jsonPath = argv[++i];
		else if (strcmp(a, "-label") == 0) label = argv[++i];
		else if (strcmp(a, "-transport") == 0) h.transport = argv[++i];
		else if (strcmp(a, "-reps") == 0) {
			if (!(reps = parsePositive(argv[++i]))) return badUsage("-reps wants a positive number, not ", argv[i]);
		} else {
			return badUsage("unknown option ", a);
		}
	}
	if (!splitList(collList, addColl)) return badUsage("-coll: want a comma-separated list of allreduce, allgather, alltoall, reducescatter, bcast, not ", collList);
	if (!splitList(sizeList, addSize)) return badUsage("-sizes: want comma-separated byte counts (k, m, g suffixes; 1 B to 16 GiB), not ", sizeList);

	char name[128], defaultLabel[256];
	mpiLibrary(&h, name, sizeof name);
	snprintf(defaultLabel, sizeof defaultLabel, "%s%s%s", name, *h.transport ? " " : "", h.transport);
	h.label = label ? label : defaultLabel;
	h.reps = reps;

	size_t largest = 4 * (size_t)nranks;
	for (int s = 0; s < nsizes; s++) if (sizes[s] > largest) largest = sizes[s];
	size_t n = largest / sizeof(float);
	if (n > 0x7fffffff) return badUsage("a size beyond 2^31-1 elements: ", sizeList);
	sendBuf = calloc(n, sizeof(float));
	recvBuf = calloc(n, sizeof(float));
	double *figs = malloc((size_t)reps * sizeof *figs);
	double *times = malloc((size_t)ncolls * (size_t)nsizes * sizeof *times);
	int *counts = malloc((size_t)ncolls * (size_t)nsizes * sizeof *counts);
	if (!sendBuf || !recvBuf || !figs || !times || !counts) {
		fprintf(stderr, "coll: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	FILE *table = jsonPath && strcmp(jsonPath, "-") == 0 ? NULL : stdout;
	if (rank == 0 && table) {
		fprintf(table, "# MPI coll, %s, %d ranks, host memory, float32 sum, each operation waited for; time: the slowest rank's, median of %d figures\n",
			defaultLabel, nranks, reps);
		fprintf(table, "# %-11s %12s %12s %12s %12s\n", "name", "bytes", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
		fprintf(table, "%-13s %12s %12.1f\n", "init", "-", h.initMicros);
	}
	for (int c = 0; c < ncolls; c++)
		for (int s = 0; s < nsizes; s++) {
			int k = c * nsizes + s, e = elements(colls[c], sizes[s]);
			counts[k] = e;
			times[k] = measure(colls[c], e, reps, figs);
			double bytes = 4.0 * e, alg = bytes / times[k] / 1e9;
			if (rank == 0 && table)
				fprintf(table, "%-13s %12.0f %12.2f %12.2f %12.2f\n", collNames[colls[c]], bytes, times[k] * 1e6, alg, alg * busFactor(colls[c]));
		}
	int status = 0;
	if (rank == 0 && jsonPath) {
		FILE *f = openJSON(jsonPath, "coll");
		if (!f) {
			status = 1;
		} else {
			writeHeader(f, &h);
			fputs(",\n  \"coll\": [", f);
			for (int c = 0; c < ncolls; c++)
				for (int s = 0; s < nsizes; s++) {
					int k = c * nsizes + s;
					double bytes = 4.0 * counts[k], alg = bytes / times[k] / 1e9;
					fprintf(f, "%s\n    {\"name\": \"%s\", \"bytes\": %.0f, \"time_us\": ", k ? "," : "", collNames[colls[c]], bytes);
					jsonNumber(f, times[k] * 1e6);
					fputs(", \"algbw_gbps\": ", f);
					jsonNumber(f, alg);
					fputs(", \"busbw_gbps\": ", f);
					jsonNumber(f, alg * busFactor(colls[c]));
					fputs("}", f);
				}
			fputs("\n  ]\n}\n", f);
			if (!closeJSON(f, "coll")) status = 1;
		}
	}
	free(counts);
	free(times);
	free(figs);
	free(recvBuf);
	free(sendBuf);
	MPI_Finalize();
	return status;
}
