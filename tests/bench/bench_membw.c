/* bench_membw.c — the memory bandwidth one process sees, pass by pass: y[i] += 0.5 * x[i] over two
 * float arrays of MB MiB each (12 bytes moved per element: x and y read, y written), REPS passes
 * after one untimed warm-up pass. Run one per core at once to see what two ranks of
 * hap-run share (reports/BENCHMARKS.md, "VGG19's memory-bound rows"):
 *   taskset -c 0 bench_membw 400 5 & taskset -c 1 bench_membw 400 5; wait
 * Usage: bench_membw [MB] [REPS] (default 400 MiB, 5 passes). Prints GB/s (1e9 bytes) per pass
 * and their median. */
#include <stdio.h>
#include <stdlib.h>

#include "exec/clock.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void pass(float *restrict y, const float *restrict x, size_t n) {
  for (size_t i = 0; i < n; i++)
    y[i] += 0.5F * x[i];
}

int main(int argc, char **argv) {
  long mb = argc > 1 ? strtol(argv[1], NULL, 10) : 400;
  int reps = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 5;
  if (mb < 1 || mb > 65536 || reps < 1 || reps > 1000) {
    fprintf(stderr, "usage: bench_membw [MB 1..65536] [REPS 1..1000]\n");
    return 2;
  }
  size_t n = (size_t)mb * 1024 * 1024 / sizeof(float);
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  double *gbs = malloc((size_t)reps * sizeof *gbs);
  if (x == NULL || y == NULL || gbs == NULL) {
    fprintf(stderr, "bench_membw: out of memory for 2 x %ld MiB\n", mb);
    free(x);
    free(y);
    free(gbs);
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    x[i] = (float)(i & 1023);
    y[i] = 0.0F;
  }
  pass(y, x, n);
  printf("bench_membw: %ld MiB x 2, GB/s per pass:", mb);
  for (int r = 0; r < reps; r++) {
    double t0 = hap_clock_s();
    pass(y, x, n);
    gbs[r] = 12.0 * (double)n / (hap_clock_s() - t0) / 1e9;
    printf(" %.1f", gbs[r]);
  }
  qsort(gbs, (size_t)reps, sizeof *gbs, cmp);
  printf("; median %.1f (checksum %g)\n", gbs[reps / 2], (double)y[n - 1]);
  free(x);
  free(y);
  free(gbs);
  return 0;
}
