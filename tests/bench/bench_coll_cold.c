/* bench_coll_cold.c — an all-reduce as the collective sweep times it against as a training
 * iteration meets it. Under mpirun (2+ ranks): bench_coll_cold [KIB [REPS]] (default 256 KiB, the
 * vit/bert gradients of reports/run-vs-sim.sh, 40 calls per way). Four ways, each call in place
 * through the mpi backend (exec/comm_mpi.h) after a barrier:
 *   hot        one buffer, call after call (the sweep: hap-profile's samples)
 *   flushed    one buffer, each rank first writing 32 MiB elsewhere (the caches a layer's
 *              backward leaves)
 *   rotating   30 buffers in turn (each gradient has its own)
 *   both       30 buffers in turn, 32 MiB written first (an iteration's gradient sums)
 * Every buffer is all-reduced once before the timing. A call's time is the smaller of the ranks'
 * (the later arrival waits for nobody); rank 0 prints the median, 10th and 90th percentile over
 * the calls after the first 5, in us. */
#include <stdio.h>
#include <stdlib.h>

#include "exec/clock.h"
#include "exec/comm_mpi.h"

enum { N_BUFS = 30, MAX_REPS = 1000, SKIP = 5 };
#define FLUSH_BYTES ((size_t)32 << 20)

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  static const char *const ways[] = {"hot", "flushed", "rotating", "both"};
  hap_comm *c = NULL;
  hap_err err = {0};
  if (hap_comm_mpi_init(&argc, &argv, &c, &err) != HAP_OK) {
    fprintf(stderr, "bench_coll_cold: %s\n", err.msg);
    return 1;
  }
  long kib = argc > 1 ? strtol(argv[1], NULL, 10) : 256;
  long reps = argc > 2 ? strtol(argv[2], NULL, 10) : 40;
  if (kib < 1 || kib > (1L << 20) || reps <= SKIP || reps > MAX_REPS) {
    fprintf(stderr, "bench_coll_cold: usage: bench_coll_cold [KIB 1..1048576 [REPS 6..1000]]\n");
    hap_comm_mpi_finalize(c);
    return 1;
  }
  int64_t n = (int64_t)kib * 1024 / 4;
  float *buf[N_BUFS] = {0};
  volatile char *junk = malloc(FLUSH_BYTES);
  double *t = malloc((size_t)2 * MAX_REPS * sizeof *t);
  int rc = junk == NULL || t == NULL;
  for (int i = 0; i < N_BUFS && rc == 0; i++) {
    buf[i] = malloc((size_t)n * sizeof(float));
    rc = buf[i] == NULL;
    for (int64_t j = 0; rc == 0 && j < n; j++)
      buf[i][j] = 1.0F;
  }
  for (size_t j = 0; rc == 0 && j < FLUSH_BYTES; j++)
    junk[j] = 1;
  if (rc != 0)
    fprintf(stderr, "bench_coll_cold: out of memory\n");
  /* every buffer's first all-reduce costs ~3x a later one: warm them all up, as hap-run's warm-up
   * iterations do */
  for (int i = 0; i < N_BUFS && rc == 0; i++)
    rc = c->ops->all_reduce(c, buf[i], buf[i], n, HAP_F32, HAP_REDUCE_SUM, &err) != HAP_OK;
  if (rc == 0 && c->rank == 0)
    printf("all-reduce of %ld KiB on %d ranks, us (median, p10, p90 of %ld calls)\n", kib, c->size,
           reps - SKIP);
  for (int way = 0; way < 4 && rc == 0; way++) {
    for (long k = 0; k < reps && rc == 0; k++) {
      float *b = way >= 2 ? buf[k % N_BUFS] : buf[0];
      if (way == 1 || way == 3)
        for (size_t j = 0; j < FLUSH_BYTES; j += 64)
          junk[j]++;
      rc = c->ops->barrier(c, &err) != HAP_OK;
      double t0 = hap_clock_s();
      rc = rc || c->ops->all_reduce(c, b, b, n, HAP_F32, HAP_REDUCE_SUM, &err) != HAP_OK;
      t[k] = hap_clock_s() - t0;
    }
    rc =
        rc || c->ops->all_reduce(c, t, t + MAX_REPS, reps, HAP_F64, HAP_REDUCE_MIN, &err) != HAP_OK;
    double *m = t + MAX_REPS + SKIP;
    long k = reps - SKIP;
    qsort(m, (size_t)k, sizeof *m, cmp);
    if (rc == 0 && c->rank == 0)
      printf("%-9s %8.1f %8.1f %8.1f\n", ways[way], m[k / 2] * 1e6, m[k / 10] * 1e6,
             m[k * 9 / 10] * 1e6);
  }
  if (rc != 0 && err.msg[0] != '\0')
    fprintf(stderr, "bench_coll_cold: rank %d: %s\n", c->rank, err.msg);
  for (int i = 0; i < N_BUFS; i++)
    free(buf[i]);
  free((void *)junk);
  free(t);
  hap_comm_mpi_finalize(c);
  return rc;
}
