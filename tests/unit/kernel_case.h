/* kernel_case.h — what the CPU-kernel tests (test_kernels.c, test_kernels_ref64.c) share: an op
 * case built input by input (kcase: the op, its attributes, its io, how each input's values are
 * drawn), builders of the cases both use, the SHAPE and value-list literals, and the xorshift
 * generator that draws the input values. Header-only (static inline), for Criterion test files.
 * Before including it, the includer defines KERNEL_CASE_RNG_SEED (the generator's start state:
 * each test process starts from it) and KERNEL_CASE_DROPOUT_SEED (every case's seed). */
#ifndef HAP_KERNEL_CASE_H
#define HAP_KERNEL_CASE_H

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#if !defined(KERNEL_CASE_RNG_SEED) || !defined(KERNEL_CASE_DROPOUT_SEED)
#error "define KERNEL_CASE_RNG_SEED and KERNEL_CASE_DROPOUT_SEED before including kernel_case.h"
#endif

/* ---- shapes ---------------------------------------------------------------------------------- */

static inline hap_shape mk_shape(const int64_t *d, size_t n) {
  hap_shape s = {.rank = (int32_t)n};
  for (size_t i = 0; i < n; i++)
    s.dims[i] = d[i];
  return s;
}
#define SHAPE(...)                                                                                 \
  mk_shape((const int64_t[]){__VA_ARGS__}, sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
static const hap_shape SCALAR = {.rank = 0};

static inline int64_t numel(const hap_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++)
    n *= s->dims[i];
  return n;
}

/* n zeroed elements of size bytes (at least one, so that an empty tensor has a buffer). */
static inline void *alloc(int64_t n, size_t size) {
  void *p = calloc((size_t)(n > 0 ? n : 1), size);
  cr_assert_not_null(p);
  return p;
}

/* ---- cases ----------------------------------------------------------------------------------- */

/* How float inputs are drawn: uniform in [-1, 1]; in [0.5, 1.5]; +-[0.1, 1] (away from relu's
 * kink); a shuffled grid of step 0.05 (no max_pool ties). */
enum { V_ANY, V_POS, V_AWAY0, V_DISTINCT };

/* One application of an op. Not copyable as is (io.attrs points into it). */
typedef struct kcase {
  hap_op op;
  hap_attrs attrs;
  hap_op_io io;
  int64_t int_hi[HAP_MAX_OP_INPUTS]; /* > 0: an int64 index input in [0, int_hi) */
  int kind[HAP_MAX_OP_INPUTS];       /* V_*: how a float input is drawn */
  double eps;                        /* test_kernels.c's finite-difference step */
  uint64_t seed;                     /* dropout masks */
} kcase;

/* A case of op with no inputs yet and default attributes. */
static inline void begin(kcase *c, hap_op op) {
  memset(c, 0, sizeof *c);
  c->op = op;
  hap_attrs_init(&c->attrs, op);
  c->io.attrs = &c->attrs;
  c->eps = 1e-2;
  c->seed = KERNEL_CASE_DROPOUT_SEED;
}

/* A float32 input that takes a gradient. */
static inline void in_f(kcase *c, hap_shape s) {
  int i = c->io.n_in++;
  c->io.in[i] = s;
  c->io.in_dtype[i] = HAP_F32;
  c->io.in_grad[i] = true;
}

/* An int64 index input with values in [0, hi). */
static inline void in_i(kcase *c, hap_shape s, int64_t hi) {
  int i = c->io.n_in++;
  c->io.in[i] = s;
  c->io.in_dtype[i] = HAP_I64;
  c->int_hi[i] = hi;
}

static inline void set_i(kcase *c, const char *name, int64_t v) {
  hap_err e = {0};
  cr_assert_eq(hap_attrs_set_int(&c->attrs, c->op, name, v, &e), HAP_OK, "%s", e.msg);
}
static inline void set_f(kcase *c, const char *name, double v) {
  hap_err e = {0};
  cr_assert_eq(hap_attrs_set_float(&c->attrs, c->op, name, v, &e), HAP_OK, "%s", e.msg);
}
static inline void set_s(kcase *c, const char *name, const char *v) {
  hap_err e = {0};
  cr_assert_eq(hap_attrs_set_str(&c->attrs, c->op, name, v, &e), HAP_OK, "%s", e.msg);
}
static inline void set_ints(kcase *c, const char *name, hap_shape v) {
  hap_err e = {0};
  cr_assert_eq(hap_attrs_set_ints(&c->attrs, c->op, name, v.dims, v.rank, &e), HAP_OK, "%s", e.msg);
}

/* Infer the outputs (must succeed). */
static inline void infer(kcase *c) {
  hap_err e = {0};
  cr_assert_eq(hap_op_infer(c->op, &c->io, &e), HAP_OK, "%s", e.msg);
}

/* einsum with equation eq on a and b. */
static inline void einsum_case(kcase *c, const char *eq, hap_shape a, hap_shape b) {
  begin(c, HAP_OP_EINSUM);
  set_s(c, "equation", eq);
  in_f(c, a);
  in_f(c, b);
}

/* multi_head_attention: query [n, l, e], key and value [n, s, e], in_proj weight and bias, out_proj
 * weight and bias, and with mask an additive [l, s] mask. */
static inline void mha_case(kcase *c, int64_t n, int64_t l, int64_t s, int64_t e, int64_t heads,
                            bool mask, double dropout) {
  begin(c, HAP_OP_MULTI_HEAD_ATTENTION);
  set_i(c, "heads", heads);
  set_f(c, "dropout", dropout);
  in_f(c, SHAPE(n, l, e));
  in_f(c, SHAPE(n, s, e));
  in_f(c, SHAPE(n, s, e));
  in_f(c, SHAPE(3, e, e));
  in_f(c, SHAPE(3, e));
  in_f(c, SHAPE(e, e));
  in_f(c, SHAPE(e));
  if (mask)
    in_f(c, SHAPE(l, s));
}

/* Value lists for hand-computed cases: VALS(D(1, 2), D(3)) is one list of doubles per input. */
#define VALS(...) ((const double *const[]){__VA_ARGS__})
#define D(...)    ((const double[]){__VA_ARGS__})

/* ---- values ---------------------------------------------------------------------------------- */

static uint64_t rng = KERNEL_CASE_RNG_SEED;
static inline uint64_t next_u64(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static inline double uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(next_u64() >> 11) * 0x1.0p-53;
}

/* Draw the n values of input k into x: int64 indices in [0, int_hi[k]) for an index input, else
 * float32 values as kind[k] says. */
static inline void kcase_draw(const kcase *c, int k, void *x, int64_t n) {
  if (c->int_hi[k] > 0) {
    int64_t *xi = x;
    for (int64_t f = 0; f < n; f++)
      xi[f] = (int64_t)(next_u64() % (uint64_t)c->int_hi[k]);
    return;
  }
  float *xf = x;
  for (int64_t f = 0; f < n; f++) {
    switch (c->kind[k]) {
    case V_POS: xf[f] = (float)uniform(0.5, 1.5); break;
    case V_AWAY0: xf[f] = (float)((next_u64() & 1 ? 1 : -1) * uniform(0.1, 1)); break;
    case V_DISTINCT: xf[f] = (float)(0.05 * (double)f - 1); break;
    default: xf[f] = (float)uniform(-1, 1); break;
    }
  }
  if (c->kind[k] == V_DISTINCT) /* shuffle the grid */
    for (int64_t f = n - 1; f > 0; f--) {
      int64_t g = (int64_t)(next_u64() % (uint64_t)(f + 1));
      float t = xf[f];
      xf[f] = xf[g];
      xf[g] = t;
    }
}

#endif
