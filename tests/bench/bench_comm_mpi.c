/* bench_comm_mpi.c — time the mpi backend's large collectives (exec/comm_mpi.h) whole and in
 * pieces. Run under mpirun (2+ ranks): bench_comm_mpi [MIB [REPS]] (default 392 MiB, VGG19's
 * classifier weight gradient, and 5 repetitions after one warm-up). For each collective and each
 * piece size (0: one MPI call, then 1, 2, 4, 8 and 32 MiB) rank 0 prints the median and range of
 * the repetitions' times (the slowest rank's), in s, and GB/s of the buffer. The piece size is set
 * per row (hap_comm_mpi_set_piece_bytes). */
#include <stdio.h>
#include <stdlib.h>

#include "exec/clock.h"
#include "exec/comm_mpi.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* One collective on `bytes` of float32 per call: 0 all-reduce, 1 reduce-scatter, 2 all-gather. */
static hap_status run_one(hap_comm *c, int kind, float *a, float *b, int64_t bytes, hap_err *err) {
  int64_t n = bytes / 4, per = n / c->size;
  switch (kind) {
  case 0: return c->ops->all_reduce(c, a, a, n, HAP_F32, HAP_REDUCE_SUM, err);
  case 1: return c->ops->reduce_scatter(c, a, b, per, HAP_F32, HAP_REDUCE_SUM, err);
  default: return c->ops->all_gather(c, a, b, per * 4, err);
  }
}

int main(int argc, char **argv) {
  static const char *const names[] = {"all_reduce", "reduce_scatter", "all_gather"};
  static const int64_t pieces_mib[] = {0, 1, 2, 4, 8, 32};
  hap_comm *c = NULL;
  hap_err err = {0};
  if (hap_comm_mpi_init(&argc, &argv, &c, &err) != HAP_OK) {
    fprintf(stderr, "bench_comm_mpi: %s\n", err.msg);
    return 1;
  }
  long long mib = argc > 1 ? strtoll(argv[1], NULL, 10) : 392;
  long reps = argc > 2 ? strtol(argv[2], NULL, 10) : 5;
  if (mib < 1 || reps < 1 || reps > 100) {
    fprintf(stderr, "bench_comm_mpi: usage: bench_comm_mpi [MIB >= 1 [REPS 1..100]]\n");
    hap_comm_mpi_finalize(c);
    return 1;
  }
  int64_t bytes = (int64_t)mib << 20;
  float *a = malloc((size_t)bytes), *b = malloc((size_t)bytes);
  if (a == NULL || b == NULL) {
    fprintf(stderr, "bench_comm_mpi: out of memory for 2 x %lld MiB\n", mib);
    free(a);
    free(b);
    hap_comm_mpi_finalize(c);
    return 1;
  }
  for (int64_t i = 0; i < bytes / 4; i++)
    a[i] = b[i] = 1;
  if (c->rank == 0)
    printf("collective      pieces  median s   min s    max s    GB/s   (%d ranks, %lld MiB)\n",
           c->size, mib);
  int rc = 0;
  for (int kind = 0; kind < 3 && rc == 0; kind++)
    for (size_t p = 0; p < sizeof pieces_mib / sizeof pieces_mib[0] && rc == 0; p++) {
      hap_comm_mpi_set_piece_bytes(c, pieces_mib[p] << 20);
      double t[101];
      for (long r = 0; r <= reps && rc == 0; r++) {
        c->ops->barrier(c, &err);
        double t0 = hap_clock_s();
        if (run_one(c, kind, a, b, bytes, &err) != HAP_OK)
          rc = 1;
        double mine = hap_clock_s() - t0, slowest = 0;
        c->ops->all_reduce(c, &mine, &slowest, 1, HAP_F64, HAP_REDUCE_MAX, &err);
        t[r] = slowest;
      }
      qsort(t + 1, (size_t)reps, sizeof *t, cmp); /* t[0]: the warm-up */
      double med = t[1 + reps / 2];
      if (c->rank == 0 && rc == 0)
        printf("%-15s %3lld MiB %8.4f %8.4f %8.4f %7.2f\n", names[kind], (long long)pieces_mib[p],
               med, t[1], t[reps], (double)bytes / med / 1e9);
    }
  if (rc != 0)
    fprintf(stderr, "bench_comm_mpi: rank %d: %s\n", c->rank, err.msg);
  free(a);
  free(b);
  hap_comm_mpi_finalize(c);
  return rc;
}
