/* k_elem.c — elementwise, softmax, reduction and layout kernels: relu, gelu, sigmoid, tanh, rsqrt,
 * pow, dropout, add/sub/mul/div (NumPy broadcasting or a scalar), softmax, log_softmax, sum, mean,
 * reshape, flatten, transpose, permute, narrow, cls_append, cls_select. Semantics: docs/ops.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"

/* ---- unary ----------------------------------------------------------------------------------- */

static const double INV_SQRT2 = 0.70710678118654752440;
static const double INV_SQRT_2PI = 0.39894228040143267794;

static double dropout_p(const hap_kernel_call *c) { return k_attr_f(c->io, HAP_OP_DROPOUT, "p"); }

hap_status k_unary_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                       hap_err *err) {
  (void)st;
  (void)err;
  const float *x = c->in[0];
  float *y = out[0];
  int64_t n = k_numel(&c->io->in[0]);
  switch (c->op) {
  case HAP_OP_RELU:
    for (int64_t i = 0; i < n; i++) { /* branch-free: the time must not depend on the data */
      float v = x[i];
      y[i] = v > 0 ? v : 0.0f;
    }
    break;
  case HAP_OP_GELU:
    for (int64_t i = 0; i < n; i++)
      y[i] = (float)(0.5 * x[i] * (1 + erf(x[i] * INV_SQRT2)));
    break;
  case HAP_OP_SIGMOID:
    for (int64_t i = 0; i < n; i++)
      y[i] = (float)(1 / (1 + exp(-(double)x[i])));
    break;
  case HAP_OP_TANH:
    for (int64_t i = 0; i < n; i++)
      y[i] = (float)tanh((double)x[i]);
    break;
  case HAP_OP_RSQRT:
    for (int64_t i = 0; i < n; i++)
      y[i] = (float)(1 / sqrt((double)x[i]));
    break;
  case HAP_OP_POW: {
    double e = k_attr_f(c->io, HAP_OP_POW, "exponent");
    for (int64_t i = 0; i < n; i++)
      y[i] = (float)pow(x[i], e);
    break;
  }
  default: { /* dropout */
    double p = dropout_p(c);
    float scale = (float)(1 / (1 - p));
    k_gpos g;
    k_gpos_of_input(c, 0, &g);
    for (int64_t i = 0; i < n; i++) {
      float v = x[i] * scale;
      y[i] = hap_kernel_keep(c->seed, k_gpos_at(&g, i), p) ? v : 0.0f;
    }
  }
  }
  return HAP_OK;
}

hap_status k_unary_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                       const hap_kernel_state *st, hap_err *err) {
  (void)st;
  (void)err;
  const float *x = c->in[0], *y = c->out[0], *g = dout[0];
  float *dx = din[0];
  int64_t n = k_numel(&c->io->in[0]);
  if (g == NULL)
    return HAP_OK;
  switch (c->op) {
  case HAP_OP_RELU:
    for (int64_t i = 0; i < n; i++) { /* unconditional loads: if-converted, no branch */
      float gi = g[i];
      dx[i] += x[i] > 0 ? gi : 0.0f;
    }
    break;
  case HAP_OP_GELU:
    for (int64_t i = 0; i < n; i++) {
      double v = x[i];
      double d = 0.5 * (1 + erf(v * INV_SQRT2)) + v * INV_SQRT_2PI * exp(-0.5 * v * v);
      dx[i] += (float)(g[i] * d);
    }
    break;
  case HAP_OP_SIGMOID:
    for (int64_t i = 0; i < n; i++)
      dx[i] += g[i] * y[i] * (1 - y[i]);
    break;
  case HAP_OP_TANH:
    for (int64_t i = 0; i < n; i++)
      dx[i] += g[i] * (1 - y[i] * y[i]);
    break;
  case HAP_OP_RSQRT:
    for (int64_t i = 0; i < n; i++)
      dx[i] += -0.5f * y[i] * y[i] * y[i] * g[i];
    break;
  case HAP_OP_POW: {
    double e = k_attr_f(c->io, HAP_OP_POW, "exponent");
    for (int64_t i = 0; i < n; i++)
      dx[i] += (float)(g[i] * e * pow(x[i], e - 1));
    break;
  }
  default: { /* dropout */
    double p = dropout_p(c);
    float scale = (float)(1 / (1 - p));
    k_gpos gp;
    k_gpos_of_input(c, 0, &gp);
    for (int64_t i = 0; i < n; i++) {
      float v = g[i] * scale;
      dx[i] += hap_kernel_keep(c->seed, k_gpos_at(&gp, i), p) ? v : 0.0f;
    }
  }
  }
  return HAP_OK;
}

/* ---- binary ---------------------------------------------------------------------------------- */

/* Odometer over the dims of `o`, advancing two strided offsets. */
typedef struct k_odo {
  int rank;
  int64_t dims[HAP_MAX_DIMS], idx[HAP_MAX_DIMS], st[2][HAP_MAX_DIMS], at[2];
} k_odo;

static void odo_init(k_odo *d, const hap_shape *o, const int64_t *st0, const int64_t *st1) {
  memset(d, 0, sizeof *d);
  d->rank = o->rank;
  for (int i = 0; i < o->rank; i++) {
    d->dims[i] = o->dims[i];
    d->st[0][i] = st0 ? st0[i] : 0;
    d->st[1][i] = st1 ? st1[i] : 0;
  }
}

static void odo_next(k_odo *d) {
  for (int i = d->rank - 1; i >= 0; i--) {
    d->idx[i]++;
    d->at[0] += d->st[0][i];
    d->at[1] += d->st[1][i];
    if (d->idx[i] < d->dims[i])
      return;
    d->at[0] -= d->st[0][i] * d->dims[i];
    d->at[1] -= d->st[1][i] * d->dims[i];
    d->idx[i] = 0;
  }
}

static float apply_binary(hap_op op, float a, float b) {
  switch (op) {
  case HAP_OP_ADD: return a + b;
  case HAP_OP_SUB: return a - b;
  case HAP_OP_MUL: return a * b;
  default: return a / b;
  }
}

hap_status k_binary_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err) {
  (void)st;
  (void)err;
  const hap_op_io *io = c->io;
  const hap_shape *o = &io->out[0];
  const float *a = c->in[0], *b = io->n_in > 1 ? c->in[1] : NULL;
  float *y = out[0];
  bool za = k_once_zero(c, 0), zb = io->n_in > 1 && k_once_zero(c, 1);
  float scalar = k_scalar_zero(c) ? 0.0f : (float)k_attr_f(io, c->op, "scalar");
  int64_t sa[HAP_MAX_DIMS], sb[HAP_MAX_DIMS];
  k_bcast_strides(&io->in[0], o, sa);
  if (b != NULL)
    k_bcast_strides(&io->in[1], o, sb);
  k_odo d;
  odo_init(&d, o, sa, b ? sb : NULL);
  int64_t n = k_numel(o);
  for (int64_t f = 0; f < n; f++, odo_next(&d)) {
    float av = za ? 0.0f : a[d.at[0]];
    float bv = b == NULL ? scalar : zb ? 0.0f : b[d.at[1]];
    y[f] = apply_binary(c->op, av, bv);
  }
  return HAP_OK;
}

hap_status k_binary_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err) {
  (void)st;
  const hap_op_io *io = c->io;
  const hap_shape *o = &io->out[0];
  const float *a = c->in[0], *b = io->n_in > 1 ? c->in[1] : NULL, *g = dout[0];
  bool za = k_once_zero(c, 0), zb = io->n_in > 1 && k_once_zero(c, 1);
  float scalar = k_scalar_zero(c) ? 0.0f : (float)k_attr_f(io, c->op, "scalar");
  bool want_a = io->in_grad[0] && !za, want_b = b != NULL && io->in_grad[1] && !zb;
  if (g == NULL || (!want_a && !want_b))
    return HAP_OK;
  int64_t na = k_numel(&io->in[0]), nb = b ? k_numel(&io->in[1]) : 0, n = k_numel(o);
  double *ga = want_a ? k_calloc((size_t)na, sizeof(double), err) : NULL;
  double *gb = want_b ? k_calloc((size_t)nb, sizeof(double), err) : NULL;
  if ((want_a && ga == NULL) || (want_b && gb == NULL)) {
    free(ga);
    free(gb);
    return HAP_ENOMEM;
  }
  int64_t sa[HAP_MAX_DIMS], sb[HAP_MAX_DIMS];
  k_bcast_strides(&io->in[0], o, sa);
  if (b != NULL)
    k_bcast_strides(&io->in[1], o, sb);
  k_odo d;
  odo_init(&d, o, sa, b ? sb : NULL);
  for (int64_t f = 0; f < n; f++, odo_next(&d)) {
    double av = za ? 0.0 : a[d.at[0]];
    double bv = b == NULL ? scalar : zb ? 0.0 : b[d.at[1]];
    double gv = g[f];
    switch (c->op) {
    case HAP_OP_ADD:
      if (ga)
        ga[d.at[0]] += gv;
      if (gb)
        gb[d.at[1]] += gv;
      break;
    case HAP_OP_SUB:
      if (ga)
        ga[d.at[0]] += gv;
      if (gb)
        gb[d.at[1]] -= gv;
      break;
    case HAP_OP_MUL:
      if (ga)
        ga[d.at[0]] += gv * bv;
      if (gb)
        gb[d.at[1]] += gv * av;
      break;
    default:
      if (ga)
        ga[d.at[0]] += gv / bv;
      if (gb)
        gb[d.at[1]] -= gv * av / (bv * bv);
      break;
    }
  }
  for (int64_t i = 0; ga && i < na; i++)
    din[0][i] += (float)ga[i];
  for (int64_t i = 0; gb && i < nb; i++)
    din[1][i] += (float)gb[i];
  free(ga);
  free(gb);
  return HAP_OK;
}

/* ---- softmax, log_softmax -------------------------------------------------------------------- */

k_rows k_rows_of(const hap_kernel_call *c) {
  const hap_shape *x = &c->io->in[0];
  int d = k_norm_dim(k_attr_i(c->io, c->op, "dim"), x->rank);
  return (k_rows){k_prod(x, 0, d), x->dims[d], k_prod(x, d + 1, x->rank)};
}

/* A row of all -inf gives zeros (softmax) or -inf (log_softmax). */
hap_status k_softmax_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                         hap_err *err) {
  (void)st;
  (void)err;
  const float *x = c->in[0];
  float *y = out[0];
  k_rows r = k_rows_of(c);
  bool log_form = c->op == HAP_OP_LOG_SOFTMAX;
  for (int64_t o = 0; o < r.outer; o++)
    for (int64_t i = 0; i < r.inner; i++) {
      int64_t base = o * r.len * r.inner + i;
      double mx = -INFINITY, z = 0;
      for (int64_t j = 0; j < r.len; j++)
        mx = fmax(mx, x[base + j * r.inner]);
      if (mx == -INFINITY) {
        for (int64_t j = 0; j < r.len; j++)
          y[base + j * r.inner] = log_form ? -INFINITY : 0.0f;
        continue;
      }
      for (int64_t j = 0; j < r.len; j++)
        z += exp(x[base + j * r.inner] - mx);
      double lz = log(z);
      for (int64_t j = 0; j < r.len; j++) {
        double t = x[base + j * r.inner] - mx;
        y[base + j * r.inner] = (float)(log_form ? t - lz : exp(t) / z);
      }
    }
  return HAP_OK;
}

hap_status k_softmax_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                         const hap_kernel_state *st, hap_err *err) {
  (void)st;
  (void)err;
  const float *y = c->out[0], *g = dout[0];
  float *dx = din[0];
  k_rows r = k_rows_of(c);
  bool log_form = c->op == HAP_OP_LOG_SOFTMAX;
  for (int64_t o = 0; o < r.outer; o++)
    for (int64_t i = 0; i < r.inner; i++) {
      int64_t base = o * r.len * r.inner + i;
      double s = 0;
      for (int64_t j = 0; j < r.len; j++) {
        int64_t at = base + j * r.inner;
        s += log_form ? g[at] : (double)g[at] * y[at];
      }
      for (int64_t j = 0; j < r.len; j++) {
        int64_t at = base + j * r.inner;
        dx[at] += (float)(log_form ? g[at] - exp((double)y[at]) * s : y[at] * (g[at] - s));
      }
    }
  return HAP_OK;
}

/* ---- sum, mean ------------------------------------------------------------------------------- */

/* Per input dim: the output stride it maps to (0 when reduced), and the mean's divisor. */
void k_reduce_plan(const hap_kernel_call *c, int64_t *ost, double *scale) {
  const hap_op_io *io = c->io;
  const hap_shape *x = &io->in[0], *o = &io->out[0];
  const hap_attr_value *dims = k_attr(io, c->op, "dims");
  bool keep = k_attr_i(io, c->op, "keepdim") != 0;
  bool red[HAP_MAX_DIMS] = {false};
  for (int d = 0; d < x->rank; d++)
    red[d] = dims->u.ints.n == 0;
  for (int k = 0; k < dims->u.ints.n; k++)
    red[k_norm_dim(dims->u.ints.v[k], x->rank)] = true;
  int64_t os[HAP_MAX_DIMS];
  k_strides(o, os);
  const hap_shape *cx = k_flag(c, HAP_VARIANT_GLOBAL_COUNT) ? &c->shard->full->in[0] : x;
  double count = 1;
  int od = 0;
  for (int d = 0; d < x->rank; d++) {
    ost[d] = red[d] ? 0 : os[od];
    if (red[d])
      count *= (double)cx->dims[d];
    if (!red[d] || keep)
      od++;
  }
  *scale = c->op == HAP_OP_MEAN ? 1 / count : 1;
}

hap_status k_reduce_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err) {
  (void)st;
  const hap_shape *x = &c->io->in[0];
  int64_t ost[HAP_MAX_DIMS];
  double scale = 1;
  k_reduce_plan(c, ost, &scale);
  int64_t n = k_numel(x), no = k_numel(&c->io->out[0]);
  double *acc = k_calloc((size_t)no, sizeof(double), err);
  if (acc == NULL)
    return HAP_ENOMEM;
  const float *v = c->in[0];
  k_odo d;
  odo_init(&d, x, ost, NULL);
  for (int64_t f = 0; f < n; f++, odo_next(&d))
    acc[d.at[0]] += v[f];
  float *y = out[0];
  for (int64_t i = 0; i < no; i++)
    y[i] = (float)(acc[i] * scale);
  free(acc);
  return HAP_OK;
}

hap_status k_reduce_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err) {
  (void)st;
  (void)err;
  const hap_shape *x = &c->io->in[0];
  int64_t ost[HAP_MAX_DIMS];
  double scale = 1;
  k_reduce_plan(c, ost, &scale);
  const float *g = dout[0];
  float *dx = din[0];
  k_odo d;
  odo_init(&d, x, ost, NULL);
  int64_t n = k_numel(x);
  for (int64_t f = 0; f < n; f++, odo_next(&d))
    dx[f] += (float)(g[d.at[0]] * scale);
  return HAP_OK;
}

/* ---- layout ---------------------------------------------------------------------------------- */

void k_gather_plan(const hap_kernel_call *c, k_gather *p) {
  const hap_op_io *io = c->io;
  const hap_shape *x = &io->in[0];
  int64_t xs[HAP_MAX_DIMS];
  k_strides(x, xs);
  memset(p, 0, sizeof *p);
  switch (c->op) {
  case HAP_OP_TRANSPOSE: {
    int a = k_norm_dim(k_attr_i(io, c->op, "dim0"), x->rank);
    int b = k_norm_dim(k_attr_i(io, c->op, "dim1"), x->rank);
    memcpy(p->st, xs, sizeof xs);
    p->st[a] = xs[b];
    p->st[b] = xs[a];
    break;
  }
  case HAP_OP_PERMUTE: {
    const hap_attr_value *perm = k_attr(io, c->op, "dims");
    for (int i = 0; i < x->rank; i++)
      p->st[i] = xs[k_norm_dim(perm->u.ints.v[i], x->rank)];
    break;
  }
  case HAP_OP_NARROW: {
    int d = k_norm_dim(k_attr_i(io, c->op, "dim"), x->rank);
    memcpy(p->st, xs, sizeof xs);
    p->base = k_attr_i(io, c->op, "start") * xs[d];
    break;
  }
  case HAP_OP_CLS_SELECT: /* [N, S, H] -> [N, H]: position S - 1 */
    p->st[0] = xs[0];
    p->st[1] = xs[2];
    p->base = (x->dims[1] - 1) * xs[1];
    break;
  default: p->flat = true; break;
  }
}

hap_status k_layout_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err) {
  (void)st;
  (void)err;
  const hap_shape *o = &c->io->out[0];
  size_t es = (size_t)hap_dtype_size(c->io->in_dtype[0]);
  int64_t n = k_numel(o);
  const char *x = c->in[0];
  char *y = out[0];
  k_gather p;
  k_gather_plan(c, &p);
  if (p.flat) {
    if (n > 0)
      memcpy(y, x, (size_t)n * es);
    return HAP_OK;
  }
  k_odo d;
  odo_init(&d, o, p.st, NULL);
  for (int64_t f = 0; f < n; f++, odo_next(&d))
    memcpy(y + (size_t)f * es, x + (size_t)(p.base + d.at[0]) * es, es);
  return HAP_OK;
}

hap_status k_layout_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err) {
  (void)st;
  (void)err;
  const hap_shape *o = &c->io->out[0];
  int64_t n = k_numel(o);
  const float *g = dout[0];
  float *dx = din[0];
  k_gather p;
  k_gather_plan(c, &p);
  if (p.flat) {
    for (int64_t f = 0; f < n; f++)
      dx[f] += g[f];
    return HAP_OK;
  }
  k_odo d;
  odo_init(&d, o, p.st, NULL);
  for (int64_t f = 0; f < n; f++, odo_next(&d))
    dx[p.base + d.at[0]] += g[f];
  return HAP_OK;
}

/* cls_append(x [N, S, H], cls [1, 1, H]) -> [N, S + 1, H], the class token last. */
hap_status k_cls_append_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                            hap_err *err) {
  (void)st;
  (void)err;
  const hap_shape *x = &c->io->in[0];
  int64_t nb = x->dims[0], s = x->dims[1], h = x->dims[2];
  const float *xv = c->in[0], *cls = c->in[1];
  bool zc = k_once_zero(c, 1);
  float *y = out[0];
  for (int64_t b = 0; b < nb; b++) {
    if (s * h > 0)
      memcpy(y + b * (s + 1) * h, xv + b * s * h, (size_t)(s * h) * sizeof(float));
    for (int64_t j = 0; j < h; j++)
      y[(b * (s + 1) + s) * h + j] = zc ? 0.0f : cls[j];
  }
  return HAP_OK;
}

hap_status k_cls_append_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                            const hap_kernel_state *st, hap_err *err) {
  (void)st;
  const hap_op_io *io = c->io;
  const hap_shape *x = &io->in[0];
  int64_t nb = x->dims[0], s = x->dims[1], h = x->dims[2];
  const float *g = dout[0];
  if (io->in_grad[0])
    for (int64_t b = 0; b < nb; b++)
      for (int64_t i = 0; i < s * h; i++)
        din[0][b * s * h + i] += g[b * (s + 1) * h + i];
  if (io->in_grad[1] && !k_once_zero(c, 1)) {
    double *acc = k_calloc((size_t)h, sizeof(double), err);
    if (acc == NULL)
      return HAP_ENOMEM;
    for (int64_t b = 0; b < nb; b++)
      for (int64_t j = 0; j < h; j++)
        acc[j] += g[(b * (s + 1) + s) * h + j];
    for (int64_t j = 0; j < h; j++)
      din[1][j] += (float)acc[j];
    free(acc);
  }
  return HAP_OK;
}
