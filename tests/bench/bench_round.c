/* bench_round.c — time mixed precision's emulated storage (kernels/half.h): hap_round_array over
 * a buffer of float32 values for bfloat16 and float16, against the scalar conversion
 * (hap_round_to per element, the array path before it was made branch-free). Usage: bench_round
 * [MIB [REPS]] (default 392 MiB, VGG19's classifier weight gradient, 5 repetitions); prints the
 * median and range, in ms, and GB/s of the buffer read and written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/clock.h"
#include "kernels/half.h"

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Values of every magnitude the formats round differently (deterministic). */
static void fill(float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    v[i] = (float)((uint32_t)(i * 2654435761u) % 200000u) * 1e-3f - 100.0f;
}

static void scalar_round(hap_dtype to, float *v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    v[i] = hap_round_to(to, v[i]);
}

int main(int argc, char **argv) {
  long long mib = argc > 1 ? strtoll(argv[1], NULL, 10) : 392;
  long reps = argc > 2 ? strtol(argv[2], NULL, 10) : 5;
  if (mib < 1 || mib > 65536 || reps < 1 || reps > 100) {
    fprintf(stderr, "bench_round: usage: bench_round [MIB 1..65536 [REPS 1..100]]\n");
    return 2;
  }
  int64_t n = (int64_t)mib << 18; /* floats */
  float *v = malloc((size_t)n * sizeof *v);
  double *t = malloc((size_t)reps * sizeof *t);
  if (v == NULL || t == NULL) {
    fprintf(stderr, "bench_round: out of memory for %lld MiB\n", mib);
    return 1;
  }
  printf("path      format    median ms   min ms    max ms    GB/s   (%lld MiB of float32)\n", mib);
  static const hap_dtype formats[] = {HAP_BF16, HAP_F16};
  for (int scalar = 1; scalar >= 0; scalar--) {
    for (int f = 0; f < 2; f++) {
      for (long r = -1; r < reps; r++) { /* r = -1: the warm-up */
        fill(v, n);
        double t0 = hap_clock_s();
        if (scalar)
          scalar_round(formats[f], v, n);
        else
          (void)hap_round_array(formats[f], v, n);
        if (r >= 0)
          t[r] = hap_clock_s() - t0;
      }
      qsort(t, (size_t)reps, sizeof *t, cmp);
      double med = t[reps / 2];
      printf("%-9s %-9s %9.2f %8.2f %9.2f %7.2f\n", scalar ? "scalar" : "array",
             hap_dtype_name(formats[f]), 1e3 * med, 1e3 * t[0], 1e3 * t[reps - 1],
             2.0 * (double)n * 4 / med / 1e9);
    }
  }
  free(v);
  free(t);
  return 0;
}
