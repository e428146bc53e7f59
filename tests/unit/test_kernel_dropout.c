/* test_kernel_dropout.c — the vectorised dropout passes (kernels/kern_internal.h, white-box):
 * k_dropout_run and k_dropout_gpos must make exactly hap_kernel_keep's decision for every element
 * (the documented mask, kernels.h) at every drop probability, including the edges 0, the
 * smallest positive double, probabilities one ulp either side of a threshold step, and 1, in both
 * the overwriting and the accumulating form, in place, and over a sharded tensor's runs of
 * consecutive global positions. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "kern_internal.h"

#define N_MAX 1031 /* odd: every vector loop's remainder runs too */

static const double PROBS[] = {0.0,   4.9e-324,      1e-9, 0.1,       0.25,      0.5, 0.9,
                               0.999, 1 - 0x1.0p-53, 1.0,  0x1.0p-53, 0x1.8p-53, 0.3};
static const uint64_t SEEDS[] = {0, 1, 42, 0xffffffffffffffffULL, 0x123456789abcdefULL};
static const int64_t STARTS[] = {0, 1, 1000003, (int64_t)1 << 40};

/* The reference: one hap_kernel_keep call per element. */
static float expect_at(uint64_t seed, double p, int64_t pos, float x, float scale) {
  return hap_kernel_keep(seed, pos, p) ? x * scale : 0.0f;
}

static void fill(float *x, int64_t n, float first) {
  for (int64_t i = 0; i < n; i++)
    x[i] = first + 0.37f * (float)i - 0.001f * (float)(i * i % 97);
}

Test(kernel_dropout, run_matches_hap_kernel_keep_element_by_element) {
  static float x[N_MAX], y[N_MAX];
  for (size_t ip = 0; ip < sizeof PROBS / sizeof PROBS[0]; ip++)
    for (size_t is = 0; is < sizeof SEEDS / sizeof SEEDS[0]; is++)
      for (size_t ia = 0; ia < sizeof STARTS / sizeof STARTS[0]; ia++) {
        double p = PROBS[ip];
        float scale = p < 1 ? (float)(1 / (1 - p)) : 1.0f;
        fill(x, N_MAX, (float)is - 2.0f);
        k_dropout_run(SEEDS[is], p, STARTS[ia], x, scale, y, N_MAX, false);
        for (int64_t i = 0; i < N_MAX; i++) {
          float want = expect_at(SEEDS[is], p, STARTS[ia] + i, x[i], scale);
          cr_assert(y[i] == want, "p %.17g seed %zu start %zu element %lld: %g, want %g", p, is, ia,
                    (long long)i, (double)y[i], (double)want);
        }
      }
}

Test(kernel_dropout, accumulating_and_in_place_forms) {
  static float x[N_MAX], y[N_MAX], base[N_MAX];
  const double p = 0.3;
  const float scale = (float)(1 / (1 - p));
  fill(x, N_MAX, 1.5f);
  fill(base, N_MAX, -4.0f);
  memcpy(y, base, sizeof y);
  k_dropout_run(7, p, 11, x, scale, y, N_MAX, true);
  for (int64_t i = 0; i < N_MAX; i++)
    cr_assert(y[i] == base[i] + expect_at(7, p, 11 + i, x[i], scale), "accumulate, element %lld",
              (long long)i);
  memcpy(y, x, sizeof y);
  k_dropout_run(7, p, 11, y, scale, y, N_MAX, false);
  for (int64_t i = 0; i < N_MAX; i++)
    cr_assert(y[i] == expect_at(7, p, 11 + i, x[i], scale), "in place, element %lld", (long long)i);
}

Test(kernel_dropout, every_probability_keeps_about_its_share) {
  static float x[N_MAX], y[N_MAX];
  for (int64_t i = 0; i < N_MAX; i++)
    x[i] = 1.0f;
  const double probs[] = {0.0, 0.1, 0.5, 0.9, 1.0};
  for (size_t ip = 0; ip < 5; ip++) {
    int64_t kept = 0;
    for (int64_t block = 0; block < 100; block++) {
      k_dropout_run(3, probs[ip], block * N_MAX, x, 1.0f, y, N_MAX, false);
      for (int64_t i = 0; i < N_MAX; i++)
        kept += y[i] != 0;
    }
    double share = (double)kept / (100.0 * N_MAX), want = 1 - probs[ip];
    cr_assert(fabs(share - want) < 0.01, "p %g kept %.4f of the elements, want %.4f", probs[ip],
              share, want);
  }
}

Test(kernel_dropout, gpos_covers_sharded_and_whole_tensors) {
  /* A [5, 4 of 10, 3] shard at offset 5 along dim 1 of the second replica, and a whole tensor. */
  const k_gpos shapes[] = {
      {.inner = 3, .len = 4, .full_len = 10, .off = 5, .base = 150},
      {.inner = 3, .len = 10, .full_len = 10, .off = 0, .base = 0},
      {.inner = 1, .len = 1, .full_len = 1, .off = 0, .base = 0},
      {.inner = 1, .len = 2, .full_len = 7, .off = 0, .base = 0},
  };
  static float x[60], y[60], acc[60];
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const k_gpos *g = &shapes[s];
    const int64_t n = 60;
    fill(x, n, 0.25f);
    for (int64_t i = 0; i < n; i++)
      acc[i] = (float)i;
    k_dropout_gpos(g, 99, 0.5, x, 2.0f, y, n, false);
    k_dropout_gpos(g, 99, 0.5, x, 2.0f, acc, n, true);
    for (int64_t i = 0; i < n; i++) {
      float want = expect_at(99, 0.5, k_gpos_at(g, i), x[i], 2.0f);
      cr_assert(y[i] == want, "shape %zu element %lld: %g, want %g", s, (long long)i, (double)y[i],
                (double)want);
      cr_assert(acc[i] == (float)i + want, "shape %zu element %lld accumulated", s, (long long)i);
    }
  }
}
