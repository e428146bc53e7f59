/* k_nn.c — pooling, embedding, layer_norm and the losses (nll_loss, cross_entropy). Semantics:
 * docs/ops.md; statistics and sums in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"
#include "kern_math.h"

/* ---- max_pool2d (state: the argmax of every output, an input flat index) --------------------- */

typedef struct pool_dims {
  int64_t nc, h, w, ho, wo, k, stride, pad;
} pool_dims;

static pool_dims max_pool_dims(const hap_op_io *io) {
  const hap_shape *x = &io->in[0], *y = &io->out[0];
  int64_t k = k_attr_i(io, HAP_OP_MAX_POOL2D, "kernel");
  int64_t s = k_attr_i(io, HAP_OP_MAX_POOL2D, "stride");
  return (pool_dims){x->dims[0] * x->dims[1],
                     x->dims[2],
                     x->dims[3],
                     y->dims[2],
                     y->dims[3],
                     k,
                     s == 0 ? k : s,
                     k_attr_i(io, HAP_OP_MAX_POOL2D, "padding")};
}

hap_status k_max_pool2d_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                            hap_err *err) {
  pool_dims d = max_pool_dims(c->io);
  int64_t n_out = k_numel(&c->io->out[0]);
  void *buf = NULL;
  HAP_TRY(k_state_begin(st, c->op, (size_t)n_out * sizeof(int64_t), true, &buf, err));
  int64_t *arg = buf;
  const float *x = c->in[0];
  float *y = out[0];
  for (int64_t p = 0; p < d.nc; p++)
    for (int64_t oy = 0; oy < d.ho; oy++)
      for (int64_t ox = 0; ox < d.wo; ox++) {
        int64_t best_at = -1;
        float best = -INFINITY;
        for (int64_t i = 0; i < d.k; i++) {
          int64_t iy = oy * d.stride + i - d.pad;
          if (iy < 0 || iy >= d.h)
            continue;
          for (int64_t j = 0; j < d.k; j++) {
            int64_t jx = ox * d.stride + j - d.pad;
            if (jx < 0 || jx >= d.w)
              continue;
            int64_t at = (p * d.h + iy) * d.w + jx;
            float v = x[at];
            bool take = best_at < 0 || v > best; /* the first maximum wins ties */
            best = take ? v : best;              /* selects, not branches: data-independent time */
            best_at = take ? at : best_at;
          }
        }
        int64_t o = (p * d.ho + oy) * d.wo + ox;
        y[o] = best;
        arg[o] = best_at;
      }
  k_state_end(st, buf);
  return HAP_OK;
}

hap_status k_max_pool2d_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                            const hap_kernel_state *st, hap_err *err) {
  int64_t n_out = k_numel(&c->io->out[0]);
  hap_kernel_state tmp;
  void *data = NULL;
  HAP_TRY(k_state_for_backward(c, st, (size_t)n_out * sizeof(int64_t), &tmp, &data, err));
  const int64_t *arg = data;
  for (int64_t o = 0; o < n_out; o++)
    if (arg[o] >= 0)
      din[0][arg[o]] += dout[0][o];
  hap_kernel_state_free(&tmp);
  return HAP_OK;
}

/* ---- adaptive_avg_pool2d (PyTorch's bins) ---------------------------------------------------- */

static int64_t bin_lo(int64_t i, int64_t in, int64_t out) { return i * in / out; }
static int64_t bin_hi(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

hap_status k_avg_pool_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                          hap_err *err) {
  (void)st;
  (void)err;
  const hap_shape *x = &c->io->in[0], *yo = &c->io->out[0];
  int64_t nc = x->dims[0] * x->dims[1], h = x->dims[2], w = x->dims[3];
  int64_t oh = yo->dims[2], ow = yo->dims[3];
  const float *xv = c->in[0];
  float *y = out[0];
  for (int64_t p = 0; p < nc; p++)
    for (int64_t i = 0; i < oh; i++)
      for (int64_t j = 0; j < ow; j++) {
        int64_t h0 = bin_lo(i, h, oh), h1 = bin_hi(i, h, oh);
        int64_t w0 = bin_lo(j, w, ow), w1 = bin_hi(j, w, ow);
        double s = 0;
        for (int64_t a = h0; a < h1; a++)
          for (int64_t b = w0; b < w1; b++)
            s += xv[(p * h + a) * w + b];
        y[(p * oh + i) * ow + j] = (float)(s / (double)((h1 - h0) * (w1 - w0)));
      }
  return HAP_OK;
}

hap_status k_avg_pool_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                          const hap_kernel_state *st, hap_err *err) {
  (void)st;
  (void)err;
  const hap_shape *x = &c->io->in[0], *yo = &c->io->out[0];
  int64_t nc = x->dims[0] * x->dims[1], h = x->dims[2], w = x->dims[3];
  int64_t oh = yo->dims[2], ow = yo->dims[3];
  const float *g = dout[0];
  float *dx = din[0];
  for (int64_t p = 0; p < nc; p++)
    for (int64_t i = 0; i < oh; i++)
      for (int64_t j = 0; j < ow; j++) {
        int64_t h0 = bin_lo(i, h, oh), h1 = bin_hi(i, h, oh);
        int64_t w0 = bin_lo(j, w, ow), w1 = bin_hi(j, w, ow);
        float v = (float)(g[(p * oh + i) * ow + j] / (double)((h1 - h0) * (w1 - w0)));
        for (int64_t a = h0; a < h1; a++)
          for (int64_t b = w0; b < w1; b++)
            dx[(p * h + a) * w + b] += v;
      }
  return HAP_OK;
}

/* ---- embedding ------------------------------------------------------------------------------- */

/* The local row of id t, or -1 for a zero row (vocab-parallel: not held here). */
static hap_status embed_row(const hap_kernel_call *c, int64_t f, int64_t *row, hap_err *err) {
  const hap_op_io *io = c->io;
  int64_t id = k_index_at(c->in[0], io->in_dtype[0], f);
  bool local = k_flag(c, HAP_VARIANT_LOCAL_ROWS);
  int64_t v_full = local ? c->shard->full->in[1].dims[0] : io->in[1].dims[0];
  if (id < 0 || id >= v_full)
    return hap_err_set(err, HAP_EINVAL, "embedding: index %lld at position %lld, expected 0..%lld",
                       (long long)id, (long long)f, (long long)(v_full - 1));
  int64_t r = local ? id - c->shard->offset : id;
  *row = r >= 0 && r < io->in[1].dims[0] ? r : -1;
  return HAP_OK;
}

hap_status k_embedding_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                           hap_err *err) {
  (void)st;
  const hap_op_io *io = c->io;
  int64_t n = k_numel(&io->in[0]), d = io->in[1].dims[1];
  const float *w = c->in[1];
  float *y = out[0];
  for (int64_t f = 0; f < n; f++) {
    int64_t row = -1;
    HAP_TRY(embed_row(c, f, &row, err));
    if (row < 0)
      memset(y + f * d, 0, (size_t)d * sizeof(float));
    else if (d > 0)
      memcpy(y + f * d, w + row * d, (size_t)d * sizeof(float));
  }
  return HAP_OK;
}

hap_status k_embedding_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                           const hap_kernel_state *st, hap_err *err) {
  (void)st;
  const hap_op_io *io = c->io;
  if (!io->in_grad[1])
    return HAP_OK;
  int64_t n = k_numel(&io->in[0]), d = io->in[1].dims[1];
  const float *g = dout[0];
  for (int64_t f = 0; f < n; f++) {
    int64_t row = -1;
    HAP_TRY(embed_row(c, f, &row, err));
    for (int64_t j = 0; row >= 0 && j < d; j++)
      din[1][row * d + j] += g[f * d + j];
  }
  return HAP_OK;
}

/* ---- layer_norm (state: mean and rstd per normalised row, float32) --------------------------- */

ln_dims k_ln_dims_of(const hap_op_io *io) {
  const hap_shape *x = &io->in[0];
  int nd = (int)k_attr_i(io, HAP_OP_LAYER_NORM, "normalized_dims");
  int64_t inner = k_prod(x, x->rank - nd, x->rank);
  return (ln_dims){inner ? k_numel(x) / inner : 0, inner, k_attr_f(io, HAP_OP_LAYER_NORM, "eps")};
}

/* One normalised row: statistics in double (two passes, 8 partial sums each), y in double
 * rounded once. */
K_VECTOR_CLONES static void ln_row_fwd(const float *xr, const float *w, const float *b,
                                       int64_t inner, double eps, float *yr, float *mean_out,
                                       float *rstd_out) {
  double mean = k_sum_f64(xr, inner) / (double)inner;
  double var = k_sum_sq_dev_f64(xr, inner, mean) / (double)inner;
  double rstd = 1 / sqrt(var + eps);
  *mean_out = (float)mean;
  *rstd_out = (float)rstd;
  for (int64_t j = 0; j < inner; j++) {
    double v = (xr[j] - mean) * rstd;
    if (w)
      v *= w[j];
    if (b)
      v += b[j];
    yr[j] = (float)v;
  }
}

hap_status k_layer_norm_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                            hap_err *err) {
  ln_dims d = k_ln_dims_of(c->io);
  void *buf = NULL;
  HAP_TRY(k_state_begin(st, c->op, (size_t)(2 * d.rows) * sizeof(float), false, &buf, err));
  float *stats = buf; /* [rows] mean, then [rows] rstd */
  const float *x = c->in[0];
  const float *w = c->io->n_in > 1 ? c->in[1] : NULL, *b = c->io->n_in > 2 ? c->in[2] : NULL;
  float *y = out[0];
  for (int64_t r = 0; r < d.rows; r++)
    ln_row_fwd(x + r * d.inner, w, b, d.inner, d.eps, y + r * d.inner, &stats[r],
               &stats[d.rows + r]);
  k_state_end(st, buf);
  return HAP_OK;
}

/* One row's backward: the weight and bias sums into acc_w, acc_b (double, per column) and, when
 * dx is given, dx += rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) (dx = ... when fresh). */
K_VECTOR_CLONES static void ln_row_bwd(const float *xr, const float *gr, const float *w,
                                       double mean, double rstd, int64_t inner, double *acc_w,
                                       double *acc_b, float *dx, bool fresh) {
  double p1[8] = {0, 0, 0, 0, 0, 0, 0, 0}, p2[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  double s1 = 0, s2 = 0; /* sum dxhat, sum dxhat * xhat */
  int64_t j = 0;
  for (; j + 8 <= inner; j += 8)
    for (int k = 0; k < 8; k++) {
      double xh = (xr[j + k] - mean) * rstd;
      double dxh = w ? (double)gr[j + k] * w[j + k] : gr[j + k];
      p1[k] += dxh;
      p2[k] += dxh * xh;
      acc_w[j + k] += (double)gr[j + k] * xh;
      acc_b[j + k] += gr[j + k];
    }
  for (; j < inner; j++) {
    double xh = (xr[j] - mean) * rstd;
    double dxh = w ? (double)gr[j] * w[j] : gr[j];
    s1 += dxh;
    s2 += dxh * xh;
    acc_w[j] += (double)gr[j] * xh;
    acc_b[j] += gr[j];
  }
  if (dx == NULL)
    return;
  for (int k = 0; k < 8; k++) {
    s1 += p1[k];
    s2 += p2[k];
  }
  s1 /= (double)inner;
  s2 /= (double)inner;
  for (j = 0; j < inner; j++) { /* stored (from 0) or added: one loop each, no select inside */
    double xh = (xr[j] - mean) * rstd;
    double dxh = w ? (double)gr[j] * w[j] : gr[j];
    float v = (float)(rstd * (dxh - s1 - xh * s2));
    if (fresh)
      dx[j] = 0.0f + v;
    else
      dx[j] += v;
  }
}

hap_status k_layer_norm_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                            const hap_kernel_state *st, hap_err *err) {
  const hap_op_io *io = c->io;
  ln_dims d = k_ln_dims_of(io);
  hap_kernel_state tmp;
  void *data = NULL;
  HAP_TRY(k_state_for_backward(c, st, (size_t)(2 * d.rows) * sizeof(float), &tmp, &data, err));
  const float *stats = data;
  const float *x = c->in[0], *g = dout[0], *w = io->n_in > 1 ? c->in[1] : NULL;
  bool want_w = io->n_in > 1 && io->in_grad[1], want_b = io->n_in > 2 && io->in_grad[2];
  double *acc = k_calloc((size_t)(2 * d.inner), sizeof(double), err); /* dw, db */
  if (acc == NULL) {
    hap_kernel_state_free(&tmp);
    return HAP_ENOMEM;
  }
  for (int64_t r = 0; r < d.rows; r++)
    ln_row_bwd(x + r * d.inner, g + r * d.inner, w, stats[r], stats[d.rows + r], d.inner, acc,
               acc + d.inner, io->in_grad[0] ? din[0] + r * d.inner : NULL, k_fresh(c, 0));
  for (int64_t j = 0; j < d.inner; j++) {
    if (want_w)
      din[1][j] = (k_fresh(c, 1) ? 0.0f : din[1][j]) + (float)acc[j];
    if (want_b)
      din[2][j] = (k_fresh(c, 2) ? 0.0f : din[2][j]) + (float)acc[d.inner + j];
  }
  free(acc);
  hap_kernel_state_free(&tmp);
  return HAP_OK;
}

/* ---- nll_loss, cross_entropy ----------------------------------------------------------------- */

loss_dims k_loss_dims_of(const hap_kernel_call *c) {
  const hap_op_io *io = c->io;
  const hap_shape *x = &io->in[0];
  bool mean = strcmp(hap_attr_s(io->attrs, hap_op_attr_index(c->op, "reduction")), "mean") == 0;
  const hap_shape *t = k_flag(c, HAP_VARIANT_GLOBAL_COUNT) ? &c->shard->full->in[1] : &io->in[1];
  return (loss_dims){x->dims[0], x->dims[1], k_prod(x, 2, x->rank),
                     mean ? (double)k_numel(t) : 1.0};
}

static hap_status loss_target(const hap_kernel_call *c, const loss_dims *d, int64_t f, int64_t *cls,
                              hap_err *err) {
  *cls = k_index_at(c->in[1], c->io->in_dtype[1], f);
  if (*cls < 0 || *cls >= d->classes)
    return hap_err_set(err, HAP_EINVAL, "%s: target %lld at position %lld, expected 0..%lld",
                       hap_op_name(c->op), (long long)*cls, (long long)f,
                       (long long)(d->classes - 1));
  return HAP_OK;
}

/* log-sum-exp of one contiguous row of classes (inner = 1), double-precision exp: the vector
 * column walk does not pay for a single column. */
static double lse_row(const float *p, int64_t classes) {
  double mx = -INFINITY, z = 0;
  for (int64_t k = 0; k < classes; k++)
    mx = fmax(mx, p[k]);
  if (mx == -INFINITY)
    return mx;
  for (int64_t k = 0; k < classes; k++)
    z += exp(p[k] - mx);
  return mx + log(z);
}

/* Scratch for k_lse_columns: mx [inner] floats, then z and lse [inner] doubles. */
static void *lse_scratch(const loss_dims *d, float **mx, double **z, double **lse, hap_err *err) {
  int64_t inner = d->inner > 0 ? d->inner : 1;
  double *buf = k_malloc((size_t)(3 * inner), sizeof(double), err);
  if (buf == NULL)
    return NULL;
  *z = buf;
  *lse = buf + inner;
  *mx = (float *)(buf + 2 * inner);
  return buf;
}

hap_status k_loss_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                      hap_err *err) {
  (void)st;
  loss_dims d = k_loss_dims_of(c);
  const float *x = c->in[0];
  bool ce = c->op == HAP_OP_CROSS_ENTROPY;
  float *mx = NULL;
  double *z = NULL, *lse = NULL;
  void *scratch = ce ? lse_scratch(&d, &mx, &z, &lse, err) : NULL;
  if (ce && scratch == NULL)
    return HAP_ENOMEM;
  double total = 0;
  hap_status st_t = HAP_OK;
  for (int64_t i = 0; i < d.n && st_t == HAP_OK; i++) {
    if (ce && d.inner == 1)
      lse[0] = lse_row(x + i * d.classes, d.classes);
    else if (ce)
      k_lse_columns(x + i * d.classes * d.inner, d.classes, d.inner, mx, z, lse);
    for (int64_t j = 0; j < d.inner; j++) {
      int64_t cls;
      if ((st_t = loss_target(c, &d, i * d.inner + j, &cls, err)) != HAP_OK)
        break;
      double lp = x[(i * d.classes + cls) * d.inner + j];
      if (ce)
        lp -= lse[j];
      total -= lp;
    }
  }
  free(scratch);
  if (st_t != HAP_OK)
    return st_t;
  ((float *)out[0])[0] = (float)(total / d.count);
  return HAP_OK;
}

hap_status k_loss_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                      const hap_kernel_state *st, hap_err *err) {
  (void)st;
  loss_dims d = k_loss_dims_of(c);
  const float *x = c->in[0];
  double scale = dout[0][0] / d.count;
  float *dx = din[0];
  bool ce = c->op == HAP_OP_CROSS_ENTROPY;
  float *mx = NULL;
  double *z = NULL, *lse = NULL;
  void *scratch = ce ? lse_scratch(&d, &mx, &z, &lse, err) : NULL;
  if (ce && scratch == NULL)
    return HAP_ENOMEM;
  hap_status st_t = HAP_OK;
  for (int64_t i = 0; i < d.n && st_t == HAP_OK; i++) {
    int64_t base = i * d.classes * d.inner;
    if (ce && d.inner == 1) { /* dx += scale softmax(x) */
      double l = lse_row(x + base, d.classes);
      for (int64_t k = 0; k < d.classes; k++)
        dx[base + k] += (float)(scale * exp(x[base + k] - l));
    } else if (ce) {
      k_lse_columns(x + base, d.classes, d.inner, mx, z, lse);
      k_add_softmax_columns(x + base, d.classes, d.inner, lse, scale, dx + base);
    }
    for (int64_t j = 0; j < d.inner; j++) { /* dx -= scale at the target */
      int64_t cls;
      if ((st_t = loss_target(c, &d, i * d.inner + j, &cls, err)) != HAP_OK)
        break;
      dx[base + cls * d.inner + j] -= (float)scale;
    }
  }
  free(scratch);
  return st_t;
}
