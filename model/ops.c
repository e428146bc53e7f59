/* ops.c — op table implementation: dtype/shape helpers, attribute handling, and per-op shape
 * inference and cost. Conventions are in ops.h and docs/ops.md. */
#include "model/ops.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- dtypes and shapes ---------------------------------------------------------------------- */

static const struct {
  const char *name;
  int size;
  bool is_float;
} dtypes[HAP_DTYPE_COUNT] = {
    [HAP_F32] = {"float32", 4, true},   [HAP_F16] = {"float16", 2, true},
    [HAP_BF16] = {"bfloat16", 2, true}, [HAP_F64] = {"float64", 8, true},
    [HAP_I64] = {"int64", 8, false},    [HAP_I32] = {"int32", 4, false},
    [HAP_BOOL] = {"bool", 1, false},
};

const char *hap_dtype_name(hap_dtype d) {
  return (unsigned)d < HAP_DTYPE_COUNT ? dtypes[d].name : "?";
}
int hap_dtype_size(hap_dtype d) { return (unsigned)d < HAP_DTYPE_COUNT ? dtypes[d].size : 0; }
bool hap_dtype_is_float(hap_dtype d) { return (unsigned)d < HAP_DTYPE_COUNT && dtypes[d].is_float; }
hap_status hap_dtype_parse(const char *s, hap_dtype *out) {
  for (int i = 0; i < HAP_DTYPE_COUNT; i++) {
    if (strcmp(s, dtypes[i].name) == 0) {
      *out = (hap_dtype)i;
      return HAP_OK;
    }
  }
  return HAP_ENOTFOUND;
}

hap_status hap_shape_numel(const hap_shape *s, int64_t *numel) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    if (s->dims[i] < 0 || __builtin_mul_overflow(n, s->dims[i], &n))
      return HAP_EOVERFLOW;
  }
  *numel = n;
  return HAP_OK;
}

double hap_shape_numel_f(const hap_shape *s) {
  double n = 1;
  for (int i = 0; i < s->rank; i++)
    n *= (double)s->dims[i];
  return n;
}

bool hap_shape_eq(const hap_shape *a, const hap_shape *b) {
  if (a->rank != b->rank)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i])
      return false;
  return true;
}

const char *hap_shape_str(const hap_shape *s, char *buf, size_t len) {
  size_t off = 0;
  off += (size_t)snprintf(buf + off, len - off, "[");
  for (int i = 0; i < s->rank && off < len; i++)
    off += (size_t)snprintf(buf + off, len - off, i ? ", %lld" : "%lld", (long long)s->dims[i]);
  if (off < len)
    snprintf(buf + off, len - off, "]");
  return buf;
}

/* ---- helpers for infer functions ------------------------------------------------------------ */

typedef char shapebuf[160];

static hap_status fail(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static hap_status fail(char *why, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return HAP_EINVAL;
}

static const char *sh(const hap_shape *s, shapebuf b) {
  return hap_shape_str(s, b, sizeof(shapebuf));
}

/* Normalise a possibly negative dim against rank; -1 if out of range. */
static int norm_dim(int64_t d, int rank) {
  if (d < 0)
    d += rank;
  return (d >= 0 && d < rank) ? (int)d : -1;
}

static double numel(const hap_shape *s) { return hap_shape_numel_f(s); }

static double dsize(hap_dtype d) { return (double)hap_dtype_size(d); }

static double in_bytes(const hap_op_io *io, int i) {
  return numel(&io->in[i]) * dsize(io->in_dtype[i]);
}
static double out_bytes(const hap_op_io *io, int o) {
  return numel(&io->out[o]) * dsize(io->out_dtype[o]);
}

static bool any_grad(const hap_op_io *io) {
  for (int i = 0; i < io->n_in; i++)
    if (io->in_grad[i])
      return true;
  return false;
}

/* Default byte accounting: forward reads inputs, writes outputs; backward reads output gradients
 * and saved inputs, writes the needed input gradients. */
static void default_bytes(const hap_op_io *io, hap_op_cost *c) {
  for (int i = 0; i < io->n_in; i++) {
    c->fwd_bytes_read += in_bytes(io, i);
    if (any_grad(io))
      c->bwd_bytes_read += in_bytes(io, i);
    if (io->in_grad[i])
      c->bwd_bytes_written += in_bytes(io, i);
  }
  for (int o = 0; o < io->n_out; o++) {
    c->fwd_bytes_written += out_bytes(io, o);
    if (any_grad(io))
      c->bwd_bytes_read += out_bytes(io, o);
  }
}

static hap_status need_float(const hap_op_io *io, int i, const char *what, char *why, size_t len) {
  if (!hap_dtype_is_float(io->in_dtype[i]))
    return fail(why, len, "input '%s' is %s, expected a floating-point type", what,
                hap_dtype_name(io->in_dtype[i]));
  return HAP_OK;
}

static hap_status need_int(const hap_op_io *io, int i, const char *what, char *why, size_t len) {
  if (io->in_dtype[i] != HAP_I64 && io->in_dtype[i] != HAP_I32)
    return fail(why, len, "input '%s' is %s, expected int64 or int32", what,
                hap_dtype_name(io->in_dtype[i]));
  return HAP_OK;
}

static hap_status need_same_dtype(const hap_op_io *io, int i, int j, char *why, size_t len) {
  if (io->in_dtype[i] != io->in_dtype[j])
    return fail(why, len, "inputs %d and %d have dtypes %s and %s, expected the same", i, j,
                hap_dtype_name(io->in_dtype[i]), hap_dtype_name(io->in_dtype[j]));
  return HAP_OK;
}

static hap_status need_rank(const hap_op_io *io, int i, int lo, int hi, const char *what, char *why,
                            size_t len) {
  if (io->in[i].rank < lo || io->in[i].rank > hi) {
    shapebuf b;
    if (lo == hi)
      return fail(why, len, "input '%s' has shape %s, expected rank %d", what, sh(&io->in[i], b),
                  lo);
    return fail(why, len, "input '%s' has shape %s, expected rank %d..%d", what, sh(&io->in[i], b),
                lo, hi);
  }
  return HAP_OK;
}

/* ---- elementwise unary ---------------------------------------------------------------------- */

static hap_status infer_unary(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_float(io, 0, "input", why, len));
  io->out[0] = io->in[0];
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

static void cost_pointwise(const hap_op_io *io, hap_op_cost *c, double fwd_per, double bwd_per) {
  double n = numel(&io->out[0]);
  c->fwd_flops = fwd_per * n;
  c->bwd_flops = io->in_grad[0] ? bwd_per * n : 0;
  default_bytes(io, c);
}

/* Per element: relu = max(x,0) 1, grad select 1. */
static void cost_relu(const hap_op_io *io, hap_op_cost *c) { cost_pointwise(io, c, 1, 1); }
/* gelu(x) = 0.5 x (1 + erf(x/sqrt2)): 5; grad Phi(x) + x phi(x), times g: 9. */
static void cost_gelu(const hap_op_io *io, hap_op_cost *c) { cost_pointwise(io, c, 5, 9); }
/* sigmoid = 1/(1+exp(-x)): 4; grad g*y*(1-y): 3. */
static void cost_sigmoid(const hap_op_io *io, hap_op_cost *c) { cost_pointwise(io, c, 4, 3); }
/* tanh: 1; grad g*(1-y^2): 3. */
static void cost_tanh(const hap_op_io *io, hap_op_cost *c) { cost_pointwise(io, c, 1, 3); }
/* rsqrt: 1; grad -0.5*y^3*g: 4. */
static void cost_rsqrt(const hap_op_io *io, hap_op_cost *c) { cost_pointwise(io, c, 1, 4); }
/* pow(x,p): 1; grad p*x^(p-1)*g: 3. */
static void cost_pow(const hap_op_io *io, hap_op_cost *c) { cost_pointwise(io, c, 1, 3); }
/* dropout: mask compare + scaled multiply: 2; grad g*mask*scale: 1. */
static void cost_dropout(const hap_op_io *io, hap_op_cost *c) { cost_pointwise(io, c, 2, 1); }

enum { A_POW_EXPONENT = 0 };
enum { A_DROPOUT_P = 0 };

static hap_status infer_dropout(hap_op_io *io, char *why, size_t len) {
  double p = hap_attr_f(io->attrs, A_DROPOUT_P);
  if (!(p >= 0 && p < 1))
    return fail(why, len, "attribute 'p' is %g, expected 0 <= p < 1", p);
  return infer_unary(io, why, len);
}

/* ---- elementwise binary with broadcasting --------------------------------------------------- */

enum { A_BINARY_SCALAR = 0 };

static hap_status broadcast(const hap_shape *a, const hap_shape *b, hap_shape *out, char *why,
                            size_t len) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int ia = a->rank - r + i, ib = b->rank - r + i;
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      shapebuf x, y;
      return fail(why, len, "shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", sh(a, x),
                  sh(b, y), i, (long long)da, (long long)db);
    }
    out->dims[i] = da == 1 ? db : da;
  }
  return HAP_OK;
}

static hap_status infer_binary(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_float(io, 0, "a", why, len));
  io->out_dtype[0] = io->in_dtype[0];
  if (io->n_in == 1) {
    io->out[0] = io->in[0];
    return HAP_OK;
  }
  HAP_TRY(need_same_dtype(io, 0, 1, why, len));
  return broadcast(&io->in[0], &io->in[1], &io->out[0], why, len);
}

/* Extra backward adds needed to reduce a broadcast gradient back to input i's shape. */
static double bcast_reduce(const hap_op_io *io, int i) {
  double o = numel(&io->out[0]), n = numel(&io->in[i]);
  return o > n ? o : 0;
}

static void cost_add_sub(const hap_op_io *io, hap_op_cost *c, bool is_sub) {
  double n = numel(&io->out[0]);
  c->fwd_flops = n;
  for (int i = 0; i < io->n_in; i++) {
    if (!io->in_grad[i])
      continue;
    c->bwd_flops += bcast_reduce(io, i);
    if (is_sub && i == 1)
      c->bwd_flops += numel(&io->in[1]); /* negate */
  }
  default_bytes(io, c);
}
static void cost_add(const hap_op_io *io, hap_op_cost *c) { cost_add_sub(io, c, false); }
static void cost_sub(const hap_op_io *io, hap_op_cost *c) { cost_add_sub(io, c, true); }

static void cost_mul(const hap_op_io *io, hap_op_cost *c) {
  double n = numel(&io->out[0]);
  c->fwd_flops = n;
  for (int i = 0; i < io->n_in; i++)
    if (io->in_grad[i])
      c->bwd_flops += n + bcast_reduce(io, i); /* g * other */
  default_bytes(io, c);
}

static void cost_div(const hap_op_io *io, hap_op_cost *c) {
  double n = numel(&io->out[0]);
  c->fwd_flops = n;
  if (io->in_grad[0])
    c->bwd_flops += n + bcast_reduce(io, 0); /* g / b */
  if (io->n_in > 1 && io->in_grad[1])
    c->bwd_flops += 3 * n + bcast_reduce(io, 1); /* -g * y / b */
  default_bytes(io, c);
}

/* ---- softmax family ------------------------------------------------------------------------- */

enum { A_SOFTMAX_DIM = 0 };

static hap_status infer_softmax(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_float(io, 0, "input", why, len));
  HAP_TRY(need_rank(io, 0, 1, HAP_MAX_DIMS, "input", why, len));
  int64_t d = hap_attr_i(io->attrs, A_SOFTMAX_DIM);
  if (norm_dim(d, io->in[0].rank) < 0)
    return fail(why, len, "attribute 'dim' is %lld, expected -%d..%d", (long long)d, io->in[0].rank,
                io->in[0].rank - 1);
  return infer_unary(io, why, len);
}

/* softmax: max, sub, exp, sum, div = 5; grad y*(g - sum(y*g)) = 4. */
static void cost_softmax(const hap_op_io *io, hap_op_cost *c) { cost_pointwise(io, c, 5, 4); }
/* log_softmax: max, sub, exp, sum, log+sub = 5; grad g - exp(y)*sum(g) = 4. */
static void cost_log_softmax(const hap_op_io *io, hap_op_cost *c) { cost_pointwise(io, c, 5, 4); }

/* ---- reductions ----------------------------------------------------------------------------- */

enum { A_RED_DIMS = 0, A_RED_KEEPDIM = 1 };

static hap_status infer_reduce(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_float(io, 0, "input", why, len));
  const hap_shape *x = &io->in[0];
  const hap_attr_value *dims = &io->attrs->v[A_RED_DIMS];
  bool keep = hap_attr_i(io->attrs, A_RED_KEEPDIM) != 0;
  bool reduced[HAP_MAX_DIMS] = {false};
  if (dims->u.ints.n == 0) {
    for (int i = 0; i < x->rank; i++)
      reduced[i] = true;
  }
  for (int k = 0; k < dims->u.ints.n; k++) {
    int d = norm_dim(dims->u.ints.v[k], x->rank);
    if (d < 0)
      return fail(why, len, "attribute 'dims[%d]' is %lld, out of range for rank %d", k,
                  (long long)dims->u.ints.v[k], x->rank);
    if (reduced[d])
      return fail(why, len, "attribute 'dims' lists dim %d twice", d);
    reduced[d] = true;
  }
  hap_shape *o = &io->out[0];
  o->rank = 0;
  for (int i = 0; i < x->rank; i++) {
    if (!reduced[i])
      o->dims[o->rank++] = x->dims[i];
    else if (keep)
      o->dims[o->rank++] = 1;
  }
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* sum: one add per input element; grad is a broadcast copy (no arithmetic). */
static void cost_sum(const hap_op_io *io, hap_op_cost *c) {
  c->fwd_flops = numel(&io->in[0]);
  c->bwd_flops = 0;
  default_bytes(io, c);
}
/* mean: sum plus one divide per output; grad scales each input element once. */
static void cost_mean(const hap_op_io *io, hap_op_cost *c) {
  c->fwd_flops = numel(&io->in[0]) + numel(&io->out[0]);
  c->bwd_flops = io->in_grad[0] ? numel(&io->in[0]) : 0;
  default_bytes(io, c);
}

/* ---- GEMM family ---------------------------------------------------------------------------- */

static hap_status infer_linear(hap_op_io *io, char *why, size_t len) {
  shapebuf a, b;
  HAP_TRY(need_float(io, 0, "input", why, len));
  HAP_TRY(need_rank(io, 0, 1, HAP_MAX_DIMS, "input", why, len));
  HAP_TRY(need_rank(io, 1, 2, 2, "weight", why, len));
  HAP_TRY(need_same_dtype(io, 0, 1, why, len));
  const hap_shape *x = &io->in[0], *w = &io->in[1];
  int64_t k = x->dims[x->rank - 1];
  if (w->dims[1] != k)
    return fail(why, len, "input 'weight' has shape %s, expected [N, %lld] to match input %s",
                sh(w, a), (long long)k, sh(x, b));
  if (io->n_in == 3) {
    HAP_TRY(need_same_dtype(io, 0, 2, why, len));
    if (io->in[2].rank != 1 || io->in[2].dims[0] != w->dims[0])
      return fail(why, len, "input 'bias' has shape %s, expected [%lld]", sh(&io->in[2], a),
                  (long long)w->dims[0]);
  }
  io->out[0] = *x;
  io->out[0].dims[x->rank - 1] = w->dims[0];
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* y = x W^T + b: 2MNK (+MN for bias); grads dX = dY W (2MNK), dW = dY^T X (2MNK), db = sum dY (MN).
 */
static void cost_linear(const hap_op_io *io, hap_op_cost *c) {
  const hap_shape *x = &io->in[0];
  double k = (double)x->dims[x->rank - 1];
  double m = numel(x) / k;
  double n = (double)io->in[1].dims[0];
  bool bias = io->n_in == 3;
  c->fwd_flops = 2 * m * n * k + (bias ? m * n : 0);
  c->bwd_flops = (io->in_grad[0] ? 2 * m * n * k : 0) + (io->in_grad[1] ? 2 * m * n * k : 0) +
                 (bias && io->in_grad[2] ? m * n : 0);
  default_bytes(io, c);
}

/* matmul: a [..., M, K] @ b [..., K, N] with broadcast batch dims (both rank >= 2). */
static hap_status infer_matmul(hap_op_io *io, char *why, size_t len) {
  shapebuf sa, sb;
  HAP_TRY(need_float(io, 0, "a", why, len));
  HAP_TRY(need_same_dtype(io, 0, 1, why, len));
  HAP_TRY(need_rank(io, 0, 2, HAP_MAX_DIMS, "a", why, len));
  HAP_TRY(need_rank(io, 1, 2, HAP_MAX_DIMS, "b", why, len));
  const hap_shape *a = &io->in[0], *b = &io->in[1];
  int64_t ka = a->dims[a->rank - 1], kb = b->dims[b->rank - 2];
  if (ka != kb)
    return fail(why, len, "shapes %s and %s: inner dims %lld and %lld differ", sh(a, sa), sh(b, sb),
                (long long)ka, (long long)kb);
  hap_shape ba = *a, bb = *b, batch;
  ba.rank -= 2;
  bb.rank -= 2;
  HAP_TRY(broadcast(&ba, &bb, &batch, why, len));
  hap_shape *o = &io->out[0];
  *o = batch;
  o->dims[o->rank++] = a->dims[a->rank - 2];
  o->dims[o->rank++] = b->dims[b->rank - 1];
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* bmm: a [B, M, K] @ b [B, K, N]. */
static hap_status infer_bmm(hap_op_io *io, char *why, size_t len) {
  shapebuf sa, sb;
  HAP_TRY(need_rank(io, 0, 3, 3, "a", why, len));
  HAP_TRY(need_rank(io, 1, 3, 3, "b", why, len));
  if (io->in[0].dims[0] != io->in[1].dims[0])
    return fail(why, len, "batch sizes of %s and %s differ", sh(&io->in[0], sa),
                sh(&io->in[1], sb));
  return infer_matmul(io, why, len);
}

/* 2 * batch * M * N * K forward; the same per input gradient. */
static void cost_matmul(const hap_op_io *io, hap_op_cost *c) {
  const hap_shape *a = &io->in[0];
  double k = (double)a->dims[a->rank - 1];
  double f = 2 * numel(&io->out[0]) * k;
  c->fwd_flops = f;
  c->bwd_flops = (io->in_grad[0] ? f : 0) + (io->in_grad[1] ? f : 0);
  default_bytes(io, c);
}

/* einsum over two operands with single-letter indices, e.g. "bsd,bsec->becd". */
enum { A_EINSUM_EQUATION = 0 };

typedef struct einsum_spec {
  char op[2][HAP_MAX_DIMS + 1];
  char out[HAP_MAX_DIMS + 1];
  int64_t extent[26];
} einsum_spec;

static hap_status parse_einsum(const hap_op_io *io, einsum_spec *e, char *why, size_t len) {
  const char *eq = hap_attr_s(io->attrs, A_EINSUM_EQUATION);
  memset(e, 0, sizeof *e);
  const char *p = eq;
  for (int k = 0; k < 2; k++) {
    int n = 0;
    bool seen[26] = {false};
    while (*p >= 'a' && *p <= 'z') {
      if (n == HAP_MAX_DIMS)
        return fail(why, len, "equation '%s': operand %d has more than %d indices", eq, k,
                    HAP_MAX_DIMS);
      if (seen[*p - 'a'])
        return fail(why, len, "equation '%s': index '%c' repeats within operand %d", eq, *p, k);
      seen[*p - 'a'] = true;
      e->op[k][n++] = *p++;
    }
    if (k == 0 && *p++ != ',')
      return fail(why, len, "equation '%s': expected 'ab,bc->ac' with lowercase indices", eq);
  }
  if (p[0] != '-' || p[1] != '>')
    return fail(why, len, "equation '%s': expected '->' after the operands", eq);
  p += 2;
  int n = 0;
  while (*p >= 'a' && *p <= 'z' && n < HAP_MAX_DIMS)
    e->out[n++] = *p++;
  if (*p != '\0')
    return fail(why, len, "equation '%s': unexpected '%c' in the output indices", eq, *p);
  for (int k = 0; k < 2; k++) {
    if ((int)strlen(e->op[k]) != io->in[k].rank) {
      shapebuf b;
      return fail(why, len, "equation '%s': operand %d has %d indices but shape %s", eq, k,
                  (int)strlen(e->op[k]), sh(&io->in[k], b));
    }
    for (int i = 0; e->op[k][i]; i++) {
      int c = e->op[k][i] - 'a';
      int64_t d = io->in[k].dims[i];
      if (e->extent[c] != 0 && e->extent[c] != d)
        return fail(why, len, "equation '%s': index '%c' has extents %lld and %lld", eq, 'a' + c,
                    (long long)e->extent[c], (long long)d);
      e->extent[c] = d;
    }
  }
  for (int i = 0; e->out[i]; i++) {
    int c = e->out[i] - 'a';
    if (e->extent[c] == 0)
      return fail(why, len, "equation '%s': output index '%c' appears in no operand", eq, 'a' + c);
    for (int j = 0; j < i; j++)
      if (e->out[j] == e->out[i])
        return fail(why, len, "equation '%s': output index '%c' repeats", eq, e->out[i]);
  }
  return HAP_OK;
}

static hap_status infer_einsum(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_float(io, 0, "a", why, len));
  HAP_TRY(need_same_dtype(io, 0, 1, why, len));
  einsum_spec e;
  HAP_TRY(parse_einsum(io, &e, why, len));
  hap_shape *o = &io->out[0];
  o->rank = (int32_t)strlen(e.out);
  for (int i = 0; i < o->rank; i++)
    o->dims[i] = e.extent[e.out[i] - 'a'];
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* One multiply-add per point of the full index space: 2 * prod(extents); the same per gradient. */
static void cost_einsum(const hap_op_io *io, hap_op_cost *c) {
  einsum_spec e;
  char why[8];
  double f = 0;
  if (parse_einsum(io, &e, why, sizeof why) == HAP_OK) {
    f = 2;
    for (int i = 0; i < 26; i++)
      if (e.extent[i])
        f *= (double)e.extent[i];
  }
  c->fwd_flops = f;
  c->bwd_flops = (io->in_grad[0] ? f : 0) + (io->in_grad[1] ? f : 0);
  default_bytes(io, c);
}

/* ---- convolution and pooling ---------------------------------------------------------------- */

enum { A_CONV_STRIDE = 0, A_CONV_PADDING = 1 };
enum { A_POOL_KERNEL = 0, A_POOL_STRIDE = 1, A_POOL_PADDING = 2 };
enum { A_APOOL_OUTPUT_SIZE = 0 };

static hap_status window_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t *out,
                             const char *dim, char *why, size_t len) {
  if (s <= 0 || p < 0)
    return fail(why, len, "stride %lld and padding %lld, expected stride >= 1, padding >= 0",
                (long long)s, (long long)p);
  int64_t span;
  if (__builtin_mul_overflow(p, 2, &span) || __builtin_add_overflow(span, in, &span))
    return fail(why, len, "padding %lld is too large for %s %lld, expected padded size in int64",
                (long long)p, dim, (long long)in);
  span -= k;
  if (span < 0)
    return fail(why, len, "%s %lld with padding %lld is smaller than the kernel %lld", dim,
                (long long)in, (long long)p, (long long)k);
  *out = span / s + 1;
  return HAP_OK;
}

static hap_status infer_conv2d(hap_op_io *io, char *why, size_t len) {
  shapebuf a, b;
  HAP_TRY(need_float(io, 0, "input", why, len));
  HAP_TRY(need_same_dtype(io, 0, 1, why, len));
  HAP_TRY(need_rank(io, 0, 4, 4, "input", why, len));
  HAP_TRY(need_rank(io, 1, 4, 4, "weight", why, len));
  const hap_shape *x = &io->in[0], *w = &io->in[1];
  if (w->dims[1] != x->dims[1])
    return fail(why, len, "input 'weight' has shape %s, expected [O, %lld, kH, kW] for input %s",
                sh(w, a), (long long)x->dims[1], sh(x, b));
  if (io->n_in == 3) {
    HAP_TRY(need_same_dtype(io, 0, 2, why, len));
    if (io->in[2].rank != 1 || io->in[2].dims[0] != w->dims[0])
      return fail(why, len, "input 'bias' has shape %s, expected [%lld]", sh(&io->in[2], a),
                  (long long)w->dims[0]);
  }
  int64_t s = hap_attr_i(io->attrs, A_CONV_STRIDE), p = hap_attr_i(io->attrs, A_CONV_PADDING);
  hap_shape *o = &io->out[0];
  o->rank = 4;
  o->dims[0] = x->dims[0];
  o->dims[1] = w->dims[0];
  HAP_TRY(window_out(x->dims[2], w->dims[2], s, p, &o->dims[2], "height", why, len));
  HAP_TRY(window_out(x->dims[3], w->dims[3], s, p, &o->dims[3], "width", why, len));
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* 2 * N*O*Ho*Wo * C*kH*kW (+ N*O*Ho*Wo for bias); grads dX and dW each the same GEMM size. */
static void cost_conv2d(const hap_op_io *io, hap_op_cost *c) {
  const hap_shape *w = &io->in[1];
  double outs = numel(&io->out[0]);
  double macs = outs * (double)w->dims[1] * (double)w->dims[2] * (double)w->dims[3];
  bool bias = io->n_in == 3;
  c->fwd_flops = 2 * macs + (bias ? outs : 0);
  c->bwd_flops = (io->in_grad[0] ? 2 * macs : 0) + (io->in_grad[1] ? 2 * macs : 0) +
                 (bias && io->in_grad[2] ? outs : 0);
  default_bytes(io, c);
}

static hap_status infer_max_pool2d(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_float(io, 0, "input", why, len));
  HAP_TRY(need_rank(io, 0, 4, 4, "input", why, len));
  int64_t k = hap_attr_i(io->attrs, A_POOL_KERNEL);
  int64_t s = hap_attr_i(io->attrs, A_POOL_STRIDE);
  int64_t p = hap_attr_i(io->attrs, A_POOL_PADDING);
  if (k <= 0)
    return fail(why, len, "attribute 'kernel' is %lld, expected >= 1", (long long)k);
  if (s == 0)
    s = k;
  if (p > k / 2)
    return fail(why, len, "attribute 'padding' is %lld, expected at most half the kernel %lld",
                (long long)p, (long long)k);
  const hap_shape *x = &io->in[0];
  hap_shape *o = &io->out[0];
  *o = *x;
  HAP_TRY(window_out(x->dims[2], k, s, p, &o->dims[2], "height", why, len));
  HAP_TRY(window_out(x->dims[3], k, s, p, &o->dims[3], "width", why, len));
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* One compare per window element per output; grad routes one value per output. */
static void cost_max_pool2d(const hap_op_io *io, hap_op_cost *c) {
  double k = (double)hap_attr_i(io->attrs, A_POOL_KERNEL);
  double outs = numel(&io->out[0]);
  c->fwd_flops = outs * k * k;
  c->bwd_flops = io->in_grad[0] ? outs : 0;
  default_bytes(io, c);
}

static hap_status infer_adaptive_avg_pool2d(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_float(io, 0, "input", why, len));
  HAP_TRY(need_rank(io, 0, 4, 4, "input", why, len));
  const hap_attr_value *os = &io->attrs->v[A_APOOL_OUTPUT_SIZE];
  if (os->u.ints.n != 2 || os->u.ints.v[0] <= 0 || os->u.ints.v[1] <= 0)
    return fail(why, len, "attribute 'output_size' must be two positive ints [oh, ow]");
  hap_shape *o = &io->out[0];
  *o = io->in[0];
  o->dims[2] = os->u.ints.v[0];
  o->dims[3] = os->u.ints.v[1];
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* Total bin length along one axis with PyTorch's adaptive bins [floor(i*in/out),
 * ceil((i+1)*in/out)). The starts telescope to `in`; bin i reaches one past the next start unless
 * out divides (i+1)*in, which happens for gcd(in, out) of the `out` bins: total = in + out -
 * gcd(in, out). (A loop over the bins would take `out` steps and overflow (i+1)*in for large
 * attributes.) */
static double adaptive_bins_total(int64_t in, int64_t out) {
  int64_t a = in, b = out;
  while (b != 0) {
    int64_t t = a % b;
    a = b;
    b = t;
  }
  return (double)in + (double)out - (double)a;
}

/* Each output sums its bin and divides once; grad spreads g / bin_size over the bin. */
static void cost_adaptive_avg_pool2d(const hap_op_io *io, hap_op_cost *c) {
  const hap_shape *x = &io->in[0], *o = &io->out[0];
  double nc = (double)x->dims[0] * (double)x->dims[1];
  double summed =
      adaptive_bins_total(x->dims[2], o->dims[2]) * adaptive_bins_total(x->dims[3], o->dims[3]);
  c->fwd_flops = nc * summed + numel(o);
  c->bwd_flops = io->in_grad[0] ? nc * summed + numel(o) : 0;
  default_bytes(io, c);
}

/* ---- embedding, normalisation --------------------------------------------------------------- */

static hap_status infer_embedding(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_int(io, 0, "indices", why, len));
  HAP_TRY(need_float(io, 1, "weight", why, len));
  HAP_TRY(need_rank(io, 0, 0, HAP_MAX_DIMS - 1, "indices", why, len));
  HAP_TRY(need_rank(io, 1, 2, 2, "weight", why, len));
  hap_shape *o = &io->out[0];
  *o = io->in[0];
  o->dims[o->rank++] = io->in[1].dims[1];
  io->out_dtype[0] = io->in_dtype[1];
  return HAP_OK;
}

/* Gather: no arithmetic; reads the indices and the gathered rows. Grad: one add per gathered
 * element into a dense weight gradient (written whole). */
static void cost_embedding(const hap_op_io *io, hap_op_cost *c) {
  double out = out_bytes(io, 0);
  c->fwd_flops = 0;
  c->fwd_bytes_read = in_bytes(io, 0) + out;
  c->fwd_bytes_written = out;
  if (io->in_grad[1]) {
    c->bwd_flops = numel(&io->out[0]);
    c->bwd_bytes_read = out + in_bytes(io, 0);
    c->bwd_bytes_written = in_bytes(io, 1);
  }
}

enum { A_LN_NORMALIZED_DIMS = 0, A_LN_EPS = 1 };

static hap_status infer_layer_norm(hap_op_io *io, char *why, size_t len) {
  shapebuf a;
  HAP_TRY(need_float(io, 0, "input", why, len));
  int64_t nd = hap_attr_i(io->attrs, A_LN_NORMALIZED_DIMS);
  const hap_shape *x = &io->in[0];
  if (nd < 1 || nd > x->rank)
    return fail(why, len, "attribute 'normalized_dims' is %lld, expected 1..%d for input %s",
                (long long)nd, x->rank, sh(x, a));
  if (!(hap_attr_f(io->attrs, A_LN_EPS) > 0))
    return fail(why, len, "attribute 'eps' must be positive");
  for (int i = 1; i < io->n_in; i++) {
    HAP_TRY(need_same_dtype(io, 0, i, why, len));
    const hap_shape *w = &io->in[i];
    bool ok = w->rank == nd;
    for (int d = 0; ok && d < nd; d++)
      ok = w->dims[d] == x->dims[x->rank - nd + d];
    if (!ok) {
      hap_shape want = {.rank = (int32_t)nd};
      for (int d = 0; d < nd; d++)
        want.dims[d] = x->dims[x->rank - nd + d];
      shapebuf b;
      return fail(why, len, "input '%s' has shape %s, expected %s", i == 1 ? "weight" : "bias",
                  sh(w, a), sh(&want, b));
    }
  }
  io->out[0] = *x;
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* Per element: mean, sub, square, variance sum, scale by rstd = 5, plus 1 each for weight and
 * bias. Grad: dx 8 per element, dweight 2 (g * xhat, sum), dbias 1. */
static void cost_layer_norm(const hap_op_io *io, hap_op_cost *c) {
  double n = numel(&io->in[0]);
  c->fwd_flops = n * (5 + (io->n_in > 1 ? 1 : 0) + (io->n_in > 2 ? 1 : 0));
  c->bwd_flops = n * ((io->in_grad[0] ? 8 : 0) + (io->n_in > 1 && io->in_grad[1] ? 2 : 0) +
                      (io->n_in > 2 && io->in_grad[2] ? 1 : 0));
  default_bytes(io, c);
}

/* ---- attention ------------------------------------------------------------------------------ */

enum { A_MHA_HEADS = 0, A_MHA_DROPOUT = 1 };
enum { MHA_Q, MHA_K, MHA_V, MHA_W_IN, MHA_B_IN, MHA_W_OUT, MHA_B_OUT, MHA_MASK };

static hap_status expect_shape(const hap_op_io *io, int i, const char *what, int rank,
                               const int64_t *dims, char *why, size_t len) {
  hap_shape want = {.rank = rank};
  for (int d = 0; d < rank; d++)
    want.dims[d] = dims[d];
  if (!hap_shape_eq(&io->in[i], &want)) {
    shapebuf a, b;
    return fail(why, len, "input '%s' has shape %s, expected %s", what, sh(&io->in[i], a),
                sh(&want, b));
  }
  return HAP_OK;
}

static hap_status infer_mha(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_float(io, MHA_Q, "query", why, len));
  HAP_TRY(need_rank(io, MHA_Q, 3, 3, "query", why, len));
  HAP_TRY(need_rank(io, MHA_K, 3, 3, "key", why, len));
  for (int i = 1; i < 7; i++)
    HAP_TRY(need_same_dtype(io, 0, i, why, len));
  const hap_shape *q = &io->in[MHA_Q], *k = &io->in[MHA_K], *w = &io->in[MHA_W_IN];
  int64_t n = q->dims[0], l = q->dims[1], e = q->dims[2], s = k->dims[1];
  if (w->rank != 3 || w->dims[0] != 3 || w->dims[2] != e) {
    shapebuf b;
    return fail(why, len, "input 'in_proj_weight' has shape %s, expected [3, P, %lld]", sh(w, b),
                (long long)e);
  }
  int64_t p = w->dims[1]; /* projected width: E, or the width of the heads a shard holds */
  int64_t heads = hap_attr_i(io->attrs, A_MHA_HEADS);
  if (heads <= 0 || p % heads != 0)
    return fail(why, len, "attribute 'heads' is %lld, expected a positive divisor of %lld",
                (long long)heads, (long long)p);
  double drop = hap_attr_f(io->attrs, A_MHA_DROPOUT);
  if (!(drop >= 0 && drop < 1))
    return fail(why, len, "attribute 'dropout' is %g, expected 0 <= p < 1", drop);
  HAP_TRY(expect_shape(io, MHA_K, "key", 3, (int64_t[]){n, s, e}, why, len));
  HAP_TRY(expect_shape(io, MHA_V, "value", 3, (int64_t[]){n, s, e}, why, len));
  HAP_TRY(expect_shape(io, MHA_B_IN, "in_proj_bias", 2, (int64_t[]){3, p}, why, len));
  HAP_TRY(expect_shape(io, MHA_W_OUT, "out_proj_weight", 2, (int64_t[]){e, p}, why, len));
  HAP_TRY(expect_shape(io, MHA_B_OUT, "out_proj_bias", 1, (int64_t[]){e}, why, len));
  if (io->n_in > MHA_MASK)
    HAP_TRY(expect_shape(io, MHA_MASK, "mask", 2, (int64_t[]){l, s}, why, len));
  io->out[0] = *q;
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* Forward, with N batch, L query and S key positions, E width, P projected width (E unless
 * head-sharded), H heads:
 *   projections 2NLEP (Q) + 4NSEP (K, V) + 2NLPE (out) + biases N(L + 2S)P + NLE
 *   scores 2NLSP, context 2NLSP; per score element: scale 1, mask 1, softmax 5, dropout 2.
 * Backward: every GEMM twice (both operands) except projection input gradients that are not
 * needed; per score element: dropout 1, softmax 4, scale 1; bias grads one add per element. */
static void cost_mha(const hap_op_io *io, hap_op_cost *c) {
  const hap_shape *q = &io->in[MHA_Q];
  double n = (double)q->dims[0], l = (double)q->dims[1], e = (double)q->dims[2];
  double s = (double)io->in[MHA_K].dims[1], p = (double)io->in[MHA_W_IN].dims[1];
  double h = (double)hap_attr_i(io->attrs, A_MHA_HEADS);
  bool mask = io->n_in > MHA_MASK;
  bool drop = hap_attr_f(io->attrs, A_MHA_DROPOUT) > 0;
  double scores = n * h * l * s;
  double proj_q = 2 * n * l * e * p, proj_kv = 2 * n * s * e * p, proj_o = 2 * n * l * p * e;
  double core = 2 * n * l * s * p; /* one of the two attention GEMMs */
  c->fwd_flops = proj_q + 2 * proj_kv + proj_o + n * (l + 2 * s) * p + n * l * e + 2 * core +
                 scores * (1 + (mask ? 1 : 0) + 5 + (drop ? 2 : 0));
  if (any_grad(io)) {
    double b = 0;
    b += proj_o + (io->in_grad[MHA_W_OUT] ? proj_o : 0) + (io->in_grad[MHA_B_OUT] ? n * l * e : 0);
    b += 4 * core + scores * ((drop ? 1 : 0) + 4 + 1);
    if (io->in_grad[MHA_W_IN])
      b += proj_q + 2 * proj_kv;
    if (io->in_grad[MHA_B_IN])
      b += n * (l + 2 * s) * p;
    b += (io->in_grad[MHA_Q] ? proj_q : 0) + (io->in_grad[MHA_K] ? proj_kv : 0) +
         (io->in_grad[MHA_V] ? proj_kv : 0);
    c->bwd_flops = b;
  }
  default_bytes(io, c);
}

/* ---- layout ops ----------------------------------------------------------------------------- */

enum { A_RESHAPE_SHAPE = 0 };
enum { A_FLATTEN_START = 0, A_FLATTEN_END = 1 };
enum { A_TRANSPOSE_DIM0 = 0, A_TRANSPOSE_DIM1 = 1 };
enum { A_PERMUTE_DIMS = 0 };
enum { A_NARROW_DIM = 0, A_NARROW_START = 1, A_NARROW_LENGTH = 2 };

static hap_status infer_reshape(hap_op_io *io, char *why, size_t len) {
  const hap_attr_value *s = &io->attrs->v[A_RESHAPE_SHAPE];
  int64_t total;
  if (hap_shape_numel(&io->in[0], &total) != HAP_OK)
    return fail(why, len, "input size overflows int64");
  int infer_at = -1;
  int64_t known = 1;
  hap_shape *o = &io->out[0];
  o->rank = s->u.ints.n;
  for (int i = 0; i < s->u.ints.n; i++) {
    int64_t d = s->u.ints.v[i];
    if (d == -1) {
      if (infer_at >= 0)
        return fail(why, len, "attribute 'shape' has more than one -1");
      infer_at = i;
      continue;
    }
    if (d <= 0)
      return fail(why, len, "attribute 'shape[%d]' is %lld, expected a positive size or -1", i,
                  (long long)d);
    if (__builtin_mul_overflow(known, d, &known))
      return fail(why, len, "attribute 'shape' overflows int64");
    o->dims[i] = d;
  }
  if (infer_at >= 0) {
    if (total % known != 0)
      return fail(why, len, "cannot reshape %lld elements with a -1 next to %lld", (long long)total,
                  (long long)known);
    o->dims[infer_at] = total / known;
  } else if (known != total) {
    shapebuf a, b;
    return fail(why, len, "cannot reshape %s (%lld elements) to %s", sh(&io->in[0], a),
                (long long)total, sh(o, b));
  }
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

static hap_status infer_flatten(hap_op_io *io, char *why, size_t len) {
  const hap_shape *x = &io->in[0];
  int r = x->rank ? x->rank : 1;
  int s = norm_dim(hap_attr_i(io->attrs, A_FLATTEN_START), r);
  int e = norm_dim(hap_attr_i(io->attrs, A_FLATTEN_END), r);
  if (s < 0 || e < 0 || s > e)
    return fail(why, len, "attributes 'start_dim'/'end_dim' (%lld, %lld) are invalid for rank %d",
                (long long)hap_attr_i(io->attrs, A_FLATTEN_START),
                (long long)hap_attr_i(io->attrs, A_FLATTEN_END), x->rank);
  hap_shape *o = &io->out[0];
  o->rank = 0;
  for (int i = 0; i < s; i++)
    o->dims[o->rank++] = x->dims[i];
  int64_t m = 1;
  for (int i = s; i <= e && i < x->rank; i++)
    m *= x->dims[i];
  o->dims[o->rank++] = m;
  for (int i = e + 1; i < x->rank; i++)
    o->dims[o->rank++] = x->dims[i];
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

static hap_status infer_transpose(hap_op_io *io, char *why, size_t len) {
  const hap_shape *x = &io->in[0];
  int a = norm_dim(hap_attr_i(io->attrs, A_TRANSPOSE_DIM0), x->rank);
  int b = norm_dim(hap_attr_i(io->attrs, A_TRANSPOSE_DIM1), x->rank);
  if (a < 0 || b < 0)
    return fail(why, len, "attributes 'dim0'/'dim1' (%lld, %lld) are out of range for rank %d",
                (long long)hap_attr_i(io->attrs, A_TRANSPOSE_DIM0),
                (long long)hap_attr_i(io->attrs, A_TRANSPOSE_DIM1), x->rank);
  io->out[0] = *x;
  io->out[0].dims[a] = x->dims[b];
  io->out[0].dims[b] = x->dims[a];
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

static hap_status infer_permute(hap_op_io *io, char *why, size_t len) {
  const hap_shape *x = &io->in[0];
  const hap_attr_value *p = &io->attrs->v[A_PERMUTE_DIMS];
  if (p->u.ints.n != x->rank)
    return fail(why, len, "attribute 'dims' has %d entries, expected %d (the input rank)",
                p->u.ints.n, x->rank);
  bool seen[HAP_MAX_DIMS] = {false};
  for (int i = 0; i < x->rank; i++) {
    int d = norm_dim(p->u.ints.v[i], x->rank);
    if (d < 0 || seen[d])
      return fail(why, len, "attribute 'dims' is not a permutation of 0..%d", x->rank - 1);
    seen[d] = true;
    io->out[0].dims[i] = x->dims[d];
  }
  io->out[0].rank = x->rank;
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

static hap_status infer_narrow(hap_op_io *io, char *why, size_t len) {
  const hap_shape *x = &io->in[0];
  int d = norm_dim(hap_attr_i(io->attrs, A_NARROW_DIM), x->rank);
  int64_t start = hap_attr_i(io->attrs, A_NARROW_START);
  int64_t length = hap_attr_i(io->attrs, A_NARROW_LENGTH);
  if (d < 0)
    return fail(why, len, "attribute 'dim' is out of range for rank %d", x->rank);
  if (start < 0 || length <= 0 || start > x->dims[d] - length)
    return fail(why, len,
                "slice of length %lld at %lld does not fit in dim %d of size %lld, expected "
                "0 <= start, 1 <= length, start + length <= %lld",
                (long long)length, (long long)start, d, (long long)x->dims[d],
                (long long)x->dims[d]);
  io->out[0] = *x;
  io->out[0].dims[d] = length;
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* Views (reshape, flatten): no arithmetic and no data movement. */
static void cost_view(const hap_op_io *io, hap_op_cost *c) {
  (void)io;
  memset(c, 0, sizeof *c);
}

/* Copies (transpose, permute, narrow, cls ops): no arithmetic; read and write the output size,
 * and the same for the gradient. */
static void cost_copy(const hap_op_io *io, hap_op_cost *c) {
  double b = 0;
  for (int o = 0; o < io->n_out; o++)
    b += out_bytes(io, o);
  c->fwd_bytes_read = b;
  c->fwd_bytes_written = b;
  if (any_grad(io)) {
    c->bwd_bytes_read = b;
    c->bwd_bytes_written = b;
  }
}

/* cls_append(x [N,S,H], cls [1,1,H]) -> [N,S+1,H], the class token last (first: first). */
static hap_status infer_cls_append(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_float(io, 0, "input", why, len));
  HAP_TRY(need_same_dtype(io, 0, 1, why, len));
  HAP_TRY(need_rank(io, 0, 3, 3, "input", why, len));
  HAP_TRY(expect_shape(io, 1, "cls", 3, (int64_t[]){1, 1, io->in[0].dims[2]}, why, len));
  io->out[0] = io->in[0];
  io->out[0].dims[1] += 1;
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* cls_select(x [N,S,H]) -> [N,H], the last token. */
static hap_status infer_cls_select(hap_op_io *io, char *why, size_t len) {
  HAP_TRY(need_rank(io, 0, 3, 3, "input", why, len));
  io->out[0].rank = 2;
  io->out[0].dims[0] = io->in[0].dims[0];
  io->out[0].dims[1] = io->in[0].dims[2];
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

/* ---- mixture of experts --------------------------------------------------------------------- */

enum { A_GATING_CAPACITY = 0 };

/* top2_gating(x [B,S,D], w [D,E]) -> dispatch, combine [B,S,E,C]. */
static hap_status infer_top2_gating(hap_op_io *io, char *why, size_t len) {
  shapebuf a;
  HAP_TRY(need_float(io, 0, "input", why, len));
  HAP_TRY(need_same_dtype(io, 0, 1, why, len));
  HAP_TRY(need_rank(io, 0, 3, 3, "input", why, len));
  HAP_TRY(need_rank(io, 1, 2, 2, "gate_weight", why, len));
  const hap_shape *x = &io->in[0], *w = &io->in[1];
  if (w->dims[0] != x->dims[2])
    return fail(why, len, "input 'gate_weight' has shape %s, expected [%lld, E]", sh(w, a),
                (long long)x->dims[2]);
  if (w->dims[1] < 2)
    return fail(why, len, "top-2 gating needs at least 2 experts, got %lld", (long long)w->dims[1]);
  int64_t cap = hap_attr_i(io->attrs, A_GATING_CAPACITY);
  if (cap <= 0)
    return fail(why, len, "attribute 'capacity' is %lld, expected >= 1", (long long)cap);
  for (int o = 0; o < 2; o++) {
    io->out[o] = (hap_shape){.rank = 4, .dims = {x->dims[0], x->dims[1], w->dims[1], cap}};
    io->out_dtype[o] = io->in_dtype[0];
  }
  return HAP_OK;
}

/* Forward: gate GEMM 2BSDE, softmax 5BSE, two top-1 passes and the position cumsum 4BSE, mask
 * construction 2 per dispatch element. Backward: reduce combine grads over capacity (2BSEC),
 * softmax grad 4BSE, and the gate GEMM's needed gradients. */
static void cost_top2_gating(const hap_op_io *io, hap_op_cost *c) {
  const hap_shape *x = &io->in[0];
  double b = (double)x->dims[0], s = (double)x->dims[1], d = (double)x->dims[2];
  double e = (double)io->in[1].dims[1];
  double masks = numel(&io->out[0]);
  double gemm = 2 * b * s * d * e;
  c->fwd_flops = gemm + 5 * b * s * e + 4 * b * s * e + 2 * masks;
  if (any_grad(io))
    c->bwd_flops =
        2 * masks + 4 * b * s * e + (io->in_grad[0] ? gemm : 0) + (io->in_grad[1] ? gemm : 0);
  default_bytes(io, c);
}

/* ---- losses --------------------------------------------------------------------------------- */

enum { A_LOSS_REDUCTION = 0 };

static hap_status infer_loss(hap_op_io *io, char *why, size_t len) {
  shapebuf a, b;
  HAP_TRY(need_float(io, 0, "input", why, len));
  HAP_TRY(need_int(io, 1, "target", why, len));
  HAP_TRY(need_rank(io, 0, 2, HAP_MAX_DIMS, "input", why, len));
  const hap_shape *x = &io->in[0], *t = &io->in[1];
  bool ok = t->rank == x->rank - 1 && t->dims[0] == x->dims[0];
  for (int i = 1; ok && i < t->rank; i++)
    ok = t->dims[i] == x->dims[i + 1];
  if (!ok)
    return fail(why, len, "input 'target' has shape %s, expected input %s without its class dim 1",
                sh(t, a), sh(x, b));
  const char *r = hap_attr_s(io->attrs, A_LOSS_REDUCTION);
  if (strcmp(r, "sum") != 0 && strcmp(r, "mean") != 0)
    return fail(why, len, "attribute 'reduction' is '%s', expected \"sum\" or \"mean\"", r);
  io->out[0].rank = 0;
  io->out_dtype[0] = io->in_dtype[0];
  return HAP_OK;
}

static bool loss_is_mean(const hap_op_io *io) {
  return strcmp(hap_attr_s(io->attrs, A_LOSS_REDUCTION), "mean") == 0;
}

/* nll_loss: gather one log-probability per target and add (1 each), divide once for mean.
 * Grad: scatter one value per target into a zeroed input gradient. */
static void cost_nll_loss(const hap_op_io *io, hap_op_cost *c) {
  double nt = numel(&io->in[1]);
  double elem = dsize(io->in_dtype[0]);
  c->fwd_flops = nt + (loss_is_mean(io) ? 1 : 0);
  c->fwd_bytes_read = in_bytes(io, 1) + nt * elem;
  c->fwd_bytes_written = out_bytes(io, 0);
  if (io->in_grad[0]) {
    c->bwd_flops = nt;
    c->bwd_bytes_read = in_bytes(io, 1) + out_bytes(io, 0);
    c->bwd_bytes_written = in_bytes(io, 0);
  }
}

/* cross_entropy = log_softmax (5 per input element) + nll; grad softmax - onehot, scaled: 3 per
 * input element. */
static void cost_cross_entropy(const hap_op_io *io, hap_op_cost *c) {
  double nx = numel(&io->in[0]), nt = numel(&io->in[1]);
  c->fwd_flops = 5 * nx + nt + (loss_is_mean(io) ? 1 : 0);
  c->bwd_flops = io->in_grad[0] ? 3 * nx : 0;
  default_bytes(io, c);
}

/* ---- the table ------------------------------------------------------------------------------ */

/* The arguments are designated-initializer values and array designators, which cannot take
 * parentheses. */
/* NOLINTBEGIN(bugprone-macro-parentheses) */
#define ATTR_INT(n, d, doc_)                                                                       \
  { .name = n, .type = HAP_ATTR_INT, .def_i = d, .doc = doc_ }
#define ATTR_REQ_INT(n, doc_)                                                                      \
  { .name = n, .type = HAP_ATTR_INT, .required = true, .doc = doc_ }
#define ATTR_FLOAT(n, d, doc_)                                                                     \
  { .name = n, .type = HAP_ATTR_FLOAT, .def_f = d, .doc = doc_ }
#define ATTR_REQ_FLOAT(n, doc_)                                                                    \
  { .name = n, .type = HAP_ATTR_FLOAT, .required = true, .doc = doc_ }
#define ATTR_BOOL(n, d, doc_)                                                                      \
  { .name = n, .type = HAP_ATTR_BOOL, .def_i = d, .doc = doc_ }
#define ATTR_REQ_INTS(n, doc_)                                                                     \
  { .name = n, .type = HAP_ATTR_INTS, .required = true, .doc = doc_ }
#define ATTR_INTS0(n, doc_)                                                                        \
  { .name = n, .type = HAP_ATTR_INTS, .def_n = 0, .doc = doc_ }
#define ATTR_STR(n, d, doc_)                                                                       \
  { .name = n, .type = HAP_ATTR_STR, .def_s = d, .doc = doc_ }
#define ATTR_REQ_STR(n, doc_)                                                                      \
  { .name = n, .type = HAP_ATTR_STR, .required = true, .doc = doc_ }

#define UNARY(ID, NAME, DOC, COST)                                                                 \
  [HAP_OP_##ID] = {.name = NAME,                                                                   \
                   .doc = DOC,                                                                     \
                   .min_in = 1,                                                                    \
                   .max_in = 1,                                                                    \
                   .n_out = 1,                                                                     \
                   .in_names = {"input"},                                                          \
                   .out_names = {"output"},                                                        \
                   .infer = infer_unary,                                                           \
                   .cost = COST}

#define BINARY(ID, NAME, DOC, DEF, COST)                                                           \
  [HAP_OP_##ID] = {.name = NAME,                                                                   \
                   .doc = DOC,                                                                     \
                   .min_in = 1,                                                                    \
                   .max_in = 2,                                                                    \
                   .n_out = 1,                                                                     \
                   .in_names = {"a", "b"},                                                         \
                   .out_names = {"output"},                                                        \
                   .n_attrs = 1,                                                                   \
                   .attrs = {ATTR_FLOAT("scalar", DEF, "second operand when only one input")},     \
                   .infer = infer_binary,                                                          \
                   .cost = COST}

#define REDUCE(ID, NAME, DOC, COST)                                                                \
  [HAP_OP_##ID] = {.name = NAME,                                                                   \
                   .doc = DOC,                                                                     \
                   .min_in = 1,                                                                    \
                   .max_in = 1,                                                                    \
                   .n_out = 1,                                                                     \
                   .in_names = {"input"},                                                          \
                   .out_names = {"output"},                                                        \
                   .n_attrs = 2,                                                                   \
                   .attrs = {ATTR_INTS0("dims", "dims to reduce; empty = all"),                    \
                             ATTR_BOOL("keepdim", 0, "keep reduced dims as size 1")},              \
                   .infer = infer_reduce,                                                          \
                   .cost = COST}
/* NOLINTEND(bugprone-macro-parentheses) */

static const hap_op_def op_table[HAP_OP_COUNT] = {
    [HAP_OP_LINEAR] = {.name = "linear",
                       .doc = "y = x W^T + b over the last dim",
                       .min_in = 2,
                       .max_in = 3,
                       .n_out = 1,
                       .in_names = {"input", "weight", "bias"},
                       .out_names = {"output"},
                       .param_inputs = 0x6,
                       .infer = infer_linear,
                       .cost = cost_linear},
    [HAP_OP_MATMUL] = {.name = "matmul",
                       .doc = "a [..,M,K] @ b [..,K,N], batch dims broadcast",
                       .min_in = 2,
                       .max_in = 2,
                       .n_out = 1,
                       .in_names = {"a", "b"},
                       .out_names = {"output"},
                       .infer = infer_matmul,
                       .cost = cost_matmul},
    [HAP_OP_BMM] = {.name = "bmm",
                    .doc = "a [B,M,K] @ b [B,K,N]",
                    .min_in = 2,
                    .max_in = 2,
                    .n_out = 1,
                    .in_names = {"a", "b"},
                    .out_names = {"output"},
                    .infer = infer_bmm,
                    .cost = cost_matmul},
    [HAP_OP_EINSUM] = {.name = "einsum",
                       .doc = "two-operand einsum, e.g. \"bsd,bsec->becd\"",
                       .min_in = 2,
                       .max_in = 2,
                       .n_out = 1,
                       .in_names = {"a", "b"},
                       .out_names = {"output"},
                       .n_attrs = 1,
                       .attrs = {ATTR_REQ_STR("equation", "lowercase indices, 'ab,bc->ac'")},
                       .infer = infer_einsum,
                       .cost = cost_einsum},
    [HAP_OP_CONV2D] = {.name = "conv2d",
                       .doc = "x [N,C,H,W] * w [O,C,kH,kW] + b [O]",
                       .min_in = 2,
                       .max_in = 3,
                       .n_out = 1,
                       .in_names = {"input", "weight", "bias"},
                       .out_names = {"output"},
                       .param_inputs = 0x6,
                       .n_attrs = 2,
                       .attrs = {ATTR_INT("stride", 1, "both spatial dims"),
                                 ATTR_INT("padding", 0, "zero padding, both spatial dims")},
                       .infer = infer_conv2d,
                       .cost = cost_conv2d},
    [HAP_OP_MAX_POOL2D] = {.name = "max_pool2d",
                           .doc = "max over kernel x kernel windows",
                           .min_in = 1,
                           .max_in = 1,
                           .n_out = 1,
                           .in_names = {"input"},
                           .out_names = {"output"},
                           .n_attrs = 3,
                           .attrs = {ATTR_INT("kernel", 2, "window size"),
                                     ATTR_INT("stride", 0, "0 = kernel"),
                                     ATTR_INT("padding", 0, "implicit -inf padding")},
                           .infer = infer_max_pool2d,
                           .cost = cost_max_pool2d},
    [HAP_OP_ADAPTIVE_AVG_POOL2D] = {.name = "adaptive_avg_pool2d",
                                    .doc = "average over PyTorch's adaptive bins",
                                    .min_in = 1,
                                    .max_in = 1,
                                    .n_out = 1,
                                    .in_names = {"input"},
                                    .out_names = {"output"},
                                    .n_attrs = 1,
                                    .attrs = {ATTR_REQ_INTS("output_size", "[oh, ow]")},
                                    .infer = infer_adaptive_avg_pool2d,
                                    .cost = cost_adaptive_avg_pool2d},
    [HAP_OP_EMBEDDING] = {.name = "embedding",
                          .doc = "rows of weight [V,D] picked by indices",
                          .min_in = 2,
                          .max_in = 2,
                          .n_out = 1,
                          .in_names = {"indices", "weight"},
                          .out_names = {"output"},
                          .param_inputs = 0x2,
                          .infer = infer_embedding,
                          .cost = cost_embedding},
    [HAP_OP_LAYER_NORM] = {.name = "layer_norm",
                           .doc = "normalise the trailing dims, then weight * x + bias",
                           .min_in = 1,
                           .max_in = 3,
                           .n_out = 1,
                           .in_names = {"input", "weight", "bias"},
                           .out_names = {"output"},
                           .param_inputs = 0x6,
                           .n_attrs = 2,
                           .attrs = {ATTR_INT("normalized_dims", 1, "trailing dims normalised"),
                                     ATTR_FLOAT("eps", 1e-5, "added to the variance")},
                           .infer = infer_layer_norm,
                           .cost = cost_layer_norm},
    [HAP_OP_MULTI_HEAD_ATTENTION] =
        {.name = "multi_head_attention",
         .doc = "batch-first attention, q/k/v in-projection blocks, optional additive mask",
         .min_in = 7,
         .max_in = 8,
         .n_out = 1,
         .in_names = {"query", "key", "value", "in_proj_weight", "in_proj_bias", "out_proj_weight",
                      "out_proj_bias", "mask"},
         .out_names = {"output"},
         .param_inputs = 0x78,
         .n_attrs = 2,
         .attrs = {ATTR_REQ_INT("heads", "number of heads, divides the width"),
                   ATTR_FLOAT("dropout", 0.0, "dropout on attention weights")},
         .infer = infer_mha,
         .cost = cost_mha},
    UNARY(RELU, "relu", "max(x, 0)", cost_relu),
    UNARY(GELU, "gelu", "x * Phi(x) (erf form)", cost_gelu),
    UNARY(SIGMOID, "sigmoid", "1 / (1 + exp(-x))", cost_sigmoid),
    UNARY(TANH, "tanh", "hyperbolic tangent", cost_tanh),
    UNARY(RSQRT, "rsqrt", "1 / sqrt(x)", cost_rsqrt),
    [HAP_OP_POW] = {.name = "pow",
                    .doc = "x ** exponent",
                    .min_in = 1,
                    .max_in = 1,
                    .n_out = 1,
                    .in_names = {"input"},
                    .out_names = {"output"},
                    .n_attrs = 1,
                    .attrs = {ATTR_REQ_FLOAT("exponent", "scalar exponent")},
                    .infer = infer_unary,
                    .cost = cost_pow},
    [HAP_OP_DROPOUT] = {.name = "dropout",
                        .doc = "zero with probability p, scale by 1/(1-p)",
                        .min_in = 1,
                        .max_in = 1,
                        .n_out = 1,
                        .in_names = {"input"},
                        .out_names = {"output"},
                        .n_attrs = 1,
                        .attrs = {ATTR_FLOAT("p", 0.5, "drop probability")},
                        .infer = infer_dropout,
                        .cost = cost_dropout},
    BINARY(ADD, "add", "a + b (broadcast) or a + scalar", 0.0, cost_add),
    BINARY(SUB, "sub", "a - b (broadcast) or a - scalar", 0.0, cost_sub),
    BINARY(MUL, "mul", "a * b (broadcast) or a * scalar", 1.0, cost_mul),
    BINARY(DIV, "div", "a / b (broadcast) or a / scalar", 1.0, cost_div),
    [HAP_OP_SOFTMAX] = {.name = "softmax",
                        .doc = "softmax along dim",
                        .min_in = 1,
                        .max_in = 1,
                        .n_out = 1,
                        .in_names = {"input"},
                        .out_names = {"output"},
                        .n_attrs = 1,
                        .attrs = {ATTR_INT("dim", -1, "normalised dim")},
                        .infer = infer_softmax,
                        .cost = cost_softmax},
    [HAP_OP_LOG_SOFTMAX] = {.name = "log_softmax",
                            .doc = "log of softmax along dim",
                            .min_in = 1,
                            .max_in = 1,
                            .n_out = 1,
                            .in_names = {"input"},
                            .out_names = {"output"},
                            .n_attrs = 1,
                            .attrs = {ATTR_INT("dim", -1, "normalised dim")},
                            .infer = infer_softmax,
                            .cost = cost_log_softmax},
    REDUCE(SUM, "sum", "sum over dims", cost_sum),
    REDUCE(MEAN, "mean", "mean over dims", cost_mean),
    [HAP_OP_RESHAPE] = {.name = "reshape",
                        .doc = "same elements, new shape (one -1 allowed)",
                        .min_in = 1,
                        .max_in = 1,
                        .n_out = 1,
                        .in_names = {"input"},
                        .out_names = {"output"},
                        .n_attrs = 1,
                        .attrs = {ATTR_REQ_INTS("shape", "target shape")},
                        .infer = infer_reshape,
                        .cost = cost_view},
    [HAP_OP_FLATTEN] = {.name = "flatten",
                        .doc = "merge dims start_dim..end_dim",
                        .min_in = 1,
                        .max_in = 1,
                        .n_out = 1,
                        .in_names = {"input"},
                        .out_names = {"output"},
                        .n_attrs = 2,
                        .attrs = {ATTR_INT("start_dim", 0, "first merged dim"),
                                  ATTR_INT("end_dim", -1, "last merged dim")},
                        .infer = infer_flatten,
                        .cost = cost_view},
    [HAP_OP_TRANSPOSE] = {.name = "transpose",
                          .doc = "swap two dims",
                          .min_in = 1,
                          .max_in = 1,
                          .n_out = 1,
                          .in_names = {"input"},
                          .out_names = {"output"},
                          .n_attrs = 2,
                          .attrs = {ATTR_REQ_INT("dim0", "first dim"),
                                    ATTR_REQ_INT("dim1", "second dim")},
                          .infer = infer_transpose,
                          .cost = cost_copy},
    [HAP_OP_PERMUTE] = {.name = "permute",
                        .doc = "reorder dims",
                        .min_in = 1,
                        .max_in = 1,
                        .n_out = 1,
                        .in_names = {"input"},
                        .out_names = {"output"},
                        .n_attrs = 1,
                        .attrs = {ATTR_REQ_INTS("dims", "output dim i is input dim dims[i]")},
                        .infer = infer_permute,
                        .cost = cost_copy},
    [HAP_OP_NARROW] = {.name = "narrow",
                       .doc = "slice [start, start+length) of one dim",
                       .min_in = 1,
                       .max_in = 1,
                       .n_out = 1,
                       .in_names = {"input"},
                       .out_names = {"output"},
                       .n_attrs = 3,
                       .attrs = {ATTR_REQ_INT("dim", "sliced dim"),
                                 ATTR_REQ_INT("start", "first index"),
                                 ATTR_REQ_INT("length", "slice length")},
                       .infer = infer_narrow,
                       .cost = cost_copy},
    [HAP_OP_CLS_APPEND] = {.name = "cls_append",
                           .doc = "append a learned class token: [N,S,H] -> [N,S+1,H]",
                           .min_in = 2,
                           .max_in = 2,
                           .n_out = 1,
                           .in_names = {"input", "cls"},
                           .out_names = {"output"},
                           .param_inputs = 0x2,
                           .n_attrs = 1,
                           .attrs = {ATTR_BOOL("first", 0,
                                               "the token at position 0 (torchvision's ViT), "
                                               "else last")},
                           .infer = infer_cls_append,
                           .cost = cost_copy},
    [HAP_OP_CLS_SELECT] = {.name = "cls_select",
                           .doc = "the class token (last position): [N,S,H] -> [N,H]",
                           .min_in = 1,
                           .max_in = 1,
                           .n_out = 1,
                           .in_names = {"input"},
                           .out_names = {"output"},
                           .infer = infer_cls_select,
                           .cost = cost_copy},
    [HAP_OP_TOP2_GATING] = {.name = "top2_gating",
                            .doc = "top-2 expert routing with capacity: dispatch and combine masks",
                            .min_in = 2,
                            .max_in = 2,
                            .n_out = 2,
                            .in_names = {"input", "gate_weight"},
                            .out_names = {"dispatch", "combine"},
                            .param_inputs = 0x2,
                            .n_attrs = 1,
                            .attrs = {ATTR_REQ_INT("capacity", "token slots per expert")},
                            .infer = infer_top2_gating,
                            .cost = cost_top2_gating},
    [HAP_OP_NLL_LOSS] = {.name = "nll_loss",
                         .doc = "negative log-likelihood of targets",
                         .min_in = 2,
                         .max_in = 2,
                         .n_out = 1,
                         .in_names = {"input", "target"},
                         .out_names = {"output"},
                         .n_attrs = 1,
                         .attrs = {ATTR_STR("reduction", "mean", "\"sum\" or \"mean\"")},
                         .infer = infer_loss,
                         .cost = cost_nll_loss},
    [HAP_OP_CROSS_ENTROPY] = {.name = "cross_entropy",
                              .doc = "log_softmax over dim 1 + nll_loss",
                              .min_in = 2,
                              .max_in = 2,
                              .n_out = 1,
                              .in_names = {"input", "target"},
                              .out_names = {"output"},
                              .n_attrs = 1,
                              .attrs = {ATTR_STR("reduction", "mean", "\"sum\" or \"mean\"")},
                              .infer = infer_loss,
                              .cost = cost_cross_entropy},
};

const hap_op_def *hap_op_get(hap_op op) {
  return (unsigned)op < HAP_OP_COUNT ? &op_table[op] : NULL;
}

const char *hap_op_name(hap_op op) { return (unsigned)op < HAP_OP_COUNT ? op_table[op].name : "?"; }

hap_status hap_op_lookup(const char *name, hap_op *out) {
  for (int i = 0; i < HAP_OP_COUNT; i++) {
    if (strcmp(op_table[i].name, name) == 0) {
      *out = (hap_op)i;
      return HAP_OK;
    }
  }
  return HAP_ENOTFOUND;
}

int hap_op_attr_index(hap_op op, const char *name) {
  const hap_op_def *d = hap_op_get(op);
  for (int i = 0; d && i < d->n_attrs; i++)
    if (strcmp(d->attrs[i].name, name) == 0)
      return i;
  return -1;
}

void hap_attrs_init(hap_attrs *a, hap_op op) {
  memset(a, 0, sizeof *a);
  const hap_op_def *d = hap_op_get(op);
  for (int i = 0; d && i < d->n_attrs; i++) {
    const hap_attr_spec *s = &d->attrs[i];
    switch (s->type) {
    case HAP_ATTR_INT:
    case HAP_ATTR_BOOL: a->v[i].u.i = s->def_i; break;
    case HAP_ATTR_FLOAT: a->v[i].u.f = s->def_f; break;
    case HAP_ATTR_INTS:
      a->v[i].u.ints.n = s->def_n;
      for (int k = 0; k < s->def_n; k++)
        a->v[i].u.ints.v[k] = s->def_v[k];
      break;
    case HAP_ATTR_STR:
      if (s->def_s)
        snprintf(a->v[i].u.s, sizeof a->v[i].u.s, "%s", s->def_s);
      break;
    }
  }
}

static hap_status attr_slot(hap_op op, const char *name, hap_attr_type want, int *idx,
                            hap_err *err) {
  int i = hap_op_attr_index(op, name);
  if (i < 0)
    return hap_err_set(err, HAP_ENOTFOUND, "op '%s' has no attribute '%s'", hap_op_name(op), name);
  hap_attr_type t = op_table[op].attrs[i].type;
  if (t != want && !(want == HAP_ATTR_INT && t == HAP_ATTR_BOOL))
    return hap_err_set(err, HAP_EINVAL, "attribute '%s' of op '%s' has another type", name,
                       hap_op_name(op));
  *idx = i;
  return HAP_OK;
}

hap_status hap_attrs_set_int(hap_attrs *a, hap_op op, const char *name, int64_t v, hap_err *err) {
  int i = 0;
  HAP_TRY(attr_slot(op, name, HAP_ATTR_INT, &i, err));
  if (op_table[op].attrs[i].type == HAP_ATTR_BOOL && v != 0 && v != 1)
    return hap_err_set(err, HAP_EINVAL, "attribute '%s' is a bool, got %lld", name, (long long)v);
  a->v[i].u.i = v;
  a->given |= 1u << i;
  return HAP_OK;
}

hap_status hap_attrs_set_float(hap_attrs *a, hap_op op, const char *name, double v, hap_err *err) {
  int i = 0;
  HAP_TRY(attr_slot(op, name, HAP_ATTR_FLOAT, &i, err));
  if (!isfinite(v))
    return hap_err_set(err, HAP_EINVAL, "attribute '%s' must be finite", name);
  a->v[i].u.f = v;
  a->given |= 1u << i;
  return HAP_OK;
}

hap_status hap_attrs_set_ints(hap_attrs *a, hap_op op, const char *name, const int64_t *v,
                              int32_t n, hap_err *err) {
  int i = 0;
  HAP_TRY(attr_slot(op, name, HAP_ATTR_INTS, &i, err));
  if (n < 0 || n > HAP_MAX_DIMS)
    return hap_err_set(err, HAP_EINVAL, "attribute '%s' has %d entries, at most %d allowed", name,
                       n, HAP_MAX_DIMS);
  a->v[i].u.ints.n = n;
  for (int k = 0; k < n; k++)
    a->v[i].u.ints.v[k] = v[k];
  a->given |= 1u << i;
  return HAP_OK;
}

hap_status hap_attrs_set_str(hap_attrs *a, hap_op op, const char *name, const char *v,
                             hap_err *err) {
  int i = 0;
  HAP_TRY(attr_slot(op, name, HAP_ATTR_STR, &i, err));
  if (strlen(v) >= HAP_ATTR_STR_MAX)
    return hap_err_set(err, HAP_EINVAL, "attribute '%s' is longer than %d bytes", name,
                       HAP_ATTR_STR_MAX - 1);
  snprintf(a->v[i].u.s, sizeof a->v[i].u.s, "%s", v);
  a->given |= 1u << i;
  return HAP_OK;
}

hap_status hap_attrs_check(const hap_attrs *a, hap_op op, hap_err *err) {
  const hap_op_def *d = &op_table[op];
  for (int i = 0; i < d->n_attrs; i++)
    if (d->attrs[i].required && !(a->given & (1u << i)))
      return hap_err_set(err, HAP_EINVAL, "op '%s' needs attribute '%s' (%s)", d->name,
                         d->attrs[i].name, d->attrs[i].doc);
  return HAP_OK;
}

bool hap_attrs_eq(const hap_attrs *a, const hap_attrs *b, hap_op op) {
  const hap_op_def *d = &op_table[op];
  for (int i = 0; i < d->n_attrs; i++) {
    const hap_attr_value *x = &a->v[i], *y = &b->v[i];
    switch (d->attrs[i].type) {
    case HAP_ATTR_INT:
    case HAP_ATTR_BOOL:
      if (x->u.i != y->u.i)
        return false;
      break;
    case HAP_ATTR_FLOAT:
      /* bitwise on purpose: 0.0 and -0.0 are different attribute values */
      // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
      if (memcmp(&x->u.f, &y->u.f, sizeof x->u.f) != 0)
        return false;
      break;
    case HAP_ATTR_INTS:
      if (x->u.ints.n != y->u.ints.n ||
          memcmp(x->u.ints.v, y->u.ints.v, (size_t)x->u.ints.n * sizeof x->u.ints.v[0]) != 0)
        return false;
      break;
    case HAP_ATTR_STR:
      if (strcmp(x->u.s, y->u.s) != 0)
        return false;
      break;
    }
  }
  return true;
}

hap_status hap_op_infer(hap_op op, hap_op_io *io, hap_err *err) {
  const hap_op_def *d = hap_op_get(op);
  if (d == NULL)
    return hap_err_set(err, HAP_EINVAL, "unknown op %d", (int)op);
  if (io->n_in < d->min_in || io->n_in > d->max_in) {
    if (d->min_in == d->max_in)
      return hap_err_set(err, HAP_EINVAL, "%s takes %d inputs, got %d", d->name, d->min_in,
                         io->n_in);
    return hap_err_set(err, HAP_EINVAL, "%s takes %d to %d inputs, got %d", d->name, d->min_in,
                       d->max_in, io->n_in);
  }
  HAP_TRY(hap_attrs_check(io->attrs, op, err));
  for (int i = 0; i < io->n_in; i++) {
    const hap_shape *s = &io->in[i];
    shapebuf b;
    int64_t n;
    if (s->rank < 0 || s->rank > HAP_MAX_DIMS)
      return hap_err_set(err, HAP_EINVAL, "%s: input '%s' has rank %d, expected 0..%d", d->name,
                         d->in_names[i], s->rank, HAP_MAX_DIMS);
    for (int k = 0; k < s->rank; k++)
      if (s->dims[k] <= 0)
        return hap_err_set(err, HAP_EINVAL, "%s: input '%s' has shape %s, expected positive dims",
                           d->name, d->in_names[i], sh(s, b));
    if (hap_shape_numel(s, &n) != HAP_OK)
      return hap_err_set(err, HAP_EOVERFLOW,
                         "%s: input '%s' has shape %s, whose element count overflows int64",
                         d->name, d->in_names[i], sh(s, b));
  }
  io->n_out = d->n_out;
  char why[512];
  why[0] = '\0';
  hap_status st = d->infer(io, why, sizeof why);
  if (st != HAP_OK)
    return hap_err_set(err, st, "%s: %s", d->name, why);
  for (int o = 0; o < io->n_out; o++) {
    int64_t n, bytes;
    if (hap_shape_numel(&io->out[o], &n) != HAP_OK ||
        __builtin_mul_overflow(n, (int64_t)hap_dtype_size(io->out_dtype[o]), &bytes))
      return hap_err_set(err, HAP_EOVERFLOW, "%s: output '%s' has more bytes than int64 holds",
                         d->name, d->out_names[o]);
    for (int k = 0; k < io->out[o].rank; k++)
      if (io->out[o].dims[k] <= 0)
        return hap_err_set(err, HAP_EINVAL, "%s: output '%s' would have an empty dim %d", d->name,
                           d->out_names[o], k);
  }
  return HAP_OK;
}

void hap_op_cost_of(hap_op op, const hap_op_io *io, hap_op_cost *cost) {
  memset(cost, 0, sizeof *cost);
  const hap_op_def *d = hap_op_get(op);
  if (d != NULL)
    d->cost(io, cost);
}

bool hap_op_gemm_dims(hap_op op, const hap_op_io *io, double *m, double *n, double *k) {
  const hap_shape *a = &io->in[0];
  switch (op) {
  case HAP_OP_LINEAR:
    *k = (double)a->dims[a->rank - 1];
    *m = numel(a) / *k;
    *n = (double)io->in[1].dims[0];
    return true;
  case HAP_OP_MATMUL:
  case HAP_OP_BMM: {
    const hap_shape *o = &io->out[0];
    *k = (double)a->dims[a->rank - 1];
    *n = (double)o->dims[o->rank - 1];
    *m = numel(o) / *n;
    return true;
  }
  case HAP_OP_CONV2D: {
    const hap_shape *w = &io->in[1], *o = &io->out[0];
    *n = (double)w->dims[0];
    *k = (double)w->dims[1] * (double)w->dims[2] * (double)w->dims[3];
    *m = numel(o) / *n;
    return true;
  }
  case HAP_OP_MULTI_HEAD_ATTENTION: /* the projections: [N*L, E] x [E, P] */
    *m = (double)a->dims[0] * (double)a->dims[1];
    *k = (double)a->dims[2];
    *n = (double)io->in[MHA_W_IN].dims[1];
    return true;
  case HAP_OP_TOP2_GATING:
    *m = (double)a->dims[0] * (double)a->dims[1];
    *k = (double)a->dims[2];
    *n = (double)io->in[1].dims[1];
    return true;
  case HAP_OP_EINSUM: {
    einsum_spec e;
    char why[8];
    if (parse_einsum(io, &e, why, sizeof why) != HAP_OK)
      return false;
    /* k: contracted indices; n: output indices only in operand b; m: the other output indices */
    *m = *n = *k = 1;
    for (int c = 0; c < 26; c++) {
      if (!e.extent[c])
        continue;
      char ch = (char)('a' + c);
      bool in_out = strchr(e.out, ch) != NULL, in_a = strchr(e.op[0], ch) != NULL;
      double x = (double)e.extent[c];
      if (!in_out)
        *k *= x;
      else if (!in_a)
        *n *= x;
      else
        *m *= x;
    }
    return true;
  }
  default: return false;
  }
}
