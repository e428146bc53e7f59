/* test_kernels_ref64.c — every op's float32 CPU kernel (kernels.h) against the independent float64
 * reference (tests/kref/kref.h). One Test per op, named after it (kernels_ref64/<op>), so that
 * `--filter 'kernels_ref64/<op>'` runs one op: tests/unit/test_kernel_faults.sh runs each so with
 * HAP_FAULT_KERNEL=<op> (a 0.1 % error in that op's backward) and requires it to fail.
 *
 * For every case (inputs are the float32 values the kernel sees, converted exactly to double):
 *  - forward: every output element within FWD_REL of the output's scale,
 *      |kernel - ref| <= FWD_REL x max(max |ref|, FWD_FLOOR)                (1e-5, floor 1e-3);
 *  - backward: with loss = sum over outputs of w . out (w uniform in [-1, 1], float32 values,
 *    given to the kernel as dout), every element of every input that takes a gradient: the
 *    kernel's gradient against finite differences of the float64 reference, the central
 *    differences at steps h = FD_STEP (1e-5) and 2h combined by Richardson extrapolation,
 *    (4 D(h) - D(2h)) / 3 (error O(h^4) plus rounding ~1e-16 |loss| / h: ~1e-10 .. 1e-9 here),
 *      |kernel - fd| <= BWD_REL x max(max |fd| of that input, BWD_FLOOR)   (1e-4, floor 1e-3).
 *    A 0.1 % error is ten times BWD_REL, and each checked input must have max |fd| >= BWD_FLOOR,
 *    so that the floor cannot hide one. D(h) and D(2h) must agree within SMOOTH_REL (1e-5) of the
 *    scale: the inputs sit where the function is smooth (a relu kink, a max_pool tie or a top-2
 *    choice flip within 2h of the point would make them differ by about the jump). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kref.h"

#define KERNEL_CASE_RNG_SEED     0x2545f4914f6cdd1dULL /* the input values */
#define KERNEL_CASE_DROPOUT_SEED 20240611
#include "kernel_case.h"

#define FWD_REL    1e-5
#define FWD_FLOOR  1e-3
#define BWD_REL    1e-4
#define BWD_FLOOR  1e-3
#define FD_STEP    1e-5
#define SMOOTH_REL 1e-5

/* ---- values ---------------------------------------------------------------------------------- */

/* One case's buffers: float inputs twice (float32 for the kernel, the same values in double for
 * the reference), index inputs once (int64, both read them). */
typedef struct bufs {
  int64_t n_in[HAP_MAX_OP_INPUTS], n_out[HAP_MAX_OP_OUTPUTS]; /* elements */
  float *xf[HAP_MAX_OP_INPUTS];
  double *xd[HAP_MAX_OP_INPUTS];
  int64_t *xi[HAP_MAX_OP_INPUTS];
  float *gf[HAP_MAX_OP_INPUTS]; /* kernel gradients */
  float *yf[HAP_MAX_OP_OUTPUTS], *wf[HAP_MAX_OP_OUTPUTS];
  double *yd[HAP_MAX_OP_OUTPUTS], *wd[HAP_MAX_OP_OUTPUTS];
} bufs;

static void fill(const kcase *c, int k, bufs *b) {
  if (c->int_hi[k] > 0) {
    kcase_draw(c, k, b->xi[k], b->n_in[k]);
    return;
  }
  kcase_draw(c, k, b->xf[k], b->n_in[k]);
  for (int64_t f = 0; f < b->n_in[k]; f++)
    b->xd[k][f] = b->xf[k][f];
}

static void bufs_make(const kcase *c, bufs *b) {
  const hap_op_io *io = &c->io;
  memset(b, 0, sizeof *b);
  for (int k = 0; k < io->n_in; k++) {
    b->n_in[k] = numel(&io->in[k]);
    if (io->in_dtype[k] == HAP_I64) {
      b->xi[k] = alloc(b->n_in[k], sizeof(int64_t));
    } else {
      b->xf[k] = alloc(b->n_in[k], sizeof(float));
      b->xd[k] = alloc(b->n_in[k], sizeof(double));
      b->gf[k] = alloc(b->n_in[k], sizeof(float));
    }
    fill(c, k, b);
  }
  for (int o = 0; o < io->n_out; o++) {
    b->n_out[o] = numel(&io->out[o]);
    b->yf[o] = alloc(b->n_out[o], sizeof(float));
    b->wf[o] = alloc(b->n_out[o], sizeof(float));
    b->yd[o] = alloc(b->n_out[o], sizeof(double));
    b->wd[o] = alloc(b->n_out[o], sizeof(double));
    for (int64_t f = 0; f < b->n_out[o]; f++) {
      b->wf[o][f] = (float)uniform(-1, 1);
      b->wd[o][f] = b->wf[o][f];
    }
  }
}

static void bufs_free(bufs *b) {
  for (int k = 0; k < HAP_MAX_OP_INPUTS; k++) {
    free(b->xf[k]);
    free(b->xd[k]);
    free(b->xi[k]);
    free(b->gf[k]);
  }
  for (int o = 0; o < HAP_MAX_OP_OUTPUTS; o++) {
    free(b->yf[o]);
    free(b->wf[o]);
    free(b->yd[o]);
    free(b->wd[o]);
  }
}

/* ---- the reference's loss and its finite differences ----------------------------------------- */

/* sum over outputs of w . ref(x) at the current double inputs. */
static double ref_loss(const kcase *c, bufs *b) {
  const void *in[HAP_MAX_OP_INPUTS] = {NULL};
  for (int k = 0; k < c->io.n_in; k++)
    in[k] = b->xi[k] != NULL ? (const void *)b->xi[k] : (const void *)b->xd[k];
  hap_err e = {0};
  cr_assert_eq(hap_kref_forward(c->op, &c->io, c->seed, in, b->yd, &e), HAP_OK, "%s reference: %s",
               hap_op_name(c->op), e.msg);
  double l = 0;
  for (int o = 0; o < c->io.n_out; o++)
    for (int64_t f = 0; f < b->n_out[o]; f++)
      l += b->wd[o][f] * b->yd[o][f];
  return l;
}

/* d loss / d x_k[f] by central differences at step h. */
static double central(const kcase *c, bufs *b, int k, int64_t f, double h) {
  double keep = b->xd[k][f];
  b->xd[k][f] = keep + h;
  double lp = ref_loss(c, b);
  b->xd[k][f] = keep - h;
  double lm = ref_loss(c, b);
  b->xd[k][f] = keep;
  return (lp - lm) / (2 * h);
}

static double max_abs_d(const double *v, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++)
    m = fmax(m, fabs(v[i]));
  return m;
}

/* ---- the check ------------------------------------------------------------------------------- */

static void check_forward(const kcase *c, bufs *b) {
  const char *op = hap_op_name(c->op);
  for (int o = 0; o < c->io.n_out; o++) {
    double scale = max_abs_d(b->yd[o], b->n_out[o]), tol = FWD_REL * fmax(scale, FWD_FLOOR);
    double worst = 0;
    for (int64_t f = 0; f < b->n_out[o]; f++)
      worst = fmax(worst, fabs((double)b->yf[o][f] - b->yd[o][f]));
    cr_log_info("%s: output %d: max |ref| %.3g, kernel error %.2e of it (tolerance %g)", op, o,
                scale, worst / fmax(scale, FWD_FLOOR), FWD_REL);
    for (int64_t f = 0; f < b->n_out[o]; f++)
      cr_assert(fabs((double)b->yf[o][f] - b->yd[o][f]) <= tol,
                "%s forward: output %d [%lld] is %.9g, the float64 reference gives %.12g "
                "(tolerance %.3g)",
                op, o, (long long)f, b->yf[o][f], b->yd[o][f], tol);
  }
}

static void check_backward(const kcase *c, bufs *b) {
  const hap_op_io *io = &c->io;
  const char *op = hap_op_name(c->op);
  int checked = 0;
  for (int k = 0; k < io->n_in; k++) {
    if (!io->in_grad[k] || b->xd[k] == NULL)
      continue;
    const char *name = hap_op_get(c->op)->in_names[k];
    int64_t n = b->n_in[k];
    /* d1, d2: central differences at h and 2h; fd: Richardson's (4 d1 - d2) / 3 */
    double *fd = alloc(n, sizeof(double)), *d1 = alloc(n, sizeof(double));
    double *d2 = alloc(n, sizeof(double));
    for (int64_t f = 0; f < n; f++) {
      d1[f] = central(c, b, k, f, FD_STEP);
      d2[f] = central(c, b, k, f, 2 * FD_STEP);
      fd[f] = (4 * d1[f] - d2[f]) / 3;
    }
    double scale = max_abs_d(fd, n);
    cr_assert(scale >= BWD_FLOOR,
              "%s: input %d (%s): largest |gradient| %.3g is under the floor %.3g, where a 0.1 %% "
              "error could hide: choose another case",
              op, k, name, scale, BWD_FLOOR);
    double tol = BWD_REL * fmax(scale, BWD_FLOOR), smooth = SMOOTH_REL * fmax(scale, BWD_FLOOR);
    double worst = 0, rough = 0; /* largest |kernel - fd| and |d1 - d2| */
    for (int64_t f = 0; f < n; f++) {
      worst = fmax(worst, fabs((double)b->gf[k][f] - fd[f]));
      rough = fmax(rough, fabs(d1[f] - d2[f]));
    }
    cr_log_info("%s: d input %d (%s): max |gradient| %.3g, kernel error %.2e of it (tolerance "
                "%g), |D(h) - D(2h)| %.2e of it",
                op, k, name, scale, worst / scale, BWD_REL, rough / scale);
    for (int64_t f = 0; f < n; f++) {
      cr_assert(fabs(d1[f] - d2[f]) <= smooth,
                "%s: input %d (%s) [%lld]: central differences at steps %g and %g differ (%.12g, "
                "%.12g): the reference is not smooth there, choose other input values",
                op, k, name, (long long)f, FD_STEP, 2 * FD_STEP, d1[f], d2[f]);
      cr_assert(fabs((double)b->gf[k][f] - fd[f]) <= tol,
                "%s backward: d input %d (%s) [%lld] is %.9g, finite differences of the float64 "
                "reference give %.12g (tolerance %.3g = %g x %.3g)",
                op, k, name, (long long)f, b->gf[k][f], fd[f], tol, BWD_REL, scale);
    }
    free(fd);
    free(d1);
    free(d2);
    checked++;
  }
  cr_assert_gt(checked, 0, "%s: the case checks no gradient", op);
}

/* Infer the case, run the kernel forward and backward and the reference, and compare. */
static void check(kcase *c) {
  infer(c);
  hap_err e = {0};
  const hap_op_io *io = &c->io;
  bufs b;
  bufs_make(c, &b);
  const void *kin[HAP_MAX_OP_INPUTS] = {NULL}, *kout[HAP_MAX_OP_OUTPUTS] = {NULL};
  void *yo[HAP_MAX_OP_OUTPUTS] = {NULL};
  const float *dout[HAP_MAX_OP_OUTPUTS] = {NULL};
  for (int k = 0; k < io->n_in; k++)
    kin[k] = b.xi[k] != NULL ? (const void *)b.xi[k] : (const void *)b.xf[k];
  for (int o = 0; o < io->n_out; o++) {
    yo[o] = b.yf[o];
    kout[o] = b.yf[o];
    dout[o] = b.wf[o];
  }
  hap_kernel_call call = {.op = c->op, .io = io, .seed = c->seed, .in = kin, .out = kout};
  hap_kernel_state st = {0};
  cr_assert_eq(hap_kernel_forward(&call, yo, &st, &e), HAP_OK, "%s forward: %s", hap_op_name(c->op),
               e.msg);
  cr_assert_eq(hap_kernel_backward(&call, dout, b.gf, &st, &e), HAP_OK, "%s backward: %s",
               hap_op_name(c->op), e.msg);
  hap_kernel_state_free(&st);
  ref_loss(c, &b); /* the reference's outputs at the unperturbed inputs */
  check_forward(c, &b);
  check_backward(c, &b);
  bufs_free(&b);
}

/* ---- the ops: one Test each, named as the op ------------------------------------------------- */

Test(kernels_ref64, linear) {
  kcase c;
  begin(&c, HAP_OP_LINEAR);
  in_f(&c, SHAPE(2, 4, 3));
  in_f(&c, SHAPE(4, 3));
  in_f(&c, SHAPE(4));
  check(&c);
  begin(&c, HAP_OP_LINEAR); /* no bias */
  in_f(&c, SHAPE(4, 6));
  in_f(&c, SHAPE(5, 6));
  check(&c);
  begin(&c, HAP_OP_LINEAR); /* a data input: no gradient asked */
  in_f(&c, SHAPE(3, 5));
  in_f(&c, SHAPE(2, 5));
  in_f(&c, SHAPE(2));
  c.io.in_grad[0] = false;
  check(&c);
}

Test(kernels_ref64, matmul) {
  kcase c;
  begin(&c, HAP_OP_MATMUL);
  in_f(&c, SHAPE(2, 4, 3));
  in_f(&c, SHAPE(3, 4));
  check(&c);
  begin(&c, HAP_OP_MATMUL); /* broadcast batch dims: [2, 1, 4, 3] @ [3, 3, 2] */
  in_f(&c, SHAPE(2, 1, 4, 3));
  in_f(&c, SHAPE(3, 3, 2));
  check(&c);
}

Test(kernels_ref64, bmm) {
  kcase c;
  begin(&c, HAP_OP_BMM);
  in_f(&c, SHAPE(4, 2, 3));
  in_f(&c, SHAPE(4, 3, 4));
  check(&c);
}

static void einsum_check(const char *eq, hap_shape a, hap_shape b) {
  kcase c;
  einsum_case(&c, eq, a, b);
  check(&c);
}

Test(kernels_ref64, einsum) {
  /* the MoE layer's four (b = 2, s = 3, d = 4, e = 4, c = 2, h = 3) */
  einsum_check("bsd,bsec->becd", SHAPE(2, 3, 4), SHAPE(2, 3, 4, 2));
  einsum_check("edh,becd->bech", SHAPE(4, 4, 3), SHAPE(2, 4, 2, 4));
  einsum_check("ehd,bech->becd", SHAPE(4, 3, 4), SHAPE(2, 4, 2, 3));
  einsum_check("becd,bsec->bsd", SHAPE(2, 4, 2, 4), SHAPE(2, 3, 4, 2));
  einsum_check("ab,c->acb", SHAPE(4, 2), SHAPE(3));             /* outer product, permuted */
  einsum_check("ab,c->c", SHAPE(4, 2), SHAPE(3));               /* summed within an operand */
  einsum_check("ij,jk->ki", SHAPE(4, 3), SHAPE(3, 2));          /* transposed product */
  einsum_check("abc,cba->", SHAPE(2, 3, 4), SHAPE(4, 3, 2));    /* full contraction */
  einsum_check("bij,bjk->bik", SHAPE(2, 3, 4), SHAPE(2, 4, 2)); /* batched */
}

Test(kernels_ref64, conv2d) {
  kcase c;
  begin(&c, HAP_OP_CONV2D);
  set_i(&c, "stride", 2);
  set_i(&c, "padding", 1);
  in_f(&c, SHAPE(2, 4, 5, 5));
  in_f(&c, SHAPE(3, 4, 3, 3));
  in_f(&c, SHAPE(3));
  check(&c);
  begin(&c, HAP_OP_CONV2D); /* patch embedding: kernel = stride, no bias */
  set_i(&c, "stride", 2);
  in_f(&c, SHAPE(2, 3, 4, 4));
  in_f(&c, SHAPE(4, 3, 2, 2));
  check(&c);
  begin(&c, HAP_OP_CONV2D); /* stride 1, padding 1, a non-square kernel */
  set_i(&c, "padding", 1);
  in_f(&c, SHAPE(1, 2, 4, 3));
  in_f(&c, SHAPE(2, 2, 3, 2));
  in_f(&c, SHAPE(2));
  check(&c);
  /* output rows of 16 and more take the row-run paths of im2col and col2im */
  begin(&c, HAP_OP_CONV2D); /* "same" along x (rows as wide as the input's), fewer rows out */
  set_i(&c, "padding", 1);
  in_f(&c, SHAPE(2, 2, 5, 18));
  in_f(&c, SHAPE(3, 2, 5, 3));
  in_f(&c, SHAPE(3));
  check(&c);
  begin(&c, HAP_OP_CONV2D); /* no padding: narrower rows out */
  in_f(&c, SHAPE(1, 2, 4, 19));
  in_f(&c, SHAPE(2, 2, 3, 3));
  check(&c);
  begin(&c, HAP_OP_CONV2D); /* stride 2 */
  set_i(&c, "stride", 2);
  set_i(&c, "padding", 1);
  in_f(&c, SHAPE(1, 2, 5, 33));
  in_f(&c, SHAPE(2, 2, 3, 3));
  in_f(&c, SHAPE(2));
  check(&c);
}

Test(kernels_ref64, max_pool2d) {
  kcase c;
  begin(&c, HAP_OP_MAX_POOL2D);
  in_f(&c, SHAPE(2, 3, 4, 4));
  c.kind[0] = V_DISTINCT;
  check(&c);
  begin(&c, HAP_OP_MAX_POOL2D); /* overlapping windows, -inf padding */
  set_i(&c, "kernel", 3);
  set_i(&c, "stride", 2);
  set_i(&c, "padding", 1);
  in_f(&c, SHAPE(1, 4, 5, 5));
  c.kind[0] = V_DISTINCT;
  check(&c);
}

Test(kernels_ref64, adaptive_avg_pool2d) {
  kcase c;
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D); /* overlapping bins */
  set_ints(&c, "output_size", SHAPE(3, 2));
  in_f(&c, SHAPE(2, 4, 5, 5));
  check(&c);
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D); /* upsampling */
  set_ints(&c, "output_size", SHAPE(3, 4));
  in_f(&c, SHAPE(1, 2, 2, 3));
  check(&c);
}

Test(kernels_ref64, embedding) {
  kcase c;
  begin(&c, HAP_OP_EMBEDDING);
  in_i(&c, SHAPE(2, 5), 6); /* repeated ids: their gradients add */
  in_f(&c, SHAPE(6, 4));
  check(&c);
  begin(&c, HAP_OP_EMBEDDING);
  in_i(&c, SCALAR, 4);
  in_f(&c, SHAPE(4, 3));
  check(&c);
}

Test(kernels_ref64, layer_norm) {
  kcase c;
  begin(&c, HAP_OP_LAYER_NORM);
  in_f(&c, SHAPE(2, 4, 3));
  in_f(&c, SHAPE(3));
  in_f(&c, SHAPE(3));
  check(&c);
  begin(&c, HAP_OP_LAYER_NORM); /* two normalised dims, weight only, a larger eps */
  set_i(&c, "normalized_dims", 2);
  set_f(&c, "eps", 1e-2);
  in_f(&c, SHAPE(4, 2, 3));
  in_f(&c, SHAPE(2, 3));
  check(&c);
  begin(&c, HAP_OP_LAYER_NORM); /* no parameters */
  in_f(&c, SHAPE(4, 5));
  check(&c);
}

Test(kernels_ref64, multi_head_attention) {
  kcase c;
  mha_case(&c, 2, 4, 3, 4, 2, true, 0.25); /* cross attention, mask, dropout */
  check(&c);
  mha_case(&c, 2, 3, 3, 6, 3, false, 0); /* 3 heads of 2 */
  check(&c);
  mha_case(&c, 1, 4, 4, 8, 4, true, 0.5); /* 4 heads; the mask is a buffer */
  c.io.in_grad[7] = false;
  check(&c);
}

static void unary_case(hap_op op, int kind) {
  kcase c;
  begin(&c, op);
  in_f(&c, SHAPE(4, 3));
  c.kind[0] = kind;
  check(&c);
}

Test(kernels_ref64, relu) { unary_case(HAP_OP_RELU, V_AWAY0); }
Test(kernels_ref64, gelu) { unary_case(HAP_OP_GELU, V_ANY); }
Test(kernels_ref64, sigmoid) { unary_case(HAP_OP_SIGMOID, V_ANY); }
Test(kernels_ref64, tanh) { unary_case(HAP_OP_TANH, V_ANY); }
Test(kernels_ref64, rsqrt) { unary_case(HAP_OP_RSQRT, V_POS); }

Test(kernels_ref64, pow) {
  static const struct {
    double exponent;
    int kind;
  } cases[] = {{3, V_ANY}, {0.5, V_POS}, {-1.5, V_POS}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kcase c;
    begin(&c, HAP_OP_POW);
    set_f(&c, "exponent", cases[i].exponent);
    in_f(&c, SHAPE(4, 3));
    c.kind[0] = cases[i].kind;
    check(&c);
  }
}

Test(kernels_ref64, dropout) {
  kcase c;
  begin(&c, HAP_OP_DROPOUT);
  set_f(&c, "p", 0.3);
  in_f(&c, SHAPE(4, 5));
  check(&c);
  begin(&c, HAP_OP_DROPOUT); /* the default p = 0.5, another seed */
  in_f(&c, SHAPE(2, 3, 4));
  c.seed = 7;
  check(&c);
}

/* a [2, 1, 3] with b [4, 3] (both broadcast), equal shapes, and the scalar attribute. */
static void binary_cases(hap_op op) {
  kcase c;
  begin(&c, op);
  in_f(&c, SHAPE(2, 1, 3));
  in_f(&c, SHAPE(4, 3));
  c.kind[1] = V_POS; /* div: away from 0 */
  check(&c);
  begin(&c, op);
  in_f(&c, SHAPE(4, 3));
  in_f(&c, SHAPE(4, 3));
  c.kind[1] = V_POS;
  check(&c);
  begin(&c, op);
  set_f(&c, "scalar", 1.5);
  in_f(&c, SHAPE(4, 3));
  check(&c);
}

Test(kernels_ref64, add) { binary_cases(HAP_OP_ADD); }
Test(kernels_ref64, sub) { binary_cases(HAP_OP_SUB); }
Test(kernels_ref64, mul) { binary_cases(HAP_OP_MUL); }
Test(kernels_ref64, div) { binary_cases(HAP_OP_DIV); }

Test(kernels_ref64, softmax) {
  kcase c;
  begin(&c, HAP_OP_SOFTMAX);
  set_i(&c, "dim", 1);
  in_f(&c, SHAPE(2, 4, 3));
  check(&c);
  begin(&c, HAP_OP_SOFTMAX);
  in_f(&c, SHAPE(3, 5));
  check(&c);
}

Test(kernels_ref64, log_softmax) {
  kcase c;
  begin(&c, HAP_OP_LOG_SOFTMAX);
  in_f(&c, SHAPE(4, 2, 3));
  check(&c);
  begin(&c, HAP_OP_LOG_SOFTMAX);
  set_i(&c, "dim", 0);
  in_f(&c, SHAPE(4, 3));
  check(&c);
}

Test(kernels_ref64, sum) {
  kcase c;
  begin(&c, HAP_OP_SUM);
  set_ints(&c, "dims", SHAPE(1));
  in_f(&c, SHAPE(2, 4, 3));
  check(&c);
  begin(&c, HAP_OP_SUM); /* every dim */
  in_f(&c, SHAPE(4, 3));
  check(&c);
  begin(&c, HAP_OP_SUM);
  set_ints(&c, "dims", SHAPE(0, 2));
  set_i(&c, "keepdim", 1);
  in_f(&c, SHAPE(2, 3, 4));
  check(&c);
}

Test(kernels_ref64, mean) {
  kcase c;
  begin(&c, HAP_OP_MEAN);
  set_ints(&c, "dims", SHAPE(0, -1));
  set_i(&c, "keepdim", 1);
  in_f(&c, SHAPE(4, 2, 3));
  check(&c);
  begin(&c, HAP_OP_MEAN); /* every dim */
  in_f(&c, SHAPE(4, 3));
  check(&c);
}

Test(kernels_ref64, reshape) {
  kcase c;
  begin(&c, HAP_OP_RESHAPE); /* [B, S, E] -> [B, S, H, E / H] */
  set_ints(&c, "shape", SHAPE(2, 4, 2, -1));
  in_f(&c, SHAPE(2, 4, 4));
  check(&c);
}

Test(kernels_ref64, flatten) {
  kcase c;
  begin(&c, HAP_OP_FLATTEN);
  set_i(&c, "start_dim", 1);
  in_f(&c, SHAPE(4, 3, 2));
  check(&c);
}

Test(kernels_ref64, transpose) {
  kcase c;
  begin(&c, HAP_OP_TRANSPOSE);
  set_i(&c, "dim0", 0);
  set_i(&c, "dim1", -1);
  in_f(&c, SHAPE(2, 4, 3));
  check(&c);
}

Test(kernels_ref64, permute) {
  kcase c;
  begin(&c, HAP_OP_PERMUTE);
  set_ints(&c, "dims", SHAPE(2, 0, 1));
  in_f(&c, SHAPE(2, 4, 3));
  check(&c);
  begin(&c, HAP_OP_PERMUTE); /* heads forward: [B, S, H, D] -> [B, H, S, D] */
  set_ints(&c, "dims", SHAPE(0, 2, 1, 3));
  in_f(&c, SHAPE(2, 3, 2, 2));
  check(&c);
}

Test(kernels_ref64, narrow) {
  kcase c;
  begin(&c, HAP_OP_NARROW);
  set_i(&c, "dim", 1);
  set_i(&c, "start", 1);
  set_i(&c, "length", 3);
  in_f(&c, SHAPE(4, 5));
  check(&c);
  begin(&c, HAP_OP_NARROW);
  set_i(&c, "dim", -1);
  set_i(&c, "start", 0);
  set_i(&c, "length", 2);
  in_f(&c, SHAPE(2, 3, 4));
  check(&c);
}

Test(kernels_ref64, cls_append) {
  kcase c;
  begin(&c, HAP_OP_CLS_APPEND);
  in_f(&c, SHAPE(4, 3, 4));
  in_f(&c, SHAPE(1, 1, 4));
  check(&c);
  begin(&c, HAP_OP_CLS_APPEND); /* the token first (torchvision's ViT) */
  set_i(&c, "first", 1);
  in_f(&c, SHAPE(4, 3, 4));
  in_f(&c, SHAPE(1, 1, 4));
  check(&c);
}

Test(kernels_ref64, cls_select) {
  kcase c;
  begin(&c, HAP_OP_CLS_SELECT);
  in_f(&c, SHAPE(4, 3, 4));
  check(&c);
}

Test(kernels_ref64, top2_gating) {
  kcase c;
  begin(&c, HAP_OP_TOP2_GATING); /* capacity 2 of up to 6 tokens per expert: some dropped */
  set_i(&c, "capacity", 2);
  in_f(&c, SHAPE(4, 3, 2));
  in_f(&c, SHAPE(2, 3));
  check(&c);
  begin(&c, HAP_OP_TOP2_GATING); /* more slots than tokens: nothing dropped */
  set_i(&c, "capacity", 8);
  in_f(&c, SHAPE(4, 5, 3));
  in_f(&c, SHAPE(3, 4));
  check(&c);
}

static void loss_cases(hap_op op) {
  for (int mean = 0; mean < 2; mean++) {
    kcase c;
    begin(&c, op);
    set_s(&c, "reduction", mean ? "mean" : "sum");
    in_f(&c, SHAPE(4, 3));
    in_i(&c, SHAPE(4), 3);
    check(&c);
    begin(&c, op); /* spatial dims after the classes */
    set_s(&c, "reduction", mean ? "mean" : "sum");
    in_f(&c, SHAPE(2, 3, 4, 2));
    in_i(&c, SHAPE(2, 4, 2), 3);
    check(&c);
  }
}

Test(kernels_ref64, nll_loss) { loss_cases(HAP_OP_NLL_LOSS); }
Test(kernels_ref64, cross_entropy) { loss_cases(HAP_OP_CROSS_ENTROPY); }

/* ---- the reference itself -------------------------------------------------------------------- */

Test(kref, every_op_has_a_reference) {
  for (int op = 0; op < HAP_OP_COUNT; op++)
    cr_assert(hap_kref_has((hap_op)op), "op '%s' has no float64 reference", hap_op_name(op));
}

/* Run the reference on the given values (float inputs, or integers for index inputs) and compare
 * output o with want (n elements) to 1e-12 relative. */
static void ref_expect(kcase *c, const double *const *vals, size_t n_vals, int o,
                       const double *want, int64_t n) {
  infer(c);
  hap_err e = {0};
  cr_assert_eq((size_t)c->io.n_in, n_vals, "%s: %d inputs, %zu value lists", hap_op_name(c->op),
               c->io.n_in, n_vals);
  const void *in[HAP_MAX_OP_INPUTS] = {NULL};
  int64_t *idx[HAP_MAX_OP_INPUTS] = {NULL};
  for (int k = 0; k < c->io.n_in; k++) {
    in[k] = vals[k];
    if (c->io.in_dtype[k] == HAP_I64) {
      idx[k] = alloc(numel(&c->io.in[k]), sizeof(int64_t));
      for (int64_t f = 0; f < numel(&c->io.in[k]); f++)
        idx[k][f] = (int64_t)vals[k][f];
      in[k] = idx[k];
    }
  }
  double *out[HAP_MAX_OP_OUTPUTS] = {NULL};
  for (int q = 0; q < c->io.n_out; q++)
    out[q] = alloc(numel(&c->io.out[q]), sizeof(double));
  cr_assert_eq(hap_kref_forward(c->op, &c->io, c->seed, in, out, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(numel(&c->io.out[o]), n, "%s: output has %lld elements, expected %lld",
               hap_op_name(c->op), (long long)numel(&c->io.out[o]), (long long)n);
  for (int64_t f = 0; f < n; f++)
    cr_assert(fabs(out[o][f] - want[f]) <= 1e-12 * fmax(1, fabs(want[f])),
              "%s reference: element %lld is %.17g, expected %.17g", hap_op_name(c->op),
              (long long)f, out[o][f], want[f]);
  for (int k = 0; k < c->io.n_in; k++)
    free(idx[k]);
  for (int q = 0; q < c->io.n_out; q++)
    free(out[q]);
}

#define REF_EXPECT(c, vals, o, ...)                                                                \
  ref_expect(c, vals, sizeof(vals) / sizeof((vals)[0]), o, D(__VA_ARGS__),                         \
             (int64_t)(sizeof D(__VA_ARGS__) / sizeof(double)))

/* Values worked out by hand, so that the reference is checked against more than the kernels. */
Test(kref, hand_computed_values) {
  kcase c;
  begin(&c, HAP_OP_CONV2D); /* x 1..9, w [[1, 0], [0, -1]], b 1, stride 2, padding 1 */
  set_i(&c, "stride", 2);
  set_i(&c, "padding", 1);
  in_f(&c, SHAPE(1, 1, 3, 3));
  in_f(&c, SHAPE(1, 1, 2, 2));
  in_f(&c, SHAPE(1));
  REF_EXPECT(&c, VALS(D(1, 2, 3, 4, 5, 6, 7, 8, 9), D(1, 0, 0, -1), D(1)), 0, 0, -2, -6, -3);
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D); /* 3 -> 2: overlapping bins {0, 1}, {1, 2} */
  set_ints(&c, "output_size", SHAPE(2, 2));
  in_f(&c, SHAPE(1, 1, 3, 3));
  REF_EXPECT(&c, VALS(D(1, 2, 3, 4, 5, 6, 7, 8, 9)), 0, 3, 4, 6, 7);
  begin(&c, HAP_OP_EINSUM); /* outer product, output order permuted */
  set_s(&c, "equation", "ab,c->acb");
  in_f(&c, SHAPE(1, 2));
  in_f(&c, SHAPE(2));
  REF_EXPECT(&c, VALS(D(1, 2), D(3, 4)), 0, 3, 6, 4, 8);
  begin(&c, HAP_OP_LAYER_NORM); /* x 1..4: mean 2.5, variance 1.25 */
  in_f(&c, SHAPE(1, 4));
  in_f(&c, SHAPE(4));
  in_f(&c, SHAPE(4));
  REF_EXPECT(&c, VALS(D(1, 2, 3, 4), D(1, 1, 2, 2), D(0, 0, 0, 1)), 0, -1.3416354199689269,
             -0.447211806656309, 0.894423613312618, 3.6832708399378538);
  /* attention with identity projections, one head: scores [1, 0] / sqrt 2 over keys (1, 0) and
   * (0, 1); then a mask that hides key 1 */
  const double *att[8] = {D(1, 0),
                          D(1, 0, 0, 1),
                          D(1, 2, 3, 4),
                          D(1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1),
                          D(0, 0, 0, 0, 0, 0),
                          D(1, 0, 0, 1),
                          D(0.5, 0),
                          D(0, -INFINITY)};
  begin(&c, HAP_OP_MULTI_HEAD_ATTENTION);
  set_i(&c, "heads", 1);
  in_f(&c, SHAPE(1, 1, 2));
  in_f(&c, SHAPE(1, 2, 2));
  in_f(&c, SHAPE(1, 2, 2));
  in_f(&c, SHAPE(3, 2, 2));
  in_f(&c, SHAPE(3, 2));
  in_f(&c, SHAPE(2, 2));
  in_f(&c, SHAPE(2));
  ref_expect(&c, att, 7, 0, D(2.1604769013466862, 2.6604769013466862), 2);
  in_f(&c, SHAPE(1, 2));
  ref_expect(&c, att, 8, 0, D(1.5, 2), 2);
  /* top2_gating: logits [x0, x1, 0]; tokens [2, 0] -> experts 0 then 1, [0, 2] -> 1 then 0,
   * [2, 1] -> 0 then 1; capacity 2: first choices take slots in sequence order, then the second
   * choices, so token 1's second choice (expert 0, slot 2) and token 2's are dropped */
  begin(&c, HAP_OP_TOP2_GATING);
  set_i(&c, "capacity", 2);
  in_f(&c, SHAPE(1, 3, 2));
  in_f(&c, SHAPE(2, 3));
  const double *const gate[] = {D(2, 0, 0, 2, 2, 1), D(1, 0, 0, 0, 1, 0)};
  const double pa = 0.8807970779778825, pb = 0.11920292202211757, pc = 0.7310585786300049;
  REF_EXPECT(&c, gate, 1, pa, 0, 0, pb, 0, 0, 0, 0, pa, 0, 0, 0, 0, pc, 0, 0, 0, 0);
  REF_EXPECT(&c, gate, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0);
  begin(&c, HAP_OP_CROSS_ENTROPY); /* logits [1, 2, 3], target 2: log(e + e^2 + e^3) - 3 */
  in_f(&c, SHAPE(1, 3));
  in_i(&c, SHAPE(1), 3);
  REF_EXPECT(&c, VALS(D(1, 2, 3), D(2)), 0, 0.40760596444438013);
  begin(&c, HAP_OP_GELU); /* x Phi(x) */
  in_f(&c, SHAPE(3));
  REF_EXPECT(&c, VALS(D(0, 1, -1)), 0, 0, 0.8413447460685429, -0.15865525393145707);
  begin(&c, HAP_OP_PERMUTE); /* [1, 2, 3] -> [3, 1, 2] */
  set_ints(&c, "dims", SHAPE(2, 0, 1));
  in_f(&c, SHAPE(1, 2, 3));
  REF_EXPECT(&c, VALS(D(1, 2, 3, 4, 5, 6)), 0, 1, 4, 2, 5, 3, 6);
}

Test(kref, bad_indices_are_refused) {
  kcase c;
  begin(&c, HAP_OP_CROSS_ENTROPY);
  in_f(&c, SHAPE(1, 3));
  in_i(&c, SHAPE(1), 3);
  infer(&c);
  hap_err e = {0};
  const double logits[3] = {1, 2, 3};
  const int64_t target[1] = {3};
  double loss = 0;
  const void *in[2] = {logits, target};
  double *out[1] = {&loss};
  cr_assert_eq(hap_kref_forward(c.op, &c.io, 0, in, out, &e), HAP_EINVAL);
  cr_assert(strstr(e.msg, "target 3") != NULL, "%s", e.msg);
}

/* ---- the fault switch (kernels.h: HAP_FAULT_KERNEL) ------------------------------------------ */

/* mul of x by itself (one shared gradient buffer, starting at d0), backward into dx. */
static hap_status mul_backward(float *dx, hap_err *e) {
  hap_attrs a;
  hap_attrs_init(&a, HAP_OP_MUL);
  hap_op_io io = {.attrs = &a, .n_in = 2, .n_out = 1};
  io.in[0] = io.in[1] = SHAPE(3);
  io.in_dtype[0] = io.in_dtype[1] = HAP_F32;
  io.in_grad[0] = io.in_grad[1] = true;
  cr_assert_eq(hap_op_infer(HAP_OP_MUL, &io, e), HAP_OK);
  static const float x[3] = {1.25f, -2.5f, 3.0f}, g[3] = {0.5f, 1.0f, -0.75f};
  float y[3];
  const void *ip[2] = {x, x}, *op[1] = {y};
  void *yo[1] = {y};
  const float *gp[1] = {g};
  float *dp[2] = {dx, dx};
  hap_kernel_call call = {.op = HAP_OP_MUL, .io = &io, .in = ip, .out = op};
  cr_assert_eq(hap_kernel_forward(&call, yo, NULL, e), HAP_OK, "%s", e->msg);
  return hap_kernel_backward(&call, gp, dp, NULL, e);
}

Test(kernel_fault, scales_the_named_op_exactly) {
  static const float d0[3] = {0.1f, -0.2f, 0.3f};
  float clean[3] = {0}, faulty[3], other[3];
  memcpy(faulty, d0, sizeof faulty);
  memcpy(other, d0, sizeof other);
  hap_err e = {0};
  cr_assert_eq(unsetenv("HAP_FAULT_KERNEL"), 0);
  cr_assert_eq(mul_backward(clean, &e), HAP_OK, "%s", e.msg); /* the gradient 2 x g, from 0 */
  cr_assert_eq(setenv("HAP_FAULT_KERNEL", "mul", 1), 0);
  cr_assert_eq(mul_backward(faulty, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(setenv("HAP_FAULT_KERNEL", "add", 1), 0); /* another op: untouched */
  cr_assert_eq(mul_backward(other, &e), HAP_OK, "%s", e.msg);
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(faulty[i], d0[i] + (float)(HAP_FAULT_SCALE * (double)clean[i]), "element %d", i);
    cr_assert_neq(faulty[i], d0[i] + clean[i], "element %d: no fault injected", i);
    cr_assert_eq(other[i], d0[i] + clean[i], "element %d", i);
  }
}

Test(kernel_fault, an_unknown_op_fails) {
  cr_assert_eq(setenv("HAP_FAULT_KERNEL", "multi_head_atention", 1), 0);
  float dx[3] = {0};
  hap_err e = {0};
  cr_assert_eq(mul_backward(dx, &e), HAP_EINVAL);
  cr_assert_str_eq(e.msg, "HAP_FAULT_KERNEL: unknown op 'multi_head_atention'");
  cr_assert_eq(setenv("HAP_FAULT_KERNEL", "", 1), 0); /* empty: off */
  hap_err_clear(&e);
  cr_assert_eq(mul_backward(dx, &e), HAP_OK, "%s", e.msg);
}
