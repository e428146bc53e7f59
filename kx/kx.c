/* kx.c — kernel programs (kx.h): which ops have GPU kernels, the program of a forward or backward
 * call (the CPU kernels' shapes and flags, from kern_internal.h, resolved into passes), and the
 * host executor the CPU tests run. Plain C: compiled with or without CUDA. */
#include "kx/kx.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/kernel_parts.h"

hap_status hap_kx_supported(hap_op op, hap_err *err) {
  switch (op) {
  case HAP_OP_LINEAR:
  case HAP_OP_MATMUL:
  case HAP_OP_BMM:
  case HAP_OP_RELU:
  case HAP_OP_GELU:
  case HAP_OP_SIGMOID:
  case HAP_OP_TANH:
  case HAP_OP_RSQRT:
  case HAP_OP_POW:
  case HAP_OP_DROPOUT:
  case HAP_OP_ADD:
  case HAP_OP_SUB:
  case HAP_OP_MUL:
  case HAP_OP_DIV:
  case HAP_OP_SOFTMAX:
  case HAP_OP_LOG_SOFTMAX:
  case HAP_OP_SUM:
  case HAP_OP_MEAN:
  case HAP_OP_RESHAPE:
  case HAP_OP_FLATTEN:
  case HAP_OP_TRANSPOSE:
  case HAP_OP_PERMUTE:
  case HAP_OP_NARROW:
  case HAP_OP_CLS_SELECT:
  case HAP_OP_CLS_APPEND:
  case HAP_OP_EMBEDDING:
  case HAP_OP_LAYER_NORM:
  case HAP_OP_NLL_LOSS:
  case HAP_OP_CROSS_ENTROPY: return HAP_OK;
  default:
    return hap_err_set(err, HAP_EUNSUPPORTED,
                       "op '%s' has no CUDA kernel yet (hap-run --backend cpu runs it)",
                       (unsigned)op < HAP_OP_COUNT ? hap_op_name(op) : "?");
  }
}

/* ---- building -------------------------------------------------------------------------------- */

static hap_kx_pass *add(hap_kx_prog *p, hap_kx_kind kind, int64_t count) {
  hap_kx_pass *x = &p->pass[p->n++]; /* programs have at most 6 passes (asserted by the tests) */
  memset(x, 0, sizeof *x);
  x->kind = kind;
  x->count = count > 0 ? count : 0;
  x->a = x->b = x->c = x->d = x->g = HAP_KX_NONE;
  x->scale = 1;
  x->div = 1;
  x->batches = 1;
  return x;
}

static void set_dims(hap_kx_pass *x, const hap_shape *s) {
  x->rank = s->rank;
  for (int d = 0; d < s->rank; d++)
    x->dims[d] = s->dims[d];
}

static void need_scratch(hap_kx_prog *p, int64_t doubles) {
  if (doubles > p->scratch)
    p->scratch = doubles;
}

/* scratch[off .. off + count) into slot c (accumulating). */
static void scratch_out(hap_kx_prog *p, int32_t slot, int64_t off, int64_t count, bool acc) {
  hap_kx_pass *x = add(p, HAP_KX_SCRATCH_OUT, count);
  x->c = slot;
  x->off = off;
  if (acc)
    x->flags |= HAP_KX_ACC;
}

static void zero(hap_kx_prog *p, int64_t count) {
  add(p, HAP_KX_ZERO, count);
  need_scratch(p, count);
}

/* Flag positions of index input `input` outside [0, hi). */
static void index_check(hap_kx_prog *p, const hap_kernel_call *c, int input, int64_t hi) {
  add(p, HAP_KX_FLAG_INIT, 1);
  int32_t bytes = hap_dtype_size(c->io->in_dtype[input]);
  hap_kx_pass *x = add(p, HAP_KX_INDEX_CHECK, k_numel(&c->io->in[input]));
  x->a = HAP_KX_IN + input;
  x->sub = bytes;
  x->lo = 0;
  x->hi = hi;
  p->uses_flag = true;
  p->index_slot = HAP_KX_IN + input;
  p->index_bytes = bytes;
  p->index_hi = hi;
}

static hap_kx_pass *gemm(hap_kx_prog *p, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                         int32_t a, int64_t lda, int32_t b, int64_t ldb, int32_t c, int64_t ldc,
                         float beta) {
  hap_kx_pass *x = add(p, HAP_KX_GEMM, 0);
  x->ta = ta;
  x->tb = tb;
  x->m = m;
  x->n = n;
  x->k = k;
  x->a = a;
  x->b = b;
  x->c = c;
  x->lda = lda;
  x->ldb = ldb;
  x->ldc = ldc;
  x->alpha = 1.0f;
  x->beta = beta;
  return x;
}

/* The batch loop of matmul/bmm (k_mm_plan_of) on a GEMM pass; sel/st per operand a, b, c. */
static void gemm_batches(hap_kx_pass *x, const mm_plan *mp, int32_t as, int64_t ast, int32_t bs,
                         int64_t bst, int32_t cs, int64_t cst) {
  set_dims(x, &mp->batch);
  for (int d = 0; d < mp->batch.rank; d++) {
    x->sa[d] = mp->sa[d];
    x->sb[d] = mp->sb[d];
  }
  x->batches = mp->batches;
  x->a_sel = as;
  x->a_st = ast;
  x->b_sel = bs;
  x->b_st = bst;
  x->c_sel = cs;
  x->c_st = cst;
}

enum { SEL_T = 0, SEL_A = 1, SEL_B = 2 };

static int32_t unary_sub(hap_op op) {
  switch (op) {
  case HAP_OP_RELU: return HAP_KX_RELU;
  case HAP_OP_GELU: return HAP_KX_GELU;
  case HAP_OP_SIGMOID: return HAP_KX_SIGMOID;
  case HAP_OP_TANH: return HAP_KX_TANH;
  case HAP_OP_RSQRT: return HAP_KX_RSQRT;
  case HAP_OP_POW: return HAP_KX_POW;
  default: return HAP_KX_DROPOUT;
  }
}

static int32_t binary_sub(hap_op op) {
  switch (op) {
  case HAP_OP_ADD: return HAP_KX_ADDOP;
  case HAP_OP_SUB: return HAP_KX_SUBOP;
  case HAP_OP_MUL: return HAP_KX_MULOP;
  default: return HAP_KX_DIVOP;
  }
}

static bool is_unary(hap_op op) {
  return op == HAP_OP_RELU || op == HAP_OP_GELU || op == HAP_OP_SIGMOID || op == HAP_OP_TANH ||
         op == HAP_OP_RSQRT || op == HAP_OP_POW || op == HAP_OP_DROPOUT;
}

static bool is_binary(hap_op op) {
  return op == HAP_OP_ADD || op == HAP_OP_SUB || op == HAP_OP_MUL || op == HAP_OP_DIV;
}

static bool is_layout(hap_op op) {
  return op == HAP_OP_RESHAPE || op == HAP_OP_FLATTEN || op == HAP_OP_TRANSPOSE ||
         op == HAP_OP_PERMUTE || op == HAP_OP_NARROW || op == HAP_OP_CLS_SELECT;
}

/* Unary parameters: exponent, or dropout's p, scale, seed and global positions. */
static void unary_params(const hap_kernel_call *c, hap_kx_pass *x) {
  x->sub = unary_sub(c->op);
  if (c->op == HAP_OP_POW)
    x->p0 = k_attr_f(c->io, HAP_OP_POW, "exponent");
  if (c->op == HAP_OP_DROPOUT) {
    double p = k_attr_f(c->io, HAP_OP_DROPOUT, "p");
    x->p0 = p;
    x->scale = (float)(1 / (1 - p));
    x->seed = c->seed;
    k_gpos g;
    k_gpos_of_input(c, 0, &g);
    x->inner = g.inner;
    x->len = g.len;
    x->full_len = g.full_len;
    x->gpos_off = g.off;
    x->gpos_base = g.base;
  }
}

/* Broadcast strides and the zero/scalar flags of add/sub/mul/div. */
static void binary_params(const hap_kernel_call *c, hap_kx_pass *x) {
  const hap_op_io *io = c->io;
  x->sub = binary_sub(c->op);
  set_dims(x, &io->out[0]);
  k_bcast_strides(&io->in[0], &io->out[0], x->sa);
  x->a = HAP_KX_IN;
  if (k_once_zero(c, 0))
    x->flags |= HAP_KX_ZA;
  if (io->n_in > 1) {
    k_bcast_strides(&io->in[1], &io->out[0], x->sb);
    x->b = HAP_KX_IN + 1;
    if (k_once_zero(c, 1))
      x->flags |= HAP_KX_ZB;
  } else {
    x->flags |= HAP_KX_SCALAR;
    x->p0 = k_scalar_zero(c) ? 0.0f : (float)k_attr_f(io, c->op, "scalar");
  }
}

static void rows_params(const hap_kernel_call *c, hap_kx_pass *x) {
  k_rows r = k_rows_of(c);
  x->count = r.outer * r.inner;
  x->len = r.len;
  x->inner = r.inner > 0 ? r.inner : 1;
  x->sub = c->op == HAP_OP_LOG_SOFTMAX;
}

static void reduce_params(const hap_kernel_call *c, hap_kx_pass *x) {
  set_dims(x, &c->io->in[0]);
  k_reduce_plan(c, x->sa, &x->scale);
}

static void embed_params(const hap_kernel_call *c, hap_kx_pass *x, int64_t v_full) {
  const hap_op_io *io = c->io;
  x->a = HAP_KX_IN;
  x->sub = hap_dtype_size(io->in_dtype[0]);
  x->inner = io->in[1].dims[1];
  x->hi = v_full;
  x->rows = io->in[1].dims[0];
  if (k_flag(c, HAP_VARIANT_LOCAL_ROWS)) {
    x->flags |= HAP_KX_LOCAL;
    x->off = c->shard->offset;
  }
}

static int64_t embed_vocab(const hap_kernel_call *c) {
  return k_flag(c, HAP_VARIANT_LOCAL_ROWS) ? c->shard->full->in[1].dims[0] : c->io->in[1].dims[0];
}

static void loss_params(const hap_kernel_call *c, const loss_dims *d, hap_kx_pass *x) {
  x->a = HAP_KX_IN;
  x->b = HAP_KX_IN + 1;
  x->sub = hap_dtype_size(c->io->in_dtype[1]);
  x->len = d->classes;
  x->inner = d->inner > 0 ? d->inner : 1;
  x->div = d->count;
  if (c->op == HAP_OP_CROSS_ENTROPY)
    x->flags |= HAP_KX_CE;
}

static hap_status layout_fwd(const hap_kernel_call *c, hap_kx_prog *p, hap_err *err) {
  int32_t es = hap_dtype_size(c->io->in_dtype[0]);
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return hap_err_set(err, HAP_EUNSUPPORTED, "op '%s': no CUDA kernel for %d-byte elements",
                       hap_op_name(c->op), es);
  k_gather g;
  k_gather_plan(c, &g);
  int64_t n = k_numel(&c->io->out[0]);
  hap_kx_pass *x = add(p, g.flat ? HAP_KX_COPY : HAP_KX_GATHER_F, g.flat ? n * es : n);
  x->a = HAP_KX_IN;
  x->c = HAP_KX_OUT;
  x->sub = es;
  if (!g.flat) {
    set_dims(x, &c->io->out[0]);
    memcpy(x->sa, g.st, sizeof g.st);
    x->base = g.base;
  }
  return HAP_OK;
}

hap_status hap_kx_build_forward(const hap_kernel_call *c, void *const *out, hap_kx_prog *p,
                                hap_err *err) {
  memset(p, 0, sizeof *p);
  HAP_TRY(hap_kernel_check_forward(c, out, err));
  HAP_TRY(hap_kx_supported(c->op, err));
  const hap_op_io *io = c->io;
  p->op = c->op;
  hap_op op = c->op;
  if (op == HAP_OP_LINEAR) {
    lin_dims d = k_linear_dims(io);
    gemm(p, false, true, d.m, d.n, d.k, HAP_KX_IN, d.k, HAP_KX_IN + 1, d.k, HAP_KX_OUT, d.n, 0.0f);
    if (io->n_in > 2 && !k_once_zero(c, 2)) {
      hap_kx_pass *x = add(p, HAP_KX_ROW_BIAS, d.m * d.n);
      x->a = HAP_KX_IN + 2;
      x->c = HAP_KX_OUT;
      x->n = d.n;
    }
  } else if (op == HAP_OP_MATMUL || op == HAP_OP_BMM) {
    mm_plan mp;
    k_mm_plan_of(io, &mp);
    hap_kx_pass *x = gemm(p, false, false, mp.m, mp.n, mp.k, HAP_KX_IN, mp.k, HAP_KX_IN + 1, mp.n,
                          HAP_KX_OUT, mp.n, 0.0f);
    gemm_batches(x, &mp, SEL_A, mp.m * mp.k, SEL_B, mp.k * mp.n, SEL_T, mp.m * mp.n);
  } else if (is_unary(op)) {
    hap_kx_pass *x = add(p, HAP_KX_UNARY_F, k_numel(&io->in[0]));
    x->a = HAP_KX_IN;
    x->c = HAP_KX_OUT;
    unary_params(c, x);
  } else if (is_binary(op)) {
    hap_kx_pass *x = add(p, HAP_KX_BINARY_F, k_numel(&io->out[0]));
    binary_params(c, x);
    x->c = HAP_KX_OUT;
  } else if (op == HAP_OP_SOFTMAX || op == HAP_OP_LOG_SOFTMAX) {
    hap_kx_pass *x = add(p, HAP_KX_SOFTMAX_F, 0);
    rows_params(c, x);
    x->a = HAP_KX_IN;
    x->c = HAP_KX_OUT;
  } else if (op == HAP_OP_SUM || op == HAP_OP_MEAN) {
    int64_t no = k_numel(&io->out[0]);
    zero(p, no);
    hap_kx_pass *x = add(p, HAP_KX_REDUCE_F, k_numel(&io->in[0]));
    reduce_params(c, x);
    x->a = HAP_KX_IN;
    scratch_out(p, HAP_KX_OUT, 0, no, false);
    p->pass[p->n - 1].scale = x->scale;
  } else if (is_layout(op)) {
    HAP_TRY(layout_fwd(c, p, err));
  } else if (op == HAP_OP_CLS_APPEND) {
    const hap_shape *xs = &io->in[0];
    hap_kx_pass *x = add(p, HAP_KX_CLS_F, k_numel(&io->out[0]));
    x->a = HAP_KX_IN;
    x->b = HAP_KX_IN + 1;
    x->c = HAP_KX_OUT;
    x->n = xs->dims[2];
    x->len = xs->dims[1];
    if (k_once_zero(c, 1))
      x->flags |= HAP_KX_ZB;
    if (k_attr_i(io, HAP_OP_CLS_APPEND, "first") != 0)
      x->flags |= HAP_KX_FIRST;
  } else if (op == HAP_OP_EMBEDDING) {
    int64_t v_full = embed_vocab(c);
    index_check(p, c, 0, v_full);
    hap_kx_pass *x = add(p, HAP_KX_EMBED_F, k_numel(&io->out[0]));
    embed_params(c, x, v_full);
    x->b = HAP_KX_IN + 1;
    x->c = HAP_KX_OUT;
    if (x->inner == 0)
      x->count = 0;
  } else if (op == HAP_OP_LAYER_NORM) {
    ln_dims d = k_ln_dims_of(io);
    hap_kx_pass *x = add(p, HAP_KX_LN_F, d.rows);
    x->a = HAP_KX_IN;
    x->c = HAP_KX_OUT;
    x->inner = d.inner;
    x->p0 = d.eps;
    if (io->n_in > 1) {
      x->flags |= HAP_KX_HAS_W;
      x->b = HAP_KX_IN + 1;
    }
    if (io->n_in > 2) {
      x->flags |= HAP_KX_HAS_B;
      x->d = HAP_KX_IN + 2;
    }
  } else { /* nll_loss, cross_entropy */
    loss_dims d = k_loss_dims_of(c);
    index_check(p, c, 1, d.classes);
    zero(p, 1);
    hap_kx_pass *x = add(p, HAP_KX_LOSS_F, d.n * d.inner);
    loss_params(c, &d, x);
    scratch_out(p, HAP_KX_OUT, 0, 1, false);
    p->pass[p->n - 1].div = d.count;
  }
  return HAP_OK;
}

hap_status hap_kx_build_backward(const hap_kernel_call *c, const float *const *dout,
                                 float *const *din, hap_kx_prog *p, bool *needed, hap_err *err) {
  memset(p, 0, sizeof *p);
  *needed = false;
  HAP_TRY(hap_kernel_check_backward(c, dout, din, needed, err));
  if (*needed)
    HAP_TRY(hap_kx_supported(c->op, err));
  if (!*needed)
    return HAP_OK;
  const hap_op_io *io = c->io;
  p->op = c->op;
  hap_op op = c->op;
  const bool *want = io->in_grad;
  if (op == HAP_OP_LINEAR) {
    lin_dims d = k_linear_dims(io);
    if (want[0]) /* dx [m, k] += g [m, n] W [n, k] */
      gemm(p, false, false, d.m, d.k, d.n, HAP_KX_DOUT, d.n, HAP_KX_IN + 1, d.k, HAP_KX_DIN, d.k,
           1.0f);
    if (want[1]) /* dW [n, k] += g^T [n, m] x [m, k] */
      gemm(p, true, false, d.n, d.k, d.m, HAP_KX_DOUT, d.n, HAP_KX_IN, d.k, HAP_KX_DIN + 1, d.k,
           1.0f);
    if (io->n_in > 2 && want[2] && !k_once_zero(c, 2)) {
      zero(p, d.n);
      hap_kx_pass *x = add(p, HAP_KX_COL_SUM, d.m * d.n);
      x->g = HAP_KX_DOUT;
      x->n = d.n > 0 ? d.n : 1;
      scratch_out(p, HAP_KX_DIN + 2, 0, d.n, true);
    }
  } else if (op == HAP_OP_MATMUL || op == HAP_OP_BMM) {
    mm_plan mp;
    k_mm_plan_of(io, &mp);
    if (want[0]) { /* da [m, k] += g [m, n] b^T */
      hap_kx_pass *x = gemm(p, false, true, mp.m, mp.k, mp.n, HAP_KX_DOUT, mp.n, HAP_KX_IN + 1,
                            mp.n, HAP_KX_DIN, mp.k, 1.0f);
      gemm_batches(x, &mp, SEL_T, mp.m * mp.n, SEL_B, mp.k * mp.n, SEL_A, mp.m * mp.k);
    }
    if (want[1]) { /* db [k, n] += a^T g */
      hap_kx_pass *x = gemm(p, true, false, mp.k, mp.n, mp.m, HAP_KX_IN, mp.k, HAP_KX_DOUT, mp.n,
                            HAP_KX_DIN + 1, mp.n, 1.0f);
      gemm_batches(x, &mp, SEL_A, mp.m * mp.k, SEL_T, mp.m * mp.n, SEL_B, mp.k * mp.n);
    }
  } else if (is_unary(op)) {
    hap_kx_pass *x = add(p, HAP_KX_UNARY_B, k_numel(&io->in[0]));
    x->a = HAP_KX_IN;
    x->b = HAP_KX_OUT;
    x->g = HAP_KX_DOUT;
    x->d = HAP_KX_DIN;
    unary_params(c, x);
  } else if (is_binary(op)) {
    bool wa = want[0] && !k_once_zero(c, 0);
    bool wb = io->n_in > 1 && want[1] && !k_once_zero(c, 1);
    if (!wa && !wb) {
      *needed = false;
      return HAP_OK;
    }
    int64_t na = k_numel(&io->in[0]), nb = io->n_in > 1 ? k_numel(&io->in[1]) : 0;
    zero(p, na + nb);
    hap_kx_pass *x = add(p, HAP_KX_BINARY_B, k_numel(&io->out[0]));
    binary_params(c, x);
    x->g = HAP_KX_DOUT;
    x->off = na;
    x->flags |= (wa ? HAP_KX_WANT_A : 0) | (wb ? HAP_KX_WANT_B : 0);
    if (wa)
      scratch_out(p, HAP_KX_DIN, 0, na, true);
    if (wb)
      scratch_out(p, HAP_KX_DIN + 1, na, nb, true);
  } else if (op == HAP_OP_SOFTMAX || op == HAP_OP_LOG_SOFTMAX) {
    hap_kx_pass *x = add(p, HAP_KX_SOFTMAX_B, 0);
    rows_params(c, x);
    x->b = HAP_KX_OUT;
    x->g = HAP_KX_DOUT;
    x->d = HAP_KX_DIN;
  } else if (op == HAP_OP_SUM || op == HAP_OP_MEAN) {
    hap_kx_pass *x = add(p, HAP_KX_REDUCE_B, k_numel(&io->in[0]));
    reduce_params(c, x);
    x->g = HAP_KX_DOUT;
    x->d = HAP_KX_DIN;
  } else if (is_layout(op)) {
    k_gather g;
    k_gather_plan(c, &g);
    hap_kx_pass *x = add(p, g.flat ? HAP_KX_ADD : HAP_KX_GATHER_B, k_numel(&io->out[0]));
    x->g = HAP_KX_DOUT;
    x->d = HAP_KX_DIN;
    if (!g.flat) {
      set_dims(x, &io->out[0]);
      memcpy(x->sa, g.st, sizeof g.st);
      x->base = g.base;
    }
  } else if (op == HAP_OP_CLS_APPEND) {
    const hap_shape *xs = &io->in[0];
    int64_t nb = xs->dims[0], sl = xs->dims[1], h = xs->dims[2];
    bool first = k_attr_i(io, HAP_OP_CLS_APPEND, "first") != 0;
    if (want[0]) {
      hap_kx_pass *x = add(p, HAP_KX_CLS_B, nb * sl * h);
      x->g = HAP_KX_DOUT;
      x->d = HAP_KX_DIN;
      x->n = h;
      x->len = sl;
      x->flags |= first ? HAP_KX_FIRST : 0;
    }
    if (want[1] && !k_once_zero(c, 1)) {
      zero(p, h);
      hap_kx_pass *x = add(p, HAP_KX_CLS_SUM, nb * h);
      x->g = HAP_KX_DOUT;
      x->n = h > 0 ? h : 1;
      x->len = sl;
      x->flags |= first ? HAP_KX_FIRST : 0;
      scratch_out(p, HAP_KX_DIN + 1, 0, h, true);
    }
  } else if (op == HAP_OP_EMBEDDING) {
    if (!want[1]) {
      *needed = false;
      return HAP_OK;
    }
    int64_t v_full = embed_vocab(c);
    index_check(p, c, 0, v_full);
    hap_kx_pass *x = add(p, HAP_KX_EMBED_B, k_numel(&io->out[0]));
    embed_params(c, x, v_full);
    x->g = HAP_KX_DOUT;
    x->d = HAP_KX_DIN + 1;
    if (x->inner == 0)
      x->count = 0;
  } else if (op == HAP_OP_LAYER_NORM) {
    ln_dims d = k_ln_dims_of(io);
    zero(p, 2 * d.inner);
    hap_kx_pass *x = add(p, HAP_KX_LN_B, d.rows);
    x->a = HAP_KX_IN;
    x->g = HAP_KX_DOUT;
    x->inner = d.inner;
    x->p0 = d.eps;
    if (want[0]) {
      x->flags |= HAP_KX_WANT_A;
      x->d = HAP_KX_DIN;
    }
    if (io->n_in > 1) {
      x->flags |= HAP_KX_HAS_W;
      x->b = HAP_KX_IN + 1;
    }
    if (io->n_in > 1 && want[1])
      scratch_out(p, HAP_KX_DIN + 1, 0, d.inner, true);
    if (io->n_in > 2 && want[2])
      scratch_out(p, HAP_KX_DIN + 2, d.inner, d.inner, true);
  } else { /* nll_loss, cross_entropy */
    loss_dims d = k_loss_dims_of(c);
    index_check(p, c, 1, d.classes);
    hap_kx_pass *x = add(p, HAP_KX_LOSS_B, d.n * d.inner);
    loss_params(c, &d, x);
    x->g = HAP_KX_DOUT;
    x->d = HAP_KX_DIN;
  }
  return HAP_OK;
}

/* ---- running --------------------------------------------------------------------------------- */

void hap_kx_slots(const hap_kernel_call *c, void *const *out, const float *const *dout,
                  float *const *din, void **slots) {
  memset(slots, 0, HAP_KX_SLOTS * sizeof *slots);
  const hap_op_io *io = c->io;
  for (int i = 0; i < io->n_in && i < HAP_MAX_OP_INPUTS; i++) {
    slots[HAP_KX_IN + i] = (void *)c->in[i];
    slots[HAP_KX_DIN + i] = din != NULL ? din[i] : NULL;
  }
  for (int o = 0; o < io->n_out && o < HAP_MAX_OP_OUTPUTS; o++) {
    slots[HAP_KX_OUT + o] = out != NULL ? out[o] : c->out != NULL ? (void *)c->out[o] : NULL;
    slots[HAP_KX_DOUT + o] = dout != NULL ? (void *)dout[o] : NULL;
  }
}

void hap_kx_gemm_offsets(const hap_kx_pass *p, int64_t t, int64_t *ia, int64_t *ib) {
  *ia = *ib = 0;
  for (int d = p->rank - 1; d >= 0; d--) {
    int64_t i = t % p->dims[d];
    t /= p->dims[d];
    *ia += i * p->sa[d];
    *ib += i * p->sb[d];
  }
}

hap_status hap_kx_index_error(const hap_kx_prog *p, int64_t pos, int64_t value, hap_err *err) {
  if (p->op == HAP_OP_EMBEDDING)
    return hap_err_set(err, HAP_EINVAL, "embedding: index %lld at position %lld, expected 0..%lld",
                       (long long)value, (long long)pos, (long long)(p->index_hi - 1));
  return hap_err_set(err, HAP_EINVAL, "%s: target %lld at position %lld, expected 0..%lld",
                     hap_op_name(p->op), (long long)value, (long long)pos,
                     (long long)(p->index_hi - 1));
}

static int64_t sel_of(int32_t sel, int64_t t, int64_t ia, int64_t ib) {
  return sel == SEL_A ? ia : sel == SEL_B ? ib : t;
}

void hap_kx_gemm_operands(const hap_kx_pass *p, int64_t t, int64_t off[3]) {
  int64_t ia, ib;
  hap_kx_gemm_offsets(p, t, &ia, &ib);
  off[0] = sel_of(p->a_sel, t, ia, ib) * p->a_st;
  off[1] = sel_of(p->b_sel, t, ia, ib) * p->b_st;
  off[2] = sel_of(p->c_sel, t, ia, ib) * p->c_st;
}

int64_t hap_kx_gemm_run(const hap_kx_pass *p, int64_t stride[3]) {
  stride[0] = stride[1] = stride[2] = 0;
  int64_t inner = p->rank > 0 ? p->dims[p->rank - 1] : p->batches;
  if (p->batches <= 1 || inner <= 1 || p->batches % inner != 0) /* no batches: a 0 in dims */
    return 1;
  int64_t o0[3], o1[3];
  hap_kx_gemm_operands(p, 0, o0);
  hap_kx_gemm_operands(p, 1, o1);
  for (int i = 0; i < 3; i++)
    stride[i] = o1[i] - o0[i];
  int64_t c_span = (p->m - 1) * p->ldc + p->n; /* elements one batch's C covers */
  return p->m > 0 && p->n > 0 && stride[2] >= c_span && stride[0] >= 0 && stride[1] >= 0 ? inner
                                                                                         : 1;
}

void hap_kx_gemm_spans(const hap_kx_pass *p, int64_t run, const int64_t stride[3],
                       int64_t span[2]) {
  int64_t rows_a = p->ta ? p->k : p->m, cols_a = p->ta ? p->m : p->k;
  int64_t rows_b = p->tb ? p->n : p->k, cols_b = p->tb ? p->k : p->n;
  span[0] = (run - 1) * stride[0] + (rows_a - 1) * p->lda + cols_a;
  span[1] = (run - 1) * stride[1] + (rows_b - 1) * p->ldb + cols_b;
}

bool hap_kx_gemm_dtype_ok(hap_dtype gemm) {
  return gemm == HAP_F32 || gemm == HAP_F16 || gemm == HAP_BF16;
}

/* n floats from src, rounded to `to`, into *buf (grown to *cap floats). */
static const float *rounded_copy(const float *src, int64_t n, hap_dtype to, float **buf,
                                 int64_t *cap, hap_err *err) {
  if (n > *cap || *buf == NULL) {
    float *nb = realloc(*buf, (size_t)(n > 0 ? n : 1) * sizeof *nb);
    if (nb == NULL) {
      hap_err_set(err, HAP_ENOMEM, "kx: out of memory for a %lld-element GEMM operand",
                  (long long)n);
      return NULL;
    }
    *buf = nb;
    *cap = n;
  }
  if (n > 0 && src != NULL)
    memcpy(*buf, src, (size_t)n * sizeof *src);
  hap_round_array(to, *buf, n);
  return *buf;
}

/* The GPU executor's walk (kernels_run.c), one k_sgemm per batch of each run. A half `gemm`
 * multiplies copies of a run's operand spans rounded to that format, as the GPU's conversion
 * before cublasGemmStridedBatchedEx does. */
static hap_status host_gemm(const hap_kx_pass *x, void **s, hap_dtype gemm, hap_err *err) {
  int64_t stride[3];
  int64_t run = hap_kx_gemm_run(x, stride);
  bool half = gemm != HAP_F32 && x->m > 0 && x->n > 0 && x->k > 0;
  float *buf[2] = {NULL, NULL};
  int64_t cap[2] = {0, 0};
  hap_status st = HAP_OK;
  for (int64_t t = 0; t < x->batches && st == HAP_OK; t += run) {
    int64_t off[3];
    hap_kx_gemm_operands(x, t, off);
    const float *a0 = (const float *)s[x->a] + off[0];
    const float *b0 = (const float *)s[x->b] + off[1];
    if (half) {
      int64_t span[2];
      hap_kx_gemm_spans(x, run, stride, span);
      if ((a0 = rounded_copy(a0, span[0], gemm, &buf[0], &cap[0], err)) == NULL ||
          (b0 = rounded_copy(b0, span[1], gemm, &buf[1], &cap[1], err)) == NULL)
        st = HAP_ENOMEM;
    }
    for (int64_t j = 0; j < run && st == HAP_OK; j++) {
      float *c = (float *)s[x->c] + off[2] + j * stride[2];
      k_sgemm(x->ta, x->tb, x->m, x->n, x->k, x->alpha, a0 + j * stride[0], x->lda,
              b0 + j * stride[1], x->ldb, x->beta, c, x->ldc);
    }
  }
  free(buf[0]);
  free(buf[1]);
  return st;
}

hap_status hap_kx_run_host(const hap_kx_prog *p, void **slots, hap_dtype gemm, hap_err *err) {
  if (!hap_kx_gemm_dtype_ok(gemm))
    return hap_err_set(err, HAP_EINVAL, "kx: GEMMs in %s, expected float32, float16 or bfloat16",
                       hap_dtype_name(gemm));
  double *scratch = k_calloc((size_t)p->scratch, sizeof(double), err);
  if (scratch == NULL)
    return HAP_ENOMEM;
  int64_t flag = INT64_MAX;
  slots[HAP_KX_SCRATCH] = scratch;
  slots[HAP_KX_FLAG] = &flag;
  hap_status st = HAP_OK;
  for (int32_t k = 0; k < p->n && st == HAP_OK; k++) {
    const hap_kx_pass *x = &p->pass[k];
    if (x->kind == HAP_KX_GEMM) {
      st = host_gemm(x, slots, gemm, err);
      continue;
    }
    for (int64_t i = 0; i < x->count; i++)
      hap_kx_body(x, slots, i);
  }
  if (st == HAP_OK && p->uses_flag && flag != INT64_MAX)
    st = hap_kx_index_error(p, flag, kx_index(slots[p->index_slot], p->index_bytes, flag), err);
  slots[HAP_KX_SCRATCH] = NULL;
  slots[HAP_KX_FLAG] = NULL;
  free(scratch);
  return st;
}

hap_status hap_kx_forward_host(const hap_kernel_call *c, void *const *out, hap_dtype gemm,
                               hap_err *err) {
  hap_kx_prog p;
  HAP_TRY(hap_kx_build_forward(c, out, &p, err));
  void *slots[HAP_KX_SLOTS];
  hap_kx_slots(c, out, NULL, NULL, slots);
  return hap_kx_run_host(&p, slots, gemm, err);
}

hap_status hap_kx_backward_host(const hap_kernel_call *c, const float *const *dout,
                                float *const *din, hap_dtype gemm, hap_err *err) {
  hap_kx_prog p;
  bool needed = false;
  HAP_TRY(hap_kx_build_backward(c, dout, din, &p, &needed, err));
  if (!needed)
    return HAP_OK;
  void *slots[HAP_KX_SLOTS];
  hap_kx_slots(c, NULL, dout, din, slots);
  return hap_kx_run_host(&p, slots, gemm, err);
}
