/* kernels.c — the kernel entry points (kernels.h): validation of a call, dispatch by op, and the
 * helpers every kernel file shares (shapes, flags, global positions, state, GEMM). */
#include "kernels/kernels.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"
#include "kern_math.h"

/* ---- shapes ---------------------------------------------------------------------------------- */

int64_t k_numel(const hap_shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++)
    n *= s->dims[i];
  return n;
}

void k_strides(const hap_shape *s, int64_t *st) {
  int64_t acc = 1;
  for (int i = s->rank - 1; i >= 0; i--) {
    st[i] = acc;
    acc *= s->dims[i];
  }
}

int64_t k_prod(const hap_shape *s, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++)
    n *= s->dims[i];
  return n;
}

void k_bcast_strides(const hap_shape *x, const hap_shape *out, int64_t *st) {
  int64_t xs[HAP_MAX_DIMS];
  k_strides(x, xs);
  for (int d = 0; d < out->rank; d++) {
    int xd = d - (out->rank - x->rank);
    st[d] = xd >= 0 && x->dims[xd] == out->dims[d] && x->dims[xd] != 1 ? xs[xd] : 0;
  }
}

int k_norm_dim(int64_t d, int rank) { return (int)(d < 0 ? d + rank : d); }

/* ---- attributes and flags -------------------------------------------------------------------- */

int64_t k_attr_i(const hap_op_io *io, hap_op op, const char *name) {
  return hap_attr_i(io->attrs, hap_op_attr_index(op, name));
}
double k_attr_f(const hap_op_io *io, hap_op op, const char *name) {
  return hap_attr_f(io->attrs, hap_op_attr_index(op, name));
}
const hap_attr_value *k_attr(const hap_op_io *io, hap_op op, const char *name) {
  return &io->attrs->v[hap_op_attr_index(op, name)];
}

bool k_flag(const hap_kernel_call *c, unsigned flag) {
  return c->shard != NULL && (c->shard->variant->flags & flag) != 0;
}

bool k_once_zero(const hap_kernel_call *c, int input) {
  return k_flag(c, HAP_VARIANT_BIAS_ONCE) && c->shard->rank != 0 &&
         (c->shard->variant->once & (1u << input)) != 0;
}

bool k_scalar_zero(const hap_kernel_call *c) {
  return c->io->n_in == 1 && (c->op == HAP_OP_ADD || c->op == HAP_OP_SUB) &&
         k_flag(c, HAP_VARIANT_BIAS_ONCE) && c->shard->rank != 0;
}

void k_gpos_of_input(const hap_kernel_call *c, int input, k_gpos *g) {
  const hap_shape *x = &c->io->in[input];
  const hap_shape *full = c->shard != NULL ? &c->shard->full->in[input] : x;
  int64_t base = c->replica > 0 ? c->replica * k_prod(full, 0, full->rank) : 0;
  *g = (k_gpos){.inner = 1, .len = 1, .full_len = 1, .off = 0, .base = base};
  if (c->shard == NULL)
    return;
  hap_layout d = c->shard->variant->in[input];
  if (d < 0 || d >= x->rank)
    return;
  g->inner = k_prod(x, d + 1, x->rank);
  g->len = x->dims[d];
  g->full_len = c->shard->full->in[input].dims[d];
  g->off = c->shard->offset;
  if (g->inner == 0 || g->len == 0) /* empty: no element asks */
    *g = (k_gpos){.inner = 1, .len = 1, .full_len = 1, .off = 0, .base = base};
}

/* ---- dropout generator ----------------------------------------------------------------------- */

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

#define KEEP_KEY  0x6a09e667f3bcc909ULL
#define KEEP_STEP 0x9e3779b97f4a7c15ULL

bool hap_kernel_keep(uint64_t seed, int64_t pos, double p) {
  if (p <= 0)
    return true;
  uint64_t z = mix64(mix64(seed ^ KEEP_KEY) + ((uint64_t)pos + 1) * KEEP_STEP);
  double u = (double)(z >> 11) * 0x1.0p-53; /* uniform in [0, 1) */
  return u >= p;
}

/* The 53-bit draw z >> 11 keeps its element iff it is at least this: u = draw * 2^-53 >= p
 * exactly when draw >= ceil(p * 2^53) (p * 2^53 is exact). NaN or p >= 1 keep nothing. */
static uint64_t keep_threshold(double p) {
  if (p <= 0)
    return 0;
  if (!(p < 1))
    return (uint64_t)1 << 53;
  return (uint64_t)ceil(p * 0x1.0p53);
}

/* hap_kernel_keep's decisions for positions pos0 .. pos0 + n - 1, one multiply-xorshift hash per
 * element and no branch: the loop vectorises. */
K_VECTOR_CLONES void k_dropout_run(uint64_t seed, double p, int64_t pos0, const float *x,
                                   float scale, float *y, int64_t n, bool accumulate) {
  uint64_t at = mix64(seed ^ KEEP_KEY) + ((uint64_t)pos0 + 1) * KEEP_STEP;
  uint64_t t = keep_threshold(p);
  if (accumulate)
    for (int64_t i = 0; i < n; i++) {
      float v = x[i] * scale;
      y[i] += mix64(at + (uint64_t)i * KEEP_STEP) >> 11 >= t ? v : 0.0f;
    }
  else
    for (int64_t i = 0; i < n; i++) {
      float v = x[i] * scale;
      y[i] = mix64(at + (uint64_t)i * KEEP_STEP) >> 11 >= t ? v : 0.0f;
    }
}

void k_dropout_gpos(const k_gpos *g, uint64_t seed, double p, const float *x, float scale, float *y,
                    int64_t n, bool accumulate) {
  /* Local elements [outer * inner * len, (outer + 1) * inner * len) have consecutive global
   * positions; all of them do when the dim is whole. */
  int64_t run = g->len == g->full_len && g->off == 0 ? n : g->inner * g->len;
  if (run < 1)
    run = 1;
  for (int64_t f = 0; f < n; f += run) {
    int64_t m = n - f < run ? n - f : run;
    k_dropout_run(seed, p, k_gpos_at(g, f), x + f, scale, y + f, m, accumulate);
  }
}

void hap_kernel_sgd(float *w, const float *g, float lr, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    w[i] -= lr * g[i];
}

/* ---- memory, state and BLAS ------------------------------------------------------------------ */

void *k_calloc(size_t n, size_t size, hap_err *err) {
  void *p = calloc(n > 0 ? n : 1, size);
  if (p == NULL)
    hap_err_set(err, HAP_ENOMEM, "kernels: out of memory allocating %zu x %zu bytes", n, size);
  return p;
}

void *k_malloc(size_t n, size_t size, hap_err *err) {
  void *p = malloc((n > 0 ? n : 1) * size);
  if (p == NULL)
    hap_err_set(err, HAP_ENOMEM, "kernels: out of memory allocating %zu x %zu bytes", n, size);
  return p;
}

hap_status k_state_begin(hap_kernel_state *st, hap_op op, size_t n_bytes, bool zeroed, void **data,
                         hap_err *err) {
  void *p = zeroed ? k_calloc(n_bytes, 1, err) : k_malloc(n_bytes, 1, err);
  if (p == NULL)
    return HAP_ENOMEM;
  if (st != NULL) {
    hap_kernel_state_free(st);
    st->op = op;
    st->n_bytes = n_bytes;
    st->data = p;
  }
  *data = p;
  return HAP_OK;
}

void k_state_end(const hap_kernel_state *st, void *data) {
  if (st == NULL)
    free(data);
}

void hap_kernel_state_free(hap_kernel_state *s) {
  if (s == NULL)
    return;
  free(s->data);
  s->data = NULL;
  s->n_bytes = 0;
}

void k_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
             int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m <= 0 || n <= 0)
    return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++)
        c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  if (beta == 0) { /* OpenBLAS clears C with a slower pass of its own before adding to it */
    if (ldc == n)
      memset(c, 0, (size_t)(m * n) * sizeof(float));
    else
      for (int64_t i = 0; i < m; i++)
        memset(c + i * ldc, 0, (size_t)n * sizeof(float));
    beta = 1;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m,
              (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

void k_fill_rows(float *y, int64_t m, int64_t n, const float *b) {
  for (int64_t i = 0; i < m && n > 0; i++)
    memcpy(y + i * n, b, (size_t)n * sizeof(float));
}

/* ---- dispatch -------------------------------------------------------------------------------- */

typedef struct k_entry {
  k_fwd_fn fwd;
  k_bwd_fn bwd;
  /* bwd honours hap_kernel_call.fresh_din on every input: it writes all of a fresh din[i]
   * (clearing it itself on paths that only add), and inputs sharing a buffer are written in
   * index order (the lowest, fresh, first) */
  bool fresh;
} k_entry;

static const k_entry table[HAP_OP_COUNT] = {
    [HAP_OP_LINEAR] = {k_linear_fwd, k_linear_bwd, true},
    [HAP_OP_MATMUL] = {k_matmul_fwd, k_matmul_bwd},
    [HAP_OP_BMM] = {k_matmul_fwd, k_matmul_bwd},
    [HAP_OP_EINSUM] = {k_einsum_fwd, k_einsum_bwd},
    [HAP_OP_CONV2D] = {k_conv2d_fwd, k_conv2d_bwd},
    [HAP_OP_MAX_POOL2D] = {k_max_pool2d_fwd, k_max_pool2d_bwd},
    [HAP_OP_ADAPTIVE_AVG_POOL2D] = {k_avg_pool_fwd, k_avg_pool_bwd},
    [HAP_OP_EMBEDDING] = {k_embedding_fwd, k_embedding_bwd},
    [HAP_OP_LAYER_NORM] = {k_layer_norm_fwd, k_layer_norm_bwd, true},
    [HAP_OP_MULTI_HEAD_ATTENTION] = {k_mha_fwd, k_mha_bwd, true},
    [HAP_OP_RELU] = {k_unary_fwd, k_unary_bwd, true},
    [HAP_OP_GELU] = {k_unary_fwd, k_unary_bwd, true},
    [HAP_OP_SIGMOID] = {k_unary_fwd, k_unary_bwd, true},
    [HAP_OP_TANH] = {k_unary_fwd, k_unary_bwd, true},
    [HAP_OP_RSQRT] = {k_unary_fwd, k_unary_bwd, true},
    [HAP_OP_POW] = {k_unary_fwd, k_unary_bwd, true},
    [HAP_OP_DROPOUT] = {k_unary_fwd, k_unary_bwd, true},
    [HAP_OP_ADD] = {k_binary_fwd, k_binary_bwd, true},
    [HAP_OP_SUB] = {k_binary_fwd, k_binary_bwd, true},
    [HAP_OP_MUL] = {k_binary_fwd, k_binary_bwd, true},
    [HAP_OP_DIV] = {k_binary_fwd, k_binary_bwd, true},
    [HAP_OP_SOFTMAX] = {k_softmax_fwd, k_softmax_bwd},
    [HAP_OP_LOG_SOFTMAX] = {k_softmax_fwd, k_softmax_bwd},
    [HAP_OP_SUM] = {k_reduce_fwd, k_reduce_bwd},
    [HAP_OP_MEAN] = {k_reduce_fwd, k_reduce_bwd},
    [HAP_OP_RESHAPE] = {k_layout_fwd, k_layout_bwd, true},
    [HAP_OP_FLATTEN] = {k_layout_fwd, k_layout_bwd, true},
    [HAP_OP_TRANSPOSE] = {k_layout_fwd, k_layout_bwd, true},
    [HAP_OP_PERMUTE] = {k_layout_fwd, k_layout_bwd, true},
    [HAP_OP_NARROW] = {k_layout_fwd, k_layout_bwd, true},
    [HAP_OP_CLS_APPEND] = {k_cls_append_fwd, k_cls_append_bwd, true},
    [HAP_OP_CLS_SELECT] = {k_layout_fwd, k_layout_bwd, true},
    [HAP_OP_TOP2_GATING] = {k_top2_fwd, k_top2_bwd},
    [HAP_OP_NLL_LOSS] = {k_loss_fwd, k_loss_bwd},
    [HAP_OP_CROSS_ENTROPY] = {k_loss_fwd, k_loss_bwd},
};

hap_status k_state_for_backward(const hap_kernel_call *c, const hap_kernel_state *given,
                                size_t n_bytes, hap_kernel_state *tmp, void **data, hap_err *err) {
  memset(tmp, 0, sizeof *tmp);
  if (given != NULL && given->op == c->op && given->n_bytes == n_bytes && given->data != NULL) {
    *data = given->data;
    return HAP_OK;
  }
  const hap_op_io *io = c->io;
  void *outs[HAP_MAX_OP_OUTPUTS] = {NULL};
  hap_status st = HAP_OK;
  for (int o = 0; o < io->n_out && st == HAP_OK; o++) {
    outs[o] = k_calloc((size_t)k_numel(&io->out[o]), (size_t)hap_dtype_size(io->out_dtype[o]), err);
    if (outs[o] == NULL)
      st = HAP_ENOMEM;
  }
  if (st == HAP_OK)
    st = table[c->op].fwd(c, outs, tmp, err);
  for (int o = 0; o < io->n_out; o++)
    free(outs[o]);
  if (st == HAP_OK && tmp->n_bytes != n_bytes)
    st = hap_err_set(err, HAP_EINVAL, "%s: recomputed state has %zu bytes, expected %zu",
                     hap_op_name(c->op), tmp->n_bytes, n_bytes);
  if (st != HAP_OK) {
    hap_kernel_state_free(tmp);
    return st;
  }
  *data = tmp->data;
  return HAP_OK;
}

/* ---- validation ------------------------------------------------------------------------------ */

static bool is_index_input(hap_op op, int i) {
  return (op == HAP_OP_EMBEDDING && i == 0) ||
         ((op == HAP_OP_NLL_LOSS || op == HAP_OP_CROSS_ENTROPY) && i == 1);
}

static bool any_dtype_op(hap_op op) {
  switch (op) {
  case HAP_OP_RESHAPE:
  case HAP_OP_FLATTEN:
  case HAP_OP_TRANSPOSE:
  case HAP_OP_PERMUTE:
  case HAP_OP_NARROW:
  case HAP_OP_CLS_SELECT: return true;
  default: return false;
  }
}

static hap_status check_shape(const char *op, const char *what, int i, const hap_shape *s,
                              hap_err *err) {
  if (s->rank < 0 || s->rank > HAP_MAX_DIMS)
    return hap_err_set(err, HAP_EINVAL, "%s: %s %d has rank %d, expected 0..%d", op, what, i,
                       s->rank, HAP_MAX_DIMS);
  int64_t n = 1;
  for (int d = 0; d < s->rank; d++) {
    if (s->dims[d] < 0)
      return hap_err_set(err, HAP_EINVAL, "%s: %s %d has dim %d = %lld, expected >= 0", op, what, i,
                         d, (long long)s->dims[d]);
    if (__builtin_mul_overflow(n, s->dims[d], &n) || n > INT_MAX)
      return hap_err_set(err, HAP_EUNSUPPORTED,
                         "%s: %s %d has more than %d elements, which the CPU kernels do not take",
                         op, what, i, INT_MAX);
  }
  return HAP_OK;
}

/* Outputs of a positive-dim application must be what the op table infers. */
static hap_status check_infer(const hap_kernel_call *c, hap_err *err) {
  const hap_op_io *io = c->io;
  for (int i = 0; i < io->n_in; i++)
    if (k_numel(&io->in[i]) == 0)
      return HAP_OK; /* an empty shard: inference rejects empty dims; trust hap_op_local_io */
  hap_op_io probe = *io;
  hap_err why = {0};
  if (hap_op_infer(c->op, &probe, &why) != HAP_OK)
    return hap_err_set(err, HAP_EINVAL, "kernel %s: %s", hap_op_name(c->op), why.msg);
  for (int o = 0; o < io->n_out; o++) {
    if (!hap_shape_eq(&probe.out[o], &io->out[o]) || probe.out_dtype[o] != io->out_dtype[o]) {
      char a[160], b[160];
      return hap_err_set(
          err, HAP_EINVAL, "kernel %s: output %d is %s %s, the op gives %s %s", hap_op_name(c->op),
          o, hap_dtype_name(io->out_dtype[o]), hap_shape_str(&io->out[o], a, sizeof a),
          hap_dtype_name(probe.out_dtype[o]), hap_shape_str(&probe.out[o], b, sizeof b));
    }
  }
  return HAP_OK;
}

static hap_status check_call(const hap_kernel_call *c, hap_err *err) {
  if (c == NULL || c->io == NULL || (unsigned)c->op >= HAP_OP_COUNT || c->in == NULL)
    return hap_err_set(err, HAP_EINVAL, "kernel call: missing call, io, input list or op");
  const hap_op_def *d = hap_op_get(c->op);
  const hap_op_io *io = c->io;
  const char *name = d->name;
  if (io->attrs == NULL)
    return hap_err_set(err, HAP_EINVAL, "kernel %s: io has no attributes", name);
  if (io->n_in < d->min_in || io->n_in > d->max_in || io->n_out != d->n_out)
    return hap_err_set(err, HAP_EINVAL,
                       "kernel %s: %d inputs and %d outputs, expected %d..%d and %d", name,
                       io->n_in, io->n_out, d->min_in, d->max_in, d->n_out);
  for (int i = 0; i < io->n_in; i++) {
    HAP_TRY(check_shape(name, "input", i, &io->in[i], err));
    hap_dtype dt = io->in_dtype[i];
    bool ok = is_index_input(c->op, i) ? (dt == HAP_I64 || dt == HAP_I32)
              : any_dtype_op(c->op)    ? (unsigned)dt < HAP_DTYPE_COUNT
                                       : dt == HAP_F32;
    if (!ok)
      return hap_err_set(err, HAP_EUNSUPPORTED, "kernel %s: input %d (%s) is %s, expected %s", name,
                         i, d->in_names[i], hap_dtype_name(dt),
                         is_index_input(c->op, i) ? "int64 or int32" : "float32");
    if (c->in[i] == NULL && k_numel(&io->in[i]) > 0)
      return hap_err_set(err, HAP_EINVAL, "kernel %s: input %d (%s) has no buffer", name, i,
                         d->in_names[i]);
  }
  for (int o = 0; o < io->n_out; o++) {
    HAP_TRY(check_shape(name, "output", o, &io->out[o], err));
    hap_dtype want = any_dtype_op(c->op) ? io->in_dtype[0] : HAP_F32;
    if (io->out_dtype[o] != want)
      return hap_err_set(err, HAP_EUNSUPPORTED, "kernel %s: output %d is %s, expected %s", name, o,
                         hap_dtype_name(io->out_dtype[o]), hap_dtype_name(want));
  }
  if (c->shard != NULL && (c->shard->full == NULL || c->shard->variant == NULL))
    return hap_err_set(err, HAP_EINVAL, "kernel %s: a shard needs the full io and the variant",
                       name);
  if (c->shard != NULL && (c->shard->rank < 0 || c->shard->offset < 0))
    return hap_err_set(err, HAP_EINVAL, "kernel %s: shard rank %d and offset %lld, expected >= 0",
                       name, c->shard->rank, (long long)c->shard->offset);
  return check_infer(c, err);
}

hap_status hap_kernel_check_forward(const hap_kernel_call *c, void *const *out, hap_err *err) {
  HAP_TRY(check_call(c, err));
  if (out == NULL)
    return hap_err_set(err, HAP_EINVAL, "kernel %s: no output list", hap_op_name(c->op));
  for (int o = 0; o < c->io->n_out; o++)
    if (out[o] == NULL && k_numel(&c->io->out[o]) > 0)
      return hap_err_set(err, HAP_EINVAL, "kernel %s: output %d has no buffer", hap_op_name(c->op),
                         o);
  return HAP_OK;
}

hap_status hap_kernel_check_backward(const hap_kernel_call *c, const float *const *dout,
                                     float *const *din, bool *needed, hap_err *err) {
  *needed = false;
  HAP_TRY(check_call(c, err));
  const hap_op_io *io = c->io;
  const char *name = hap_op_name(c->op);
  bool any = false;
  for (int i = 0; i < io->n_in; i++) {
    if (!io->in_grad[i] || is_index_input(c->op, i))
      continue;
    any = true;
    if (io->in_dtype[i] != HAP_F32)
      return hap_err_set(err, HAP_EUNSUPPORTED, "kernel %s: gradient of a %s input %d", name,
                         hap_dtype_name(io->in_dtype[i]), i);
    if ((din == NULL || din[i] == NULL) && k_numel(&io->in[i]) > 0)
      return hap_err_set(err, HAP_EINVAL, "kernel %s: input %d needs a gradient buffer", name, i);
  }
  if (!any)
    return HAP_OK;
  if (c->out == NULL || dout == NULL)
    return hap_err_set(err, HAP_EINVAL, "kernel %s: backward needs the forward outputs and dout",
                       name);
  bool any_dout = false;
  for (int o = 0; o < io->n_out; o++)
    any_dout = any_dout || dout[o] != NULL;
  if (!any_dout)
    return HAP_OK; /* every output gradient is zero */
  for (int o = 0; o < io->n_out; o++)
    if (c->out[o] == NULL && k_numel(&io->out[o]) > 0)
      return hap_err_set(err, HAP_EINVAL, "kernel %s: forward output %d missing", name, o);
  *needed = true;
  return HAP_OK;
}

hap_status hap_kernel_forward(const hap_kernel_call *c, void *const *out, hap_kernel_state *state,
                              hap_err *err) {
  HAP_TRY(hap_kernel_check_forward(c, out, err));
  return table[c->op].fwd(c, out, state, err);
}

/* ---- fault injection (tests only; kernels.h) ------------------------------------------------- */

/* The op HAP_FAULT_KERNEL names (*on false when it is unset or empty). */
static hap_status fault_op(hap_op *op, bool *on, hap_err *err) {
  const char *name = getenv("HAP_FAULT_KERNEL");
  *on = false;
  if (name == NULL || name[0] == '\0')
    return HAP_OK;
  if (hap_op_lookup(name, op) != HAP_OK)
    return hap_err_set(err, HAP_EINVAL, "HAP_FAULT_KERNEL: unknown op '%s'", name);
  *on = true;
  return HAP_OK;
}

/* The op's backward into zeroed scratch gradients (inputs sharing a gradient buffer share one
 * scratch buffer), then din[i] += HAP_FAULT_SCALE x scratch (= where din[i] is fresh): exactly
 * the gradient scaled. */
static hap_status backward_scaled(const hap_kernel_call *c, const float *const *dout,
                                  float *const *din, const hap_kernel_state *state, hap_err *err) {
  const hap_op_io *io = c->io;
  float *tmp[HAP_MAX_OP_INPUTS] = {NULL};
  bool own[HAP_MAX_OP_INPUTS] = {false};
  hap_status st = HAP_OK;
  for (int i = 0; i < io->n_in && st == HAP_OK; i++) {
    if (din == NULL || !io->in_grad[i] || is_index_input(c->op, i) || din[i] == NULL)
      continue;
    for (int j = 0; j < i && tmp[i] == NULL; j++)
      if (din[j] == din[i])
        tmp[i] = tmp[j];
    if (tmp[i] == NULL) {
      tmp[i] = k_calloc((size_t)k_numel(&io->in[i]), sizeof(float), err);
      own[i] = true;
      st = tmp[i] == NULL ? HAP_ENOMEM : HAP_OK;
    }
  }
  hap_kernel_call into_tmp = *c; /* tmp is zeroed: add to it */
  into_tmp.fresh_din = 0;
  if (st == HAP_OK)
    st = table[c->op].bwd(&into_tmp, dout, tmp, state, err);
  for (int i = 0; i < io->n_in; i++) {
    if (!own[i])
      continue;
    bool fresh = k_fresh(c, i);
    for (int64_t e = 0; st == HAP_OK && e < k_numel(&io->in[i]); e++)
      din[i][e] = (fresh ? 0.0f : din[i][e]) + (float)(HAP_FAULT_SCALE * (double)tmp[i][e]);
    free(tmp[i]);
  }
  return st;
}

/* The fresh bits the op's backward is given (kernels.h): only on inputs that take a gradient,
 * moved to the lowest of inputs sharing a buffer; `keep` false (an op that only adds, a call
 * with nothing to do): none, and every fresh buffer is zeroed here instead. */
static uint32_t settle_fresh(const hap_kernel_call *c, float *const *din, bool keep) {
  const hap_op_io *io = c->io;
  uint32_t bits = 0;
  for (int i = 0; i < io->n_in && c->fresh_din != 0 && din != NULL; i++) {
    if (!k_fresh(c, i) || !io->in_grad[i] || is_index_input(c->op, i) || din[i] == NULL)
      continue;
    int lowest = i;
    for (int j = 0; j < i; j++)
      if (io->in_grad[j] && !is_index_input(c->op, j) && din[j] == din[i]) {
        lowest = j;
        break;
      }
    if (bits >> lowest & 1u)
      continue;
    bits |= 1u << lowest;
    if (!keep && k_numel(&io->in[i]) > 0)
      memset(din[i], 0, (size_t)k_numel(&io->in[i]) * sizeof(float));
  }
  return keep ? bits : 0;
}

void k_clear_fresh(const hap_kernel_call *c, float *const *din, int input, int64_t n) {
  if (k_fresh(c, input) && n > 0)
    memset(din[input], 0, (size_t)n * sizeof(float));
}

hap_status hap_kernel_backward(const hap_kernel_call *c, const float *const *dout,
                               float *const *din, const hap_kernel_state *state, hap_err *err) {
  bool needed = false, fault = false;
  hap_op faulty = HAP_OP_COUNT;
  HAP_TRY(fault_op(&faulty, &fault, err));
  HAP_TRY(hap_kernel_check_backward(c, dout, din, &needed, err));
  hap_kernel_call call = *c;
  call.fresh_din = settle_fresh(c, din, needed && table[c->op].fresh);
  if (!needed)
    return HAP_OK;
  if (fault && faulty == c->op)
    return backward_scaled(&call, dout, din, state, err);
  return table[c->op].bwd(&call, dout, din, state, err);
}
