/* test_ops.c — the op table: shape inference, FLOPs and bytes of every op, and the errors shape
 * inference reports. Every expected value is computed by hand here, written as arithmetic. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/graph.h"
#include "model/ops.h"

#define NARGS_(...)             ((int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define SHAPE(...)              ((hap_shape){.rank = NARGS_(__VA_ARGS__), .dims = {__VA_ARGS__}})
#define SCALAR                  ((hap_shape){.rank = 0})
#define ATTR_INTS(c, name, ...) set_ints(c, name, NARGS_(__VA_ARGS__), (int64_t[]){__VA_ARGS__})

/* in_grad as a graph sets it: data and index inputs need no gradient, parameters and activations
 * computed from parameters do. */
#define DATA false
#define GRAD true

/* One application of an op: its attributes, io, error and cost. Not copyable (io.attrs points
 * into it). */
typedef struct opcase {
  hap_op op;
  hap_attrs attrs;
  hap_op_io io;
  hap_err err;
  hap_op_cost cost;
} opcase;

static void begin(opcase *c, hap_op op) {
  memset(c, 0, sizeof *c);
  c->op = op;
  hap_attrs_init(&c->attrs, op);
  c->io.attrs = &c->attrs;
}

static void in(opcase *c, hap_shape s, hap_dtype dt, bool grad) {
  int i = c->io.n_in++;
  c->io.in[i] = s;
  c->io.in_dtype[i] = dt;
  c->io.in_grad[i] = grad;
}

static void set_i(opcase *c, const char *name, int64_t v) {
  cr_assert_eq(hap_attrs_set_int(&c->attrs, c->op, name, v, &c->err), HAP_OK, "%s", c->err.msg);
}

static void set_f(opcase *c, const char *name, double v) {
  cr_assert_eq(hap_attrs_set_float(&c->attrs, c->op, name, v, &c->err), HAP_OK, "%s", c->err.msg);
}

static void set_s(opcase *c, const char *name, const char *v) {
  cr_assert_eq(hap_attrs_set_str(&c->attrs, c->op, name, v, &c->err), HAP_OK, "%s", c->err.msg);
}

static void set_ints(opcase *c, const char *name, int32_t n, const int64_t *v) {
  cr_assert_eq(hap_attrs_set_ints(&c->attrs, c->op, name, v, n, &c->err), HAP_OK, "%s", c->err.msg);
}

/* Infer (must succeed) and cost. */
static void run(opcase *c) {
  hap_status st = hap_op_infer(c->op, &c->io, &c->err);
  cr_assert_eq(st, HAP_OK, "%s: infer failed: %s", hap_op_name(c->op), c->err.msg);
  hap_op_cost_of(c->op, &c->io, &c->cost);
}

static void expect_out(const opcase *c, int o, hap_shape want, hap_dtype dt) {
  char got_s[160], want_s[160];
  cr_assert(hap_shape_eq(&c->io.out[o], &want), "%s: output %d is %s, expected %s",
            hap_op_name(c->op), o, hap_shape_str(&c->io.out[o], got_s, sizeof got_s),
            hap_shape_str(&want, want_s, sizeof want_s));
  cr_assert_eq(c->io.out_dtype[o], dt, "%s: output %d is %s, expected %s", hap_op_name(c->op), o,
               hap_dtype_name(c->io.out_dtype[o]), hap_dtype_name(dt));
}

/* Exact for integers below 2^53, else within a relative 1e-12. */
static void expect_num(const opcase *c, double got, double want, const char *what) {
  cr_assert_float_eq(got, want, 1e-12 * fabs(want), "%s: %s is %.17g, expected %.17g",
                     hap_op_name(c->op), what, got, want);
}

static void expect_flops(const opcase *c, double fwd, double bwd) {
  expect_num(c, c->cost.fwd_flops, fwd, "fwd_flops");
  expect_num(c, c->cost.bwd_flops, bwd, "bwd_flops");
}

static void expect_bytes(const opcase *c, double fwd_r, double fwd_w, double bwd_r, double bwd_w) {
  expect_num(c, c->cost.fwd_bytes_read, fwd_r, "fwd_bytes_read");
  expect_num(c, c->cost.fwd_bytes_written, fwd_w, "fwd_bytes_written");
  expect_num(c, c->cost.bwd_bytes_read, bwd_r, "bwd_bytes_read");
  expect_num(c, c->cost.bwd_bytes_written, bwd_w, "bwd_bytes_written");
}

/* Infer must fail with `st` and a message containing `substr` (and the op name). */
static void expect_fail(opcase *c, hap_status st, const char *substr) {
  hap_status got = hap_op_infer(c->op, &c->io, &c->err);
  cr_assert_eq(got, st, "%s: status %d (%s), expected %d", hap_op_name(c->op), (int)got, c->err.msg,
               (int)st);
  cr_assert_eq(c->err.status, st);
  cr_assert(strstr(c->err.msg, substr) != NULL, "message '%s' lacks '%s'", c->err.msg, substr);
  cr_assert(strstr(c->err.msg, hap_op_name(c->op)) != NULL, "message '%s' does not name the op",
            c->err.msg);
}

/* ---- the table itself ---------------------------------------------------------------------- */

Test(ops_table, every_op_is_complete_and_found_by_name) {
  static const char *const names[] = {
#define NAME_(id, str) str,
      HAP_OP_LIST(NAME_)
#undef NAME_
  };
  cr_assert_eq(HAP_OP_COUNT, 35);
  for (int i = 0; i < HAP_OP_COUNT; i++) {
    const hap_op_def *d = hap_op_get((hap_op)i);
    cr_assert_not_null(d);
    cr_assert_str_eq(d->name, names[i]);
    cr_assert_str_eq(hap_op_name((hap_op)i), names[i]);
    hap_op found;
    cr_assert_eq(hap_op_lookup(names[i], &found), HAP_OK);
    cr_assert_eq(found, (hap_op)i);
    cr_assert(d->infer != NULL && d->cost != NULL && d->doc != NULL, "%s", d->name);
    cr_assert(d->min_in >= 1 && d->min_in <= d->max_in && d->max_in <= HAP_MAX_OP_INPUTS, "%s",
              d->name);
    cr_assert(d->n_out >= 1 && d->n_out <= HAP_MAX_OP_OUTPUTS, "%s", d->name);
    for (int k = 0; k < d->max_in; k++)
      cr_assert_not_null(d->in_names[k], "%s input %d", d->name, k);
    for (int k = 0; k < d->n_out; k++)
      cr_assert_not_null(d->out_names[k], "%s output %d", d->name, k);
    cr_assert_eq(d->param_inputs >> d->max_in, 0, "%s marks a parameter past max_in", d->name);
  }
  hap_op found;
  cr_assert_eq(hap_op_lookup("conv3d", &found), HAP_ENOTFOUND);
  cr_assert_null(hap_op_get(HAP_OP_COUNT));
  cr_assert_str_eq(hap_op_name(HAP_OP_COUNT), "?");
}

Test(ops_table, parameter_inputs) {
  cr_assert_eq(hap_op_get(HAP_OP_LINEAR)->param_inputs, 0x6);
  cr_assert_eq(hap_op_get(HAP_OP_CONV2D)->param_inputs, 0x6);
  cr_assert_eq(hap_op_get(HAP_OP_EMBEDDING)->param_inputs, 0x2);
  cr_assert_eq(hap_op_get(HAP_OP_LAYER_NORM)->param_inputs, 0x6);
  /* in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias */
  cr_assert_eq(hap_op_get(HAP_OP_MULTI_HEAD_ATTENTION)->param_inputs,
               (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6));
  cr_assert_eq(hap_op_get(HAP_OP_CLS_APPEND)->param_inputs, 0x2);
  cr_assert_eq(hap_op_get(HAP_OP_TOP2_GATING)->param_inputs, 0x2);
  cr_assert_eq(hap_op_get(HAP_OP_MATMUL)->param_inputs, 0);
}

Test(ops_table, dtypes) {
  cr_assert_eq(hap_dtype_size(HAP_F32), 4);
  cr_assert_eq(hap_dtype_size(HAP_F16), 2);
  cr_assert_eq(hap_dtype_size(HAP_BF16), 2);
  cr_assert_eq(hap_dtype_size(HAP_F64), 8);
  cr_assert_eq(hap_dtype_size(HAP_I64), 8);
  cr_assert_eq(hap_dtype_size(HAP_I32), 4);
  cr_assert_eq(hap_dtype_size(HAP_BOOL), 1);
  cr_assert(hap_dtype_is_float(HAP_BF16) && !hap_dtype_is_float(HAP_I32));
  hap_dtype d;
  cr_assert_eq(hap_dtype_parse("bfloat16", &d), HAP_OK);
  cr_assert_eq(d, HAP_BF16);
  cr_assert_eq(hap_dtype_parse("float", &d), HAP_ENOTFOUND);
}

Test(ops_table, shape_helpers) {
  hap_shape s = SHAPE(256, 128, 768);
  int64_t n = 0;
  cr_assert_eq(hap_shape_numel(&s, &n), HAP_OK);
  cr_assert_eq(n, (int64_t)256 * 128 * 768);
  char buf[64];
  cr_assert_str_eq(hap_shape_str(&s, buf, sizeof buf), "[256, 128, 768]");
  cr_assert_str_eq(hap_shape_str(&SCALAR, buf, sizeof buf), "[]");
  hap_shape big = SHAPE(INT64_C(1) << 32, INT64_C(1) << 30);
  cr_assert_eq(hap_shape_numel(&big, &n), HAP_OK);
  cr_assert_eq(n, INT64_C(1) << 62);
  hap_shape over = SHAPE(INT64_C(1) << 32, INT64_C(1) << 31); /* 2^63 = INT64_MAX + 1 */
  cr_assert_eq(hap_shape_numel(&over, &n), HAP_EOVERFLOW);
  cr_assert_float_eq(hap_shape_numel_f(&over), 9223372036854775808.0, 0.0);
  hap_shape neg = SHAPE(2, -1);
  cr_assert_eq(hap_shape_numel(&neg, &n), HAP_EOVERFLOW);
  hap_shape a = SHAPE(2, 3), b = SHAPE(2, 3), c = SHAPE(3, 2), d = SHAPE(2, 3, 1);
  cr_assert(hap_shape_eq(&a, &b));
  cr_assert_not(hap_shape_eq(&a, &c));
  cr_assert_not(hap_shape_eq(&a, &d));
}

Test(ops_table, attributes) {
  hap_attrs a;
  hap_err err = {0};
  hap_attrs_init(&a, HAP_OP_MAX_POOL2D);
  cr_assert_eq(hap_op_attr_index(HAP_OP_MAX_POOL2D, "stride"), 1);
  cr_assert_eq(hap_op_attr_index(HAP_OP_MAX_POOL2D, "dilation"), -1);
  cr_assert_eq(hap_attr_i(&a, 0), 2); /* kernel default */
  cr_assert_eq(a.given, 0u);
  cr_assert_eq(hap_attrs_set_int(&a, HAP_OP_MAX_POOL2D, "dilation", 2, &err), HAP_ENOTFOUND);
  cr_assert(strstr(err.msg, "dilation") != NULL, "%s", err.msg);
  hap_err_clear(&err);
  cr_assert_eq(hap_attrs_set_float(&a, HAP_OP_MAX_POOL2D, "kernel", 2.0, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "kernel") != NULL, "%s", err.msg);
  hap_err_clear(&err);

  hap_attrs_init(&a, HAP_OP_SUM);
  cr_assert_eq(hap_attrs_set_int(&a, HAP_OP_SUM, "keepdim", 2, &err), HAP_EINVAL);
  hap_err_clear(&err);
  cr_assert_eq(hap_attrs_set_int(&a, HAP_OP_SUM, "keepdim", 1, &err), HAP_OK);
  cr_assert_eq(a.given, 2u);

  hap_attrs_init(&a, HAP_OP_DROPOUT);
  cr_assert_float_eq(hap_attr_f(&a, 0), 0.5, 0.0);
  cr_assert_eq(hap_attrs_set_float(&a, HAP_OP_DROPOUT, "p", NAN, &err), HAP_EINVAL);
  hap_err_clear(&err);

  hap_attrs_init(&a, HAP_OP_NLL_LOSS);
  cr_assert_str_eq(hap_attr_s(&a, 0), "mean");
  char longs[HAP_ATTR_STR_MAX + 1];
  memset(longs, 'x', sizeof longs - 1);
  longs[sizeof longs - 1] = '\0';
  cr_assert_eq(hap_attrs_set_str(&a, HAP_OP_NLL_LOSS, "reduction", longs, &err), HAP_EINVAL);
  hap_err_clear(&err);

  hap_attrs b;
  hap_attrs_init(&a, HAP_OP_RESHAPE);
  hap_attrs_init(&b, HAP_OP_RESHAPE);
  cr_assert_eq(hap_attrs_check(&a, HAP_OP_RESHAPE, &err), HAP_EINVAL);
  cr_assert(strstr(err.msg, "'shape'") != NULL, "%s", err.msg);
  hap_err_clear(&err);
  int64_t too_many[HAP_MAX_DIMS + 1] = {0};
  cr_assert_eq(hap_attrs_set_ints(&a, HAP_OP_RESHAPE, "shape", too_many, HAP_MAX_DIMS + 1, &err),
               HAP_EINVAL);
  hap_err_clear(&err);
  cr_assert_eq(hap_attrs_set_ints(&a, HAP_OP_RESHAPE, "shape", (int64_t[]){6, 4}, 2, &err), HAP_OK);
  cr_assert_eq(hap_attrs_set_ints(&b, HAP_OP_RESHAPE, "shape", (int64_t[]){6, 4}, 2, &err), HAP_OK);
  cr_assert(hap_attrs_eq(&a, &b, HAP_OP_RESHAPE));
  cr_assert_eq(hap_attrs_set_ints(&b, HAP_OP_RESHAPE, "shape", (int64_t[]){4, 6}, 2, &err), HAP_OK);
  cr_assert_not(hap_attrs_eq(&a, &b, HAP_OP_RESHAPE));
  cr_assert_eq(hap_attrs_check(&a, HAP_OP_RESHAPE, &err), HAP_OK);
}

/* ---- GEMM family --------------------------------------------------------------------------- */

Test(ops_linear, with_bias_all_grads) {
  opcase c;
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD); /* M = 6, K = 4 */
  in(&c, SHAPE(5, 4), HAP_F32, GRAD);    /* N = 5 */
  in(&c, SHAPE(5), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 3, 5), HAP_F32);
  /* y = xW^T + b: 2MNK + MN; dX, dW: 2MNK each; db: MN */
  expect_flops(&c, 2.0 * 6 * 5 * 4 + 6 * 5, 2.0 * 6 * 5 * 4 + 2.0 * 6 * 5 * 4 + 6 * 5);
  cr_assert_eq(c.cost.fwd_flops, 270.0);
  double x = 24 * 4, w = 20 * 4, b = 5 * 4, y = 30 * 4;
  expect_bytes(&c, x + w + b, y, x + w + b + y, x + w + b);
}

Test(ops_linear, first_layer_no_input_grad_no_bias) {
  opcase c;
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(256, 128, 768), HAP_F32, DATA);
  in(&c, SHAPE(3072, 768), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(256, 128, 3072), HAP_F32);
  /* only dW is computed */
  expect_flops(&c, 2.0 * 256 * 128 * 768 * 3072, 2.0 * 256 * 128 * 768 * 3072);
  double x = 256.0 * 128 * 768 * 4, w = 3072.0 * 768 * 4, y = 256.0 * 128 * 3072 * 4;
  expect_bytes(&c, x + w, y, x + w + y, w);
}

Test(ops_linear, no_bias_both_grads_half_precision) {
  opcase c;
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(7), HAP_F16, GRAD); /* rank-1 input: M = 1 */
  in(&c, SHAPE(3, 7), HAP_F16, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(3), HAP_F16);
  expect_flops(&c, 2.0 * 1 * 3 * 7, 2 * (2.0 * 1 * 3 * 7));
  expect_bytes(&c, (7 + 21) * 2.0, 3 * 2.0, (7 + 21 + 3) * 2.0, (7 + 21) * 2.0);
}

Test(ops_linear, bias_without_grad_is_not_reduced) {
  opcase c;
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(4, 8), HAP_F32, GRAD);
  in(&c, SHAPE(2, 8), HAP_F32, DATA);
  in(&c, SHAPE(2), HAP_F32, DATA);
  run(&c);
  expect_out(&c, 0, SHAPE(4, 2), HAP_F32);
  expect_flops(&c, 2.0 * 4 * 2 * 8 + 4 * 2, 2.0 * 4 * 2 * 8);
}

Test(ops_matmul, broadcast_batch_dims) {
  opcase c;
  begin(&c, HAP_OP_MATMUL);
  in(&c, SHAPE(3, 1, 4, 5), HAP_F32, GRAD);
  in(&c, SHAPE(2, 5, 6), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(3, 2, 4, 6), HAP_F32);
  expect_flops(&c, 2.0 * 3 * 2 * 4 * 6 * 5, 2 * (2.0 * 3 * 2 * 4 * 6 * 5));
  expect_bytes(&c, (60 + 60) * 4.0, 144 * 4.0, (60 + 60 + 144) * 4.0, (60 + 60) * 4.0);
}

Test(ops_matmul, plain_2d_one_grad) {
  opcase c;
  begin(&c, HAP_OP_MATMUL);
  in(&c, SHAPE(4, 5), HAP_F32, DATA);
  in(&c, SHAPE(5, 6), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(4, 6), HAP_F32);
  expect_flops(&c, 2.0 * 4 * 6 * 5, 2.0 * 4 * 6 * 5);
}

Test(ops_bmm, batched) {
  opcase c;
  begin(&c, HAP_OP_BMM);
  in(&c, SHAPE(8, 4, 5), HAP_BF16, GRAD);
  in(&c, SHAPE(8, 5, 6), HAP_BF16, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(8, 4, 6), HAP_BF16);
  expect_flops(&c, 2.0 * 8 * 4 * 6 * 5, 2 * (2.0 * 8 * 4 * 6 * 5));
  expect_bytes(&c, (160 + 240) * 2.0, 192 * 2.0, (160 + 240 + 192) * 2.0, (160 + 240) * 2.0);
}

/* Einsum: B = 2, S = 3, D = 4, E = 5, C = 6, H = 7 (the MoE layer's equations). */
static void einsum_case(opcase *c, const char *eq, hap_shape a, bool ga, hap_shape b, bool gb) {
  begin(c, HAP_OP_EINSUM);
  set_s(c, "equation", eq);
  in(c, a, HAP_F32, ga);
  in(c, b, HAP_F32, gb);
  run(c);
}

Test(ops_einsum, moe_dispatch) {
  opcase c;
  einsum_case(&c, "bsd,bsec->becd", SHAPE(2, 3, 4), GRAD, SHAPE(2, 3, 5, 6), GRAD);
  expect_out(&c, 0, SHAPE(2, 5, 6, 4), HAP_F32);
  expect_flops(&c, 2.0 * 2 * 3 * 4 * 5 * 6, 2 * (2.0 * 2 * 3 * 4 * 5 * 6));
  expect_bytes(&c, (24 + 180) * 4.0, 240 * 4.0, (24 + 180 + 240) * 4.0, (24 + 180) * 4.0);
}

Test(ops_einsum, moe_expert_up) {
  opcase c;
  einsum_case(&c, "edh,becd->bech", SHAPE(5, 4, 7), GRAD, SHAPE(2, 5, 6, 4), GRAD);
  expect_out(&c, 0, SHAPE(2, 5, 6, 7), HAP_F32);
  expect_flops(&c, 2.0 * 5 * 4 * 7 * 2 * 6, 2 * (2.0 * 5 * 4 * 7 * 2 * 6));
}

Test(ops_einsum, moe_expert_down) {
  opcase c;
  einsum_case(&c, "ehd,bech->becd", SHAPE(5, 7, 4), GRAD, SHAPE(2, 5, 6, 7), GRAD);
  expect_out(&c, 0, SHAPE(2, 5, 6, 4), HAP_F32);
  expect_flops(&c, 2.0 * 5 * 7 * 4 * 2 * 6, 2 * (2.0 * 5 * 7 * 4 * 2 * 6));
}

Test(ops_einsum, moe_combine) {
  opcase c;
  einsum_case(&c, "becd,bsec->bsd", SHAPE(2, 5, 6, 4), GRAD, SHAPE(2, 3, 5, 6), GRAD);
  expect_out(&c, 0, SHAPE(2, 3, 4), HAP_F32);
  expect_flops(&c, 2.0 * 2 * 5 * 6 * 4 * 3, 2 * (2.0 * 2 * 5 * 6 * 4 * 3));
}

Test(ops_einsum, plain_matmul_one_grad) {
  opcase c;
  einsum_case(&c, "ij,jk->ik", SHAPE(3, 4), DATA, SHAPE(4, 5), GRAD);
  expect_out(&c, 0, SHAPE(3, 5), HAP_F32);
  expect_flops(&c, 2.0 * 3 * 4 * 5, 2.0 * 3 * 4 * 5);
}

Test(ops_einsum, transpose_output_and_full_contraction) {
  opcase c;
  einsum_case(&c, "ij,jk->ki", SHAPE(3, 4), GRAD, SHAPE(4, 5), DATA);
  expect_out(&c, 0, SHAPE(5, 3), HAP_F32);
  expect_flops(&c, 2.0 * 3 * 4 * 5, 2.0 * 3 * 4 * 5);
  opcase d;
  einsum_case(&d, "ij,ij->", SHAPE(3, 4), GRAD, SHAPE(3, 4), GRAD);
  expect_out(&d, 0, SCALAR, HAP_F32);
  expect_flops(&d, 2.0 * 3 * 4, 2 * (2.0 * 3 * 4));
}

/* ---- convolution and pooling -------------------------------------------------------------- */

Test(ops_conv2d, three_by_three_same_padding_with_bias) {
  opcase c;
  begin(&c, HAP_OP_CONV2D);
  set_i(&c, "padding", 1);
  in(&c, SHAPE(2, 3, 8, 8), HAP_F32, DATA); /* image: no dX */
  in(&c, SHAPE(16, 3, 3, 3), HAP_F32, GRAD);
  in(&c, SHAPE(16), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 16, 8, 8), HAP_F32);
  /* 2*N*O*H*W*C*9 (+ N*O*H*W bias); backward: dW and db only */
  expect_flops(&c, 2.0 * 2 * 16 * 8 * 8 * 3 * 9 + 2.0 * 16 * 8 * 8,
               2.0 * 2 * 16 * 8 * 8 * 3 * 9 + 2.0 * 16 * 8 * 8);
  double x = 2.0 * 3 * 8 * 8 * 4, w = 16.0 * 27 * 4, b = 16.0 * 4, y = 2.0 * 16 * 64 * 4;
  expect_bytes(&c, x + w + b, y, x + w + b + y, w + b);
}

Test(ops_conv2d, patch_embedding_k4_s4) {
  opcase c;
  begin(&c, HAP_OP_CONV2D);
  set_i(&c, "stride", 4);
  in(&c, SHAPE(2, 3, 32, 32), HAP_F32, GRAD);
  in(&c, SHAPE(96, 3, 4, 4), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 96, 8, 8), HAP_F32);
  expect_flops(&c, 2.0 * 2 * 96 * 8 * 8 * 3 * 16, 2 * (2.0 * 2 * 96 * 8 * 8 * 3 * 16));
}

Test(ops_conv2d, strided_rectangular_kernel) {
  opcase c;
  begin(&c, HAP_OP_CONV2D);
  set_i(&c, "stride", 2);
  set_i(&c, "padding", 1);
  in(&c, SHAPE(1, 4, 7, 10), HAP_F32, GRAD);
  in(&c, SHAPE(5, 4, 3, 2), HAP_F32, GRAD);
  run(&c);
  /* H: (7 + 2 - 3) / 2 + 1 = 4; W: (10 + 2 - 2) / 2 + 1 = 6 */
  expect_out(&c, 0, SHAPE(1, 5, 4, 6), HAP_F32);
  expect_flops(&c, 2.0 * 1 * 5 * 4 * 6 * 4 * 3 * 2, 2 * (2.0 * 1 * 5 * 4 * 6 * 4 * 3 * 2));
}

Test(ops_max_pool2d, two_by_two) {
  opcase c;
  begin(&c, HAP_OP_MAX_POOL2D); /* defaults: kernel 2, stride = kernel */
  in(&c, SHAPE(2, 3, 8, 7), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 3, 4, 3), HAP_F32); /* 7 / 2 rounds down */
  expect_flops(&c, 2.0 * 3 * 4 * 3 * (2 * 2), 2.0 * 3 * 4 * 3);
  double x = 2.0 * 3 * 8 * 7 * 4, y = 2.0 * 3 * 4 * 3 * 4;
  expect_bytes(&c, x, y, x + y, x);
}

Test(ops_max_pool2d, kernel3_stride2_pad1_no_grad) {
  opcase c;
  begin(&c, HAP_OP_MAX_POOL2D);
  set_i(&c, "kernel", 3);
  set_i(&c, "stride", 2);
  set_i(&c, "padding", 1);
  in(&c, SHAPE(1, 64, 112, 112), HAP_F32, DATA);
  run(&c);
  /* (112 + 2 - 3) / 2 + 1 = 56 */
  expect_out(&c, 0, SHAPE(1, 64, 56, 56), HAP_F32);
  expect_flops(&c, 64.0 * 56 * 56 * 9, 0);
  expect_bytes(&c, 64.0 * 112 * 112 * 4, 64.0 * 56 * 56 * 4, 0, 0);
}

Test(ops_adaptive_avg_pool2d, downsample_overlapping_bins) {
  opcase c;
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D);
  ATTR_INTS(&c, "output_size", 3, 7);
  in(&c, SHAPE(1, 2, 10, 8), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(1, 2, 3, 7), HAP_F32);
  /* 10 -> 3: [0,4) [3,7) [6,10): 4 + 4 + 4 = 12.
   * 8 -> 7: [0,2) [1,3) [2,4) [3,5) [4,6) [5,7) [6,8): 7 * 2 = 14.
   * Each output sums its bin and divides once; the gradient the same. */
  expect_flops(&c, 1.0 * 2 * (12 * 14) + 1.0 * 2 * 3 * 7, 1.0 * 2 * (12 * 14) + 1.0 * 2 * 3 * 7);
}

Test(ops_adaptive_avg_pool2d, downsample_8_to_7) {
  opcase c;
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D);
  ATTR_INTS(&c, "output_size", 7, 7);
  in(&c, SHAPE(2, 3, 8, 8), HAP_F32, DATA);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 3, 7, 7), HAP_F32);
  expect_flops(&c, 2.0 * 3 * (14 * 14) + 2.0 * 3 * 49, 0);
}

Test(ops_adaptive_avg_pool2d, divisible_bins_do_not_overlap) {
  opcase c;
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D);
  ATTR_INTS(&c, "output_size", 3, 2);
  in(&c, SHAPE(1, 1, 6, 8), HAP_F32, GRAD);
  run(&c);
  /* 6 -> 3: bins of 2 (total 6); 8 -> 2: bins of 4 (total 8) */
  expect_flops(&c, 6.0 * 8 + 3 * 2, 6.0 * 8 + 3 * 2);
}

Test(ops_adaptive_avg_pool2d, upsample_1x1_to_7x7) {
  opcase c;
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D);
  ATTR_INTS(&c, "output_size", 7, 7);
  in(&c, SHAPE(2, 512, 1, 1), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 512, 7, 7), HAP_F32);
  /* every bin is [0,1): one element per output, 7 per axis */
  expect_flops(&c, 2.0 * 512 * (7 * 7) + 2.0 * 512 * 49, 2.0 * 512 * (7 * 7) + 2.0 * 512 * 49);
}

Test(ops_adaptive_avg_pool2d, huge_output_size_costs_quickly) {
  opcase c;
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D);
  ATTR_INTS(&c, "output_size", INT64_C(1) << 40, 3);
  in(&c, SHAPE(1, 1, 5, 3), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(1, 1, INT64_C(1) << 40, 3), HAP_F32);
  /* 5 -> 2^40: every bin holds 1 element except the 4 that straddle a boundary (2): 2^40 + 4.
   * 3 -> 3: total 3. */
  double bins = (1099511627776.0 + 4) * 3;
  expect_flops(&c, bins + 1099511627776.0 * 3, bins + 1099511627776.0 * 3);
}

/* ---- embedding, normalisation -------------------------------------------------------------- */

Test(ops_embedding, gather_and_dense_weight_grad) {
  opcase c;
  begin(&c, HAP_OP_EMBEDDING);
  in(&c, SHAPE(4, 16), HAP_I64, DATA);
  in(&c, SHAPE(1000, 32), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(4, 16, 32), HAP_F32);
  expect_flops(&c, 0, 4.0 * 16 * 32);
  double idx = 4.0 * 16 * 8, rows = 4.0 * 16 * 32 * 4;
  /* forward reads the indices and the gathered rows only, not the whole table; backward writes
   * the whole (dense) weight gradient */
  expect_bytes(&c, idx + rows, rows, rows + idx, 1000.0 * 32 * 4);
}

Test(ops_embedding, int32_scalar_indices_frozen_table) {
  opcase c;
  begin(&c, HAP_OP_EMBEDDING);
  in(&c, SCALAR, HAP_I32, DATA);
  in(&c, SHAPE(10, 8), HAP_F16, DATA);
  run(&c);
  expect_out(&c, 0, SHAPE(8), HAP_F16);
  expect_flops(&c, 0, 0);
  expect_bytes(&c, 4.0 + 8 * 2, 8 * 2.0, 0, 0);
}

Test(ops_layer_norm, affine) {
  opcase c;
  begin(&c, HAP_OP_LAYER_NORM);
  in(&c, SHAPE(2, 3, 8), HAP_F32, GRAD);
  in(&c, SHAPE(8), HAP_F32, GRAD);
  in(&c, SHAPE(8), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 3, 8), HAP_F32);
  /* 5 + weight 1 + bias 1 per element; grad dx 8, dweight 2, dbias 1 per element */
  expect_flops(&c, 48.0 * (5 + 1 + 1), 48.0 * (8 + 2 + 1));
  expect_bytes(&c, (48 + 8 + 8) * 4.0, 48 * 4.0, (48 + 8 + 8 + 48) * 4.0, (48 + 8 + 8) * 4.0);
}

Test(ops_layer_norm, no_affine_two_normalized_dims) {
  opcase c;
  begin(&c, HAP_OP_LAYER_NORM);
  set_i(&c, "normalized_dims", 2);
  in(&c, SHAPE(2, 3, 8), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 3, 8), HAP_F32);
  expect_flops(&c, 48.0 * 5, 48.0 * 8);
}

Test(ops_layer_norm, affine_on_data_input) {
  opcase c;
  begin(&c, HAP_OP_LAYER_NORM);
  set_i(&c, "normalized_dims", 2);
  in(&c, SHAPE(2, 3, 8), HAP_F32, DATA);
  in(&c, SHAPE(3, 8), HAP_F32, GRAD);
  run(&c);
  expect_flops(&c, 48.0 * (5 + 1), 48.0 * 2);
}

/* ---- attention ----------------------------------------------------------------------------- */

/* q [n,l,e], k and v [n,s,e], the four projection parameters, optional mask [l,s]. */
static void mha_case(opcase *c, int64_t n, int64_t l, int64_t s, int64_t e, int64_t heads,
                     bool grad_q, bool grad_kv, bool mask) {
  begin(c, HAP_OP_MULTI_HEAD_ATTENTION);
  set_i(c, "heads", heads);
  in(c, SHAPE(n, l, e), HAP_F32, grad_q);
  in(c, SHAPE(n, s, e), HAP_F32, grad_kv);
  in(c, SHAPE(n, s, e), HAP_F32, grad_kv);
  in(c, SHAPE(3, e, e), HAP_F32, GRAD);
  in(c, SHAPE(3, e), HAP_F32, GRAD);
  in(c, SHAPE(e, e), HAP_F32, GRAD);
  in(c, SHAPE(e), HAP_F32, GRAD);
  if (mask)
    in(c, SHAPE(l, s), HAP_F32, DATA);
}

Test(ops_mha, self_attention_no_mask_no_dropout) {
  opcase c;
  mha_case(&c, 2, 4, 4, 8, 2, GRAD, GRAD, false);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 4, 8), HAP_F32);
  const double n = 2, l = 4, s = 4, e = 8, h = 2;
  double fwd = 2 * n * l * e * e;                   /* Q projection */
  fwd += 4 * n * s * e * e;                         /* K and V projections */
  fwd += 2 * n * l * e * e;                         /* output projection */
  fwd += n * (2 * l + 2 * s) * e;                   /* the four bias adds */
  fwd += 2 * n * l * s * e;                         /* scores Q K^T */
  fwd += 2 * n * l * s * e;                         /* context P V */
  fwd += n * h * l * s * (1 + 5);                   /* scale, softmax */
  double bwd = 2 * n * l * e * e;                   /* out proj: d context */
  bwd += 2 * n * l * e * e + n * l * e;             /* out proj: dW, db */
  bwd += 2 * (2 * 2 * n * l * s * e);               /* both attention GEMMs, both operands */
  bwd += n * h * l * s * (4 + 1);                   /* softmax, scale */
  bwd += 2 * n * l * e * e + 4 * n * s * e * e;     /* dW_in */
  bwd += n * (l + 2 * s) * e;                       /* db_in */
  bwd += 2 * n * l * e * e + 2 * 2 * n * s * e * e; /* dQ, dK, dV */
  expect_flops(&c, fwd, bwd);
  cr_assert_eq(c.cost.fwd_flops, 5760.0); /* 1024 + 2048 + 1024 + 256 + 1024 + 384 */
  cr_assert_eq(c.cost.bwd_flops, 10816.0);
  double act = 64 * 4.0, params = (192 + 24 + 64 + 8) * 4.0;
  expect_bytes(&c, 3 * act + params, act, 3 * act + params + act, 3 * act + params);
}

Test(ops_mha, self_attention_mask_and_dropout) {
  opcase c;
  mha_case(&c, 2, 4, 4, 8, 2, GRAD, GRAD, true);
  set_f(&c, "dropout", 0.1);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 4, 8), HAP_F32);
  /* per score element (N*H*L*S = 64): + mask 1 + dropout 2 forward, + dropout 1 backward */
  expect_flops(&c, 5760.0 + 64 * (1 + 2), 10816.0 + 64 * 1);
}

Test(ops_mha, cross_attention_query_without_grad) {
  opcase c;
  mha_case(&c, 2, 3, 5, 8, 4, DATA, GRAD, true);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 3, 8), HAP_F32);
  const double n = 2, l = 3, s = 5, e = 8, h = 4;
  double fwd = 2 * n * l * e * e + 4 * n * s * e * e + 2 * n * l * e * e + n * (2 * l + 2 * s) * e +
               2 * (2 * n * l * s * e) + n * h * l * s * (1 + 1 + 5);
  double bwd = 2 * n * l * e * e + 2 * n * l * e * e + n * l * e + 2 * (2 * 2 * n * l * s * e) +
               n * h * l * s * (4 + 1) + (2 * n * l * e * e + 4 * n * s * e * e) +
               n * (l + 2 * s) * e + 2 * 2 * n * s * e * e; /* no dQ */
  expect_flops(&c, fwd, bwd);
  cr_assert_eq(c.cost.fwd_flops, 6152.0);
  cr_assert_eq(c.cost.bwd_flops, 10200.0);
}

Test(ops_mha, inference_has_no_backward) {
  opcase c;
  mha_case(&c, 2, 4, 4, 8, 2, DATA, DATA, false);
  for (int i = 3; i < 7; i++)
    c.io.in_grad[i] = false;
  run(&c);
  expect_flops(&c, 5760.0, 0);
  cr_assert_eq(c.cost.bwd_bytes_read, 0.0);
  cr_assert_eq(c.cost.bwd_bytes_written, 0.0);
}

/* One head-parallel shard (docs/sharding.md): 1 of 2 heads, projected width P = 4 of E = 8, so
 * in_proj_weight [3, 4, 8], in_proj_bias [3, 4], out_proj_weight [8, 4]. Every projection and
 * attention GEMM scales with P; the output bias add (N*L*E) does not. */
Test(ops_mha, head_shard_projected_width) {
  opcase c;
  mha_case(&c, 2, 4, 4, 8, 2, GRAD, GRAD, false);
  c.io.in[3] = SHAPE(3, 4, 8);
  c.io.in[4] = SHAPE(3, 4);
  c.io.in[5] = SHAPE(8, 4);
  set_i(&c, "heads", 1);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 4, 8), HAP_F32);
  const double n = 2, l = 4, s = 4, e = 8, p = 4, h = 1;
  double fwd = 2 * n * l * e * p + 4 * n * s * e * p + 2 * n * l * p * e; /* Q, K, V, out */
  fwd += n * (l + 2 * s) * p + n * l * e;                                 /* biases */
  fwd += 2 * (2 * n * l * s * p) + n * h * l * s * (1 + 5);
  double bwd = 2 * (2 * n * l * p * e) + n * l * e; /* out proj: d context, dW, db */
  bwd += 2 * (2 * 2 * n * l * s * p) + n * h * l * s * (4 + 1);
  bwd += 2 * n * l * e * p + 4 * n * s * e * p + n * (l + 2 * s) * p; /* dW_in, db_in */
  bwd += 2 * n * l * e * p + 2 * 2 * n * s * e * p;                   /* dQ, dK, dV */
  expect_flops(&c, fwd, bwd);
  /* the two shards together: the full op plus one extra output-bias add */
  cr_assert_eq(2 * c.cost.fwd_flops, 5760.0 + n * l * e);
  double m = 0, nn = 0, k = 0;
  cr_assert(hap_op_gemm_dims(c.op, &c.io, &m, &nn, &k));
  cr_assert(m == n * l && nn == p && k == e, "gemm %g x %g x %g", m, nn, k);
}

Test(ops_mha, bert_base_projections_dominate) {
  opcase c;
  mha_case(&c, 256, 128, 128, 768, 12, GRAD, GRAD, false);
  set_f(&c, "dropout", 0.1);
  run(&c);
  const double n = 256, l = 128, e = 768, h = 12;
  double proj = 4 * 2 * n * l * e * e, attn = 2 * 2 * n * l * l * e;
  double small = n * 4 * l * e + n * h * l * l * (1 + 5 + 2);
  double bwd = 2 * (2 * n * l * e * e) + n * l * e; /* out proj: d context, dW, db */
  bwd += 2 * attn + n * h * l * l * (1 + 4 + 1);    /* GEMMs twice; dropout, softmax, scale */
  bwd += 3 * (2 * n * l * e * e) + 3 * n * l * e;   /* dW_in, db_in */
  bwd += 3 * (2 * n * l * e * e);                   /* dQ, dK, dV */
  expect_flops(&c, proj + attn + small, bwd);
  cr_assert_float_eq(c.cost.fwd_flops, 167503724544.0 + 503316480.0, 0.0);
  cr_assert(c.cost.fwd_flops > proj + attn);
  cr_assert((c.cost.fwd_flops - (proj + attn)) / c.cost.fwd_flops < 0.005,
            "small terms are %g of %g", c.cost.fwd_flops - (proj + attn), c.cost.fwd_flops);
  cr_assert(proj / c.cost.fwd_flops > 0.9);
  /* a full backward is about twice the forward */
  cr_assert(c.cost.bwd_flops > 1.9 * c.cost.fwd_flops && c.cost.bwd_flops < 2.1 * c.cost.fwd_flops,
            "bwd %g, fwd %g", c.cost.bwd_flops, c.cost.fwd_flops);
}

/* ---- elementwise --------------------------------------------------------------------------- */

static void unary_case(opcase *c, hap_op op, bool grad) {
  begin(c, op);
  if (op == HAP_OP_POW)
    set_f(c, "exponent", 2.0);
  in(c, SHAPE(3, 5), HAP_F32, grad);
  run(c);
  expect_out(c, 0, SHAPE(3, 5), HAP_F32);
}

Test(ops_unary, per_element_constants) {
  static const struct {
    hap_op op;
    double fwd, bwd;
  } k[] = {
      {HAP_OP_RELU, 1, 1},  {HAP_OP_GELU, 5, 9}, {HAP_OP_SIGMOID, 4, 3}, {HAP_OP_TANH, 1, 3},
      {HAP_OP_RSQRT, 1, 4}, {HAP_OP_POW, 1, 3},  {HAP_OP_DROPOUT, 2, 1},
  };
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    opcase c;
    unary_case(&c, k[i].op, GRAD);
    expect_flops(&c, 15 * k[i].fwd, 15 * k[i].bwd);
    expect_bytes(&c, 60, 60, 120, 60);
    unary_case(&c, k[i].op, DATA);
    expect_flops(&c, 15 * k[i].fwd, 0);
    expect_bytes(&c, 60, 60, 0, 0);
  }
}

Test(ops_unary, keeps_dtype_and_rank0) {
  opcase c;
  begin(&c, HAP_OP_GELU);
  in(&c, SCALAR, HAP_BF16, GRAD);
  run(&c);
  expect_out(&c, 0, SCALAR, HAP_BF16);
  expect_flops(&c, 5, 9);
}

Test(ops_unary, dropout_probability_range) {
  opcase c;
  begin(&c, HAP_OP_DROPOUT);
  set_f(&c, "p", 0.0);
  in(&c, SHAPE(4), HAP_F32, GRAD);
  run(&c);
  begin(&c, HAP_OP_DROPOUT);
  set_f(&c, "p", 1.0);
  in(&c, SHAPE(4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "expected 0 <= p < 1");
}

/* [4,1,3] op [2,3] -> [4,2,3], both with gradients. */
static void bcast_case(opcase *c, hap_op op) {
  begin(c, op);
  in(c, SHAPE(4, 1, 3), HAP_F32, GRAD);
  in(c, SHAPE(2, 3), HAP_F32, GRAD);
  run(c);
  expect_out(c, 0, SHAPE(4, 2, 3), HAP_F32);
  /* read a (12) and b (6), write 24; backward also reads the output grad, writes both grads */
  expect_bytes(c, 18 * 4.0, 24 * 4.0, (18 + 24) * 4.0, 18 * 4.0);
}

Test(ops_binary, broadcasting) {
  opcase c;
  const double n = 24; /* output elements; reducing a broadcast grad costs n adds per input */
  bcast_case(&c, HAP_OP_ADD);
  expect_flops(&c, n, n + n);
  bcast_case(&c, HAP_OP_SUB);
  expect_flops(&c, n, n + n + 6); /* + negate db */
  bcast_case(&c, HAP_OP_MUL);
  expect_flops(&c, n, (n + n) + (n + n)); /* g*b, g*a, each reduced */
  bcast_case(&c, HAP_OP_DIV);
  expect_flops(&c, n, (n + n) + (3 * n + n)); /* g/b; -g*y/b */
}

Test(ops_binary, same_shape_one_grad) {
  static const struct {
    hap_op op;
    double bwd;
  } k[] = {{HAP_OP_ADD, 0}, {HAP_OP_SUB, 12}, {HAP_OP_MUL, 12}, {HAP_OP_DIV, 3 * 12}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    opcase c;
    begin(&c, k[i].op);
    in(&c, SHAPE(4, 3), HAP_F32, DATA);
    in(&c, SHAPE(4, 3), HAP_F32, GRAD);
    run(&c);
    expect_out(&c, 0, SHAPE(4, 3), HAP_F32);
    expect_flops(&c, 12, k[i].bwd);
    expect_bytes(&c, 24 * 4.0, 12 * 4.0, 36 * 4.0, 12 * 4.0);
  }
}

Test(ops_binary, scalar_form) {
  static const struct {
    hap_op op;
    double bwd;
  } k[] = {{HAP_OP_ADD, 0}, {HAP_OP_SUB, 0}, {HAP_OP_MUL, 12}, {HAP_OP_DIV, 12}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
    opcase c;
    begin(&c, k[i].op);
    set_f(&c, "scalar", 3.0);
    in(&c, SHAPE(4, 3), HAP_F16, GRAD);
    run(&c);
    expect_out(&c, 0, SHAPE(4, 3), HAP_F16);
    expect_flops(&c, 12, k[i].bwd);
    expect_bytes(&c, 24, 24, 48, 24);
  }
}

/* x + x and x * x through the graph builder: one tensor used twice, a gradient for each use. */
Test(ops_binary, same_tensor_twice_via_graph) {
  hap_graph *g = hap_graph_create("twice");
  cr_assert_not_null(g);
  hap_err err = {0};
  int32_t w, sum, prod, loss;
  cr_assert_eq(hap_graph_add_tensor(g, "w", HAP_TENSOR_PARAMETER, HAP_F32, &SHAPE(4, 3), &w, &err),
               HAP_OK);
  cr_assert_eq(
      hap_graph_add_node(g, "x2", HAP_OP_ADD, (int32_t[]){w, w}, 2, NULL, NULL, &sum, &err), HAP_OK,
      "%s", err.msg);
  cr_assert_eq(
      hap_graph_add_node(g, "sq", HAP_OP_MUL, (int32_t[]){sum, sum}, 2, NULL, NULL, &prod, &err),
      HAP_OK, "%s", err.msg);
  cr_assert_eq(hap_graph_add_node(g, "loss", HAP_OP_SUM, &prod, 1, NULL, NULL, &loss, &err), HAP_OK,
               "%s", err.msg);
  cr_assert_eq(hap_graph_set_loss(g, loss, &err), HAP_OK);
  cr_assert_eq(hap_graph_validate(g, &err), HAP_OK, "%s", err.msg);

  opcase c;
  begin(&c, HAP_OP_ADD);
  hap_graph_node_io(g, hap_graph_find_node(g, "x2"), &c.io);
  cr_assert(c.io.in_grad[0] && c.io.in_grad[1]);
  hap_graph_node_cost(g, hap_graph_find_node(g, "x2"), &c.cost);
  expect_flops(&c, 12, 0);
  expect_bytes(&c, 2 * 48.0, 48, 3 * 48.0, 2 * 48.0);

  c.op = HAP_OP_MUL;
  hap_graph_node_cost(g, hap_graph_find_node(g, "sq"), &c.cost);
  expect_flops(&c, 12, 12 + 12);

  c.op = HAP_OP_SUM;
  hap_graph_node_cost(g, hap_graph_find_node(g, "loss"), &c.cost);
  expect_flops(&c, 12, 0);
  expect_bytes(&c, 48, 4, 48 + 4, 48);
  hap_graph_destroy(g);
}

/* ---- softmax and reductions ---------------------------------------------------------------- */

Test(ops_softmax, negative_dim) {
  opcase c;
  begin(&c, HAP_OP_SOFTMAX);
  set_i(&c, "dim", -3);
  in(&c, SHAPE(2, 3, 5), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 3, 5), HAP_F32);
  expect_flops(&c, 30.0 * 5, 30.0 * 4);
  begin(&c, HAP_OP_SOFTMAX);
  set_i(&c, "dim", -4);
  in(&c, SHAPE(2, 3, 5), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "attribute 'dim' is -4, expected -3..2");
}

Test(ops_log_softmax, default_last_dim) {
  opcase c;
  begin(&c, HAP_OP_LOG_SOFTMAX);
  cr_assert_eq(hap_attr_i(&c.attrs, 0), -1);
  in(&c, SHAPE(8, 10), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(8, 10), HAP_F32);
  expect_flops(&c, 80.0 * 5, 80.0 * 4);
  begin(&c, HAP_OP_LOG_SOFTMAX);
  set_i(&c, "dim", 2);
  in(&c, SHAPE(8, 10), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "expected -2..1");
}

Test(ops_reduce, sum_all_dims) {
  opcase c;
  begin(&c, HAP_OP_SUM);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SCALAR, HAP_F32);
  expect_flops(&c, 24, 0); /* the gradient is a broadcast copy */
  expect_bytes(&c, 96, 4, 100, 96);
}

Test(ops_reduce, sum_chosen_dim_keepdim) {
  opcase c;
  begin(&c, HAP_OP_SUM);
  ATTR_INTS(&c, "dims", -2);
  set_i(&c, "keepdim", 1);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 1, 4), HAP_F32);
  expect_flops(&c, 24, 0);
}

Test(ops_reduce, mean_two_dims) {
  opcase c;
  begin(&c, HAP_OP_MEAN);
  ATTR_INTS(&c, "dims", 0, -1);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(3), HAP_F32);
  expect_flops(&c, 24 + 3, 24); /* sum + one divide per output; grad scales each input */
}

Test(ops_reduce, mean_all_keepdim_no_grad) {
  opcase c;
  begin(&c, HAP_OP_MEAN);
  set_i(&c, "keepdim", 1);
  in(&c, SHAPE(2, 3, 4), HAP_F32, DATA);
  run(&c);
  expect_out(&c, 0, SHAPE(1, 1, 1), HAP_F32);
  expect_flops(&c, 24 + 1, 0);
}

Test(ops_reduce, bad_dims) {
  opcase c;
  begin(&c, HAP_OP_SUM);
  ATTR_INTS(&c, "dims", 1, -2);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "lists dim 1 twice");
  begin(&c, HAP_OP_MEAN);
  ATTR_INTS(&c, "dims", 3);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "'dims[0]' is 3, out of range for rank 3");
}

/* ---- layout -------------------------------------------------------------------------------- */

static void expect_no_cost(const opcase *c) {
  expect_flops(c, 0, 0);
  expect_bytes(c, 0, 0, 0, 0);
}

/* A copy moves the output once forward and once backward (when a gradient is needed). */
static void expect_copy_cost(const opcase *c, double out_bytes, bool grad) {
  expect_flops(c, 0, 0);
  expect_bytes(c, out_bytes, out_bytes, grad ? out_bytes : 0, grad ? out_bytes : 0);
}

Test(ops_reshape, minus_one) {
  opcase c;
  begin(&c, HAP_OP_RESHAPE);
  ATTR_INTS(&c, "shape", -1, 4);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(6, 4), HAP_F32);
  expect_no_cost(&c);
  begin(&c, HAP_OP_RESHAPE);
  ATTR_INTS(&c, "shape", 4, -1, 3);
  in(&c, SHAPE(2, 3, 4), HAP_I64, DATA); /* any dtype */
  run(&c);
  expect_out(&c, 0, SHAPE(4, 2, 3), HAP_I64);
  begin(&c, HAP_OP_RESHAPE);
  ATTR_INTS(&c, "shape", 24);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(24), HAP_F32);
}

Test(ops_reshape, errors) {
  opcase c;
  begin(&c, HAP_OP_RESHAPE);
  ATTR_INTS(&c, "shape", 5, 5);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "cannot reshape [2, 3, 4] (24 elements) to [5, 5]");
  begin(&c, HAP_OP_RESHAPE);
  ATTR_INTS(&c, "shape", -1, 2, -1);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "more than one -1");
  begin(&c, HAP_OP_RESHAPE);
  ATTR_INTS(&c, "shape", -1, 5);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "cannot reshape 24 elements with a -1 next to 5");
  begin(&c, HAP_OP_RESHAPE);
  ATTR_INTS(&c, "shape", 24, 0);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "'shape[1]' is 0, expected a positive size or -1");
}

Test(ops_flatten, start_end) {
  opcase c;
  begin(&c, HAP_OP_FLATTEN);
  in(&c, SHAPE(2, 3, 4, 5), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2 * 3 * 4 * 5), HAP_F32);
  expect_no_cost(&c);
  begin(&c, HAP_OP_FLATTEN);
  set_i(&c, "start_dim", 1);
  in(&c, SHAPE(2, 3, 4, 5), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 3 * 4 * 5), HAP_F32);
  begin(&c, HAP_OP_FLATTEN);
  set_i(&c, "start_dim", -3);
  set_i(&c, "end_dim", -2);
  in(&c, SHAPE(2, 3, 4, 5), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 3 * 4, 5), HAP_F32);
  begin(&c, HAP_OP_FLATTEN);
  set_i(&c, "start_dim", 2);
  set_i(&c, "end_dim", 1);
  in(&c, SHAPE(2, 3, 4, 5), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "(2, 1) are invalid for rank 4");
}

Test(ops_transpose, negative_dims) {
  opcase c;
  begin(&c, HAP_OP_TRANSPOSE);
  set_i(&c, "dim0", -1);
  set_i(&c, "dim1", 0);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(4, 3, 2), HAP_F32);
  expect_copy_cost(&c, 24 * 4.0, true);
  begin(&c, HAP_OP_TRANSPOSE);
  set_i(&c, "dim0", 1);
  set_i(&c, "dim1", -4);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "(1, -4) are out of range for rank 3");
}

Test(ops_permute, reorder) {
  opcase c;
  begin(&c, HAP_OP_PERMUTE);
  ATTR_INTS(&c, "dims", 2, 0, 1);
  in(&c, SHAPE(2, 3, 4), HAP_F32, DATA);
  run(&c);
  expect_out(&c, 0, SHAPE(4, 2, 3), HAP_F32);
  expect_copy_cost(&c, 24 * 4.0, false);
  begin(&c, HAP_OP_PERMUTE);
  ATTR_INTS(&c, "dims", 0, -1, 1);
  in(&c, SHAPE(2, 3, 4), HAP_F16, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 4, 3), HAP_F16);
  expect_copy_cost(&c, 24 * 2.0, true);
}

Test(ops_permute, not_a_permutation) {
  opcase c;
  begin(&c, HAP_OP_PERMUTE);
  ATTR_INTS(&c, "dims", 0, 2, -1);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "not a permutation of 0..2");
  begin(&c, HAP_OP_PERMUTE);
  ATTR_INTS(&c, "dims", 1, 0);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "has 2 entries, expected 3");
}

Test(ops_narrow, slice) {
  opcase c;
  begin(&c, HAP_OP_NARROW);
  set_i(&c, "dim", -2);
  set_i(&c, "start", 3);
  set_i(&c, "length", 5);
  in(&c, SHAPE(2, 10, 4), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 5, 4), HAP_F32);
  expect_copy_cost(&c, 40 * 4.0, true);
  begin(&c, HAP_OP_NARROW); /* exactly to the end */
  set_i(&c, "dim", 1);
  set_i(&c, "start", 5);
  set_i(&c, "length", 5);
  in(&c, SHAPE(2, 10, 4), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 5, 4), HAP_F32);
}

Test(ops_narrow, out_of_range) {
  opcase c;
  begin(&c, HAP_OP_NARROW);
  set_i(&c, "dim", 1);
  set_i(&c, "start", 8);
  set_i(&c, "length", 3);
  in(&c, SHAPE(2, 10, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "does not fit in dim 1 of size 10");
  begin(&c, HAP_OP_NARROW);
  set_i(&c, "dim", 3);
  set_i(&c, "start", 0);
  set_i(&c, "length", 1);
  in(&c, SHAPE(2, 10, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "'dim' is out of range for rank 3");
  begin(&c, HAP_OP_NARROW); /* start + length would overflow int64 */
  set_i(&c, "dim", 0);
  set_i(&c, "start", 1);
  set_i(&c, "length", INT64_MAX);
  in(&c, SHAPE(2, 10, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "does not fit in dim 0 of size 2");
}

Test(ops_cls, append_and_select) {
  opcase c;
  begin(&c, HAP_OP_CLS_APPEND);
  in(&c, SHAPE(2, 5, 8), HAP_F32, GRAD);
  in(&c, SHAPE(1, 1, 8), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 6, 8), HAP_F32);
  expect_copy_cost(&c, 2.0 * 6 * 8 * 4, true);
  begin(&c, HAP_OP_CLS_SELECT);
  in(&c, SHAPE(2, 6, 8), HAP_F32, GRAD);
  run(&c);
  expect_out(&c, 0, SHAPE(2, 8), HAP_F32);
  expect_copy_cost(&c, 2.0 * 8 * 4, true);
  begin(&c, HAP_OP_CLS_APPEND);
  in(&c, SHAPE(2, 5, 8), HAP_F32, GRAD);
  in(&c, SHAPE(1, 8), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "input 'cls' has shape [1, 8], expected [1, 1, 8]");
}

/* ---- mixture of experts -------------------------------------------------------------------- */

Test(ops_top2_gating, masks_and_cost) {
  opcase c;
  begin(&c, HAP_OP_TOP2_GATING);
  set_i(&c, "capacity", 6);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD); /* B = 2, S = 3, D = 4 */
  in(&c, SHAPE(4, 5), HAP_F32, GRAD);    /* E = 5 */
  run(&c);
  cr_assert_eq(c.io.n_out, 2);
  expect_out(&c, 0, SHAPE(2, 3, 5, 6), HAP_F32);
  expect_out(&c, 1, SHAPE(2, 3, 5, 6), HAP_F32);
  const double b = 2, s = 3, d = 4, e = 5, cap = 6;
  double gemm = 2 * b * s * d * e, masks = b * s * e * cap;
  expect_flops(&c, gemm + 5 * b * s * e + 4 * b * s * e + 2 * masks,
               2 * masks + 4 * b * s * e + gemm + gemm);
  double x = 24 * 4.0, w = 20 * 4.0, out = 2 * 180 * 4.0;
  expect_bytes(&c, x + w, out, x + w + out, x + w);
}

Test(ops_top2_gating, data_input_and_errors) {
  opcase c;
  begin(&c, HAP_OP_TOP2_GATING);
  set_i(&c, "capacity", 6);
  in(&c, SHAPE(2, 3, 4), HAP_F32, DATA);
  in(&c, SHAPE(4, 5), HAP_F32, GRAD);
  run(&c);
  expect_flops(&c, 2.0 * 120 + 5.0 * 30 + 4.0 * 30 + 2.0 * 180, 2.0 * 180 + 4.0 * 30 + 2.0 * 120);
  begin(&c, HAP_OP_TOP2_GATING);
  set_i(&c, "capacity", 6);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  in(&c, SHAPE(4, 1), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "at least 2 experts");
  begin(&c, HAP_OP_TOP2_GATING);
  set_i(&c, "capacity", 0);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  in(&c, SHAPE(4, 5), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "'capacity' is 0, expected >= 1");
  begin(&c, HAP_OP_TOP2_GATING);
  set_i(&c, "capacity", 2);
  in(&c, SHAPE(2, 3, 4), HAP_F32, GRAD);
  in(&c, SHAPE(5, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "expected [4, E]");
}

/* ---- losses -------------------------------------------------------------------------------- */

static void loss_case(opcase *c, hap_op op, hap_shape x, hap_shape t, const char *reduction) {
  begin(c, op);
  if (reduction)
    set_s(c, "reduction", reduction);
  in(c, x, HAP_F32, GRAD);
  in(c, t, HAP_I64, DATA);
  run(c);
  expect_out(c, 0, SCALAR, HAP_F32);
}

Test(ops_nll_loss, two_d_sum_and_mean) {
  opcase c;
  loss_case(&c, HAP_OP_NLL_LOSS, SHAPE(8, 10), SHAPE(8), "sum");
  expect_flops(&c, 8, 8);
  /* forward reads the targets and one log-probability per target; backward reads the targets
   * and the scalar output gradient and writes the whole (dense) input gradient */
  expect_bytes(&c, 8 * 8.0 + 8 * 4.0, 4, 8 * 8.0 + 4, 80 * 4.0);
  loss_case(&c, HAP_OP_NLL_LOSS, SHAPE(8, 10), SHAPE(8), NULL); /* default: mean */
  expect_flops(&c, 8 + 1, 8);
}

Test(ops_nll_loss, spatial_targets) {
  opcase c;
  loss_case(&c, HAP_OP_NLL_LOSS, SHAPE(4, 10, 6), SHAPE(4, 6), "mean");
  expect_flops(&c, 4 * 6 + 1, 4 * 6);
  loss_case(&c, HAP_OP_NLL_LOSS, SHAPE(4, 10, 6, 3), SHAPE(4, 6, 3), "sum");
  expect_flops(&c, 4 * 6 * 3, 4 * 6 * 3);
}

Test(ops_cross_entropy, mean_and_sum) {
  opcase c;
  loss_case(&c, HAP_OP_CROSS_ENTROPY, SHAPE(8, 10), SHAPE(8), NULL);
  expect_flops(&c, 5 * 80.0 + 8 + 1, 3 * 80.0);
  expect_bytes(&c, 80 * 4.0 + 8 * 8.0, 4, 80 * 4.0 + 8 * 8.0 + 4, 80 * 4.0);
  loss_case(&c, HAP_OP_CROSS_ENTROPY, SHAPE(4, 10, 6), SHAPE(4, 6), "sum");
  expect_flops(&c, 5 * 240.0 + 24, 3 * 240.0);
}

Test(ops_losses, errors) {
  opcase c;
  begin(&c, HAP_OP_NLL_LOSS);
  in(&c, SHAPE(8, 10), HAP_F32, GRAD);
  in(&c, SHAPE(10), HAP_I64, DATA);
  expect_fail(&c, HAP_EINVAL,
              "input 'target' has shape [10], expected input [8, 10] without its class dim 1");
  begin(&c, HAP_OP_NLL_LOSS);
  in(&c, SHAPE(4, 10, 6), HAP_F32, GRAD);
  in(&c, SHAPE(4, 10), HAP_I64, DATA);
  expect_fail(&c, HAP_EINVAL, "without its class dim");
  begin(&c, HAP_OP_CROSS_ENTROPY);
  in(&c, SHAPE(8, 10), HAP_F32, GRAD);
  in(&c, SHAPE(8), HAP_F32, DATA);
  expect_fail(&c, HAP_EINVAL, "input 'target' is float32, expected int64 or int32");
  begin(&c, HAP_OP_CROSS_ENTROPY);
  set_s(&c, "reduction", "none");
  in(&c, SHAPE(8, 10), HAP_F32, GRAD);
  in(&c, SHAPE(8), HAP_I32, DATA);
  expect_fail(&c, HAP_EINVAL, "'reduction' is 'none', expected \"sum\" or \"mean\"");
}

/* ---- shape-inference errors ---------------------------------------------------------------- */

Test(ops_errors, linear_shapes) {
  opcase c;
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(2, 4), HAP_F32, GRAD);
  in(&c, SHAPE(5, 3), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL,
              "input 'weight' has shape [5, 3], expected [N, 4] to match input [2, 4]");
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(2, 4), HAP_F32, GRAD);
  in(&c, SHAPE(5, 4), HAP_F32, GRAD);
  in(&c, SHAPE(4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "input 'bias' has shape [4], expected [5]");
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(2, 4), HAP_F32, GRAD);
  in(&c, SHAPE(5, 4), HAP_F16, GRAD);
  expect_fail(&c, HAP_EINVAL, "dtypes float32 and float16, expected the same");
}

Test(ops_errors, matmul_shapes) {
  opcase c;
  begin(&c, HAP_OP_MATMUL);
  in(&c, SHAPE(3, 4, 5), HAP_F32, GRAD);
  in(&c, SHAPE(3, 4, 6), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "inner dims 5 and 4 differ");
  begin(&c, HAP_OP_MATMUL);
  in(&c, SHAPE(3, 4, 5), HAP_F32, GRAD);
  in(&c, SHAPE(2, 5, 6), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "do not broadcast");
  begin(&c, HAP_OP_MATMUL);
  in(&c, SHAPE(5), HAP_F32, GRAD);
  in(&c, SHAPE(5, 6), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "input 'a' has shape [5], expected rank 2..8");
  begin(&c, HAP_OP_BMM);
  in(&c, SHAPE(3, 4, 5), HAP_F32, GRAD);
  in(&c, SHAPE(2, 5, 6), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "batch sizes of [3, 4, 5] and [2, 5, 6] differ");
  begin(&c, HAP_OP_BMM);
  in(&c, SHAPE(4, 5), HAP_F32, GRAD);
  in(&c, SHAPE(5, 6), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "expected rank 3");
}

Test(ops_errors, binary_not_broadcastable) {
  opcase c;
  begin(&c, HAP_OP_ADD);
  in(&c, SHAPE(4, 3), HAP_F32, GRAD);
  in(&c, SHAPE(2, 3), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "shapes [4, 3] and [2, 3] do not broadcast (dim 0: 4 vs 2)");
  begin(&c, HAP_OP_MUL);
  in(&c, SHAPE(4, 3), HAP_F32, GRAD);
  in(&c, SHAPE(4, 3), HAP_BF16, GRAD);
  expect_fail(&c, HAP_EINVAL, "expected the same");
}

Test(ops_errors, conv_and_pool) {
  opcase c;
  begin(&c, HAP_OP_CONV2D);
  in(&c, SHAPE(1, 3, 2, 2), HAP_F32, DATA);
  in(&c, SHAPE(4, 3, 3, 3), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "height 2 with padding 0 is smaller than the kernel 3");
  begin(&c, HAP_OP_CONV2D);
  in(&c, SHAPE(1, 3, 8, 8), HAP_F32, DATA);
  in(&c, SHAPE(4, 2, 3, 3), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "expected [O, 3, kH, kW] for input [1, 3, 8, 8]");
  begin(&c, HAP_OP_CONV2D);
  in(&c, SHAPE(1, 3, 8, 8), HAP_F32, DATA);
  in(&c, SHAPE(4, 3, 3, 3), HAP_F32, GRAD);
  in(&c, SHAPE(4), HAP_F16, GRAD);
  expect_fail(&c, HAP_EINVAL, "inputs 0 and 2 have dtypes float32 and float16, expected the same");
  begin(&c, HAP_OP_CONV2D);
  set_i(&c, "stride", 0);
  in(&c, SHAPE(1, 3, 8, 8), HAP_F32, DATA);
  in(&c, SHAPE(4, 3, 3, 3), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "expected stride >= 1");
  begin(&c, HAP_OP_CONV2D); /* 2 * padding would overflow int64 */
  set_i(&c, "padding", INT64_MAX / 2 + 1);
  in(&c, SHAPE(1, 3, 8, 8), HAP_F32, DATA);
  in(&c, SHAPE(4, 3, 3, 3), HAP_F32, GRAD);
  cr_assert_neq(hap_op_infer(c.op, &c.io, &c.err), HAP_OK);
  cr_assert(strstr(c.err.msg, "padding") != NULL, "%s", c.err.msg);
  begin(&c, HAP_OP_MAX_POOL2D);
  set_i(&c, "kernel", 3);
  set_i(&c, "padding", 2);
  in(&c, SHAPE(1, 3, 8, 8), HAP_F32, DATA);
  expect_fail(&c, HAP_EINVAL, "expected at most half the kernel 3");
  begin(&c, HAP_OP_MAX_POOL2D);
  set_i(&c, "kernel", 3);
  set_i(&c, "padding", INT64_MAX);
  in(&c, SHAPE(1, 3, 8, 8), HAP_F32, DATA);
  expect_fail(&c, HAP_EINVAL, "expected at most half the kernel 3");
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D);
  ATTR_INTS(&c, "output_size", 7);
  in(&c, SHAPE(1, 3, 8, 8), HAP_F32, DATA);
  expect_fail(&c, HAP_EINVAL, "two positive ints [oh, ow]");
}

Test(ops_errors, attention) {
  opcase c;
  mha_case(&c, 2, 4, 4, 8, 3, GRAD, GRAD, false);
  expect_fail(&c, HAP_EINVAL, "attribute 'heads' is 3, expected a positive divisor of 8");
  mha_case(&c, 2, 4, 4, 8, 2, GRAD, GRAD, false);
  c.io.in[3] = SHAPE(24, 8);
  expect_fail(&c, HAP_EINVAL, "input 'in_proj_weight' has shape [24, 8], expected [3, P, 8]");
  mha_case(&c, 2, 4, 4, 8, 2, GRAD, GRAD, false);
  c.io.in[3] = SHAPE(3, 6, 8);
  c.io.in[4] = SHAPE(3, 6);
  set_i(&c, "heads", 4);
  expect_fail(&c, HAP_EINVAL, "attribute 'heads' is 4, expected a positive divisor of 6");
  mha_case(&c, 2, 4, 4, 8, 2, GRAD, GRAD, false);
  c.io.in[4] = SHAPE(24);
  expect_fail(&c, HAP_EINVAL, "input 'in_proj_bias' has shape [24], expected [3, 8]");
  mha_case(&c, 2, 4, 4, 8, 2, GRAD, GRAD, false);
  c.io.in[3] = SHAPE(3, 4, 8);
  c.io.in[4] = SHAPE(3, 4);
  expect_fail(&c, HAP_EINVAL, "input 'out_proj_weight' has shape [8, 8], expected [8, 4]");
  mha_case(&c, 2, 4, 5, 8, 2, GRAD, GRAD, true);
  c.io.in[7] = SHAPE(5, 4);
  expect_fail(&c, HAP_EINVAL, "input 'mask' has shape [5, 4], expected [4, 5]");
  mha_case(&c, 2, 4, 4, 8, 2, GRAD, GRAD, false);
  c.io.in[2] = SHAPE(2, 5, 8);
  expect_fail(&c, HAP_EINVAL, "input 'value' has shape [2, 5, 8], expected [2, 4, 8]");
  mha_case(&c, 2, 4, 4, 8, 2, GRAD, GRAD, false);
  set_f(&c, "dropout", 1.0);
  expect_fail(&c, HAP_EINVAL, "expected 0 <= p < 1");
}

Test(ops_errors, layer_norm_and_embedding) {
  opcase c;
  begin(&c, HAP_OP_LAYER_NORM);
  in(&c, SHAPE(2, 3, 8), HAP_F32, GRAD);
  in(&c, SHAPE(3, 8), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "input 'weight' has shape [3, 8], expected [8]");
  begin(&c, HAP_OP_LAYER_NORM);
  set_i(&c, "normalized_dims", 4);
  in(&c, SHAPE(2, 3, 8), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "'normalized_dims' is 4, expected 1..3");
  begin(&c, HAP_OP_EMBEDDING);
  in(&c, SHAPE(4, 16), HAP_F32, DATA);
  in(&c, SHAPE(100, 8), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "input 'indices' is float32, expected int64 or int32");
}

Test(ops_errors, wrong_number_of_inputs) {
  opcase c;
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(2, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "linear takes 2 to 3 inputs, got 1");
  begin(&c, HAP_OP_EMBEDDING);
  in(&c, SHAPE(4), HAP_I64, DATA);
  in(&c, SHAPE(10, 4), HAP_F32, GRAD);
  in(&c, SHAPE(10, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "embedding takes 2 inputs, got 3");
  begin(&c, HAP_OP_MULTI_HEAD_ATTENTION);
  set_i(&c, "heads", 2);
  in(&c, SHAPE(2, 4, 8), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "takes 7 to 8 inputs, got 1");
}

Test(ops_errors, missing_required_attribute) {
  opcase c;
  begin(&c, HAP_OP_TRANSPOSE);
  set_i(&c, "dim1", 0);
  in(&c, SHAPE(2, 3), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "needs attribute 'dim0'");
  begin(&c, HAP_OP_EINSUM);
  in(&c, SHAPE(2, 3), HAP_F32, GRAD);
  in(&c, SHAPE(3, 4), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "needs attribute 'equation'");
  begin(&c, HAP_OP_POW);
  in(&c, SHAPE(2, 3), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "needs attribute 'exponent'");
}

static void einsum_fail(const char *eq, hap_shape a, hap_shape b, const char *substr) {
  opcase c;
  begin(&c, HAP_OP_EINSUM);
  set_s(&c, "equation", eq);
  in(&c, a, HAP_F32, GRAD);
  in(&c, b, HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, substr);
}

Test(ops_errors, einsum) {
  einsum_fail("ij,jk->ik", SHAPE(3, 4), SHAPE(5, 6), "index 'j' has extents 4 and 5");
  einsum_fail("ij->ik", SHAPE(3, 4), SHAPE(4, 5), "expected 'ab,bc->ac' with lowercase indices");
  einsum_fail("iJ,Jk->ik", SHAPE(3, 4), SHAPE(4, 5), "expected 'ab,bc->ac' with lowercase indices");
  einsum_fail("ij,jk", SHAPE(3, 4), SHAPE(4, 5), "expected '->' after the operands");
  einsum_fail("ij,jk->i k", SHAPE(3, 4), SHAPE(4, 5), "unexpected ' ' in the output indices");
  einsum_fail("ij,jk->iz", SHAPE(3, 4), SHAPE(4, 5), "output index 'z' appears in no operand");
  einsum_fail("ij,jk->ii", SHAPE(3, 4), SHAPE(4, 5), "output index 'i' repeats");
  einsum_fail("ii,jk->ik", SHAPE(3, 3), SHAPE(4, 5), "index 'i' repeats within operand 0");
  einsum_fail("ij,jk->ik", SHAPE(3, 4), SHAPE(4), "operand 1 has 2 indices but shape [4]");
  einsum_fail("abcdefghi,jk->jk", SHAPE(1, 1, 1, 1, 1, 1, 1, 1), SHAPE(2, 2),
              "operand 0 has more than 8 indices");
}

Test(ops_errors, int_input_where_float_expected) {
  static const hap_op unary[] = {HAP_OP_RELU, HAP_OP_SOFTMAX, HAP_OP_SUM, HAP_OP_LAYER_NORM};
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
    opcase c;
    begin(&c, unary[i]);
    in(&c, SHAPE(2, 3), HAP_I64, DATA);
    expect_fail(&c, HAP_EINVAL, "input 'input' is int64, expected a floating-point type");
  }
  opcase c;
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(2, 3), HAP_I32, DATA);
  in(&c, SHAPE(4, 3), HAP_I32, GRAD);
  expect_fail(&c, HAP_EINVAL, "input 'input' is int32, expected a floating-point type");
  begin(&c, HAP_OP_ADD);
  in(&c, SHAPE(2, 3), HAP_BOOL, DATA);
  expect_fail(&c, HAP_EINVAL, "input 'a' is bool, expected a floating-point type");
}

Test(ops_errors, output_overflows_int64) {
  opcase c;
  /* [2^40, 1] x [2^30, 1]^T -> [2^40, 2^30]: 2^70 elements */
  begin(&c, HAP_OP_LINEAR);
  in(&c, SHAPE(INT64_C(1) << 40, 1), HAP_F32, DATA);
  in(&c, SHAPE(INT64_C(1) << 30, 1), HAP_F32, GRAD);
  expect_fail(&c, HAP_EOVERFLOW, "output 'output' has more bytes than int64 holds");
  /* 2^62 elements fit, 2^64 bytes do not */
  begin(&c, HAP_OP_RELU);
  in(&c, SHAPE(INT64_C(1) << 31, INT64_C(1) << 31), HAP_F32, DATA);
  expect_fail(&c, HAP_EOVERFLOW, "more bytes than int64 holds");
  begin(&c, HAP_OP_MATMUL);
  in(&c, SHAPE(INT64_C(1) << 20, 1, INT64_C(1) << 22, 1), HAP_F32, DATA);
  in(&c, SHAPE(INT64_C(1) << 21, 1, INT64_C(1) << 20), HAP_F32, DATA);
  expect_fail(&c, HAP_EOVERFLOW, "more bytes than int64 holds");
  begin(&c, HAP_OP_ADAPTIVE_AVG_POOL2D);
  ATTR_INTS(&c, "output_size", INT64_C(1) << 32, INT64_C(1) << 32);
  in(&c, SHAPE(1, 1, 4, 4), HAP_F32, DATA);
  expect_fail(&c, HAP_EOVERFLOW, "more bytes than int64 holds");
}

Test(ops_errors, input_shape_invalid) {
  opcase c;
  begin(&c, HAP_OP_RELU); /* 2^64 elements */
  in(&c, SHAPE(INT64_C(1) << 32, INT64_C(1) << 32), HAP_F32, DATA);
  expect_fail(&c, HAP_EOVERFLOW, "input 'input' has shape [4294967296, 4294967296]");
  begin(&c, HAP_OP_LINEAR); /* an empty dim would make the cost 0/0 */
  in(&c, SHAPE(4, 0), HAP_F32, DATA);
  in(&c, SHAPE(3, 0), HAP_F32, GRAD);
  expect_fail(&c, HAP_EINVAL, "input 'input' has shape [4, 0], expected positive dims");
  begin(&c, HAP_OP_RELU);
  in(&c, SHAPE(2, -3), HAP_F32, DATA);
  expect_fail(&c, HAP_EINVAL, "expected positive dims");
}
