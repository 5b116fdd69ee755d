/*
 * p2p.c: the same two measurements as `courier bench`, written against MPI,
 * so both can run side by side on one machine in one script:
 *   latency   - half the time of a blocking ping-pong round trip;
 *   bandwidth - windows of 64 MPI_Isend of one size, each window closed by
 *               a one-byte acknowledgement.
 * Each figure is the median of 3 measurements. Output rows match courier
 * bench's table.
 *
 *   mpicc -O2 -o p2p p2p.c && mpirun -np 2 --mca btl self,tcp ./p2p
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64
#define REPS 3
#define BUDGET (1LL << 30)

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

static double latency(char *buf, long n, long it) {
	long warm = it / 10 + 1;
	if (warm > 100) warm = 100;
	double start = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	for (long i = -warm; i < it; i++) {
		if (i == 0) start = MPI_Wtime();
		if (rank == 0) {
			MPI_Send(buf, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
			MPI_Recv(buf, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else if (rank == 1) {
			MPI_Recv(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Send(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
		}
	}
	return (MPI_Wtime() - start) / (2.0 * it);
}

static double bandwidth(char *buf, long n, long rounds) {
	MPI_Request reqs[WINDOW];
	char ack = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	double start = MPI_Wtime();
	for (long r = 0; r < rounds; r++) {
		if (rank == 0) {
			for (int i = 0; i < WINDOW; i++)
				MPI_Isend(buf, n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &reqs[i]);
			MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
			MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else if (rank == 1) {
			for (int i = 0; i < WINDOW; i++)
				MPI_Irecv(buf, n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &reqs[i]);
			MPI_Waitall(WINDOW, reqs, MPI_STATUSES_IGNORE);
			MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
		}
	}
	return MPI_Wtime() - start;
}

int main(int argc, char **argv) {
	static const long lat[] = {1, 4 << 10, 64 << 10, 1 << 20};
	static const long bw[] = {4 << 10, 64 << 10, 1 << 20, 4 << 20, 64 << 20};
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	char *buf = malloc(64 << 20);
	memset(buf, 1, 64 << 20);
	if (rank == 0) {
		printf("# MPI p2p, ranks 0 and 1\n");
		printf("%-10s %12s %14s %10s\n", "kind", "bytes", "latency (µs)", "GB/s");
	}
	for (size_t s = 0; s < sizeof lat / sizeof lat[0]; s++) {
		double t[REPS];
		for (int r = 0; r < REPS; r++) t[r] = latency(buf, lat[s], iters(BUDGET / 16, lat[s], 1));
		qsort(t, REPS, sizeof t[0], cmp);
		if (rank == 0)
			printf("%-10s %12ld %14.2f %10.3f\n", "latency", lat[s], t[REPS / 2] * 1e6, lat[s] / t[REPS / 2] / 1e9);
	}
	for (size_t s = 0; s < sizeof bw / sizeof bw[0]; s++) {
		long rounds = iters(BUDGET, bw[s], WINDOW);
		double t[REPS];
		for (int r = 0; r < REPS; r++) t[r] = bandwidth(buf, bw[s], rounds);
		qsort(t, REPS, sizeof t[0], cmp);
		if (rank == 0)
			printf("%-10s %12ld %14s %10.3f\n", "bandwidth", bw[s], "-", (double)bw[s] * WINDOW * rounds / t[REPS / 2] / 1e9);
	}
	free(buf);
	MPI_Finalize();
	return 0;
}
