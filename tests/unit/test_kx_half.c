/* test_kx_half.c — kernel programs (kx/kx.h) with half-precision GEMMs, on the host: with GEMM
 * operands in float16 or bfloat16, a program on unrounded inputs gives what the CPU kernel gives
 * when the GEMMs' operands are rounded to that format first (and everything else is not), and
 * visibly not the float32 result. The host executor rounds exactly the operand spans the GPU
 * converts (hap_kx_gemm_spans), so a span too short or misplaced fails here, for transposed
 * operands (backward) and strided batch runs (bmm, broadcast matmul) too. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/kernels.h"
#include "kx/kx.h"

#define KERNEL_CASE_RNG_SEED     0x2545f4914f6cdd1dULL
#define KERNEL_CASE_DROPOUT_SEED 7
#include "kernel_case.h"

typedef struct bufs {
  float *in[HAP_MAX_OP_INPUTS];
  float *out[HAP_MAX_OP_OUTPUTS];
  int64_t n_in[HAP_MAX_OP_INPUTS], n_out[HAP_MAX_OP_OUTPUTS];
} bufs;

static void draw(const kcase *c, bufs *b) {
  for (int i = 0; i < c->io.n_in; i++) {
    b->n_in[i] = numel(&c->io.in[i]);
    b->in[i] = alloc(b->n_in[i], sizeof(float));
    kcase_draw(c, i, b->in[i], b->n_in[i]);
  }
  for (int o = 0; o < c->io.n_out; o++) {
    b->n_out[o] = numel(&c->io.out[o]);
    b->out[o] = alloc(b->n_out[o], sizeof(float));
  }
}

static float *copy_of(const float *x, int64_t n, hap_dtype round_to) {
  float *y = alloc(n, sizeof *y);
  memcpy(y, x, (size_t)(n > 0 ? n : 0) * sizeof *y);
  hap_round_array(round_to, y, n);
  return y;
}

static void free_bufs(const kcase *c, bufs *b) {
  for (int i = 0; i < c->io.n_in; i++)
    free(b->in[i]);
  for (int o = 0; o < c->io.n_out; o++)
    free(b->out[o]);
}

static double max_abs(const float *x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++)
    m = fmax(m, fabs((double)x[i]));
  return m;
}

/* got == want within float32 summation noise; *differs: how far `fp32` is from `want` (scaled). */
static void expect_same(const char *what, const float *got, const float *want, int64_t n) {
  double tol = 1e-5 * fmax(1, max_abs(want, n));
  for (int64_t i = 0; i < n; i++)
    cr_assert(fabs((double)got[i] - want[i]) <= tol, "%s: element %lld is %.9g, expected %.9g",
              what, (long long)i, (double)got[i], (double)want[i]);
}

static double scaled_gap(const float *a, const float *b, int64_t n) {
  double gap = 0;
  for (int64_t i = 0; i < n; i++)
    gap = fmax(gap, fabs((double)a[i] - b[i]));
  return gap / fmax(1, max_abs(b, n));
}

/* Forward of c with `gemm` operands: the program on raw inputs against the CPU kernel on inputs
 * rounded where rounded[i] (the GEMM's operands). */
static void check_forward(kcase *c, hap_dtype gemm, const bool *rounded) {
  infer(c);
  bufs b = {0};
  draw(c, &b);
  const void *raw[HAP_MAX_OP_INPUTS] = {NULL}, *ref_in[HAP_MAX_OP_INPUTS] = {NULL};
  float *kept[HAP_MAX_OP_INPUTS] = {NULL};
  for (int i = 0; i < c->io.n_in; i++) {
    raw[i] = b.in[i];
    kept[i] = copy_of(b.in[i], b.n_in[i], rounded[i] ? gemm : HAP_F32);
    ref_in[i] = kept[i];
  }
  float *want = alloc(b.n_out[0], sizeof *want), *fp32 = alloc(b.n_out[0], sizeof *fp32);
  hap_err e = {0};
  hap_kernel_call call = {.op = c->op, .io = &c->io, .in = raw};
  cr_assert_eq(hap_kx_forward_host(&call, (void *const *)b.out, gemm, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_kx_forward_host(&call, (void *const *)&fp32, HAP_F32, &e), HAP_OK, "%s", e.msg);
  hap_kernel_call ref = {.op = c->op, .io = &c->io, .in = ref_in};
  cr_assert_eq(hap_kernel_forward(&ref, (void *const *)&want, NULL, &e), HAP_OK, "%s", e.msg);
  expect_same(hap_op_name(c->op), b.out[0], want, b.n_out[0]);
  cr_assert_gt(scaled_gap(fp32, want, b.n_out[0]), 1e-4,
               "%s in %s: the float32 result is as close as the half one (no rounding?)",
               hap_op_name(c->op), hap_dtype_name(gemm));
  for (int i = 0; i < c->io.n_in; i++)
    free(kept[i]);
  free(want);
  free(fp32);
  free_bufs(c, &b);
}

/* Backward of c (every input a GEMM operand, no bias): the program on raw inputs and output
 * gradient against the CPU kernel on all of them rounded. */
static void check_backward(kcase *c, hap_dtype gemm) {
  infer(c);
  bufs b = {0};
  draw(c, &b);
  const int n_in = c->io.n_in;
  int64_t n_out = b.n_out[0];
  float *dout = alloc(n_out, sizeof *dout);
  for (int64_t i = 0; i < n_out; i++)
    dout[i] = (float)uniform(-1, 1);
  float *dout_r = copy_of(dout, n_out, gemm);
  const void *raw[HAP_MAX_OP_INPUTS] = {NULL}, *ref_in[HAP_MAX_OP_INPUTS] = {NULL};
  float *rounded[HAP_MAX_OP_INPUTS] = {NULL}, *din[HAP_MAX_OP_INPUTS] = {NULL},
        *want[HAP_MAX_OP_INPUTS] = {NULL}, *fp32[HAP_MAX_OP_INPUTS] = {NULL};
  for (int i = 0; i < n_in; i++) {
    raw[i] = b.in[i];
    rounded[i] = copy_of(b.in[i], b.n_in[i], gemm);
    ref_in[i] = rounded[i];
    din[i] = alloc(b.n_in[i], sizeof(float));
    want[i] = alloc(b.n_in[i], sizeof(float));
    fp32[i] = alloc(b.n_in[i], sizeof(float));
  }
  hap_err e = {0};
  hap_kernel_call call = {.op = c->op, .io = &c->io, .in = raw, .out = (const void *const *)b.out};
  const float *dp = dout, *dpr = dout_r;
  cr_assert_eq(hap_kx_backward_host(&call, &dp, din, gemm, &e), HAP_OK, "%s", e.msg);
  cr_assert_eq(hap_kx_backward_host(&call, &dp, fp32, HAP_F32, &e), HAP_OK, "%s", e.msg);
  hap_kernel_call ref = {.op = c->op, .io = &c->io, .in = ref_in, .out = call.out};
  cr_assert_eq(hap_kernel_backward(&ref, &dpr, want, NULL, &e), HAP_OK, "%s", e.msg);
  for (int i = 0; i < n_in; i++) {
    char what[64];
    snprintf(what, sizeof what, "%s backward, input %d", hap_op_name(c->op), i);
    expect_same(what, din[i], want[i], b.n_in[i]);
    cr_assert_gt(scaled_gap(fp32[i], want[i], b.n_in[i]), 1e-4,
                 "%s in %s: the float32 gradient is as close as the half one", what,
                 hap_dtype_name(gemm));
    free(rounded[i]);
    free(din[i]);
    free(want[i]);
    free(fp32[i]);
  }
  free(dout);
  free(dout_r);
  free_bufs(c, &b);
}

static const hap_dtype halves[] = {HAP_F16, HAP_BF16};

Test(kx_half, linear_forward_rounds_x_and_w_not_the_bias) {
  const bool rounded[HAP_MAX_OP_INPUTS] = {true, true, false};
  for (int h = 0; h < 2; h++) {
    kcase c;
    begin(&c, HAP_OP_LINEAR);
    in_f(&c, SHAPE(3, 5, 24));
    in_f(&c, SHAPE(7, 24));
    in_f(&c, SHAPE(7));
    check_forward(&c, halves[h], rounded);
  }
}

Test(kx_half, matmul_and_bmm_forward_over_batch_runs) {
  const bool rounded[HAP_MAX_OP_INPUTS] = {true, true};
  for (int h = 0; h < 2; h++) {
    kcase c;
    begin(&c, HAP_OP_BMM);
    in_f(&c, SHAPE(6, 5, 24));
    in_f(&c, SHAPE(6, 24, 9));
    check_forward(&c, halves[h], rounded);
    begin(&c, HAP_OP_MATMUL); /* broadcast batch dims: b's batches repeat */
    in_f(&c, SHAPE(2, 3, 4, 24));
    in_f(&c, SHAPE(3, 24, 5));
    check_forward(&c, halves[h], rounded);
  }
}

Test(kx_half, backward_with_transposed_operands) {
  for (int h = 0; h < 2; h++) {
    kcase c;
    begin(&c, HAP_OP_LINEAR);
    in_f(&c, SHAPE(4, 6, 24));
    in_f(&c, SHAPE(9, 24));
    check_backward(&c, halves[h]);
    begin(&c, HAP_OP_BMM);
    in_f(&c, SHAPE(5, 7, 24));
    in_f(&c, SHAPE(5, 24, 6));
    check_backward(&c, halves[h]);
    begin(&c, HAP_OP_MATMUL);
    in_f(&c, SHAPE(2, 3, 4, 24));
    in_f(&c, SHAPE(3, 24, 5));
    check_backward(&c, halves[h]);
  }
}

Test(kx_half, other_gemm_formats_are_refused) {
  kcase c;
  begin(&c, HAP_OP_LINEAR);
  in_f(&c, SHAPE(2, 3));
  in_f(&c, SHAPE(4, 3));
  infer(&c);
  float x[6] = {0}, w[12] = {0}, y[8] = {0};
  const void *in[] = {x, w};
  void *out[] = {y};
  hap_kernel_call call = {.op = c.op, .io = &c.io, .in = in};
  hap_err e = {0};
  cr_assert_eq(hap_kx_forward_host(&call, out, HAP_F64, &e), HAP_EINVAL);
  cr_assert(strstr(e.msg, "expected float32, float16 or bfloat16") != NULL, "%s", e.msg);
  cr_assert(hap_kx_gemm_dtype_ok(HAP_BF16) && !hap_kx_gemm_dtype_ok(HAP_I32));
}
