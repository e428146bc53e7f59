/* k_elem.c — elementwise, softmax, reduction and layout kernels: relu, gelu, sigmoid, tanh, rsqrt,
 * pow, dropout, add/sub/mul/div (NumPy broadcasting or a scalar), softmax, log_softmax, sum, mean,
 * reshape, flatten, transpose, permute, narrow, cls_append, cls_select. Semantics: docs/ops.md. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kern_internal.h"
#include "kern_math.h"

/* ---- unary ----------------------------------------------------------------------------------- */

static const double INV_SQRT2 = 0.70710678118654752440;
static const double INV_SQRT_2PI = 0.39894228040143267794;

/* y = x Phi(x) (float32 erf, kern_math.h) */
K_VECTOR_CLONES static void gelu_fwd(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = 0.5f * x[i] * (1.0f + k_erff(x[i] * (float)INV_SQRT2));
}

/* Phi(x) + x phi(x) */
static inline float gelu_slope(float v) {
  return 0.5f * (1.0f + k_erff(v * (float)INV_SQRT2)) +
         v * (float)INV_SQRT_2PI * k_expf(-0.5f * v * v);
}

/* dx += g (Phi(x) + x phi(x)); when fresh, dx = 0 + the same (two loops: a select inside one
 * kept GCC from vectorising it, 10x slower) */
K_VECTOR_CLONES static void gelu_bwd(const float *x, const float *g, float *dx, int64_t n,
                                     bool fresh) {
  if (fresh)
    for (int64_t i = 0; i < n; i++)
      dx[i] = 0.0f + g[i] * gelu_slope(x[i]);
  else
    for (int64_t i = 0; i < n; i++)
      dx[i] += g[i] * gelu_slope(x[i]);
}

/* y = 1 / (1 + e^-x) (float32 exp: 0 below x = -89, 1 above) */
K_VECTOR_CLONES static void sigmoid_fwd(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    y[i] = 1.0f / (1.0f + k_expf(-x[i]));
}

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
  case HAP_OP_GELU: gelu_fwd(x, y, n); break;
  case HAP_OP_SIGMOID: sigmoid_fwd(x, y, n); break;
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
    k_dropout_gpos(&g, c->seed, p, x, scale, y, n, false);
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
  bool fresh = k_fresh(c, 0);
  if (g == NULL ||
      (c->op != HAP_OP_RELU && c->op != HAP_OP_GELU)) /* these two store; the rest add */
    k_clear_fresh(c, din, 0, n);
  if (g == NULL)
    return HAP_OK;
  switch (c->op) {
  case HAP_OP_RELU: /* unconditional loads: if-converted, no branch; one loop per form, as
                     * in gelu_bwd */
    if (fresh)
      for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        dx[i] = 0.0f + (x[i] > 0 ? gi : 0.0f);
      }
    else
      for (int64_t i = 0; i < n; i++) {
        float gi = g[i];
        dx[i] += x[i] > 0 ? gi : 0.0f;
      }
    break;
  case HAP_OP_GELU: gelu_bwd(x, g, dx, n, fresh); break;
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
    k_dropout_gpos(&gp, c->seed, p, g, scale, dx, n, true);
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

/* Rows of an output walked with two strided operands: the output's dims coalesced wherever both
 * operands' strides allow (same-shape tensors become one row), dims of size 1 dropped; the last
 * remaining dim is the row, the others an odometer. */
typedef struct k_rowit {
  int rank; /* outer dims */
  int64_t dims[HAP_MAX_DIMS], idx[HAP_MAX_DIMS], st[2][HAP_MAX_DIMS];
  int64_t len, inner[2]; /* row length; each operand's stride along the row */
  int64_t at[2];         /* each operand's offset of the current row's first element */
  int64_t rows;
} k_rowit;

static void rowit_init(k_rowit *it, const hap_shape *o, const int64_t *st0, const int64_t *st1) {
  memset(it, 0, sizeof *it);
  int64_t dims[HAP_MAX_DIMS], st[2][HAP_MAX_DIMS];
  int n = 0; /* coalesced dims, innermost first */
  bool empty = false;
  for (int d = o->rank - 1; d >= 0; d--) {
    int64_t len = o->dims[d], s0 = st0 ? st0[d] : 0, s1 = st1 ? st1[d] : 0;
    empty = empty || len == 0;
    if (len == 1)
      continue;
    if (n > 0 && s0 == st[0][n - 1] * dims[n - 1] && s1 == st[1][n - 1] * dims[n - 1]) {
      dims[n - 1] *= len; /* contiguous with the dim inside it for both operands */
      continue;
    }
    dims[n] = len;
    st[0][n] = s0;
    st[1][n] = s1;
    n++;
  }
  it->len = n > 0 ? dims[0] : 1;
  it->inner[0] = n > 0 ? st[0][0] : 0;
  it->inner[1] = n > 0 ? st[1][0] : 0;
  it->rows = empty ? 0 : 1;
  for (int k = 1; k < n; k++) { /* outer dims, outermost first */
    int i = n - 1 - k;
    it->dims[i] = dims[k];
    it->st[0][i] = st[0][k];
    it->st[1][i] = st[1][k];
    it->rows *= dims[k];
  }
  it->rank = n > 0 ? n - 1 : 0;
  if (empty)
    it->len = 0;
}

static void rowit_next(k_rowit *it) {
  for (int i = it->rank - 1; i >= 0; i--) {
    it->idx[i]++;
    it->at[0] += it->st[0][i];
    it->at[1] += it->st[1][i];
    if (it->idx[i] < it->dims[i])
      return;
    it->at[0] -= it->st[0][i] * it->dims[i];
    it->at[1] -= it->st[1][i] * it->dims[i];
    it->idx[i] = 0;
  }
}

/* y[j] = a[j sa] OP b[j sb] for j < n, with the unit and zero strides as plain vector loops. */
#define K_BINARY_ROW(OP)                                                                           \
  do {                                                                                             \
    if (sa == 1 && sb == 1)                                                                        \
      for (int64_t j = 0; j < n; j++)                                                              \
        y[j] = a[j] OP b[j];                                                                       \
    else if (sa == 1 && sb == 0)                                                                   \
      for (int64_t j = 0; j < n; j++)                                                              \
        y[j] = a[j] OP b[0];                                                                       \
    else if (sa == 0 && sb == 1)                                                                   \
      for (int64_t j = 0; j < n; j++)                                                              \
        y[j] = a[0] OP b[j];                                                                       \
    else                                                                                           \
      for (int64_t j = 0; j < n; j++)                                                              \
        y[j] = a[j * sa] OP b[j * sb];                                                             \
  } while (0)

static void binary_row(hap_op op, const float *a, int64_t sa, const float *b, int64_t sb, float *y,
                       int64_t n) {
  switch (op) {
  case HAP_OP_ADD: K_BINARY_ROW(+); break;
  case HAP_OP_SUB: K_BINARY_ROW(-); break;
  case HAP_OP_MUL: K_BINARY_ROW(*); break;
  default: K_BINARY_ROW(/); break;
  }
}

/* The operands of a binary call as strided views of the output: a zero operand (BIAS_ONCE off
 * rank 0) and a scalar read one float with stride 0. */
typedef struct k_operands {
  const float *a, *b;
  int64_t sa[HAP_MAX_DIMS], sb[HAP_MAX_DIMS];
  float a0, b0; /* the stride-0 values */
} k_operands;

static void operands_of(const hap_kernel_call *c, k_operands *v) {
  const hap_op_io *io = c->io;
  const hap_shape *o = &io->out[0];
  memset(v, 0, sizeof *v);
  v->a = c->in[0];
  k_bcast_strides(&io->in[0], o, v->sa);
  if (k_once_zero(c, 0)) {
    v->a = &v->a0;
    memset(v->sa, 0, sizeof v->sa);
  }
  if (io->n_in > 1 && !k_once_zero(c, 1)) {
    v->b = c->in[1];
    k_bcast_strides(&io->in[1], o, v->sb);
  } else { /* a scalar, or a zero operand */
    v->b0 = io->n_in > 1 || k_scalar_zero(c) ? 0.0f : (float)k_attr_f(io, c->op, "scalar");
    v->b = &v->b0;
  }
}

hap_status k_binary_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                        hap_err *err) {
  (void)st;
  (void)err;
  k_operands v;
  operands_of(c, &v);
  float *y = out[0];
  k_rowit it;
  rowit_init(&it, &c->io->out[0], v.sa, v.sb);
  for (int64_t r = 0; r < it.rows; r++, rowit_next(&it))
    binary_row(c->op, v.a + it.at[0], it.inner[0], v.b + it.at[1], it.inner[1], y + r * it.len,
               it.len);
  return HAP_OK;
}

/* The gradient of one operand along a row: the term for output element j (g the output
 * gradient, a and b the operands), added to a float gradient (same shape as the output) or to
 * a double accumulator (a broadcast operand: several output elements add to one element). */
static double binary_term(hap_op op, bool of_a, double g, double a, double b) {
  switch (op) {
  case HAP_OP_ADD: return g;
  case HAP_OP_SUB: return of_a ? g : -g;
  case HAP_OP_MUL: return of_a ? g * b : g * a;
  default: return of_a ? g / b : -g * a / (b * b);
  }
}

/* dx[j] += term(j) for a full operand (unit stride), as float32 vector loops where the term is a
 * float32 operation with the same result as the double one rounded (sums and products of two
 * floats); division stays in double. */
static void binary_grad_row(hap_op op, bool of_a, const float *g, const float *a, int64_t sa,
                            const float *b, int64_t sb, float *dx, int64_t n, bool fresh) {
  const float *other = of_a ? b : a;
  int64_t so = of_a ? sb : sa;
  if ((op == HAP_OP_ADD || (op == HAP_OP_SUB && of_a)) && fresh) {
    for (int64_t j = 0; j < n; j++)
      dx[j] = 0.0f + g[j];
    return;
  }
  if (fresh) /* the rarer forms: the same sums from a zeroed row */
    for (int64_t j = 0; j < n; j++)
      dx[j] = 0.0f;
  if (op == HAP_OP_ADD || (op == HAP_OP_SUB && of_a)) {
    for (int64_t j = 0; j < n; j++)
      dx[j] += g[j];
  } else if (op == HAP_OP_SUB) {
    for (int64_t j = 0; j < n; j++)
      dx[j] -= g[j];
  } else if (op == HAP_OP_MUL && so == 1) {
    for (int64_t j = 0; j < n; j++)
      dx[j] += g[j] * other[j];
  } else if (op == HAP_OP_MUL && so == 0) {
    for (int64_t j = 0; j < n; j++)
      dx[j] += g[j] * other[0];
  } else {
    for (int64_t j = 0; j < n; j++)
      dx[j] += (float)binary_term(op, of_a, g[j], a[j * sa], b[j * sb]);
  }
}

hap_status k_binary_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                        const hap_kernel_state *st, hap_err *err) {
  (void)st;
  const hap_op_io *io = c->io;
  const hap_shape *o = &io->out[0];
  const float *g = dout[0];
  bool want[2] = {io->in_grad[0] && !k_once_zero(c, 0),
                  io->n_in > 1 && io->in_grad[1] && !k_once_zero(c, 1)};
  for (int k = 0; k < io->n_in && k < 2; k++) /* no term to store (rank > 0 of a once operand) */
    if (io->in_grad[k] && (g == NULL || !want[k]))
      k_clear_fresh(c, din, k, k_numel(&io->in[k]));
  if (g == NULL || (!want[0] && !want[1]))
    return HAP_OK;
  k_operands v;
  operands_of(c, &v);
  int64_t n = k_numel(o);
  /* a broadcast operand (fewer elements than the output) sums its terms in double scratch */
  double *acc[2] = {NULL, NULL};
  int64_t n_in[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    n_in[k] = want[k] ? k_numel(&io->in[k]) : 0;
    if (want[k] && n_in[k] < n &&
        (acc[k] = k_calloc((size_t)n_in[k], sizeof(double), err)) == NULL) {
      free(acc[0]);
      return HAP_ENOMEM;
    }
    if (want[k] && acc[k] == NULL && n_in[k] != n) /* an empty output: no row reaches it */
      k_clear_fresh(c, din, k, n_in[k]);
  }
  k_rowit it;
  rowit_init(&it, o, v.sa, v.sb);
  for (int64_t r = 0; r < it.rows; r++, rowit_next(&it)) {
    const float *gr = g + r * it.len, *ar = v.a + it.at[0], *br = v.b + it.at[1];
    for (int k = 0; k < 2; k++) {
      if (!want[k])
        continue;
      if (acc[k] == NULL) { /* same shape as the output: this row of it */
        binary_grad_row(c->op, k == 0, gr, ar, it.inner[0], br, it.inner[1], din[k] + r * it.len,
                        it.len, k_fresh(c, k));
        continue;
      }
      double *ak = acc[k] + it.at[k];
      int64_t sk = it.inner[k];
      for (int64_t j = 0; j < it.len; j++)
        ak[j * sk] += binary_term(c->op, k == 0, gr[j], ar[j * it.inner[0]], br[j * it.inner[1]]);
    }
  }
  for (int k = 0; k < 2; k++) {
    bool fresh = k_fresh(c, k);
    for (int64_t i = 0; acc[k] != NULL && i < n_in[k]; i++)
      din[k][i] = (fresh ? 0.0f : din[k][i]) + (float)acc[k][i];
    free(acc[k]);
  }
  return HAP_OK;
}

/* ---- softmax, log_softmax -------------------------------------------------------------------- */

k_rows k_rows_of(const hap_kernel_call *c) {
  const hap_shape *x = &c->io->in[0];
  int d = k_norm_dim(k_attr_i(c->io, c->op, "dim"), x->rank);
  return (k_rows){k_prod(x, 0, d), x->dims[d], k_prod(x, d + 1, x->rank)};
}

K_VECTOR_CLONES void k_softmax_row(const float *x, float *y, int64_t len, bool log_form) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < len; j++)
    mx = x[j] > mx ? x[j] : mx;
  if (mx == -INFINITY) { /* empty or fully masked */
    for (int64_t j = 0; j < len; j++)
      y[j] = log_form ? -INFINITY : 0.0f;
    return;
  }
  if (!log_form) {
    for (int64_t j = 0; j < len; j++)
      y[j] = k_expf(x[j] - mx);
    double inv = 1 / k_sum_f64(y, len);
    for (int64_t j = 0; j < len; j++)
      y[j] = (float)(y[j] * inv);
    return;
  }
  double part[8] = {0, 0, 0, 0, 0, 0, 0, 0}, z = 0;
  for (int64_t j = 0; j < len; j++)
    y[j] = x[j] - mx;
  int64_t j = 0;
  for (; j + 8 <= len; j += 8)
    for (int k = 0; k < 8; k++)
      part[k] += k_expf(y[j + k]);
  for (; j < len; j++)
    z += k_expf(y[j]);
  for (int k = 0; k < 8; k++)
    z += part[k];
  float lz = (float)log(z);
  for (j = 0; j < len; j++)
    y[j] -= lz;
}

K_VECTOR_CLONES void k_lse_columns(const float *x, int64_t rows, int64_t cols, float *mx, double *z,
                                   double *lse) {
  for (int64_t j = 0; j < cols; j++) {
    mx[j] = -INFINITY;
    z[j] = 0;
  }
  for (int64_t k = 0; k < rows; k++)
    for (int64_t j = 0; j < cols; j++)
      mx[j] = x[k * cols + j] > mx[j] ? x[k * cols + j] : mx[j];
  for (int64_t k = 0; k < rows; k++)
    for (int64_t j = 0; j < cols; j++)
      z[j] += k_expf(x[k * cols + j] - mx[j]);
  for (int64_t j = 0; j < cols; j++)
    lse[j] = mx[j] == -INFINITY ? -INFINITY : mx[j] + log(z[j]);
}

K_VECTOR_CLONES void k_add_softmax_columns(const float *x, int64_t rows, int64_t cols,
                                           const double *lse, double scale, float *dx) {
  for (int64_t k = 0; k < rows; k++)
    for (int64_t j = 0; j < cols; j++)
      dx[k * cols + j] += (float)(scale * k_expf((float)(x[k * cols + j] - lse[j])));
}

/* softmax: dx += y (g - sum g y); log_softmax: dx += g - exp(y) sum g. */
K_VECTOR_CLONES static void softmax_row_bwd(const float *y, const float *g, float *dx, int64_t len,
                                            bool log_form) {
  if (log_form) {
    float s = (float)k_sum_f64(g, len);
    for (int64_t j = 0; j < len; j++)
      dx[j] += g[j] - k_expf(y[j]) * s;
    return;
  }
  double s = k_dot_f64(g, y, len);
  for (int64_t j = 0; j < len; j++)
    dx[j] += (float)(y[j] * (g[j] - s));
}

/* A row of all -inf gives zeros (softmax) or -inf (log_softmax). Rows along the last dim take the
 * vector path (k_softmax_row); other dims the strided one below. */
hap_status k_softmax_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                         hap_err *err) {
  (void)st;
  (void)err;
  const float *x = c->in[0];
  float *y = out[0];
  k_rows r = k_rows_of(c);
  bool log_form = c->op == HAP_OP_LOG_SOFTMAX;
  if (r.inner == 1) {
    for (int64_t o = 0; o < r.outer; o++)
      k_softmax_row(x + o * r.len, y + o * r.len, r.len, log_form);
    return HAP_OK;
  }
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
  if (r.inner == 1) {
    for (int64_t o = 0; o < r.outer; o++)
      softmax_row_bwd(y + o * r.len, g + o * r.len, dx + o * r.len, r.len, log_form);
    return HAP_OK;
  }
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

/* One gathered row of `len` elements of `es` bytes: y[j] = x[j * stride]. */
static void gather_row(const char *x, int64_t stride, char *y, int64_t len, size_t es) {
  if (stride == 1) {
    memcpy(y, x, (size_t)len * es);
  } else if (es == sizeof(float)) {
    const float *xf = (const float *)x;
    float *yf = (float *)y;
    for (int64_t j = 0; j < len; j++)
      yf[j] = xf[j * stride];
  } else if (es == sizeof(int64_t)) {
    const int64_t *xi = (const int64_t *)x;
    int64_t *yi = (int64_t *)y;
    for (int64_t j = 0; j < len; j++)
      yi[j] = xi[j * stride];
  } else {
    for (int64_t j = 0; j < len; j++)
      memcpy(y + (size_t)j * es, x + (size_t)(j * stride) * es, es);
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
  k_rowit it;
  rowit_init(&it, o, p.st, NULL);
  for (int64_t r = 0; r < it.rows; r++, rowit_next(&it))
    gather_row(x + (size_t)(p.base + it.at[0]) * es, it.inner[0], y + (size_t)(r * it.len) * es,
               it.len, es);
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
  bool fresh = k_fresh(c, 0);
  k_gather p;
  k_gather_plan(c, &p);
  if (p.flat && fresh) {
    for (int64_t f = 0; f < n; f++)
      dx[f] = 0.0f + g[f];
    return HAP_OK;
  }
  if (p.flat) {
    for (int64_t f = 0; f < n; f++)
      dx[f] += g[f];
    return HAP_OK;
  }
  if (c->op == HAP_OP_TRANSPOSE || c->op == HAP_OP_PERMUTE) {
    /* a bijection: walk dx in order, gathering from g (writes in order, reads strided) */
    const hap_shape *x = &c->io->in[0];
    int64_t os[HAP_MAX_DIMS], gs[HAP_MAX_DIMS] = {0}; /* gs[d]: g's stride along x's dim d */
    k_strides(o, os);
    if (c->op == HAP_OP_TRANSPOSE) {
      int a = k_norm_dim(k_attr_i(c->io, c->op, "dim0"), x->rank);
      int b = k_norm_dim(k_attr_i(c->io, c->op, "dim1"), x->rank);
      memcpy(gs, os, sizeof gs);
      gs[a] = os[b];
      gs[b] = os[a];
    } else { /* out dim i is x's dim perm[i] */
      const hap_attr_value *perm = k_attr(c->io, c->op, "dims");
      for (int i = 0; i < x->rank; i++)
        gs[k_norm_dim(perm->u.ints.v[i], x->rank)] = os[i];
    }
    k_rowit it;
    rowit_init(&it, x, gs, NULL);
    for (int64_t r = 0; r < it.rows; r++, rowit_next(&it)) {
      float *dr = dx + r * it.len;
      const float *gr = g + it.at[0];
      int64_t s = it.inner[0];
      for (int64_t j = 0; j < it.len; j++)
        dr[j] = (fresh ? 0.0f : dr[j]) + gr[j * s];
    }
    return HAP_OK;
  }
  k_clear_fresh(c, din, 0, k_numel(&c->io->in[0])); /* a gather may not reach every element */
  k_rowit it;
  rowit_init(&it, o, p.st, NULL);
  for (int64_t r = 0; r < it.rows; r++, rowit_next(&it)) {
    float *dr = dx + p.base + it.at[0];
    const float *gr = g + r * it.len;
    int64_t s = it.inner[0];
    for (int64_t j = 0; j < it.len; j++)
      dr[j * s] += gr[j];
  }
  return HAP_OK;
}

/* cls_append(x [N, S, H], cls [1, 1, H]) -> [N, S + 1, H], the class token last (at position 0
 * with `first`): x's rows start at row xo of each batch entry, the token's row is tp. */
static void cls_rows(const hap_op_io *io, int64_t s, int64_t *xo, int64_t *tp) {
  bool first = k_attr_i(io, HAP_OP_CLS_APPEND, "first") != 0;
  *xo = first ? 1 : 0;
  *tp = first ? 0 : s;
}

hap_status k_cls_append_fwd(const hap_kernel_call *c, void *const *out, hap_kernel_state *st,
                            hap_err *err) {
  (void)st;
  (void)err;
  const hap_shape *x = &c->io->in[0];
  int64_t nb = x->dims[0], s = x->dims[1], h = x->dims[2], xo, tp;
  cls_rows(c->io, s, &xo, &tp);
  const float *xv = c->in[0], *cls = c->in[1];
  bool zc = k_once_zero(c, 1);
  float *y = out[0];
  for (int64_t b = 0; b < nb; b++) {
    if (s * h > 0)
      memcpy(y + (b * (s + 1) + xo) * h, xv + b * s * h, (size_t)(s * h) * sizeof(float));
    for (int64_t j = 0; j < h; j++)
      y[(b * (s + 1) + tp) * h + j] = zc ? 0.0f : cls[j];
  }
  return HAP_OK;
}

hap_status k_cls_append_bwd(const hap_kernel_call *c, const float *const *dout, float *const *din,
                            const hap_kernel_state *st, hap_err *err) {
  (void)st;
  const hap_op_io *io = c->io;
  const hap_shape *x = &io->in[0];
  int64_t nb = x->dims[0], s = x->dims[1], h = x->dims[2], xo, tp;
  cls_rows(io, s, &xo, &tp);
  const float *g = dout[0];
  bool fresh = k_fresh(c, 0);
  if (io->in_grad[0])
    for (int64_t b = 0; b < nb; b++)
      for (int64_t i = 0; i < s * h; i++) {
        float *d = &din[0][b * s * h + i];
        *d = (fresh ? 0.0f : *d) + g[(b * (s + 1) + xo) * h + i];
      }
  if (io->in_grad[1])
    k_clear_fresh(c, din, 1, h);
  if (io->in_grad[1] && !k_once_zero(c, 1)) {
    double *acc = k_calloc((size_t)h, sizeof(double), err);
    if (acc == NULL)
      return HAP_ENOMEM;
    for (int64_t b = 0; b < nb; b++)
      for (int64_t j = 0; j < h; j++)
        acc[j] += g[(b * (s + 1) + tp) * h + j];
    for (int64_t j = 0; j < h; j++)
      din[1][j] += (float)acc[j];
    free(acc);
  }
  return HAP_OK;
}
