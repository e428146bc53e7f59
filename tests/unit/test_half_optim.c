/* test_half_optim.c — kernels/half.h (float16 / bfloat16 conversions: every bit pattern, ties to
 * even, millions of random floats against a double-arithmetic reference) and kernels/optim.h (each
 * optimizer against a float64 re-derivation, Adam's first step, AdamW's decay, loss-scale undoing,
 * SGD's bit identity with hap_kernel_sgd, the dynamic loss scaler). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kernels/optim.h"

static uint32_t fbits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float bitsf(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static uint64_t rng_state = 0x243F6A8885A308D3ULL;
static uint64_t next_u64(void) { /* SplitMix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
static double uniform(double lo, double hi) { /* [lo, hi) */
  return lo + (hi - lo) * (double)(next_u64() >> 11) * 0x1p-53;
}

static bool f16_is_nan(uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; }
static bool bf16_is_nan(uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x7Fu) != 0; }

/* ---- every bit pattern ----------------------------------------------------------------------- */

Test(half, every_fp16_pattern_round_trips) {
  int nans = 0;
  for (uint32_t h = 0; h <= 0xFFFFu; h++) {
    float f = hap_fp16_to_float((uint16_t)h);
    uint16_t back = hap_fp16_from_float(f);
    if (f16_is_nan((uint16_t)h)) {
      nans++;
      cr_assert(isnan(f), "fp16 0x%04x is a NaN, to float gives %g", h, (double)f);
      cr_assert(f16_is_nan(back) && (back & 0x8000u) == (h & 0x8000u),
                "fp16 NaN 0x%04x comes back as 0x%04x", h, back);
      cr_assert(back & 0x0200u, "fp16 NaN 0x%04x comes back as 0x%04x, not quiet", h, back);
    } else {
      cr_assert_eq(back, h, "fp16 0x%04x -> %.9g -> 0x%04x", h, (double)f, back);
    }
  }
  cr_assert_eq(nans, 2 * 1023);
  /* a few values by hand */
  cr_assert(hap_fp16_to_float(0x3C00) == 1.0f);
  cr_assert(hap_fp16_to_float(0x7BFF) == 65504.0f);
  cr_assert(hap_fp16_to_float(0x0001) == 0x1p-24f);
  cr_assert(hap_fp16_to_float(0x0400) == 0x1p-14f);
  cr_assert(hap_fp16_to_float(0x03FF) == 0x1.ff8p-15f);
  cr_assert(hap_fp16_to_float(0xC000) == -2.0f);
  cr_assert(isinf(hap_fp16_to_float(0xFC00)) && hap_fp16_to_float(0xFC00) < 0);
  cr_assert_eq(fbits(hap_fp16_to_float(0x8000)), 0x80000000u, "-0 stays -0");
}

Test(half, every_bf16_pattern_round_trips) {
  int nans = 0;
  for (uint32_t b = 0; b <= 0xFFFFu; b++) {
    float f = hap_bf16_to_float((uint16_t)b);
    uint16_t back = hap_bf16_from_float(f);
    if (bf16_is_nan((uint16_t)b)) {
      nans++;
      cr_assert(isnan(f), "bf16 0x%04x is a NaN, to float gives %g", b, (double)f);
      cr_assert(bf16_is_nan(back) && (back & 0x8000u) == (b & 0x8000u),
                "bf16 NaN 0x%04x comes back as 0x%04x", b, back);
    } else {
      cr_assert_eq(back, b, "bf16 0x%04x -> %.9g -> 0x%04x", b, (double)f, back);
      cr_assert_eq(fbits(f), b << 16, "bf16 0x%04x is the top half of a float", b);
    }
  }
  cr_assert_eq(nans, 2 * 127);
}

/* NaNs whose payload lies in bits a conversion drops stay NaN (not Inf), quiet, with their sign. */
Test(half, nans_stay_nans) {
  uint32_t pats[] = {0x7F800001u, 0xFF800001u, 0x7F800100u, 0x7FC00000u,
                     0xFFFFFFFFu, 0x7FFFFFFFu, 0x7F80FFFFu, 0xFF801000u};
  for (size_t i = 0; i < sizeof pats / sizeof pats[0]; i++) {
    float x = bitsf(pats[i]);
    uint16_t h = hap_fp16_from_float(x), b = hap_bf16_from_float(x);
    uint16_t sign = (uint16_t)((pats[i] >> 16) & 0x8000u);
    cr_assert(f16_is_nan(h) && (h & 0x8000u) == sign && (h & 0x0200u), "0x%08x -> fp16 0x%04x",
              pats[i], h);
    cr_assert(bf16_is_nan(b) && (b & 0x8000u) == sign && (b & 0x0040u), "0x%08x -> bf16 0x%04x",
              pats[i], b);
    cr_assert(isnan(hap_round_to(HAP_F16, x)) && isnan(hap_round_to(HAP_BF16, x)));
  }
}

/* ---- ties to even ------------------------------------------------------------------------------
 */

/* Every pair of neighbouring finite fp16 values (subnormals included, both signs): their midpoint
 * goes to the one with an even mantissa, a float32 ulp either side to the nearer one. */
Test(half, fp16_ties_to_even) {
  for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u)
    for (uint32_t h = 0; h < 0x7BFFu; h++) {
      uint16_t lo = (uint16_t)(sign | h), hi = (uint16_t)(sign | (h + 1));
      double a = hap_fp16_to_float(lo), b = hap_fp16_to_float(hi);
      float mid = (float)((a + b) / 2); /* 12 significant bits: exact in float */
      cr_assert((double)mid == (a + b) / 2);
      uint16_t even = (h & 1u) ? hi : lo;
      cr_assert_eq(hap_fp16_from_float(mid), even, "midpoint %.9g of 0x%04x and 0x%04x -> 0x%04x",
                   (double)mid, lo, hi, hap_fp16_from_float(mid));
      float toward_lo = nextafterf(mid, (float)a), toward_hi = nextafterf(mid, (float)b);
      cr_assert_eq(hap_fp16_from_float(toward_lo), lo, "just below the midpoint of 0x%04x", lo);
      cr_assert_eq(hap_fp16_from_float(toward_hi), hi, "just above the midpoint of 0x%04x", lo);
    }
  /* the overflow boundary: 65520 is halfway between 65504 (odd mantissa) and 2^16 */
  cr_assert_eq(hap_fp16_from_float(65520.0f), 0x7C00);
  cr_assert_eq(hap_fp16_from_float(-65520.0f), 0xFC00);
  cr_assert_eq(hap_fp16_from_float(nextafterf(65520.0f, 0)), 0x7BFF);
  cr_assert_eq(hap_fp16_from_float(-nextafterf(65520.0f, 0)), 0xFBFF);
  cr_assert_eq(hap_fp16_from_float(1e30f), 0x7C00);
  cr_assert_eq(hap_fp16_from_float(INFINITY), 0x7C00);
  cr_assert_eq(hap_fp16_from_float(-INFINITY), 0xFC00);
  /* half the smallest subnormal ties to 0; just above it goes to the subnormal; -0 stays -0 */
  cr_assert_eq(hap_fp16_from_float(0x1p-25f), 0x0000);
  cr_assert_eq(hap_fp16_from_float(-0x1p-25f), 0x8000);
  cr_assert_eq(hap_fp16_from_float(nextafterf(0x1p-25f, 1)), 0x0001);
  cr_assert_eq(hap_fp16_from_float(0x1.8p-24f), 0x0002, "1.5 subnormal units: tie to 2");
  cr_assert_eq(hap_fp16_from_float(-0.0f), 0x8000);
  cr_assert_eq(hap_fp16_from_float(1e-30f), 0x0000);
  /* the largest subnormal rounds up into the smallest normal */
  cr_assert_eq(hap_fp16_from_float(nextafterf(0x1p-14f, 0)), 0x0400);
}

Test(half, bf16_ties_to_even) {
  for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u)
    for (uint32_t b = 0; b < 0x7F7Fu; b++) {
      uint32_t lo = sign | b, hi = sign | (b + 1);
      float mid = bitsf((lo << 16) | 0x8000u);
      cr_assert((double)mid ==
                ((double)hap_bf16_to_float((uint16_t)lo) + hap_bf16_to_float((uint16_t)hi)) / 2);
      uint32_t even = (b & 1u) ? hi : lo;
      cr_assert_eq(hap_bf16_from_float(mid), even, "midpoint of 0x%04x and 0x%04x -> 0x%04x", lo,
                   hi, hap_bf16_from_float(mid));
      cr_assert_eq(hap_bf16_from_float(bitsf((lo << 16) | 0x7FFFu)), lo);
      cr_assert_eq(hap_bf16_from_float(bitsf((lo << 16) | 0x8001u)), hi);
    }
  /* beyond the largest finite bf16 (0x7F7F, odd): the midpoint and above overflow */
  cr_assert_eq(hap_bf16_from_float(bitsf(0x7F7F8000u)), 0x7F80);
  cr_assert_eq(hap_bf16_from_float(bitsf(0x7F7F7FFFu)), 0x7F7F);
  cr_assert_eq(hap_bf16_from_float(bitsf(0xFF7FFFFFu)), 0xFF80);
  cr_assert_eq(hap_bf16_from_float(-0.0f), 0x8000);
  cr_assert_eq(hap_bf16_from_float(bitsf(0x00008000u)), 0x0000, "float subnormal tie to 0");
  cr_assert_eq(hap_bf16_from_float(bitsf(0x00018000u)), 0x0002, "float subnormal tie to even");
}

/* ---- random floats against a reference in double -------------------------------------------- */

/* x rounded to a binary format with `mant` stored mantissa bits, smallest normal exponent emin and
 * largest finite value max, by double arithmetic: the nearest multiple of the spacing at x's
 * binade (clamped at emin for subnormals), ties to even (rint in the default rounding mode). */
static float reference_round(float x, int mant, int emin, double max) {
  if (isnan(x))
    return x;
  if (isinf(x) || x == 0)
    return x;
  double a = fabs((double)x);
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  int ex = e - 1 < emin ? emin : e - 1;
  double spacing = ldexp(1.0, ex - mant);
  double r = rint(a / spacing) * spacing; /* a / spacing is exact: a power-of-two divisor */
  if (r > max)
    r = INFINITY;
  return (float)copysign(r, (double)x);
}

static void sweep(hap_dtype to, int64_t n_samples) {
  bool f16 = to == HAP_F16;
  int mant = f16 ? 10 : 7, emin = f16 ? -14 : -126;
  double max = f16 ? 65504.0 : ldexp(2.0 - ldexp(1.0, -7), 127);
  int64_t ties = 0, subnormal = 0;
  for (int64_t i = 0; i < n_samples; i++) {
    uint32_t u = (uint32_t)next_u64();
    switch (i % 4) {
    case 0: /* any pattern */ break;
    case 1: /* exponents around the format's range (fp16: 2^-27 .. 2^17) */
      u = (u & 0x807FFFFFu) | ((uint32_t)(f16 ? 100 + (u >> 8) % 45 : 1 + (u >> 8) % 254) << 23);
      break;
    case 2: /* exact ties and their neighbours: the dropped bits are 1000...0 +- 1 */
      u = (u & 0x807FFFFFu) | ((uint32_t)(f16 ? 100 + (u >> 8) % 45 : (u >> 8) % 255) << 23);
      {
        uint32_t drop = f16 ? 13 : 16, exp = (u >> 23) & 0xFF;
        if (f16 && exp < 113) /* a subnormal float16 keeps fewer bits */
          drop += 113 - exp;
        if (drop < 24) {
          u = (u & ~((1u << drop) - 1u)) | (1u << (drop - 1));
          u += (uint32_t)(i / 4 % 3) - 1u; /* -1, 0, +1 */
          ties++;
        }
      }
      break;
    default: /* float32 subnormals and tiny values */ u &= 0x80FFFFFFu; break;
    }
    float x = bitsf(u);
    float want = reference_round(x, mant, emin, max);
    float got = hap_round_to(to, x);
    subnormal += fabsf(want) < (f16 ? 0x1p-14f : 0x1p-126f) && want != 0;
    if (isnan(x)) {
      cr_assert(isnan(got), "%s of NaN 0x%08x: 0x%08x", hap_dtype_name(to), u, fbits(got));
      continue;
    }
    cr_assert_eq(fbits(got), fbits(want), "%s of %.9g (0x%08x): %.9g (0x%08x), expected %.9g",
                 hap_dtype_name(to), (double)x, u, (double)got, fbits(got), (double)want);
  }
  cr_assert_gt(ties, n_samples / 16, "ties exercised: %lld", (long long)ties);
  cr_assert_gt(subnormal, n_samples / 100, "subnormal results: %lld", (long long)subnormal);
}

Test(half, fp16_random_floats_match_the_reference) { sweep(HAP_F16, 4000000); }
Test(half, bf16_random_floats_match_the_reference) { sweep(HAP_BF16, 4000000); }

/* The array path of bfloat16 (branch-free, vectorised) against the scalar conversion, on random
 * patterns and on the special values (NaNs of both signs and payloads, Infs, the largest finite,
 * ties, subnormals, zeros). */
Test(half, bf16_round_array_matches_the_scalar_conversion) {
  enum { N = 1 << 16 };
  static float v[N], w[N];
  static const uint32_t special[] = {0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0xFF80FFFFu,
                                     0x7F800000u, 0xFF800000u, 0x7F7FFFFFu, 0xFF7FFFFFu,
                                     0x7F7F7FFFu, 0x3F808000u, 0x3F818000u, 0x00000001u,
                                     0x80008000u, 0x00000000u, 0x80000000u};
  int n_special = (int)(sizeof special / sizeof special[0]);
  for (int i = 0; i < N; i++)
    v[i] = bitsf(i < n_special ? special[i] : (uint32_t)next_u64());
  memcpy(w, v, sizeof v);
  bool finite = hap_round_array(HAP_BF16, w, N);
  bool want_finite = true;
  for (int i = 0; i < N; i++) {
    uint32_t want = fbits(hap_round_to(HAP_BF16, v[i]));
    want_finite &= (want & 0x7F800000u) != 0x7F800000u;
    cr_assert_eq(fbits(w[i]), want, "0x%08x: 0x%08x, expected 0x%08x", fbits(v[i]), fbits(w[i]),
                 want);
  }
  cr_assert_not(finite, "the NaNs and Infs are not finite");
  cr_assert_not(want_finite);
  for (int i = 0; i < N; i++) /* exponent bit 7 clear: below 2, all finite */
    w[i] = bitsf(fbits(v[i]) & 0xBFFFFFFFu);
  cr_assert(hap_round_array(HAP_BF16, w, N));
}

/* The array path of float16 (branch-free, vectorised) against the scalar conversion: random
 * patterns, half of them with exponents around float16's range (subnormals, ties, the overflow
 * edge), and the special values. */
Test(half, fp16_round_array_matches_the_scalar_conversion) {
  enum { N = 1 << 18 };
  static float v[N], w[N];
  static const uint32_t special[] = {
      0x7FC00000u, 0xFFC00001u, 0x7F800001u, 0xFF80FFFFu, 0x7F800000u, 0xFF800000u, 0x477FE000u,
      0x477FEFFFu, 0x477FF000u, 0xC77FF000u, 0x38800000u, 0x387FFFFFu, 0x33000000u, 0x33000001u,
      0x33800000u, 0x00000001u, 0x80000000u, 0x00000000u, 0x3F801000u, 0x3F803000u};
  int n_special = (int)(sizeof special / sizeof special[0]);
  for (int i = 0; i < N; i++) {
    uint32_t u = (uint32_t)next_u64();
    if (i % 2) /* exponents 2^-27 .. 2^17 */
      u = (u & 0x807FFFFFu) | ((uint32_t)(100 + (u >> 8) % 45) << 23);
    v[i] = bitsf(i < n_special ? special[i] : u);
  }
  memcpy(w, v, sizeof v);
  cr_assert_not(hap_round_array(HAP_F16, w, N), "the NaNs, Infs and overflows are not finite");
  for (int i = 0; i < N; i++) {
    uint32_t want = fbits(hap_round_to(HAP_F16, v[i]));
    cr_assert_eq(fbits(w[i]), want, "0x%08x: 0x%08x, expected 0x%08x", fbits(v[i]), fbits(w[i]),
                 want);
  }
  for (int i = 0; i < N; i++) /* exponents below 2^15: all finite */
    w[i] = bitsf((fbits(v[i]) & 0x807FFFFFu) | ((fbits(v[i]) >> 23 & 0xFFu) % 142u) << 23);
  cr_assert(hap_round_array(HAP_F16, w, N));
}

Test(half, round_array_and_all_finite) {
  float v[6] = {1.0f, 0.1f, 70000.0f, -3.0e-8f, 1e-3f, 123.456f};
  float w[6];
  memcpy(w, v, sizeof v);
  cr_assert_not(hap_round_array(HAP_F16, w, 6), "70000 overflows float16");
  cr_assert(isinf(w[2]));
  for (int i = 0; i < 6; i++)
    cr_assert_eq(fbits(w[i]), fbits(hap_round_to(HAP_F16, v[i])), "element %d", i);
  memcpy(w, v, sizeof v);
  cr_assert(hap_round_array(HAP_BF16, w, 6));
  cr_assert(w[1] == 0.10009765625f, "0.1 in bf16 is 0.10009765625, got %.9g", (double)w[1]);
  memcpy(w, v, sizeof v);
  cr_assert(hap_round_array(HAP_F32, w, 6), "fp32: unchanged");
  cr_assert(memcmp(w, v, sizeof v) == 0);
  cr_assert(hap_round_to(HAP_F32, 0.1f) == 0.1f);
  cr_assert(hap_all_finite(v, 6));
  cr_assert(hap_all_finite(v, 0));
  v[5] = NAN;
  cr_assert_not(hap_all_finite(v, 6));
  cr_assert(hap_all_finite(v, 5));
  v[5] = -INFINITY;
  cr_assert_not(hap_all_finite(v, 6));
  v[5] = 3.4e38f;
  cr_assert(hap_all_finite(v, 6));
}

/* ---- optimizers -------------------------------------------------------------------------------
 */

#define N     257
#define STEPS 6

typedef struct fixture {
  float w[N], m[N], v[N], w0[N];
  float grad[STEPS][N];
  double wd[N], md[N], vd[N]; /* the float64 re-derivation */
} fixture;

static void fixture_init(fixture *f) {
  memset(f, 0, sizeof *f);
  for (int i = 0; i < N; i++) {
    f->w[i] = f->w0[i] = (float)uniform(-1, 1);
    f->wd[i] = f->w[i];
    for (int s = 0; s < STEPS; s++) /* magnitudes over four decades */
      f->grad[s][i] = (float)(uniform(-1, 1) * pow(10, uniform(-3, 1)));
  }
}

/* The float64 re-derivation of step t (1-based) of optimizer o, straight from the formulas. */
static void reference_step(fixture *f, hap_optimizer o, const hap_optim_hyper *h, int t) {
  for (int i = 0; i < N; i++) {
    double g = f->grad[t - 1][i];
    if (o == HAP_OPT_SGD) {
      f->wd[i] -= h->lr * g;
    } else if (o == HAP_OPT_MOMENTUM) {
      f->md[i] = h->momentum * f->md[i] + g;
      f->wd[i] -= h->lr * f->md[i];
    } else {
      if (o == HAP_OPT_ADAMW)
        f->wd[i] -= h->lr * h->weight_decay * f->wd[i];
      f->md[i] = h->beta1 * f->md[i] + (1 - h->beta1) * g;
      f->vd[i] = h->beta2 * f->vd[i] + (1 - h->beta2) * g * g;
      double mh = f->md[i] / (1 - pow(h->beta1, t)), vh = f->vd[i] / (1 - pow(h->beta2, t));
      f->wd[i] -= h->lr * mh / (sqrt(vh) + h->eps);
    }
  }
}

/* Several steps of o on float32 state against the float64 re-derivation: the difference is the
 * float32 storage of w, m and v, a few float32 ulps of w per step and ~1e-6 of the displacement. */
static void against_float64(hap_optimizer o) {
  fixture *f = malloc(sizeof *f);
  cr_assert_not_null(f);
  fixture_init(f);
  hap_optim_hyper h = hap_optim_defaults(1e-2);
  int nb = hap_optim_state_buffers(o);
  double worst = 0;
  for (int t = 1; t <= STEPS; t++) {
    hap_optim_step(o, &h, t, f->w, f->grad[t - 1], 1.0, nb >= 1 ? f->m : NULL,
                   nb >= 2 ? f->v : NULL, N);
    reference_step(f, o, &h, t);
    for (int i = 0; i < N; i++) {
      double moved = fabs(f->wd[i] - f->w0[i]);
      double tol = 1e-5 * moved + 2.0 * t * 0x1p-24 * fabs(f->wd[i]);
      double err = fabs((double)f->w[i] - f->wd[i]);
      worst = fmax(worst, err / tol);
      cr_assert_leq(err, tol, "%s step %d element %d: %.9g, float64 %.12g (moved %.3g)",
                    hap_optimizer_name(o), t, i, (double)f->w[i], f->wd[i], moved);
    }
  }
  cr_assert_gt(worst, 0, "%s: the runs should differ somewhere in the last bits",
               hap_optimizer_name(o));
  free(f);
}

Test(optim, sgd_against_float64) { against_float64(HAP_OPT_SGD); }
Test(optim, momentum_against_float64) { against_float64(HAP_OPT_MOMENTUM); }
Test(optim, adam_against_float64) { against_float64(HAP_OPT_ADAM); }
Test(optim, adamw_against_float64) { against_float64(HAP_OPT_ADAMW); }

Test(optim, state_buffers) {
  cr_assert_eq(hap_optim_state_buffers(HAP_OPT_SGD), 0);
  cr_assert_eq(hap_optim_state_buffers(HAP_OPT_MOMENTUM), 1);
  cr_assert_eq(hap_optim_state_buffers(HAP_OPT_ADAM), 2);
  cr_assert_eq(hap_optim_state_buffers(HAP_OPT_ADAMW), 2);
  hap_optim_hyper h = hap_optim_defaults(0.25);
  cr_assert(h.lr == 0.25 && h.momentum == 0.9 && h.beta1 == 0.9 && h.beta2 == 0.999 &&
            h.eps == 1e-8 && h.weight_decay == 0.01);
}

/* SGD at grad_scale 1 is hap_kernel_sgd bit for bit, at a learning rate that is no power of two. */
Test(optim, sgd_is_hap_kernel_sgd) {
  fixture *f = malloc(sizeof *f);
  cr_assert_not_null(f);
  fixture_init(f);
  float mine[N], theirs[N];
  memcpy(mine, f->w, sizeof mine);
  memcpy(theirs, f->w, sizeof theirs);
  hap_optim_hyper h = hap_optim_defaults(0.0123);
  for (int t = 1; t <= STEPS; t++) {
    hap_optim_step(HAP_OPT_SGD, &h, t, mine, f->grad[t - 1], 1.0, NULL, NULL, N);
    hap_kernel_sgd(theirs, f->grad[t - 1], (float)0.0123, N);
  }
  cr_assert(memcmp(mine, theirs, sizeof mine) == 0);
  cr_assert(memcmp(mine, f->w, sizeof mine) != 0, "the values moved");
  free(f);
}

/* Adam's first step: m/(1-b1) = g and v/(1-b2) = g^2, so each element moves by lr * g/(|g|+eps),
 * lr * sign(g) to ~eps/|g|, whatever |g| is. */
Test(optim, adam_first_step_moves_by_lr) {
  fixture *f = malloc(sizeof *f);
  cr_assert_not_null(f);
  fixture_init(f);
  double lr = 1e-2;
  hap_optim_hyper h = hap_optim_defaults(lr);
  hap_optim_step(HAP_OPT_ADAM, &h, 1, f->w, f->grad[0], 1.0, f->m, f->v, N);
  for (int i = 0; i < N; i++) {
    double g = f->grad[0][i], moved = (double)f->w[i] - f->w0[i];
    double want = -lr * (g > 0 ? 1 : -1);
    double tol = 2 * 0x1p-24 * fabs((double)f->w0[i]) + lr * (1e-6 + 2 * h.eps / fabs(g));
    cr_assert_leq(fabs(moved - want), tol, "element %d (g %.3g): moved %.9g, expected %.9g", i, g,
                  moved, want);
    cr_assert(f->m[i] == (float)((1 - 0.9) * g), "m after one step is (1 - b1) g");
  }
  free(f);
}

/* AdamW with a zero gradient moves only by its decay, w (1 - lr wd); Adam does not move. */
Test(optim, adamw_decay) {
  float w[4] = {1.0f, -2.0f, 0.5f, 100.0f}, wa[4], zero[4] = {0}, m[4] = {0}, v[4] = {0};
  memcpy(wa, w, sizeof w);
  hap_optim_hyper h = hap_optim_defaults(0.1);
  h.weight_decay = 0.05;
  for (int t = 1; t <= 3; t++)
    hap_optim_step(HAP_OPT_ADAMW, &h, t, w, zero, 1.0, m, v, 4);
  double shrink = pow(1 - 0.1 * 0.05, 3);
  double start[4] = {1.0, -2.0, 0.5, 100.0};
  for (int i = 0; i < 4; i++)
    cr_assert_float_eq((double)w[i], start[i] * shrink, 4 * 0x1p-24 * fabs(start[i]),
                       "element %d: %.9g, expected %.9g", i, (double)w[i], start[i] * shrink);
  memset(m, 0, sizeof m);
  memset(v, 0, sizeof v);
  for (int t = 1; t <= 3; t++)
    hap_optim_step(HAP_OPT_ADAM, &h, t, wa, zero, 1.0, m, v, 4);
  for (int i = 0; i < 4; i++)
    cr_assert(wa[i] == (float)start[i], "Adam ignores weight_decay");
  /* with a gradient: AdamW's step is Adam's less lr wd w */
  float a[2] = {0.75f, -0.25f}, b[2] = {0.75f, -0.25f}, g[2] = {0.3f, -0.02f};
  float ma[2] = {0}, va[2] = {0}, mb[2] = {0}, vb[2] = {0};
  hap_optim_step(HAP_OPT_ADAM, &h, 1, a, g, 1.0, ma, va, 2);
  hap_optim_step(HAP_OPT_ADAMW, &h, 1, b, g, 1.0, mb, vb, 2);
  cr_assert_float_eq((double)b[0] - a[0], -0.1 * 0.05 * 0.75, 1e-7);
  cr_assert_float_eq((double)b[1] - a[1], -0.1 * 0.05 * -0.25, 1e-7);
}

/* Gradients scaled by a power of two S and stepped with grad_scale 1/S give exactly the unscaled
 * step, for every optimizer (the scaling is exact in double; SGD's (float)(g S / S) is g). */
Test(optim, grad_scale_undoes_a_loss_scale) {
  for (int o = 0; o < HAP_OPT_COUNT; o++) {
    fixture *f = malloc(sizeof *f), *s = malloc(sizeof *s);
    cr_assert(f && s);
    fixture_init(f);
    memcpy(s, f, sizeof *s);
    for (int t = 0; t < STEPS; t++)
      for (int i = 0; i < N; i++)
        s->grad[t][i] = f->grad[t][i] * 1024.0f;
    hap_optim_hyper h = hap_optim_defaults(3e-3);
    for (int t = 1; t <= STEPS; t++) {
      hap_optim_step((hap_optimizer)o, &h, t, f->w, f->grad[t - 1], 1.0, f->m, f->v, N);
      hap_optim_step((hap_optimizer)o, &h, t, s->w, s->grad[t - 1], 1.0 / 1024, s->m, s->v, N);
    }
    cr_assert(memcmp(f->w, s->w, sizeof f->w) == 0, "%s", hap_optimizer_name((hap_optimizer)o));
    cr_assert(memcmp(f->m, s->m, sizeof f->m) == 0, "%s", hap_optimizer_name((hap_optimizer)o));
    /* and a scale that is no power of two still undoes it to float32 rounding */
    float w3[N];
    memcpy(w3, f->w0, sizeof w3);
    float g3[N], m3[N] = {0}, v3[N] = {0}, m1[N] = {0}, v1[N] = {0}, w1[N];
    memcpy(w1, f->w0, sizeof w1);
    for (int i = 0; i < N; i++)
      g3[i] = f->grad[0][i] * 3.0f;
    hap_optim_step((hap_optimizer)o, &h, 1, w3, g3, 1.0 / 3, m3, v3, N);
    hap_optim_step((hap_optimizer)o, &h, 1, w1, f->grad[0], 1.0, m1, v1, N);
    for (int i = 0; i < N; i++)
      cr_assert_float_eq((double)w3[i], (double)w1[i],
                         2 * 0x1p-24 * fabs((double)w1[i]) + 1e-7 * fabs((double)w1[i] - f->w0[i]) +
                             1e-12,
                         "%s element %d", hap_optimizer_name((hap_optimizer)o), i);
    free(f);
    free(s);
  }
}

/* ---- the loss scaler --------------------------------------------------------------------------
 */

Test(optim, loss_scaler_start) {
  hap_loss_scaler s = hap_loss_scaler_start(HAP_PREC_FP16);
  cr_assert(s.dynamic && s.scale == 65536.0 && s.good_steps == 0);
  for (int p = HAP_PREC_FP32; p < HAP_PREC_COUNT; p++) {
    if (p == HAP_PREC_FP16)
      continue;
    s = hap_loss_scaler_start((hap_precision)p);
    cr_assert(!s.dynamic && s.scale == 1.0, "%s", hap_precision_name((hap_precision)p));
    hap_loss_scaler_after(&s, true);
    hap_loss_scaler_after(&s, false);
    cr_assert(s.scale == 1.0 && s.good_steps == 0, "a static scaler never changes");
  }
}

Test(optim, loss_scaler_halves_and_doubles) {
  hap_loss_scaler s = hap_loss_scaler_start(HAP_PREC_FP16);
  hap_loss_scaler_after(&s, true);
  cr_assert(s.scale == 32768.0 && s.good_steps == 0);
  for (int i = 1; i < HAP_LOSS_SCALE_WINDOW; i++) {
    hap_loss_scaler_after(&s, false);
    cr_assert(s.scale == 32768.0 && s.good_steps == i);
  }
  hap_loss_scaler_after(&s, false);
  cr_assert(s.scale == 65536.0 && s.good_steps == 0, "doubled after %d good steps: %g",
            HAP_LOSS_SCALE_WINDOW, s.scale);
  /* an overflow inside a window resets the count */
  for (int i = 0; i < 10; i++)
    hap_loss_scaler_after(&s, false);
  hap_loss_scaler_after(&s, true);
  cr_assert(s.scale == 32768.0 && s.good_steps == 0);
  /* repeated overflows stop at 1 */
  for (int i = 0; i < 40; i++)
    hap_loss_scaler_after(&s, true);
  cr_assert(s.scale == 1.0, "scale %g", s.scale);
}
