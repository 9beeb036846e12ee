/* mpi_allreduce.c: MPI_Allreduce (float32 SUM, in place) measured the way
 * `cohort bench allreduce` measures, for bench/vs_mpi.sh.
 *
 * Per size, in the order given on the command line:
 *   - a fresh zeroed buffer; a barrier; 20 warm-up ops (5 from 16 MiB), the
 *     first of them timed on its own: first_s, the max over ranks (the cold
 *     path counts too);
 *   - iters = clamp(round(budget / warm-up mean, max over ranks), 10, 1000);
 *   - each timed op measured alone, element-wise max over ranks, median;
 *   - algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests);
 *   - a one-shot all-reduce of ones must give n everywhere (ok).
 * Rank 0 prints one JSON object per size.
 *
 * Build: mpicc -O2 -o mpi_allreduce mpi_allreduce.c
 * Usage: mpirun ... ./mpi_allreduce BUDGET_S LABEL SIZE...
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int by_value(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void allreduce(float *buf, long n) {
	MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static void measure(long bytes, double budget, const char *label, int rank, int np) {
	long n = bytes / 4;
	float *buf = calloc(n, sizeof *buf);
	int warm = bytes >= (16L << 20) ? 5 : 20;
	double first = 0;
	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = MPI_Wtime();
	for (int i = 0; i < warm; i++) {
		allreduce(buf, n);
		if (i == 0)
			first = MPI_Wtime() - t0;
	}
	double wm[2] = {(MPI_Wtime() - t0) / warm, first}, wmax[2];
	MPI_Allreduce(wm, wmax, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	double want = budget / (wmax[0] > 1e-9 ? wmax[0] : 1e-9) + 0.5;
	int iters = want < 10 ? 10 : want > 1000 ? 1000 : (int)want;
	double *ts = malloc(iters * sizeof *ts), *tmax = malloc(iters * sizeof *tmax);
	MPI_Barrier(MPI_COMM_WORLD);
	for (int i = 0; i < iters; i++) {
		double a = MPI_Wtime();
		allreduce(buf, n);
		ts[i] = MPI_Wtime() - a;
	}
	MPI_Allreduce(ts, tmax, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	for (long i = 0; i < n; i++)
		buf[i] = 1.0f;
	allreduce(buf, n);
	int ok = 1, okall;
	for (long i = 0; i < n && ok; i++)
		ok = buf[i] == (float)np;
	MPI_Allreduce(&ok, &okall, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (rank == 0) {
		qsort(tmax, iters, sizeof *tmax, by_value);
		double med = iters % 2 ? tmax[iters / 2] : (tmax[iters / 2 - 1] + tmax[iters / 2]) / 2;
		double algbw = bytes / med / 1e9;
		printf("{\"impl\":\"mpi-%s\",\"world\":%d,\"bytes\":%ld,\"iters\":%d,\"time_s\":%.9g,"
		       "\"first_s\":%.9g,\"algbw_GBps\":%.6g,\"busbw_GBps\":%.6g,\"ok\":%s}\n",
		       label, np, bytes, iters, med, wmax[1], algbw, algbw * 2.0 * (np - 1) / np,
		       okall ? "true" : "false");
		fflush(stdout);
	}
	free(ts);
	free(tmax);
	free(buf);
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, np;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &np);
	if (argc < 4) {
		if (rank == 0)
			fprintf(stderr, "usage: mpi_allreduce BUDGET_S LABEL SIZE...\n");
		MPI_Finalize();
		return 2;
	}
	double budget = atof(argv[1]);
	for (int i = 3; i < argc; i++)
		measure(atol(argv[i]), budget, argv[2], rank, np);
	MPI_Finalize();
	return 0;
}
