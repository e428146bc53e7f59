/* test_kernel_math.c — the kernels' vectorisable float32 exp and erf and their double sums
 * (kernels/kern_math.h, white-box) against double-precision libm: the accuracy bounds the header
 * promises, the special values (-inf gives exactly 0, NaN stays NaN, overflow gives +inf), and
 * subnormal results. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>

#include "kern_math.h"

/* Relative error of k_expf(x) against exp((double)x). */
static double exp_rel_err(float x) {
  double want = exp((double)x);
  return fabs((double)k_expf(x) - want) / want;
}

Test(kernel_math, expf_relative_error_over_the_normal_range) {
  double worst = 0;
  float worst_x = 0;
  for (int64_t i = 0; i <= 2000000; i++) {
    float x = (float)(-87.0 + 175.0 * (double)i / 2000000.0);
    double e = exp_rel_err(x);
    if (e > worst) {
      worst = e;
      worst_x = x;
    }
  }
  /* the points where the reduction switches n, and small arguments */
  const float at[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 0.34657359f, -0.34657359f, 0.6931472f,
                      1.0f, -1.0f, 10.0f,  50.0f,   88.0f,       88.7f,        -86.9f};
  for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
    double e = exp_rel_err(at[i]);
    if (e > worst) {
      worst = e;
      worst_x = at[i];
    }
  }
  cr_log_info("k_expf: worst relative error %.3g at x = %.9g", worst, (double)worst_x);
  cr_expect(worst < 4e-7, "k_expf relative error %.3g at x = %.9g, promised < 4e-7", worst,
            (double)worst_x);
}

Test(kernel_math, expf_special_values) {
  cr_expect(k_expf(-INFINITY) == 0.0f, "exp(-inf) = %g", (double)k_expf(-INFINITY));
  cr_expect(k_expf(-200.0f) == 0.0f, "exp(-200) = %g", (double)k_expf(-200.0f));
  cr_expect(k_expf(-104.5f) == 0.0f, "exp(-104.5) = %g", (double)k_expf(-104.5f));
  cr_expect(isinf(k_expf(INFINITY)) && k_expf(INFINITY) > 0, "exp(inf) = %g",
            (double)k_expf(INFINITY));
  cr_expect(isinf(k_expf(89.0f)), "exp(89) = %g, expected +inf (above FLT_MAX)",
            (double)k_expf(89.0f));
  cr_expect(isnan(k_expf(NAN)), "exp(NaN) = %g", (double)k_expf(NAN));
  cr_expect(k_expf(0.0f) == 1.0f, "exp(0) = %.9g", (double)k_expf(0.0f));
  /* subnormal results: within a few units of the smallest subnormal of the true value */
  for (int i = 0; i < 42; i++) {
    float x = -103.0f + 0.37f * (float)i;
    double want = exp((double)x), got = k_expf(x);
    cr_expect(fabs(got - want) <= 4e-7 * want + 2.0 * 0x1p-149,
              "exp(%.9g) = %.9g, expected %.9g (subnormal range)", (double)x, got, want);
  }
}

Test(kernel_math, erff_absolute_error_and_symmetry) {
  double worst = 0;
  float worst_x = 0;
  for (int64_t i = 0; i <= 2000000; i++) {
    float x = (float)(-10.0 + 20.0 * (double)i / 2000000.0);
    double e = fabs((double)k_erff(x) - erf((double)x));
    if (e > worst) {
      worst = e;
      worst_x = x;
    }
    cr_assert(k_erff(-x) == -k_erff(x), "erf(%.9g) = %.9g but erf(%.9g) = %.9g", (double)x,
              (double)k_erff(x), (double)-x, (double)k_erff(-x));
  }
  cr_log_info("k_erff: worst absolute error %.3g at x = %.9g", worst, (double)worst_x);
  cr_expect(worst < 3e-7, "k_erff absolute error %.3g at x = %.9g, promised < 3e-7", worst,
            (double)worst_x);
  cr_expect(k_erff(INFINITY) == 1.0f && k_erff(-INFINITY) == -1.0f, "erf(+-inf) = %g, %g",
            (double)k_erff(INFINITY), (double)k_erff(-INFINITY));
  cr_expect(k_erff(0.0f) == 0.0f, "erf(0) = %g", (double)k_erff(0.0f));
  cr_expect(isnan(k_erff(NAN)), "erf(NaN) = %g", (double)k_erff(NAN));
}

Test(kernel_math, double_sums_match_long_double) {
  enum { N = 1027 }; /* not a multiple of the 8 partial sums: the tail counts too */
  static float x[N];
  uint64_t s = 12345;
  long double want = 0, mean_ld;
  for (int i = 0; i < N; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x[i] = (float)((double)(s >> 40) / (double)(1ULL << 24) * 8.0 - 3.0);
    want += x[i];
  }
  mean_ld = want / N;
  double got = k_sum_f64(x, N);
  cr_expect(fabsl(got - want) <= 1e-12L * fabsl(want) + 1e-12L, "sum %.17g, expected %.17Lg", got,
            want);
  long double want_sq = 0;
  for (int i = 0; i < N; i++)
    want_sq += (x[i] - mean_ld) * (x[i] - mean_ld);
  double got_sq = k_sum_sq_dev_f64(x, N, (double)mean_ld);
  cr_expect(fabsl(got_sq - want_sq) <= 1e-12L * want_sq, "sum of squares %.17g, expected %.17Lg",
            got_sq, want_sq);
  for (int n = 0; n < 17; n++) { /* short rows: only the tail loop */
    long double w = 0;
    for (int i = 0; i < n; i++)
      w += x[i];
    cr_expect(fabsl(k_sum_f64(x, n) - w) <= 1e-12L, "sum of %d elements %.17g, expected %.17Lg", n,
              k_sum_f64(x, n), w);
  }
}
