/* half.c — float16 and bfloat16 conversions by bit manipulation (half.h). */
#include "kernels/half.h"

#include <string.h>

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* float32 fields: sign bit 31, exponent bits 23..30 (bias 127), mantissa bits 0..22.
 * float16 fields: sign bit 15, exponent bits 10..14 (bias 15), mantissa bits 0..9. */
#define F32_ABS_MASK  0x7FFFFFFFu
#define F32_INF       0x7F800000u
#define F32_QUIET     0x00400000u
#define F16_INF       0x7C00u
#define F16_QUIET     0x0200u
#define F16_OVERFLOW  0x477FF000u /* 65520 = 65504 + half an ulp: rounds (to even) to Inf */
#define F16_MIN_NORM  0x38800000u /* 2^-14 */
#define F16_MAX_BITS  0x477FE000u /* 65504, the largest finite half */
#define F16_HALF_TINY 0x33000000u /* 2^-25, half the smallest subnormal: rounds (to even) to 0 */

uint16_t hap_fp16_from_float(float x) {
  uint32_t u = bits_of(x);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & F32_ABS_MASK;
  if (a > F32_INF) /* NaN: quiet, keeps the payload's top bits */
    return (uint16_t)(sign | F16_INF | F16_QUIET | ((a >> 13) & 0x3FFu));
  if (a >= F16_OVERFLOW) /* Inf, or finite beyond the largest half */
    return (uint16_t)(sign | F16_INF);
  if (a >= F16_MIN_NORM) {
    /* rebias the exponent (127 -> 15) and drop 13 mantissa bits, rounding to nearest even; a
     * carry out of the mantissa increments the exponent, which is the right result */
    uint32_t r = a - ((127u - 15u) << 23);
    r += 0x0FFFu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
  }
  if (a <= F16_HALF_TINY) /* 0, or rounds to 0 */
    return sign;
  /* subnormal result: a = mant * 2^(e - 150), units of 2^-24: mant >> (126 - e) */
  uint32_t e = a >> 23;
  uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  uint32_t shift = 126u - e; /* 14 .. 24 for e in 102 .. 112 */
  uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u)))
    q++; /* may reach 0x400, the smallest normal: still the right encoding */
  return (uint16_t)(sign | q);
}

float hap_fp16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0x1F) /* Inf, or NaN (made quiet) */
    return float_of(sign | F32_INF | (m << 13) | (m ? F32_QUIET : 0));
  if (e == 0) {
    if (m == 0)
      return float_of(sign);
    /* subnormal m * 2^-24: normalise */
    uint32_t fe = 127u - 14u;
    while (!(m & 0x400u)) {
      m <<= 1;
      fe--;
    }
    return float_of(sign | (fe << 23) | ((m & 0x3FFu) << 13));
  }
  return float_of(sign | ((e + 127u - 15u) << 23) | (m << 13));
}

uint16_t hap_bf16_from_float(float x) {
  uint32_t u = bits_of(x);
  if ((u & F32_ABS_MASK) > F32_INF) /* NaN: rounding could carry it into Inf; keep it NaN */
    return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u); /* round to nearest even; overflow carries into Inf */
  return (uint16_t)(u >> 16);
}

float hap_bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  if ((u & F32_ABS_MASK) > F32_INF)
    u |= F32_QUIET;
  return float_of(u);
}

float hap_round_to(hap_dtype to, float x) {
  switch (to) {
  case HAP_F16: return hap_fp16_to_float(hap_fp16_from_float(x));
  case HAP_BF16: return hap_bf16_to_float(hap_bf16_from_float(x));
  default: return x;
  }
}

/* hap_round_to(HAP_BF16, .) on the bits, without branches (the loop below vectorises): a NaN keeps
 * its top bits and becomes quiet, anything else rounds to nearest even (overflow carries into
 * Inf). In place; returns true when every result is finite. */
static bool round_bf16_array(float *v, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &v[i], sizeof u);
    uint32_t nan = (u & F32_ABS_MASK) > F32_INF;
    uint32_t quiet = (u | F32_QUIET) & 0xFFFF0000u;
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    uint32_t r = nan ? quiet : rounded;
    bad |= (r & F32_INF) == F32_INF;
    memcpy(&v[i], &r, sizeof r);
  }
  return !bad;
}

/* hap_round_to(HAP_F16, .) without branches, each case computed and one selected: NaN (quiet,
 * the top 10 payload bits kept); a float16 subnormal or zero (below 2^-14: 0.5 + |x| rounds |x| to
 * a multiple of 2^-24, float16's subnormal step, to nearest even in float32 arithmetic, and
 * subtracting 0.5 is exact); a normal (13 mantissa bits dropped to nearest even, a carry moving
 * the exponent); beyond 65504 after rounding, Inf. In place; true when every result is finite. */
static bool round_fp16_array(float *v, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &v[i], sizeof u);
    uint32_t sign = u & ~F32_ABS_MASK, a = u & F32_ABS_MASK;
    /* all-ones masks of the cases (selects as bit operations: the loop stays branch-free) */
    uint32_t is_nan = 0u - (uint32_t)(a > F32_INF), is_tiny = 0u - (uint32_t)(a < F16_MIN_NORM);
    float tiny_f;
    uint32_t tiny_a = a & is_tiny; /* the subnormal path's input */
    memcpy(&tiny_f, &tiny_a, sizeof tiny_f);
    tiny_f = (tiny_f + 0.5f) - 0.5f;
    uint32_t tiny;
    memcpy(&tiny, &tiny_f, sizeof tiny);
    uint32_t normal = (a + 0xFFFu + ((a >> 13) & 1u)) & ~0x1FFFu;
    uint32_t over = 0u - (uint32_t)(normal > F16_MAX_BITS);
    normal = (normal & ~over) | (F32_INF & over);
    uint32_t finite = sign | (tiny & is_tiny) | (normal & ~is_tiny);
    uint32_t r = (((u & 0xFFFFE000u) | F32_QUIET) & is_nan) | (finite & ~is_nan);
    bad |= (r & F32_INF) == F32_INF;
    memcpy(&v[i], &r, sizeof r);
  }
  return !bad;
}

bool hap_round_array(hap_dtype to, float *v, int64_t n) {
  if (to == HAP_BF16)
    return round_bf16_array(v, n);
  if (to == HAP_F16)
    return round_fp16_array(v, n);
  return hap_all_finite(v, n);
}

bool hap_all_finite(const float *v, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; i++) /* exponent all ones: Inf or NaN */
    bad |= (bits_of(v[i]) & F32_INF) == F32_INF;
  return !bad;
}
