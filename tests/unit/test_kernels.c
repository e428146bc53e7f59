/* test_kernels.c — the CPU kernels (kernels.h): forward against hand-computed values, backward
 * against central finite differences, and for every sharding variant of every op (model/sharding.h)
 * at uneven and empty shard lengths: the per-device forward outputs combined by their layouts
 * equal the unsharded forward, and the per-device input gradients combined by the dual layouts
 * equal the unsharded backward. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/sharding.h"

#define KERNEL_CASE_RNG_SEED     0x9e3779b97f4a7c15ULL /* the input values */
#define KERNEL_CASE_DROPOUT_SEED 12345
#include "kernel_case.h"

#ifdef HAP_TEST_KX
/* test_kernels_kx (tests/CMakeLists.txt): every forward and backward call below of an op with
 * a GPU kernel program (kx/kx.h) runs both the CPU kernel and the program on the host and
 * checks that they agree (same status; values within 1e-5 of the tensor's largest); the tests
 * then check the program's results. Ops without a program run the CPU kernel alone. */
#include "kx/kx.h"

static size_t kx_bytes(const hap_shape *s, hap_dtype dt) {
  int64_t n = numel(s);
  return (size_t)(n > 0 ? n : 0) * (size_t)hap_dtype_size(dt);
}

static void kx_compare(const char *what, const hap_kernel_call *c, int k, const void *got,
                       const void *want, size_t bytes, bool is_float) {
  if (!is_float) {
    cr_assert(memcmp(got, want, bytes) == 0, "%s %s %d: program differs from the CPU kernel",
              hap_op_name(c->op), what, k);
    return;
  }
  const float *g = got, *w = want;
  size_t n = bytes / sizeof(float);
  double scale = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(w[i]))
      scale = fmax(scale, fabs((double)w[i]));
  for (size_t i = 0; i < n; i++) {
    bool same = (isnan(g[i]) && isnan(w[i])) || g[i] == w[i] ||
                fabs((double)g[i] - w[i]) <= 1e-5 * scale + 1e-7;
    cr_assert(same, "%s %s %d element %zu: program %.9g, CPU kernel %.9g", hap_op_name(c->op), what,
              k, i, g[i], w[i]);
  }
}

static hap_status kx_forward(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                             hap_err *err) {
  hap_err e1 = {0}, e2 = {0};
  if (c == NULL || hap_kx_supported(c->op, &e1) != HAP_OK)
    return hap_kernel_forward(c, out, st, err);
  hap_status pre = hap_kernel_check_forward(c, out, &e2);
  if (pre != HAP_OK) {
    hap_status ks = hap_kx_forward_host(c, out, HAP_F32, err);
    cr_assert_eq(ks, pre, "%s: %s", hap_op_name(c->op), err->msg);
    return ks;
  }
  void *ref[HAP_MAX_OP_OUTPUTS] = {NULL};
  for (int o = 0; o < c->io->n_out; o++)
    ref[o] = calloc(kx_bytes(&c->io->out[o], c->io->out_dtype[o]) + 8, 1);
  hap_err ce = {0};
  hap_status cs = hap_kernel_forward(c, ref, NULL, &ce);
  hap_status ks = hap_kx_forward_host(c, out, HAP_F32, err);
  cr_assert_eq(ks, cs, "%s forward: program %s (%s), CPU %s (%s)", hap_op_name(c->op),
               hap_status_str(ks), err->msg, hap_status_str(cs), ce.msg);
  if (ks == HAP_EINVAL)
    cr_assert_str_eq(err->msg, ce.msg);
  for (int o = 0; o < c->io->n_out && ks == HAP_OK; o++)
    kx_compare("output", c, o, out[o], ref[o], kx_bytes(&c->io->out[o], c->io->out_dtype[o]),
               c->io->out_dtype[o] == HAP_F32);
  for (int o = 0; o < c->io->n_out; o++)
    free(ref[o]);
  if (st != NULL)
    hap_kernel_state_free(st); /* programs keep no state */
  return ks;
}

static hap_status kx_backward(const hap_kernel_call *c, const float *const *dout, float *const *din,
                              const hap_kernel_state *st, hap_err *err) {
  hap_err e1 = {0}, e2 = {0};
  bool needed = false;
  if (c == NULL || hap_kx_supported(c->op, &e1) != HAP_OK)
    return hap_kernel_backward(c, dout, din, st, err);
  hap_status pre = hap_kernel_check_backward(c, dout, din, &needed, &e2);
  if (pre != HAP_OK || !needed) {
    hap_status ks = hap_kx_backward_host(c, dout, din, HAP_F32, err);
    cr_assert_eq(ks, pre, "%s: %s", hap_op_name(c->op), err->msg);
    return ks;
  }
  /* the CPU kernel on copies of the gradients (aliases stay aliases) */
  const hap_op_io *io = c->io;
  float *ref[HAP_MAX_OP_INPUTS] = {NULL};
  bool own[HAP_MAX_OP_INPUTS] = {false};
  for (int i = 0; i < io->n_in; i++) {
    if (din == NULL || din[i] == NULL)
      continue;
    for (int j = 0; j < i && ref[i] == NULL; j++)
      if (din[j] == din[i])
        ref[i] = ref[j];
    if (ref[i] == NULL) {
      size_t b = kx_bytes(&io->in[i], HAP_F32);
      ref[i] = calloc(b + 8, 1);
      memcpy(ref[i], din[i], b);
      own[i] = true;
    }
  }
  hap_err ce = {0};
  hap_status cs = hap_kernel_backward(c, dout, ref, NULL, &ce);
  hap_status ks = hap_kx_backward_host(c, dout, din, HAP_F32, err);
  cr_assert_eq(ks, cs, "%s backward: program %s (%s), CPU %s (%s)", hap_op_name(c->op),
               hap_status_str(ks), err->msg, hap_status_str(cs), ce.msg);
  for (int i = 0; i < io->n_in; i++) {
    if (ks == HAP_OK && own[i])
      kx_compare("input gradient", c, i, din[i], ref[i], kx_bytes(&io->in[i], HAP_F32), true);
    if (own[i])
      free(ref[i]);
  }
  return ks;
}

#define hap_kernel_forward  kx_forward
#define hap_kernel_backward kx_backward
#endif

/* ---- tensors --------------------------------------------------------------------------------- */

typedef struct tens {
  hap_shape s;
  hap_dtype dt;
  int64_t n;
  void *p;
} tens;

static void t_alloc(tens *t, const hap_shape *s, hap_dtype dt) {
  t->s = *s;
  t->dt = dt;
  t->n = numel(s);
  t->p = alloc(t->n, (size_t)hap_dtype_size(dt));
}
static void t_free(tens *t) {
  free(t->p);
  t->p = NULL;
}
static float *F(const tens *t) { return t->p; }
static int64_t *I(const tens *t) { return t->p; }

static void unravel(const hap_shape *s, int64_t flat, int64_t *idx) {
  for (int d = s->rank - 1; d >= 0; d--) {
    idx[d] = s->dims[d] ? flat % s->dims[d] : 0;
    flat = s->dims[d] ? flat / s->dims[d] : 0;
  }
}
static int64_t ravel(const hap_shape *s, const int64_t *idx) {
  int64_t f = 0;
  for (int d = 0; d < s->rank; d++)
    f = f * s->dims[d] + idx[d];
  return f;
}

/* ---- running kernels ------------------------------------------------------------------------- */

static void run_fwd(const kcase *c, const hap_op_io *io, const tens *in, tens *out,
                    const hap_kernel_shard *sh, hap_kernel_state *st) {
  const void *ip[HAP_MAX_OP_INPUTS] = {NULL};
  void *op[HAP_MAX_OP_OUTPUTS] = {NULL};
  for (int k = 0; k < io->n_in; k++)
    ip[k] = in[k].p;
  for (int o = 0; o < io->n_out; o++)
    op[o] = out[o].p;
  hap_kernel_call call = {.op = c->op, .io = io, .shard = sh, .seed = c->seed, .in = ip};
  hap_err e = {0};
  cr_assert_eq(hap_kernel_forward(&call, op, st, &e), HAP_OK, "%s forward: %s", hap_op_name(c->op),
               e.msg);
}

static void run_bwd(const kcase *c, const hap_op_io *io, const tens *in, const tens *out,
                    const tens *dout, tens *din, const hap_kernel_shard *sh,
                    const hap_kernel_state *st) {
  const void *ip[HAP_MAX_OP_INPUTS] = {NULL}, *opp[HAP_MAX_OP_OUTPUTS] = {NULL};
  const float *g[HAP_MAX_OP_OUTPUTS] = {NULL};
  float *dp[HAP_MAX_OP_INPUTS] = {NULL};
  for (int k = 0; k < io->n_in; k++) {
    ip[k] = in[k].p;
    dp[k] = din[k].p;
  }
  for (int o = 0; o < io->n_out; o++) {
    opp[o] = out[o].p;
    g[o] = dout[o].p;
  }
  hap_kernel_call call = {
      .op = c->op, .io = io, .shard = sh, .seed = c->seed, .in = ip, .out = opp};
#ifndef HAP_TEST_KX /* the kernel programs add only; the CPU kernels are the ones checked here */
  /* Where every gradient buffer starts at zero, the same call again with each marked fresh
   * (hap_kernel_call.fresh_din) and filled with NaN must store exactly those gradients: a kernel
   * that leaves an element unwritten, or adds to what was there, shows here in every case,
   * variant and split of this file. */
  bool zero = true;
  float *fp[HAP_MAX_OP_INPUTS] = {NULL};
  for (int k = 0; k < io->n_in && zero; k++)
    for (int64_t f = 0; dp[k] != NULL && f < din[k].n && zero; f++)
      zero = dp[k][f] == 0.0f;
  hap_kernel_call fresh = call;
  for (int k = 0; k < io->n_in && zero; k++) {
    if (dp[k] == NULL || din[k].dt != HAP_F32)
      continue;
    fp[k] = alloc(din[k].n, sizeof(float)); /* zeros where no gradient is asked (untouched) */
    if (!io->in_grad[k])
      continue;
    for (int64_t f = 0; f < din[k].n; f++)
      fp[k][f] = NAN;
    fresh.fresh_din |= 1u << k;
  }
#endif
  hap_err e = {0};
  cr_assert_eq(hap_kernel_backward(&call, g, dp, st, &e), HAP_OK, "%s backward: %s",
               hap_op_name(c->op), e.msg);
#ifndef HAP_TEST_KX
  if (!zero)
    return;
  cr_assert_eq(hap_kernel_backward(&fresh, g, fp, st, &e), HAP_OK, "%s fresh backward: %s",
               hap_op_name(c->op), e.msg);
  for (int k = 0; k < io->n_in; k++) {
    for (int64_t f = 0; fp[k] != NULL && f < din[k].n; f++) /* +0 and -0 alike */
      cr_assert(fp[k][f] == dp[k][f] || (fp[k][f] != fp[k][f] && dp[k][f] != dp[k][f]),
                "%s: input %d [%lld]: fresh gradient %.9g, added to zeros %.9g", hap_op_name(c->op),
                k, (long long)f, fp[k][f], dp[k][f]);
    free(fp[k]);
  }
#endif
}

static double max_abs(const tens *t) {
  double m = 0;
  for (int64_t f = 0; f < t->n; f++)
    m = fmax(m, fabs((double)F(t)[f]));
  return m;
}

static void expect_close(const float *got, const tens *want, double rel, const char *what) {
  double tol = rel * fmax(1, max_abs(want));
  for (int64_t f = 0; f < want->n; f++)
    cr_assert(fabs((double)got[f] - F(want)[f]) <= tol, "%s: element %lld is %.9g, expected %.9g",
              what, (long long)f, got[f], F(want)[f]);
}

/* ---- (1) forward against hand-computed values ------------------------------------------------ */

/* Run c on the given input values (floats, or integers for index inputs) and compare output o. */
static void expect_fwd(kcase *c, const double *const *vals, size_t n_vals, int o,
                       const double *want, int64_t n) {
  infer(c);
  const int n_in = c->io.n_in, n_out = c->io.n_out;
  cr_assert_leq((size_t)n_in, n_vals, "%s: %d inputs, %zu value lists", hap_op_name(c->op), n_in,
                n_vals);
  tens in[HAP_MAX_OP_INPUTS] = {{{0}}}, out[HAP_MAX_OP_OUTPUTS] = {{{0}}};
  for (int k = 0; k < n_in; k++) {
    t_alloc(&in[k], &c->io.in[k], c->io.in_dtype[k]);
    for (int64_t f = 0; f < in[k].n; f++) {
      if (c->io.in_dtype[k] == HAP_I64)
        I(&in[k])[f] = (int64_t)vals[k][f];
      else
        F(&in[k])[f] = (float)vals[k][f];
    }
  }
  for (int q = 0; q < n_out; q++)
    t_alloc(&out[q], &c->io.out[q], c->io.out_dtype[q]);
  run_fwd(c, &c->io, in, out, NULL, NULL);
  cr_assert_eq(out[o].n, n, "%s: output has %lld elements, expected %lld", hap_op_name(c->op),
               (long long)out[o].n, (long long)n);
  for (int64_t f = 0; f < n; f++)
    cr_assert(fabs(F(&out[o])[f] - want[f]) <= 1e-5 * fmax(1, fabs(want[f])),
              "%s: element %lld is %.9g, expected %.9g", hap_op_name(c->op), (long long)f,
              F(&out[o])[f], want[f]);
  for (int k = 0; k < n_in; k++)
    t_free(&in[k]);
  for (int q = 0; q < n_out; q++)
    t_free(&out[q]);
}

#define EXPECT(c, vals, o, ...)                                                                    \
  expect_fwd(c, vals, sizeof(vals) / sizeof((vals)[0]), o, D(__VA_ARGS__),                         \
             (int64_t)(sizeof D(__VA_ARGS__) / sizeof(double)))

Test(kernels_forward, gemm_family) {
  kcase c;
  begin(&c, HAP_OP_LINEAR); /* y = x W^T + b */
  in_f(&c, SHAPE(1, 2));
  in_f(&c, SHAPE(2, 2));
  in_f(&c, SHAPE(2));
  EXPECT(&c, VALS(D(1, 2), D(1, 0, 2, -1), D(0.5, -1)), 0, 1.5, -1);
  begin(&c, HAP_OP_MATMUL);
  in_f(&c, SHAPE(2, 2));
  in_f(&c, SHAPE(2, 1));
  EXPECT(&c, VALS(D(1, 2, 3, 4), D(5, 6)), 0, 17, 39);
  begin(&c, HAP_OP_MATMUL); /* a [1, 2] against a batch of two b [2, 1] */
  in_f(&c, SHAPE(1, 2));
  in_f(&c, SHAPE(2, 2, 1));
  EXPECT(&c, VALS(D(1, 2), D(1, 1, 2, 0)), 0, 3, 2);
  begin(&c, HAP_OP_BMM);
  in_f(&c, SHAPE(2, 1, 2));
  in_f(&c, SHAPE(2, 2, 1));
  EXPECT(&c, VALS(D(1, 2, 3, 4), D(1, 1, 1, -1)), 0, 3, -1);
  begin(&c, HAP_OP_EINSUM); /* row dots */
  set_s(&c, "equation", "ab,ab->a");
  in_f(&c, SHAPE(2, 2));
  in_f(&c, SHAPE(2, 2));
  EXPECT(&c, VALS(D(1, 2, 3, 4), D(1, 1, 2, 0)), 0, 3, 6);
  begin(&c, HAP_OP_EINSUM); /* outer product, output order permuted */
  set_s(&c, "equation", "ab,c->acb");
  in_f(&c, SHAPE(1, 2));
  in_f(&c, SHAPE(2));
  EXPECT(&c, VALS(D(1, 2), D(3, 4)), 0, 3, 6, 4, 8);
  begin(&c, HAP_OP_EINSUM); /* an index summed within one operand */
  set_s(&c, "equation", "ab,c->c");
  in_f(&c, SHAPE(1, 2));
  in_f(&c, SHAPE(2));
  EXPECT(&c, VALS(D(1, 2), D(3, 4)), 0, 9, 12);
  begin(&c, HAP_OP_EINSUM); /* the MoE dispatch: x [1,2,1] routed to 2 experts x 1 slot */
  set_s(&c, "equation", "bsd,bsec->becd");
  in_f(&c, SHAPE(1, 2, 1));
  in_f(&c, SHAPE(1, 2, 2, 1));
  EXPECT(&c, VALS(D(5, 7), D(1, 0, 0, 1)), 0, 5, 7);
  begin(&c, HAP_OP_CONV2D); /* x 1..9, w [[1, 0], [0, -1]], b 1 */
  in_f(&c, SHAPE(1, 1, 3, 3));
  in_f(&c, SHAPE(1, 1, 2, 2));
  in_f(&c, SHAPE(1));
  EXPECT(&c, VALS(D(1, 2, 3, 4, 5, 6, 7, 8, 9), D(1, 0, 0, -1), D(1)), 0, -3, -3, -3, -3);
  begin(&c, HAP_OP_CONV2D); /* the same with stride 2, padding 1 */
  set_i(&c, "stride", 2);
  set_i(&c, "padding", 1);
  in_f(&c, SHAPE(1, 1, 3, 3));
  in_f(&c, SHAPE(1, 1, 2, 2));
  in_f(&c, SHAPE(1));
  EXPECT(&c, VALS(D(1, 2, 3, 4, 5, 6, 7, 8, 9), D(1, 0, 0, -1), D(1)), 0, 0, -2, -6, -3);
}

Test(kernels_forward, pooling_embedding_norm) {
  kcase c;
  begin(&c, HAP_OP_MAX_POOL2D);
  in_f(&c, SHAPE(1, 1, 2, 4));
  EXPECT(&c, VALS(D(1, 5, 2, 3, 4, 0, 7, 6)), 0, 5, 7);
  begin(&c, HAP_OP_MAX_POOL2D); /* padding: each window sees one element */
  set_i(&c, "padding", 1);
  in_f(&c, SHAPE(1, 1, 2, 2));
  EXPECT(&c, VALS(D(1, 2, 3, 4)), 0, 1, 2, 3, 4);
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D); /* 3 -> 2: overlapping bins {0, 1}, {1, 2} */
  set_ints(&c, "output_size", SHAPE(2, 2));
  in_f(&c, SHAPE(1, 1, 3, 3));
  EXPECT(&c, VALS(D(1, 2, 3, 4, 5, 6, 7, 8, 9)), 0, 3, 4, 6, 7);
  begin(&c, HAP_OP_EMBEDDING);
  in_i(&c, SHAPE(3), 3);
  in_f(&c, SHAPE(3, 2));
  EXPECT(&c, VALS(D(2, 0, 2), D(1, 2, 3, 4, 5, 6)), 0, 5, 6, 1, 2, 5, 6);
  begin(&c, HAP_OP_LAYER_NORM);
  in_f(&c, SHAPE(1, 4));
  in_f(&c, SHAPE(4));
  in_f(&c, SHAPE(4));
  EXPECT(&c, VALS(D(1, 2, 3, 4), D(1, 1, 2, 2), D(0, 0, 0, 1)), 0, -1.3416354199689269,
         -0.447211806656309, 0.894423613312618, 3.6832708399378538);
}

Test(kernels_forward, attention) {
  /* identity projections, one head: scores [1, 0] / sqrt 2 over keys (1, 0), (0, 1) */
  const double *vals[8] = {D(1, 0),
                           D(1, 0, 0, 1),
                           D(1, 2, 3, 4),
                           D(1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1),
                           D(0, 0, 0, 0, 0, 0),
                           D(1, 0, 0, 1),
                           D(0.5, 0),
                           D(0, -INFINITY)};
  kcase c;
  begin(&c, HAP_OP_MULTI_HEAD_ATTENTION);
  set_i(&c, "heads", 1);
  in_f(&c, SHAPE(1, 1, 2));
  in_f(&c, SHAPE(1, 2, 2));
  in_f(&c, SHAPE(1, 2, 2));
  in_f(&c, SHAPE(3, 2, 2));
  in_f(&c, SHAPE(3, 2));
  in_f(&c, SHAPE(2, 2));
  in_f(&c, SHAPE(2));
  EXPECT(&c, vals, 0, 2.1604769013466862, 2.6604769013466862);
  in_f(&c, SHAPE(1, 2)); /* the mask hides key 1 */
  EXPECT(&c, vals, 0, 1.5, 2);
}

Test(kernels_forward, elementwise) {
  static const struct {
    hap_op op;
    double x[3], y[3];
  } unary[] = {
      {HAP_OP_RELU, {-1, 0, 2}, {0, 0, 2}},
      {HAP_OP_GELU, {0, 1, -1}, {0, 0.8413447460685429, -0.15865525393145707}},
      {HAP_OP_SIGMOID, {0, 1.0986122886681098, -1.0986122886681098}, {0.5, 0.75, 0.25}},
      {HAP_OP_TANH, {0, 0.6931471805599453, -0.6931471805599453}, {0, 0.6, -0.6}},
      {HAP_OP_RSQRT, {4, 0.25, 1}, {0.5, 2, 1}},
  };
  kcase c;
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
    begin(&c, unary[i].op);
    in_f(&c, SHAPE(3));
    expect_fwd(&c, VALS(unary[i].x), 1, 0, unary[i].y, 3);
  }
  begin(&c, HAP_OP_POW);
  set_f(&c, "exponent", 3);
  in_f(&c, SHAPE(2));
  EXPECT(&c, VALS(D(2, -1)), 0, 8, -1);
  begin(&c, HAP_OP_DROPOUT);
  set_f(&c, "p", 0);
  in_f(&c, SHAPE(2));
  EXPECT(&c, VALS(D(2, -1)), 0, 2, -1);
  begin(&c, HAP_OP_ADD); /* [2, 1] + [3] */
  in_f(&c, SHAPE(2, 1));
  in_f(&c, SHAPE(3));
  EXPECT(&c, VALS(D(1, 2), D(10, 20, 30)), 0, 11, 21, 31, 12, 22, 32);
  begin(&c, HAP_OP_SUB);
  set_f(&c, "scalar", 1.5);
  in_f(&c, SHAPE(2));
  EXPECT(&c, VALS(D(1, 3)), 0, -0.5, 1.5);
  begin(&c, HAP_OP_MUL);
  in_f(&c, SHAPE(2));
  in_f(&c, SHAPE(1));
  EXPECT(&c, VALS(D(1, 3), D(-2)), 0, -2, -6);
  begin(&c, HAP_OP_DIV);
  in_f(&c, SHAPE(2));
  in_f(&c, SHAPE(2));
  EXPECT(&c, VALS(D(1, 3), D(2, 4)), 0, 0.5, 0.75);
  begin(&c, HAP_OP_DIV);
  in_f(&c, SHAPE(2)); /* default scalar 1 */
  EXPECT(&c, VALS(D(1, 3)), 0, 1, 3);
}

Test(kernels_forward, softmax_reductions) {
  kcase c;
  begin(&c, HAP_OP_SOFTMAX);
  in_f(&c, SHAPE(3));
  EXPECT(&c, VALS(D(1, 2, 3)), 0, 0.09003057317038046, 0.24472847105479767, 0.6652409557748219);
  begin(&c, HAP_OP_SOFTMAX);
  set_i(&c, "dim", 0);
  in_f(&c, SHAPE(2, 2));
  EXPECT(&c, VALS(D(1, 2, 3, 2)), 0, 0.11920292202211755, 0.5, 0.8807970779778825, 0.5);
  begin(&c, HAP_OP_SOFTMAX); /* a fully masked row gives zeros */
  in_f(&c, SHAPE(2));
  EXPECT(&c, VALS(D(-INFINITY, -INFINITY)), 0, 0, 0);
  begin(&c, HAP_OP_LOG_SOFTMAX);
  in_f(&c, SHAPE(3));
  EXPECT(&c, VALS(D(1, 2, 3)), 0, -2.40760596444438, -1.4076059644443801, -0.40760596444438013);
  begin(&c, HAP_OP_SUM);
  set_ints(&c, "dims", SHAPE(1));
  in_f(&c, SHAPE(2, 3));
  EXPECT(&c, VALS(D(1, 2, 3, 4, 5, 6)), 0, 6, 15);
  begin(&c, HAP_OP_SUM);
  set_ints(&c, "dims", SHAPE(0));
  set_i(&c, "keepdim", 1);
  in_f(&c, SHAPE(2, 3));
  EXPECT(&c, VALS(D(1, 2, 3, 4, 5, 6)), 0, 5, 7, 9);
  begin(&c, HAP_OP_MEAN);
  in_f(&c, SHAPE(2, 3));
  EXPECT(&c, VALS(D(1, 2, 3, 4, 5, 6)), 0, 3.5);
  begin(&c, HAP_OP_MEAN);
  set_ints(&c, "dims", SHAPE(-1));
  in_f(&c, SHAPE(2, 3));
  EXPECT(&c, VALS(D(1, 2, 3, 4, 5, 6)), 0, 2, 5);
}

Test(kernels_forward, layout) {
  kcase c;
  const double *x6 = D(1, 2, 3, 4, 5, 6);
  begin(&c, HAP_OP_RESHAPE);
  set_ints(&c, "shape", SHAPE(3, -1));
  in_f(&c, SHAPE(2, 3));
  EXPECT(&c, VALS(x6), 0, 1, 2, 3, 4, 5, 6);
  begin(&c, HAP_OP_FLATTEN);
  in_f(&c, SHAPE(2, 3));
  EXPECT(&c, VALS(x6), 0, 1, 2, 3, 4, 5, 6);
  begin(&c, HAP_OP_TRANSPOSE);
  set_i(&c, "dim0", 0);
  set_i(&c, "dim1", 1);
  in_f(&c, SHAPE(2, 3));
  EXPECT(&c, VALS(x6), 0, 1, 4, 2, 5, 3, 6);
  begin(&c, HAP_OP_PERMUTE); /* [1, 2, 3] -> [3, 1, 2] */
  set_ints(&c, "dims", SHAPE(2, 0, 1));
  in_f(&c, SHAPE(1, 2, 3));
  EXPECT(&c, VALS(x6), 0, 1, 4, 2, 5, 3, 6);
  begin(&c, HAP_OP_NARROW);
  set_i(&c, "dim", 1);
  set_i(&c, "start", 1);
  set_i(&c, "length", 2);
  in_f(&c, SHAPE(2, 3));
  EXPECT(&c, VALS(x6), 0, 2, 3, 5, 6);
  begin(&c, HAP_OP_CLS_APPEND);
  in_f(&c, SHAPE(1, 2, 2));
  in_f(&c, SHAPE(1, 1, 2));
  EXPECT(&c, VALS(D(1, 2, 3, 4), D(9, 8)), 0, 1, 2, 3, 4, 9, 8);
  begin(&c, HAP_OP_CLS_APPEND);
  set_i(&c, "first", 1);
  in_f(&c, SHAPE(1, 2, 2));
  in_f(&c, SHAPE(1, 1, 2));
  EXPECT(&c, VALS(D(1, 2, 3, 4), D(9, 8)), 0, 9, 8, 1, 2, 3, 4);
  begin(&c, HAP_OP_CLS_SELECT);
  in_f(&c, SHAPE(1, 3, 2));
  EXPECT(&c, VALS(x6), 0, 5, 6);
}

Test(kernels_forward, layout_of_int64) {
  /* layout ops move any dtype: token ids transposed */
  kcase c;
  begin(&c, HAP_OP_TRANSPOSE);
  set_i(&c, "dim0", 0);
  set_i(&c, "dim1", 1);
  in_i(&c, SHAPE(2, 3), 10);
  infer(&c);
  tens in = {0}, out = {0};
  t_alloc(&in, &c.io.in[0], HAP_I64);
  t_alloc(&out, &c.io.out[0], HAP_I64);
  for (int64_t f = 0; f < 6; f++)
    I(&in)[f] = f + (1LL << 40);
  run_fwd(&c, &c.io, &in, &out, NULL, NULL);
  static const int64_t want[6] = {0, 3, 1, 4, 2, 5};
  for (int f = 0; f < 6; f++)
    cr_assert_eq(I(&out)[f], want[f] + (1LL << 40));
  t_free(&in);
  t_free(&out);
}

Test(kernels_forward, int32_indices) {
  /* index inputs may be int32 */
  kcase c;
  begin(&c, HAP_OP_EMBEDDING);
  in_i(&c, SHAPE(2), 3);
  in_f(&c, SHAPE(3, 1));
  c.io.in_dtype[0] = HAP_I32;
  infer(&c);
  int32_t idx[2] = {2, 1};
  float w[3] = {10, 20, 30}, y[2] = {0};
  const void *ip[2] = {idx, w};
  void *op[1] = {y};
  hap_kernel_call call = {.op = c.op, .io = &c.io, .in = ip};
  hap_err e = {0};
  cr_assert_eq(hap_kernel_forward(&call, op, NULL, &e), HAP_OK, "%s", e.msg);
  cr_assert_float_eq(y[0], 30, 0);
  cr_assert_float_eq(y[1], 20, 0);
  begin(&c, HAP_OP_NLL_LOSS);
  in_f(&c, SHAPE(2, 2));
  in_i(&c, SHAPE(2), 2);
  c.io.in_dtype[1] = HAP_I32;
  infer(&c);
  float x[4] = {-1, -2, -3, -4}, l = 0;
  int32_t t[2] = {1, 0};
  const void *ip2[2] = {x, t};
  void *op2[1] = {&l};
  call = (hap_kernel_call){.op = c.op, .io = &c.io, .in = ip2};
  cr_assert_eq(hap_kernel_forward(&call, op2, NULL, &e), HAP_OK, "%s", e.msg);
  cr_assert_float_eq(l, 2.5f, 1e-6); /* mean of 2 and 3 */
}

Test(kernels_forward, gating_and_losses) {
  /* logits [x0, x1, 0]: tokens [2, 0] -> experts 0 then 1; [0, 2] -> 1 then 0; [2, 1] -> 0, 1 */
  kcase c;
  begin(&c, HAP_OP_TOP2_GATING);
  set_i(&c, "capacity", 2);
  in_f(&c, SHAPE(1, 3, 2));
  in_f(&c, SHAPE(2, 3));
  const double *const vals[] = {D(2, 0, 0, 2, 2, 1), D(1, 0, 0, 0, 1, 0)};
  const double a = 0.8807970779778825, b = 0.11920292202211757;
  const double p = 0.7310585786300049;
  /* [s, e, c]: first choices take slots in sequence order, then the second choices; token 1's
   * second choice (expert 0, slot 2) and token 2's (expert 1, slot 2) are over capacity */
  EXPECT(&c, vals, 1, a, 0, 0, b, 0, 0, /* token 0: e0 slot 0, e1 slot 1 */
         0, 0, a, 0, 0, 0,              /* token 1: e1 slot 0 */
         0, p, 0, 0, 0, 0);             /* token 2: e0 slot 1 */
  EXPECT(&c, vals, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0);
  for (int mean = 0; mean < 2; mean++) {
    begin(&c, HAP_OP_NLL_LOSS);
    set_s(&c, "reduction", mean ? "mean" : "sum");
    in_f(&c, SHAPE(2, 3));
    in_i(&c, SHAPE(2), 3);
    EXPECT(&c, VALS(D(-1, -2, -3, -0.5, -1.5, -2.5), D(2, 0)), 0, mean ? 1.75 : 3.5);
  }
  begin(&c, HAP_OP_NLL_LOSS); /* a spatial dim: input [1, 2, 2], classes along dim 1 */
  set_s(&c, "reduction", "sum");
  in_f(&c, SHAPE(1, 2, 2));
  in_i(&c, SHAPE(1, 2), 2);
  EXPECT(&c, VALS(D(1, 2, 3, 4), D(1, 0)), 0, -5);
  begin(&c, HAP_OP_CROSS_ENTROPY);
  in_f(&c, SHAPE(1, 3));
  in_i(&c, SHAPE(1), 3);
  EXPECT(&c, VALS(D(1, 2, 3), D(2)), 0, 0.40760596444438013);
}

Test(kernels_forward, dropout_mask) {
  /* p = 0.5: about half kept, kept ones scaled by 2; the mask is a function of (seed, position) */
  kcase c;
  begin(&c, HAP_OP_DROPOUT);
  in_f(&c, SHAPE(100, 100));
  infer(&c);
  tens x = {0}, y = {0}, y2 = {0};
  t_alloc(&x, &c.io.in[0], HAP_F32);
  t_alloc(&y, &c.io.out[0], HAP_F32);
  t_alloc(&y2, &c.io.out[0], HAP_F32);
  for (int64_t f = 0; f < x.n; f++)
    F(&x)[f] = 1.5f;
  run_fwd(&c, &c.io, &x, &y, NULL, NULL);
  int64_t kept = 0;
  for (int64_t f = 0; f < y.n; f++) {
    cr_assert(F(&y)[f] == 0 || F(&y)[f] == 3.0f);
    kept += F(&y)[f] != 0;
    cr_assert_eq(F(&y)[f] != 0, hap_kernel_keep(c.seed, f, 0.5));
  }
  cr_assert(kept > 4800 && kept < 5200, "kept %lld of 10000", (long long)kept);
  c.seed++;
  run_fwd(&c, &c.io, &x, &y2, NULL, NULL);
  int64_t same = 0;
  for (int64_t f = 0; f < y.n; f++)
    same += (F(&y)[f] != 0) == (F(&y2)[f] != 0);
  cr_assert(same < 5300, "another seed gives %lld of 10000 equal decisions", (long long)same);
  t_free(&x);
  t_free(&y);
  t_free(&y2);
}

/* ---- errors ---------------------------------------------------------------------------------- */

Test(kernels_errors, bad_calls) {
  kcase c;
  begin(&c, HAP_OP_EMBEDDING);
  in_i(&c, SHAPE(2), 3);
  in_f(&c, SHAPE(3, 2));
  infer(&c);
  int64_t idx[2] = {1, 3};
  float w[6] = {0}, y[4];
  const void *ip[2] = {idx, w};
  void *op[1] = {y};
  hap_kernel_call call = {.op = c.op, .io = &c.io, .in = ip};
  hap_err e = {0};
  cr_assert_eq(hap_kernel_forward(&call, op, NULL, &e), HAP_EINVAL);
  cr_assert(strstr(e.msg, "index 3") != NULL, "%s", e.msg);
  /* float64 data is not for these kernels */
  c.io.in_dtype[1] = HAP_F64;
  c.io.out_dtype[0] = HAP_F64;
  hap_err_clear(&e);
  idx[1] = 0;
  cr_assert_eq(hap_kernel_forward(&call, op, NULL, &e), HAP_EUNSUPPORTED, "%s", e.msg);
  /* outputs that disagree with the op table */
  c.io.in_dtype[1] = HAP_F32;
  c.io.out_dtype[0] = HAP_F32;
  c.io.out[0].dims[1] = 3;
  hap_err_clear(&e);
  cr_assert_eq(hap_kernel_forward(&call, op, NULL, &e), HAP_EINVAL, "%s", e.msg);
  /* a loss target out of range */
  begin(&c, HAP_OP_NLL_LOSS);
  in_f(&c, SHAPE(1, 2));
  in_i(&c, SHAPE(1), 2);
  infer(&c);
  int64_t t = -1;
  float x[2] = {0}, l = 0;
  const void *ip2[2] = {x, &t};
  void *op2[1] = {&l};
  call = (hap_kernel_call){.op = c.op, .io = &c.io, .in = ip2};
  hap_err_clear(&e);
  cr_assert_eq(hap_kernel_forward(&call, op2, NULL, &e), HAP_EINVAL);
  cr_assert(strstr(e.msg, "target -1") != NULL, "%s", e.msg);
}

Test(kernels_errors, einsum_equation_refused) {
  /* The op table only admits two-operand lowercase equations; a call that bypasses it with an
   * ellipsis is refused with HAP_EUNSUPPORTED, not misread. */
  kcase c;
  begin(&c, HAP_OP_EINSUM);
  set_s(&c, "equation", "ab,bc->ac");
  in_f(&c, SHAPE(1, 1));
  in_f(&c, SHAPE(1, 1));
  infer(&c);
  snprintf(c.attrs.v[0].u.s, sizeof c.attrs.v[0].u.s, "%s", "a...,b->ab");
  c.io.in[0].dims[0] = 0; /* an empty shard skips the op-table check */
  c.io.out[0].dims[0] = 0;
  float a = 1, b = 1, y = 0;
  const void *ip[2] = {&a, &b};
  void *op[1] = {&y};
  hap_kernel_call call = {.op = c.op, .io = &c.io, .in = ip};
  hap_err e = {0};
  cr_assert_eq(hap_kernel_forward(&call, op, NULL, &e), HAP_EUNSUPPORTED, "%s", e.msg);
}

/* ---- (2) backward against central finite differences ----------------------------------------- */

static double loss_of(const tens *out, const tens *w, int n_out) {
  double l = 0;
  for (int o = 0; o < n_out; o++)
    for (int64_t f = 0; f < out[o].n; f++)
      l += (double)F(&w[o])[f] * F(&out[o])[f];
  return l;
}

static void check_grad(kcase *c) {
  infer(c);
  const hap_op_io *io = &c->io;
  const int n_in = io->n_in, n_out = io->n_out;
  tens x[HAP_MAX_OP_INPUTS] = {{{0}}}, dx[HAP_MAX_OP_INPUTS] = {{{0}}},
       dx2[HAP_MAX_OP_INPUTS] = {{{0}}};
  tens y[HAP_MAX_OP_OUTPUTS] = {{{0}}}, w[HAP_MAX_OP_OUTPUTS] = {{{0}}};
  for (int k = 0; k < n_in; k++) {
    t_alloc(&x[k], &io->in[k], io->in_dtype[k]);
    kcase_draw(c, k, x[k].p, x[k].n);
    t_alloc(&dx[k], &io->in[k], HAP_F32);
    t_alloc(&dx2[k], &io->in[k], HAP_F32);
  }
  for (int o = 0; o < n_out; o++) {
    t_alloc(&y[o], &io->out[o], HAP_F32);
    t_alloc(&w[o], &io->out[o], HAP_F32);
    for (int64_t f = 0; f < w[o].n; f++)
      F(&w[o])[f] = (float)uniform(-1, 1);
  }
  hap_kernel_state st = {0};
  run_fwd(c, io, x, y, NULL, &st);
  run_bwd(c, io, x, y, w, dx, NULL, &st);
  run_bwd(c, io, x, y, w, dx2, NULL, NULL); /* recomputed state: the same gradients */
  hap_kernel_state_free(&st);
  for (int k = 0; k < n_in; k++)
    for (int64_t f = 0; f < dx[k].n; f++)
      cr_assert(fabsf(F(&dx[k])[f] - F(&dx2[k])[f]) <= 1e-6f * (1 + fabsf(F(&dx[k])[f])),
                "%s: input %d: gradients with and without saved state differ", hap_op_name(c->op),
                k);
  tens yp[HAP_MAX_OP_OUTPUTS] = {{{0}}};
  for (int o = 0; o < n_out; o++)
    t_alloc(&yp[o], &io->out[o], HAP_F32);
  for (int k = 0; k < n_in; k++) {
    if (!io->in_grad[k] || io->in_dtype[k] != HAP_F32)
      continue;
    double *fd = calloc((size_t)x[k].n + 1, sizeof(double)), scale = 0;
    for (int64_t f = 0; f < x[k].n; f++) {
      float keep = F(&x[k])[f];
      F(&x[k])[f] = (float)(keep + c->eps);
      double hi = (double)F(&x[k])[f] - keep;
      run_fwd(c, io, x, yp, NULL, NULL);
      double lp = loss_of(yp, w, n_out);
      F(&x[k])[f] = (float)(keep - c->eps);
      double lo = keep - (double)F(&x[k])[f];
      run_fwd(c, io, x, yp, NULL, NULL);
      double lm = loss_of(yp, w, n_out);
      F(&x[k])[f] = keep;
      fd[f] = (lp - lm) / (hi + lo);
      scale = fmax(scale, fabs(fd[f]));
    }
    double tol = 2e-3 * fmax(1, scale);
    for (int64_t f = 0; f < x[k].n; f++)
      cr_assert(fabs(F(&dx[k])[f] - fd[f]) <= tol,
                "%s: d input %d [%lld] is %.7g, finite differences give %.7g", hap_op_name(c->op),
                k, (long long)f, F(&dx[k])[f], fd[f]);
    free(fd);
  }
  for (int k = 0; k < n_in; k++) {
    t_free(&x[k]);
    t_free(&dx[k]);
    t_free(&dx2[k]);
  }
  for (int o = 0; o < n_out; o++) {
    t_free(&y[o]);
    t_free(&w[o]);
    t_free(&yp[o]);
  }
}

/* ---- (3) sharded equivalence ----------------------------------------------------------------- */

static const struct {
  int n;
  double r[4];
} RATIOS[] = {
    {2, {0.75, 0.25}},         /* 3 + 1 of 4 */
    {3, {0.5, 0, 0.5}},        /* an empty shard in the middle */
    {3, {0, 0.6, 0.4}},        /* device 0 (which applies BIAS_ONCE terms) empty */
    {4, {0.1, 0.2, 0.3, 0.4}}, /* uneven over four */
    {1, {1}},                  /* one device holds everything */
};
enum { N_RATIOS = (int)(sizeof RATIOS / sizeof RATIOS[0]), MAX_DEV = 4 };

static void slice(const tens *full, int d, int64_t off, const hap_shape *local, tens *out) {
  t_alloc(out, local, full->dt);
  size_t es = (size_t)hap_dtype_size(full->dt);
  for (int64_t f = 0; f < out->n; f++) {
    int64_t idx[HAP_MAX_DIMS] = {0};
    unravel(local, f, idx);
    idx[d] += off;
    memcpy((char *)out->p + (size_t)f * es, (char *)full->p + (size_t)ravel(&full->s, idx) * es,
           es);
  }
}

/* full[idx + off along d] (+)= part */
static void place(tens *full, int d, int64_t off, const tens *part, bool add) {
  for (int64_t f = 0; f < part->n; f++) {
    int64_t idx[HAP_MAX_DIMS] = {0};
    unravel(&part->s, f, idx);
    idx[d] += off;
    float *at = &F(full)[ravel(&full->s, idx)];
    *at = add ? *at + F(part)[f] : F(part)[f];
  }
}

typedef struct sh_ref {
  tens x[HAP_MAX_OP_INPUTS], y[HAP_MAX_OP_OUTPUTS], w[HAP_MAX_OP_OUTPUTS], dx[HAP_MAX_OP_INPUTS];
} sh_ref;

/* Variant v at one ratio vector: forward outputs and input gradients against the reference. */
static void check_split(const kcase *c, const sh_ref *ref, const hap_variant *v, int ratio) {
  const hap_op_io *io = &c->io;
  const int n_in = io->n_in, n_out = io->n_out;
  int n = RATIOS[ratio].n;
  int64_t lens[MAX_DEV] = {0}, ext = hap_variant_extent(io, v);
  hap_err err = {0};
  if (ext > 0)
    cr_assert_eq(hap_shard_lengths(ext, v->granule, RATIOS[ratio].r, n, lens, &err), HAP_OK, "%s",
                 err.msg);
  char what[200];
  snprintf(what, sizeof what, "%s '%s' (flags %u), lengths %lld %lld %lld %lld", hap_op_name(c->op),
           v->name, v->flags, (long long)lens[0], (long long)lens[1], (long long)lens[2],
           (long long)lens[3]);
  bool all_out_identity = true;
  for (int o = 0; o < n_out; o++)
    all_out_identity = all_out_identity && v->out[o] == HAP_LAYOUT_IDENTITY;
  tens acc[HAP_MAX_OP_OUTPUTS] = {{{0}}}, gacc[HAP_MAX_OP_INPUTS] = {{{0}}};
  for (int o = 0; o < n_out; o++)
    t_alloc(&acc[o], &io->out[o], HAP_F32);
  for (int k = 0; k < n_in; k++)
    t_alloc(&gacc[k], &io->in[k], HAP_F32);
  /* Reduce inputs: random parts, the last completing the sum */
  tens parts[HAP_MAX_OP_INPUTS][MAX_DEV];
  memset(parts, 0, sizeof parts);
  for (int k = 0; k < n_in; k++) {
    if (v->in[k] != HAP_LAYOUT_REDUCE)
      continue;
    for (int i = 0; i < n; i++) {
      t_alloc(&parts[k][i], &io->in[k], HAP_F32);
      for (int64_t f = 0; f < parts[k][i].n; f++) {
        double sofar = 0;
        for (int j = 0; j < i; j++)
          sofar += F(&parts[k][j])[f];
        F(&parts[k][i])[f] = (float)(i < n - 1 ? uniform(-1, 1) : F(&ref->x[k])[f] - sofar);
      }
    }
  }
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    hap_attrs la;
    hap_op_io lio;
    cr_assert_eq(hap_op_local_io(c->op, io, v, lens[i], &la, &lio, &err), HAP_OK, "%s: %s", what,
                 err.msg);
    hap_kernel_shard sh = {.full = io, .variant = v, .rank = i, .offset = off};
    tens lin[HAP_MAX_OP_INPUTS] = {{{0}}}, lout[HAP_MAX_OP_OUTPUTS] = {{{0}}};
    tens lg[HAP_MAX_OP_OUTPUTS] = {{{0}}}, ldx[HAP_MAX_OP_INPUTS] = {{{0}}};
    for (int k = 0; k < n_in; k++) {
      if (v->in[k] >= 0) {
        slice(&ref->x[k], v->in[k], off, &lio.in[k], &lin[k]);
      } else {
        const tens *src = v->in[k] == HAP_LAYOUT_REDUCE ? &parts[k][i] : &ref->x[k];
        cr_assert_not_null(src->p);
        t_alloc(&lin[k], &lio.in[k], io->in_dtype[k]);
        memcpy(lin[k].p, src->p, (size_t)lin[k].n * (size_t)hap_dtype_size(io->in_dtype[k]));
      }
      t_alloc(&ldx[k], &lio.in[k], HAP_F32);
    }
    for (int o = 0; o < n_out; o++) {
      t_alloc(&lout[o], &lio.out[o], HAP_F32);
      if (v->out[o] >= 0)
        slice(&ref->w[o], v->out[o], off, &lio.out[o], &lg[o]);
      else {
        t_alloc(&lg[o], &lio.out[o], HAP_F32);
        memcpy(lg[o].p, ref->w[o].p, (size_t)lg[o].n * sizeof(float));
      }
    }
    run_fwd(c, &lio, lin, lout, &sh, NULL);
    run_bwd(c, &lio, lin, lout, lg, ldx, &sh, NULL);
    for (int o = 0; o < n_out; o++) {
      if (v->out[o] >= 0)
        place(&acc[o], v->out[o], off, &lout[o], false);
      else if (v->out[o] == HAP_LAYOUT_REDUCE)
        place(&acc[o], 0, 0, &lout[o], true);
      else
        expect_close(F(&lout[o]), &ref->y[o], 1e-5, what);
    }
    /* input gradients by the dual layouts: Gather -> slices; Reduce -> the full gradient on
     * every device; Identity -> partial sums (or, when every output is Identity, full copies) */
    for (int k = 0; k < n_in; k++) {
      if (!io->in_grad[k] || io->in_dtype[k] != HAP_F32)
        continue;
      char gwhat[320];
      snprintf(gwhat, sizeof gwhat, "%s: gradient of input %d on device %d", what, k, i);
      if (v->in[k] >= 0)
        place(&gacc[k], v->in[k], off, &ldx[k], false);
      else if (v->in[k] == HAP_LAYOUT_REDUCE || all_out_identity)
        expect_close(F(&ldx[k]), &ref->dx[k], 2e-5, gwhat);
      else
        place(&gacc[k], 0, 0, &ldx[k], true);
    }
    for (int k = 0; k < n_in; k++) {
      t_free(&lin[k]);
      t_free(&ldx[k]);
    }
    for (int o = 0; o < n_out; o++) {
      t_free(&lout[o]);
      t_free(&lg[o]);
    }
    off += lens[i];
  }
  for (int o = 0; o < n_out; o++) {
    if (v->out[o] != HAP_LAYOUT_IDENTITY)
      expect_close(F(&acc[o]), &ref->y[o], 1e-5, what);
    t_free(&acc[o]);
  }
  for (int k = 0; k < n_in; k++) {
    char gwhat[320];
    snprintf(gwhat, sizeof gwhat, "%s: gradient of input %d", what, k);
    bool combined = v->in[k] >= 0 || (v->in[k] == HAP_LAYOUT_IDENTITY && !all_out_identity);
    if (io->in_grad[k] && io->in_dtype[k] == HAP_F32 && combined)
      expect_close(F(&gacc[k]), &ref->dx[k], 2e-5, gwhat);
    t_free(&gacc[k]);
    for (int i = 0; i < n; i++)
      t_free(&parts[k][i]);
  }
}

/* Every variant at every ratio vector; returns the number of variants. */
static int check_sharded(kcase *c) {
  infer(c);
  const hap_op_io *io = &c->io;
  const int n_in = io->n_in, n_out = io->n_out;
  sh_ref ref;
  memset(&ref, 0, sizeof ref);
  for (int k = 0; k < n_in; k++) {
    t_alloc(&ref.x[k], &io->in[k], io->in_dtype[k]);
    kcase_draw(c, k, ref.x[k].p, ref.x[k].n);
    t_alloc(&ref.dx[k], &io->in[k], HAP_F32);
  }
  for (int o = 0; o < n_out; o++) {
    t_alloc(&ref.y[o], &io->out[o], HAP_F32);
    t_alloc(&ref.w[o], &io->out[o], HAP_F32);
    for (int64_t f = 0; f < ref.w[o].n; f++)
      F(&ref.w[o])[f] = (float)uniform(-1, 1);
  }
  run_fwd(c, io, ref.x, ref.y, NULL, NULL);
  run_bwd(c, io, ref.x, ref.y, ref.w, ref.dx, NULL, NULL);
  hap_variant vs[HAP_MAX_VARIANTS];
  int nv = hap_op_variants(c->op, io, vs, HAP_MAX_VARIANTS);
  cr_assert_geq(nv, 1);
  for (int i = 0; i < nv; i++)
    for (int r = 0; r < N_RATIOS; r++)
      check_split(c, &ref, &vs[i], r);
  for (int k = 0; k < n_in; k++) {
    t_free(&ref.x[k]);
    t_free(&ref.dx[k]);
  }
  for (int o = 0; o < n_out; o++) {
    t_free(&ref.y[o]);
    t_free(&ref.w[o]);
  }
  return nv;
}

/* Both checks on one case (the sharded one on a fresh copy: check_grad perturbs nothing lasting,
 * but keep the cases independent). */
static int check_all(kcase *c) {
  kcase copy = *c;
  copy.io.attrs = &copy.attrs;
  check_grad(c);
  return check_sharded(&copy);
}

/* ---- the cases ------------------------------------------------------------------------------- */

Test(kernels_ops, linear) {
  kcase c;
  begin(&c, HAP_OP_LINEAR);
  in_f(&c, SHAPE(2, 4, 3));
  in_f(&c, SHAPE(4, 3));
  in_f(&c, SHAPE(4));
  cr_assert_eq(check_all(&c), 6);
  begin(&c, HAP_OP_LINEAR);
  in_f(&c, SHAPE(4, 4));
  in_f(&c, SHAPE(5, 4));
  cr_assert_geq(check_all(&c), 4);
  begin(&c, HAP_OP_LINEAR); /* a data input: no gradient asked */
  in_f(&c, SHAPE(4, 3));
  in_f(&c, SHAPE(2, 3));
  c.io.in_grad[0] = false;
  check_all(&c);
}

Test(kernels_ops, matmul_bmm) {
  kcase c;
  begin(&c, HAP_OP_MATMUL);
  in_f(&c, SHAPE(2, 4, 3));
  in_f(&c, SHAPE(3, 4));
  check_all(&c);
  begin(&c, HAP_OP_MATMUL); /* broadcast batch dims: [2, 1, 4, 3] @ [3, 3, 2] */
  in_f(&c, SHAPE(2, 1, 4, 3));
  in_f(&c, SHAPE(3, 3, 2));
  check_all(&c);
  begin(&c, HAP_OP_BMM);
  in_f(&c, SHAPE(4, 2, 3));
  in_f(&c, SHAPE(4, 3, 4));
  check_all(&c);
}

Test(kernels_ops, einsum_moe) {
  kcase c; /* b = 2, s = 3, d = 4, e = 4, c = 2, h = 3 */
  einsum_case(&c, "bsd,bsec->becd", SHAPE(2, 3, 4), SHAPE(2, 3, 4, 2));
  check_all(&c);
  einsum_case(&c, "edh,becd->bech", SHAPE(4, 4, 3), SHAPE(2, 4, 2, 4));
  check_all(&c);
  einsum_case(&c, "ehd,bech->becd", SHAPE(4, 3, 4), SHAPE(2, 4, 2, 3));
  check_all(&c);
  einsum_case(&c, "becd,bsec->bsd", SHAPE(2, 4, 2, 4), SHAPE(2, 3, 4, 2));
  check_all(&c);
}

Test(kernels_ops, einsum_general) {
  kcase c;
  einsum_case(&c, "ab,c->acb", SHAPE(4, 2), SHAPE(3)); /* outer product, permuted */
  check_all(&c);
  einsum_case(&c, "ab,c->c", SHAPE(4, 2), SHAPE(3)); /* summed within an operand */
  check_all(&c);
  einsum_case(&c, "ij,jk->ki", SHAPE(4, 3), SHAPE(3, 2)); /* transposed product */
  check_all(&c);
  einsum_case(&c, "abc,cba->", SHAPE(2, 3, 4), SHAPE(4, 3, 2)); /* full contraction */
  check_all(&c);
}

Test(kernels_ops, conv2d) {
  kcase c;
  begin(&c, HAP_OP_CONV2D);
  set_i(&c, "stride", 2);
  set_i(&c, "padding", 1);
  in_f(&c, SHAPE(2, 4, 5, 5));
  in_f(&c, SHAPE(4, 4, 3, 3));
  in_f(&c, SHAPE(4));
  cr_assert_eq(check_all(&c), 5);
  begin(&c, HAP_OP_CONV2D); /* patch embedding: kernel = stride, no bias */
  set_i(&c, "stride", 2);
  in_f(&c, SHAPE(4, 3, 4, 4));
  in_f(&c, SHAPE(4, 3, 2, 2));
  check_all(&c);
}

Test(kernels_ops, pooling) {
  kcase c;
  begin(&c, HAP_OP_MAX_POOL2D);
  in_f(&c, SHAPE(2, 4, 4, 4));
  c.kind[0] = V_DISTINCT;
  cr_assert_eq(check_all(&c), 3);
  begin(&c, HAP_OP_MAX_POOL2D);
  set_i(&c, "kernel", 3);
  set_i(&c, "stride", 2);
  set_i(&c, "padding", 1);
  in_f(&c, SHAPE(1, 4, 5, 5));
  c.kind[0] = V_DISTINCT;
  check_all(&c);
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D);
  set_ints(&c, "output_size", SHAPE(3, 2));
  in_f(&c, SHAPE(2, 4, 5, 5));
  cr_assert_eq(check_all(&c), 4);
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D); /* upsampling */
  set_ints(&c, "output_size", SHAPE(3, 4));
  in_f(&c, SHAPE(1, 2, 2, 3));
  check_all(&c);
}

Test(kernels_ops, embedding) {
  kcase c;
  begin(&c, HAP_OP_EMBEDDING);
  in_i(&c, SHAPE(2, 3), 8);
  in_f(&c, SHAPE(8, 4));
  cr_assert_eq(check_all(&c), 5); /* replicated, 2 data, embedding-dim, vocab */
  begin(&c, HAP_OP_EMBEDDING);
  in_i(&c, SCALAR, 4);
  in_f(&c, SHAPE(4, 3));
  check_all(&c);
}

Test(kernels_ops, layer_norm) {
  kcase c;
  begin(&c, HAP_OP_LAYER_NORM);
  in_f(&c, SHAPE(2, 4, 3));
  in_f(&c, SHAPE(3));
  in_f(&c, SHAPE(3));
  cr_assert_eq(check_all(&c), 3);
  begin(&c, HAP_OP_LAYER_NORM);
  set_i(&c, "normalized_dims", 2);
  in_f(&c, SHAPE(4, 2, 3));
  in_f(&c, SHAPE(2, 3));
  check_all(&c);
  begin(&c, HAP_OP_LAYER_NORM);
  in_f(&c, SHAPE(4, 5));
  check_all(&c);
}

Test(kernels_ops, attention) {
  kcase c;
  mha_case(&c, 4, 4, 3, 4, 2, true, 0.25); /* cross attention, mask, dropout */
  cr_assert_eq(check_all(&c), 4);
  mha_case(&c, 2, 4, 4, 6, 3, false, 0); /* 3 heads of 2 */
  check_all(&c);
  mha_case(&c, 2, 4, 4, 8, 4, true, 0.5); /* 4 heads: head-parallel 3 + 1 */
  c.io.in_grad[7] = false;                /* the mask is a buffer */
  check_all(&c);
}

Test(kernels_ops, unary) {
  static const hap_op ops[] = {HAP_OP_RELU,  HAP_OP_GELU, HAP_OP_SIGMOID, HAP_OP_TANH,
                               HAP_OP_RSQRT, HAP_OP_POW,  HAP_OP_POW,     HAP_OP_DROPOUT};
  kcase c;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    begin(&c, ops[i]);
    if (ops[i] == HAP_OP_POW)
      set_f(&c, "exponent", i == 5 ? 3 : 0.5);
    if (ops[i] == HAP_OP_DROPOUT)
      set_f(&c, "p", 0.3);
    in_f(&c, SHAPE(4, 3));
    c.kind[0] = ops[i] == HAP_OP_RSQRT || (ops[i] == HAP_OP_POW && i == 6) ? V_POS : V_AWAY0;
    cr_assert_eq(check_all(&c), ops[i] == HAP_OP_DROPOUT ? 4 : 3, "%s", hap_op_name(ops[i]));
  }
}

Test(kernels_ops, binary) {
  static const hap_op ops[] = {HAP_OP_ADD, HAP_OP_SUB, HAP_OP_MUL, HAP_OP_DIV};
  kcase c;
  for (int i = 0; i < 4; i++) {
    begin(&c, ops[i]); /* [2, 1, 3] with [4, 3]: out [2, 4, 3] */
    in_f(&c, SHAPE(2, 1, 3));
    in_f(&c, SHAPE(4, 3));
    c.kind[1] = V_POS;
    check_all(&c);
    begin(&c, ops[i]);
    in_f(&c, SHAPE(4, 3));
    in_f(&c, SHAPE(4, 3));
    c.kind[1] = V_POS;
    check_all(&c);
    begin(&c, ops[i]);
    set_f(&c, "scalar", 1.5);
    in_f(&c, SHAPE(4, 3));
    cr_assert_eq(check_all(&c), 4, "%s", hap_op_name(ops[i]));
  }
}

Test(kernels_ops, softmax_and_reductions) {
  kcase c;
  begin(&c, HAP_OP_SOFTMAX);
  set_i(&c, "dim", 1);
  in_f(&c, SHAPE(2, 4, 3));
  cr_assert_eq(check_all(&c), 3);
  begin(&c, HAP_OP_LOG_SOFTMAX);
  in_f(&c, SHAPE(4, 2, 3));
  check_all(&c);
  begin(&c, HAP_OP_SUM);
  set_ints(&c, "dims", SHAPE(1));
  in_f(&c, SHAPE(2, 4, 3));
  cr_assert_eq(check_all(&c), 5);
  begin(&c, HAP_OP_SUM);
  in_f(&c, SHAPE(4, 3));
  check_all(&c);
  begin(&c, HAP_OP_MEAN);
  set_ints(&c, "dims", SHAPE(0, -1));
  set_i(&c, "keepdim", 1);
  in_f(&c, SHAPE(4, 2, 3));
  cr_assert_eq(check_all(&c), 5);
  begin(&c, HAP_OP_MEAN);
  in_f(&c, SHAPE(4, 3));
  check_all(&c);
}

Test(kernels_ops, layout) {
  kcase c;
  begin(&c, HAP_OP_RESHAPE);
  set_ints(&c, "shape", SHAPE(2, 4, 3, 1));
  in_f(&c, SHAPE(2, 4, 3));
  check_all(&c);
  begin(&c, HAP_OP_RESHAPE); /* [B, S, E] -> [B, S, H, E / H] */
  set_ints(&c, "shape", SHAPE(2, 4, 2, -1));
  in_f(&c, SHAPE(2, 4, 4));
  check_all(&c);
  begin(&c, HAP_OP_FLATTEN);
  set_i(&c, "start_dim", 1);
  in_f(&c, SHAPE(4, 3, 2));
  check_all(&c);
  begin(&c, HAP_OP_TRANSPOSE);
  set_i(&c, "dim0", 0);
  set_i(&c, "dim1", -1);
  in_f(&c, SHAPE(2, 4, 3));
  cr_assert_eq(check_all(&c), 5);
  begin(&c, HAP_OP_PERMUTE);
  set_ints(&c, "dims", SHAPE(2, 0, 1));
  in_f(&c, SHAPE(2, 4, 3));
  cr_assert_eq(check_all(&c), 5);
  begin(&c, HAP_OP_NARROW);
  set_i(&c, "dim", 1);
  set_i(&c, "start", 1);
  set_i(&c, "length", 3);
  in_f(&c, SHAPE(4, 5));
  cr_assert_eq(check_all(&c), 3);
  begin(&c, HAP_OP_CLS_APPEND);
  in_f(&c, SHAPE(4, 3, 4));
  in_f(&c, SHAPE(1, 1, 4));
  cr_assert_eq(check_all(&c), 4);
  begin(&c, HAP_OP_CLS_APPEND);
  set_i(&c, "first", 1);
  in_f(&c, SHAPE(4, 3, 4));
  in_f(&c, SHAPE(1, 1, 4));
  cr_assert_eq(check_all(&c), 4);
  begin(&c, HAP_OP_CLS_SELECT);
  in_f(&c, SHAPE(4, 3, 4));
  cr_assert_eq(check_all(&c), 4);
}

Test(kernels_ops, top2_gating) {
  kcase c;
  begin(&c, HAP_OP_TOP2_GATING);
  set_i(&c, "capacity", 2);
  in_f(&c, SHAPE(4, 3, 2));
  in_f(&c, SHAPE(2, 3));
  c.eps = 1e-3;
  cr_assert_eq(check_all(&c), 2);
  begin(&c, HAP_OP_TOP2_GATING); /* more slots than tokens: nothing dropped */
  set_i(&c, "capacity", 8);
  in_f(&c, SHAPE(4, 5, 3));
  in_f(&c, SHAPE(3, 4));
  c.eps = 1e-3;
  check_all(&c);
}

Test(kernels_ops, losses) {
  static const hap_op ops[] = {HAP_OP_NLL_LOSS, HAP_OP_CROSS_ENTROPY};
  kcase c;
  for (int i = 0; i < 2; i++)
    for (int mean = 0; mean < 2; mean++) {
      begin(&c, ops[i]);
      set_s(&c, "reduction", mean ? "mean" : "sum");
      in_f(&c, SHAPE(4, 3));
      in_i(&c, SHAPE(4), 3);
      cr_assert_eq(check_all(&c), 2);
      begin(&c, ops[i]);
      set_s(&c, "reduction", mean ? "mean" : "sum");
      in_f(&c, SHAPE(2, 3, 4, 2));
      in_i(&c, SHAPE(2, 4, 2), 3);
      cr_assert_eq(check_all(&c), 4);
    }
}

/* ---- conventions ------------------------------------------------------------------------------
 */

/* x * x over x = (1, 2, 3), forward run, with one gradient buffer dx for both inputs and an
 * output gradient of ones: backward's gradient is 2x. Keep it in place (it points into itself). */
typedef struct square_case {
  kcase c;
  float x[3], y[3], g[3], dx[3];
  const void *ip[2], *op[1];
  const float *gp[1];
  float *dp[2];
  hap_kernel_call call;
} square_case;

static void square_setup(square_case *s) {
  begin(&s->c, HAP_OP_MUL);
  in_f(&s->c, SHAPE(3));
  in_f(&s->c, SHAPE(3));
  infer(&s->c);
  for (int i = 0; i < 3; i++) {
    s->x[i] = (float)(i + 1);
    s->g[i] = 1;
    s->dx[i] = 0;
  }
  s->ip[0] = s->ip[1] = s->x;
  s->op[0] = s->y;
  s->gp[0] = s->g;
  s->dp[0] = s->dp[1] = s->dx;
  s->call = (hap_kernel_call){.op = s->c.op, .io = &s->c.io, .in = s->ip, .out = s->op};
  void *yo[1] = {s->y};
  hap_err e = {0};
  cr_assert_eq(hap_kernel_forward(&s->call, yo, NULL, &e), HAP_OK, "%s", e.msg);
}

Test(kernels_conventions, backward_accumulates) {
  /* din += gradient: two calls give twice the gradient; x + x may share one buffer */
  square_case s;
  square_setup(&s);
  hap_err e = {0};
  cr_assert_eq(hap_kernel_backward(&s.call, s.gp, s.dp, NULL, &e), HAP_OK, "%s", e.msg);
  for (int i = 0; i < 3; i++) /* d(x^2)/dx = 2x */
    cr_assert_float_eq(s.dx[i], 2 * s.x[i], 1e-6);
  cr_assert_eq(hap_kernel_backward(&s.call, s.gp, s.dp, NULL, &e), HAP_OK, "%s", e.msg);
  for (int i = 0; i < 3; i++)
    cr_assert_float_eq(s.dx[i], 4 * s.x[i], 1e-6);
}

#ifndef HAP_TEST_KX /* kernel programs add only */
Test(kernels_conventions, fresh_gradients_are_stored) {
  /* x * x with one buffer for both gradients, full of NaN: marked fresh (on either input: the
   * bit moves to the lowest), the call stores 2x; not marked, it adds to the NaN */
  square_case s;
  square_setup(&s);
  hap_err e = {0};
  for (uint32_t bits = 1; bits <= 3; bits++) {
    for (int i = 0; i < 3; i++)
      s.dx[i] = NAN;
    s.call.fresh_din = bits;
    cr_assert_eq(hap_kernel_backward(&s.call, s.gp, s.dp, NULL, &e), HAP_OK, "%s", e.msg);
    for (int i = 0; i < 3; i++)
      cr_assert_float_eq(s.dx[i], 2 * s.x[i], 1e-6, "fresh bits %u", bits);
  }
  s.call.fresh_din = 0;
  s.dx[0] = NAN;
  cr_assert_eq(hap_kernel_backward(&s.call, s.gp, s.dp, NULL, &e), HAP_OK, "%s", e.msg);
  cr_assert(isnan(s.dx[0]), "without the bit the gradient is added to what was there");

  /* an op whose kernel only adds (embedding's scatter): hap_kernel_backward zeroes the fresh
   * buffer first; nothing to do (no output gradient): the fresh buffer ends as zeros */
  kcase c;
  begin(&c, HAP_OP_EMBEDDING);
  in_i(&c, SHAPE(2), 3);
  in_f(&c, SHAPE(3, 2));
  infer(&c);
  int64_t ids[2] = {2, 2};
  float table[6] = {0}, emb[4], ge[4] = {1, 2, 3, 4}, dw[6];
  const void *eip[2] = {ids, table}, *eop[1] = {emb};
  void *eo[1] = {emb};
  const float *egp[1] = {ge}, *none[1] = {NULL};
  float *edp[2] = {NULL, dw};
  hap_kernel_call ec = {.op = c.op, .io = &c.io, .in = eip, .out = eop, .fresh_din = 2};
  cr_assert_eq(hap_kernel_forward(&ec, eo, NULL, &e), HAP_OK, "%s", e.msg);
  for (int i = 0; i < 6; i++)
    dw[i] = NAN;
  cr_assert_eq(hap_kernel_backward(&ec, egp, edp, NULL, &e), HAP_OK, "%s", e.msg);
  const float want[6] = {0, 0, 0, 0, 4, 6};
  for (int i = 0; i < 6; i++)
    cr_assert_float_eq(dw[i], want[i], 1e-6, "embedding row %d", i / 2);
  for (int i = 0; i < 6; i++)
    dw[i] = NAN;
  cr_assert_eq(hap_kernel_backward(&ec, none, edp, NULL, &e), HAP_OK, "%s", e.msg);
  for (int i = 0; i < 6; i++)
    cr_assert_eq(dw[i], 0.0f);
}

Test(kernels_conventions, state_is_reused_and_replaced) {
  kcase c;
  begin(&c, HAP_OP_LAYER_NORM);
  in_f(&c, SHAPE(2, 3));
  infer(&c);
  float x[6] = {1, 2, 4, -1, 0, 3}, y[6], g[6] = {1, 0, 0, 0, 0, 1}, d1[6] = {0}, d2[6] = {0};
  const void *ip[1] = {x}, *op[1] = {y};
  void *yo[1] = {y};
  const float *gp[1] = {g};
  float *dp1[1] = {d1}, *dp2[1] = {d2};
  hap_kernel_call call = {.op = c.op, .io = &c.io, .in = ip, .out = op};
  hap_kernel_state st = {0};
  hap_err e = {0};
  cr_assert_eq(hap_kernel_forward(&call, yo, &st, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(st.op, HAP_OP_LAYER_NORM);
  cr_assert_eq(st.n_bytes, 4 * sizeof(float)); /* mean and rstd of two rows */
  cr_assert_eq(hap_kernel_forward(&call, yo, &st, &e), HAP_OK, "%s", e.msg); /* no leak */
  cr_assert_eq(hap_kernel_backward(&call, gp, dp1, &st, &e), HAP_OK, "%s", e.msg);
  hap_kernel_state_free(&st);
  cr_assert_eq(hap_kernel_backward(&call, gp, dp2, &st, &e), HAP_OK, "%s", e.msg);
  for (int i = 0; i < 6; i++)
    cr_assert_float_eq(d1[i], d2[i], 1e-7);
}
#endif

#ifdef HAP_TEST_KX
Test(kernels_kx, ops_without_a_program_are_refused) {
  hap_err e = {0};
  cr_assert_eq(hap_kx_supported(HAP_OP_CONV2D, &e), HAP_EUNSUPPORTED);
  cr_assert_str_eq(e.msg, "op 'conv2d' has no CUDA kernel yet (hap-run --backend cpu runs it)");
  static const hap_op with[] = {HAP_OP_LINEAR, HAP_OP_SIGMOID, HAP_OP_SUM, HAP_OP_CROSS_ENTROPY};
  for (size_t i = 0; i < sizeof with / sizeof with[0]; i++)
    cr_assert_eq(hap_kx_supported(with[i], &e), HAP_OK);
  static const hap_op without[] = {HAP_OP_EINSUM, HAP_OP_MAX_POOL2D, HAP_OP_ADAPTIVE_AVG_POOL2D,
                                   HAP_OP_MULTI_HEAD_ATTENTION, HAP_OP_TOP2_GATING};
  for (size_t i = 0; i < sizeof without / sizeof without[0]; i++) {
    hap_err_clear(&e);
    cr_assert_eq(hap_kx_supported(without[i], &e), HAP_EUNSUPPORTED);
    cr_assert(strstr(e.msg, hap_op_name(without[i])) != NULL, "%s", e.msg);
  }
}

Test(kernels_kx, bias_once_drops_the_bias_pass_off_rank_0) {
  /* linear's row-parallel variant adds the bias on rank 0 only: other ranks' programs have no
   * bias pass in forward and no bias gradient in backward */
  kcase c;
  begin(&c, HAP_OP_LINEAR);
  in_f(&c, SHAPE(4, 6));
  in_f(&c, SHAPE(3, 6));
  in_f(&c, SHAPE(3));
  infer(&c);
  hap_variant vs[HAP_MAX_VARIANTS];
  int nv = hap_op_variants(c.op, &c.io, vs, HAP_MAX_VARIANTS);
  int found = 0;
  for (int v = 0; v < nv; v++) {
    if (!(vs[v].flags & HAP_VARIANT_BIAS_ONCE))
      continue;
    found++;
    float x[24] = {0}, w[18] = {0}, b[3] = {1, 2, 3}, y[12];
    const void *ip[3] = {x, w, b};
    void *op[1] = {y};
    for (int32_t rank = 0; rank < 2; rank++) {
      hap_kernel_shard sh = {&c.io, &vs[v], rank, 0};
      hap_kernel_call call = {.op = c.op, .io = &c.io, .shard = &sh, .in = ip};
      hap_kx_prog p;
      hap_err e = {0};
      cr_assert_eq(hap_kx_build_forward(&call, op, &p, &e), HAP_OK, "%s", e.msg);
      bool bias = false;
      for (int k = 0; k < p.n; k++)
        bias = bias || p.pass[k].kind == HAP_KX_ROW_BIAS;
      cr_assert_eq(bias, rank == 0, "variant %d rank %d", v, rank);
    }
  }
  cr_assert_gt(found, 0, "linear has a BIAS_ONCE variant");
}
#endif
