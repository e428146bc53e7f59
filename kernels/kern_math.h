/* kern_math.h — float32 exp and erf and double-accumulated sums written so that GCC vectorises the
 * loops that call them (branch-free: selects, no calls, no table lookups), for the kernels'
 * elementwise passes. Internal to kernels/ (see docs/kernels.md, "Numerics").
 *
 * Accuracy (checked against double-precision libm by unit_kernel_math):
 *  - k_expf: relative error below 4e-7 (a few ulp) over [-87, 88]; 0 below -104 and for -inf
 *    (masked attention weights stay exactly zero); +inf above 88.73; NaN gives NaN.
 *  - k_erff: absolute error below 3e-7 (|x| < 0.9: the Maclaurin series, relative error ~1e-7;
 *    above: Abramowitz & Stegun 7.1.26, the form PyTorch's vectorised CPU erf uses); odd; NaN
 *    gives NaN.
 *  - k_sum_f64, k_sum_sq_dev_f64, k_dot_f64: sums in double with 8 partial accumulators (an order
 * other than left to right, so that the adds are not one serial chain; each partial is still a
 * double). */
#ifndef HAP_KERN_MATH_H
#define HAP_KERN_MATH_H

#include <stdint.h>
#include <string.h>

/* Compile the marked function once per x86-64 vector width and pick one at load time (GNU
 * ifunc): an exp or erf loop runs 2-3x faster with AVX2 or AVX-512 than with the baseline's SSE2.
 * Results do not depend on the pick: no clone contracts a * b + c into an FMA (-std=c17 keeps
 * -ffp-contract=off) and each lane computes what the scalar code does. */
#if defined(__x86_64__) &&                                                                         \
    ((defined(__clang__) && __clang_major__ >= 14) || (!defined(__clang__) && defined(__GNUC__)))
#define K_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define K_VECTOR_CLONES
/* Sum of a[j] * b[j] over j < n, in double. */
static inline double k_dot_f64(const float *a, const float *b, int64_t n) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; k++)
      part[k] += (double)a[j + k] * b[j + k];
  double s = 0;
  for (; j < n; j++)
    s += (double)a[j] * b[j];
  for (int k = 0; k < 8; k++)
    s += part[k];
  return s;
}

#endif

/* 2^n for n in [-126, 127], by building the exponent bits. */
static inline float k_pow2i(int32_t n) {
  uint32_t bits = (uint32_t)(n + 127) << 23;
  float r;
  memcpy(&r, &bits, sizeof r);
  return r;
}

static inline float k_expf(float x) {
  /* clamp into the range where the two-factor scale below stays normal; NaN goes to -104 so the
   * integer conversion below stays defined (the NaN is returned at the end) */
  float xc = x > -104.0f ? x : -104.0f;
  xc = xc < 89.0f ? xc : 89.0f;
  /* n = round(x / ln 2) by the 1.5 x 2^23 shift (round to nearest even under the default mode) */
  const float shift = 12582912.0f;
  float n = (xc * 1.44269504088896341f + shift) - shift;
  /* r = x - n ln 2 in two parts (Cody & Waite), |r| <= ln 2 / 2 */
  float r = xc - n * 0.693145751953125f;
  r = r - n * 1.42860682030941723e-6f;
  /* e^r: Taylor to degree 7 (truncation below 5e-9 relative on |r| <= 0.347) */
  float p = 1.98412698e-4f;
  p = p * r + 1.38888889e-3f;
  p = p * r + 8.33333333e-3f;
  p = p * r + 4.16666667e-2f;
  p = p * r + 1.66666667e-1f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  /* 2^n as two normal factors (n in [-150, 129]): subnormal results and overflow come out of the
   * final products */
  int32_t ni = (int32_t)n, n1 = ni >> 1; /* floor(n / 2) */
  float y = p * k_pow2i(n1) * k_pow2i(ni - n1);
  y = x < -104.0f ? 0.0f : y;
  return x != x ? x : y; /* NaN in, NaN out */
}

static inline float k_erff(float x) {
  float a = x < 0 ? -x : x;
  /* |x| < 0.9: the Maclaurin series to x^19 (truncation below 2e-8) */
  float z = a * a, q = -1.45038522e-7f;
  q = q * z + 1.45891690e-6f;
  q = q * z - 1.32275132e-5f;
  q = q * z + 1.06837607e-4f;
  q = q * z - 7.57575758e-4f;
  q = q * z + 4.62962963e-3f;
  q = q * z - 2.38095238e-2f;
  q = q * z + 0.1f;
  q = q * z - 0.333333333f;
  q = q * z + 1.0f;
  float small = 1.12837917f * a * q;
  /* otherwise Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7) */
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  float large = 1.0f - p * t * k_expf(-z);
  float e = a < 0.9f ? small : large;
  e = x < 0 ? -e : e;
  return x != x ? x : e;
}

/* Sum of x[0 .. n) in double. */
static inline double k_sum_f64(const float *x, int64_t n) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; k++)
      part[k] += x[j + k];
  double s = 0;
  for (; j < n; j++)
    s += x[j];
  for (int k = 0; k < 8; k++)
    s += part[k];
  return s;
}

/* Sum of (x[j] - mean)^2 over j < n, in double. */
static inline double k_sum_sq_dev_f64(const float *x, int64_t n, double mean) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; k++) {
      double d = x[j + k] - mean;
      part[k] += d * d;
    }
  double s = 0;
  for (; j < n; j++) {
    double d = x[j] - mean;
    s += d * d;
  }
  for (int k = 0; k < 8; k++)
    s += part[k];
  return s;
}

/* Sum of a[j] * b[j] over j < n, in double. */
static inline double k_dot_f64(const float *a, const float *b, int64_t n) {
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; k++)
      part[k] += (double)a[j + k] * b[j + k];
  double s = 0;
  for (; j < n; j++)
    s += (double)a[j] * b[j];
  for (int k = 0; k < 8; k++)
    s += part[k];
  return s;
}

#endif
