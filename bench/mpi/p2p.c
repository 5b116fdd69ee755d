/*
 * p2p.c: the same two measurements as `courier bench`, written against MPI,
 * so both can run side by side on one machine in one script
 * (bench/host-compare.sh):
 *   latency   - half the time of a blocking ping-pong round trip between
 *               ranks 0 and 1: a warm-up of iters/10+1 round trips (at most
 *               100), timed, then as many as move about 64 MiB (3 to 20000),
 *               cut so that they take about 2 s by the warm-up's pace; the
 *               first latency size gets 0.25 s of untimed round trips first;
 *   bandwidth - windows of -window MPI_Isend of one size from rank 0 to 1,
 *               each window closed by a one-byte acknowledgement; as many
 *               windows as move about 1 GiB (3 to 20000).
 * Each figure is the median of -reps measurements; other ranks only take
 * part in the barriers. Output rows match courier bench's table; with
 * -json, the run is also written as courier bench -json writes it (schema
 * courier-bench/1, see bench.h), for courier plot.
 *
 *   mpicc -O2 -o p2p p2p.c && mpirun -np 2 --mca btl self,tcp ./p2p
 */
#include "bench.h"

#define BUDGET (1LL << 30)
#define LATENCY_BUDGET 2.0 /* seconds */
#define WARMUP_BUDGET 0.25 /* seconds: the untimed ping-pong before the first latency row */
#define MAX_SIZE ((size_t)1 << 31)

static int rank;

static long iters(long long budget, long size, int per) {
	long long n = budget / (size * per > 0 ? size * per : 1);
	if (n < 3) n = 3;
	if (n > 20000) n = 20000;
	return (long)n;
}

static int cmp(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void roundTrip(char *buf, long n) {
	if (rank == 0) {
		MPI_Send(buf, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
		MPI_Recv(buf, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	} else if (rank == 1) {
		MPI_Recv(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Send(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
	}
}

/* latency is courier bench's: the warm-up's pace cuts it to about
 * budget seconds (rank 0 decides and tells rank 1). */
static double latency(char *buf, long n, long it, double budget) {
	long warm = it / 10 + 1;
	if (warm > 100) warm = 100;
	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime();
	for (long i = 0; i < warm; i++) roundTrip(buf, n);
	long long count = it;
	if (rank == 0) {
		double per = (MPI_Wtime() - start) / (double)warm;
		long long cut = per > 0 ? (long long)(budget / per) : count;
		if (cut < 10) cut = 10;
		if (cut < count) count = cut;
		MPI_Send(&count, 1, MPI_LONG_LONG, 1, 5, MPI_COMM_WORLD);
	} else if (rank == 1) {
		MPI_Recv(&count, 1, MPI_LONG_LONG, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	}
	start = MPI_Wtime();
	for (long long i = 0; i < count; i++) roundTrip(buf, n);
	return (MPI_Wtime() - start) / (2.0 * (double)count);
}

static double bandwidth(char *buf, long n, long rounds, int window, MPI_Request *reqs) {
	char ack = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime();
	for (long r = 0; r < rounds; r++) {
		if (rank == 0) {
			for (int i = 0; i < window; i++)
				MPI_Isend(buf, n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &reqs[i]);
			MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
			MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else if (rank == 1) {
			for (int i = 0; i < window; i++)
				MPI_Irecv(buf, n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &reqs[i]);
			MPI_Waitall(window, reqs, MPI_STATUSES_IGNORE);
			MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
		}
	}
	return MPI_Wtime() - start;
}

static const char usage[] =
	"usage: p2p [-lat SIZES] [-bw SIZES] [-reps N] [-window N] [-json FILE] [-label TEXT] [-transport NAME]\n"
	"  -lat SIZES      latency sizes in bytes, comma-separated, each with an optional\n"
	"                  k, m or g (default 1,4k,64k,1m)\n"
	"  -bw SIZES       bandwidth sizes (default 4k,64k,1m,4m,64m)\n"
	"  -reps N         measurements per figure, the median printed (default 3)\n"
	"  -window N       sends in flight per bandwidth window (default 64)\n"
	"  -json FILE      also write the run as JSON (schema courier-bench/1) to FILE;\n"
	"                  - writes it to standard output instead of the table\n"
	"  -label TEXT     the run's name in the JSON (default: the MPI library and\n"
	"                  the transport)\n"
	"  -transport NAME the transport to record in the JSON (default: OMPI_MCA_btl,\n"
	"                  else UCX_TLS, from the environment)\n";

#define MAXSIZES 64
static size_t lat[MAXSIZES], bw[MAXSIZES];
static int nlat, nbw;

static int addLat(const char *t) {
	size_t b = parseSize(t, MAX_SIZE);
	if (b == 0 && strcmp(t, "0") != 0) return 0;
	if (nlat == MAXSIZES) return 0;
	lat[nlat++] = b;
	return 1;
}

static int addBw(const char *t) {
	size_t b = parseSize(t, MAX_SIZE);
	if (b == 0 || nbw == MAXSIZES) return 0;
	bw[nbw++] = b;
	return 1;
}

static int badUsage(const char *why, const char *arg) {
	if (rank == 0) fprintf(stderr, "p2p: %s%s\n%s", why, arg, usage);
	MPI_Finalize();
	return 2;
}

int main(int argc, char **argv) {
	struct runHeader h;
	startHeader(&h, "p2p.c", argc, argv);
	double t0 = wallSeconds();
	MPI_Init(&argc, &argv);
	h.initMicros = (wallSeconds() - t0) * 1e6;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &h.ranks);
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *latList = "1,4k,64k,1m", *bwList = "4k,64k,1m,4m,64m", *jsonPath = NULL, *label = NULL;
	int reps = 3, window = 64;
	h.transport = defaultTransport();
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int hasValue = i + 1 < argc;
		if (strcmp(a, "-h") == 0 || strcmp(a, "-help") == 0 || strcmp(a, "--help") == 0) {
			if (rank == 0) fputs(usage, stdout);
			MPI_Finalize();
			return 0;
		} else if (!hasValue) {
			return badUsage("unknown option or missing value: ", a);
		} else if (strcmp(a, "-lat") == 0) latList = argv[++i];
		else if (strcmp(a, "-bw") == 0) bwList = argv[++i];
		else if (strcmp(a, "-json") == 0) jsonPath = argv[++i];
		else if (strcmp(a, "-label") == 0) label = argv[++i];
		else if (strcmp(a, "-transport") == 0) h.transport = argv[++i];
		else if (strcmp(a, "-reps") == 0) {
			if (!(reps = parsePositive(argv[++i]))) return badUsage("-reps wants a positive number, not ", argv[i]);
		} else if (strcmp(a, "-window") == 0) {
			if (!(window = parsePositive(argv[++i])) || window > 100000) return badUsage("-window wants 1 to 100000, not ", argv[i]);
		} else {
			return badUsage("unknown option ", a);
		}
	}
	if (!splitList(latList, addLat)) return badUsage("-lat: want comma-separated byte counts (k, m, g suffixes; at most 2 GiB), not ", latList);
	if (!splitList(bwList, addBw)) return badUsage("-bw: want comma-separated byte counts (k, m, g suffixes; 1 B to 2 GiB), not ", bwList);
	if (h.ranks < 2) return badUsage("needs 2 ranks, the job has ", "1");

	char name[128], defaultLabel[256];
	mpiLibrary(&h, name, sizeof name);
	snprintf(defaultLabel, sizeof defaultLabel, "%s%s%s", name, *h.transport ? " " : "", h.transport);
	h.label = label ? label : defaultLabel;
	h.pattern = "osu";
	h.window = window;
	h.reps = reps;

	size_t largest = 1;
	for (int s = 0; s < nlat; s++) if (lat[s] > largest) largest = lat[s];
	for (int s = 0; s < nbw; s++) if (bw[s] > largest) largest = bw[s];
	char *buf = malloc(largest);
	MPI_Request *reqs = malloc((size_t)window * sizeof *reqs);
	double *t = malloc((size_t)reps * sizeof *t);
	double latUs[MAXSIZES], latGBps[MAXSIZES], bwGBps[MAXSIZES];
	if (!buf || !reqs || !t) {
		fprintf(stderr, "p2p: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	memset(buf, 1, largest);
	FILE *table = jsonPath && strcmp(jsonPath, "-") == 0 ? NULL : stdout;
	if (rank == 0 && table) {
		fprintf(table, "# MPI p2p, %s, ranks 0 and 1\n", defaultLabel);
		fprintf(table, "%-10s %12s %14s %10s\n", "kind", "bytes", "latency (µs)", "GB/s");
		fprintf(table, "%-10s %12s %14.1f %10s\n", "init", "-", h.initMicros, "-");
	}
	/* As courier bench: WARMUP_BUDGET of untimed round trips at the first
	 * latency size, so that the first row is not the slowest for being
	 * first. */
	if (nlat > 0) latency(buf, (long)lat[0], iters(BUDGET / 16, (long)lat[0], 1), WARMUP_BUDGET);
	for (int s = 0; s < nlat; s++) {
		for (int r = 0; r < reps; r++) t[r] = latency(buf, (long)lat[s], iters(BUDGET / 16, (long)lat[s], 1), LATENCY_BUDGET);
		qsort(t, (size_t)reps, sizeof t[0], cmp);
		latUs[s] = t[reps / 2] * 1e6;
		latGBps[s] = (double)lat[s] / t[reps / 2] / 1e9;
		if (rank == 0 && table) fprintf(table, "%-10s %12zu %14.2f %10.3f\n", "latency", lat[s], latUs[s], latGBps[s]);
	}
	for (int s = 0; s < nbw; s++) {
		long rounds = iters(BUDGET, (long)bw[s], window);
		for (int r = 0; r < reps; r++) t[r] = bandwidth(buf, (long)bw[s], rounds, window, reqs);
		qsort(t, (size_t)reps, sizeof t[0], cmp);
		bwGBps[s] = (double)bw[s] * window * rounds / t[reps / 2] / 1e9;
		if (rank == 0 && table) fprintf(table, "%-10s %12zu %14s %10.3f\n", "bandwidth", bw[s], "-", bwGBps[s]);
	}
	int status = 0;
	if (rank == 0 && jsonPath) {
		FILE *f = openJSON(jsonPath, "p2p");
		if (!f) {
			status = 1;
		} else {
			writeHeader(f, &h);
			fputs(",\n  \"p2p\": [", f);
			for (int s = 0; s < nlat; s++) {
				fprintf(f, "%s\n    {\"kind\": \"latency\", \"bytes\": %zu, \"latency_us\": ", s ? "," : "", lat[s]);
				jsonNumber(f, latUs[s]);
				fputs(", \"gbps\": ", f);
				jsonNumber(f, latGBps[s]);
				fputs("}", f);
			}
			for (int s = 0; s < nbw; s++) {
				fprintf(f, "%s\n    {\"kind\": \"bandwidth\", \"bytes\": %zu, \"gbps\": ", s || nlat ? "," : "", bw[s]);
				jsonNumber(f, bwGBps[s]);
				fputs("}", f);
			}
			fputs("\n  ]\n}\n", f);
			if (!closeJSON(f, "p2p")) status = 1;
		}
	}
	free(t);
	free(reqs);
	free(buf);
	MPI_Finalize();
	return status;
}
