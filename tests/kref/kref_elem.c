/* kref_elem.c — float64 reference of the elementwise ops (relu, gelu, sigmoid, tanh, rsqrt, pow,
 * dropout, add, sub, mul, div), softmax, log_softmax, sum and mean (docs/ops.md). */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h" /* hap_kernel_keep: the documented dropout mask, nothing else */
#include "kref_internal.h"

/* ---- unary ----------------------------------------------------------------------------------- */

hap_status kr_unary(const kr_call *c, hap_err *err) {
  (void)err;
  const double *x = kr_x(c, 0);
  double *y = c->out[0];
  int64_t n = kr_numel(&c->io->in[0]);
  double e = c->op == HAP_OP_POW ? kr_attr_f(c, "exponent") : 0;
  double p = c->op == HAP_OP_DROPOUT ? kr_attr_f(c, "p") : 0;
  for (int64_t i = 0; i < n; i++) {
    double v = x[i];
    switch (c->op) {
    case HAP_OP_RELU: y[i] = v > 0 ? v : 0; break;
    case HAP_OP_GELU: y[i] = v * 0.5 * erfc(-v / sqrt(2.0)); break; /* x Phi(x) */
    case HAP_OP_SIGMOID: y[i] = 1 / (1 + exp(-v)); break;
    case HAP_OP_TANH: y[i] = tanh(v); break;
    case HAP_OP_RSQRT: y[i] = 1 / sqrt(v); break;
    case HAP_OP_POW: y[i] = pow(v, e); break;
    default: /* dropout: element i kept (scaled by 1 / (1 - p)) or zeroed by its position */
      y[i] = hap_kernel_keep(c->seed, i, p) ? v / (1 - p) : 0;
      break;
    }
  }
  return HAP_OK;
}

/* ---- binary: NumPy broadcasting of a and b, or a and the `scalar` attribute ------------------ */

hap_status kr_binary(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_op_io *io = c->io;
  const hap_shape *ys = &io->out[0];
  const double *a = kr_x(c, 0), *b = io->n_in > 1 ? kr_x(c, 1) : NULL;
  double scalar = kr_attr_f(c, "scalar");
  double *y = c->out[0];
  int64_t idx[HAP_MAX_DIMS];
  for (int64_t f = 0; f < kr_numel(ys); f++) {
    kr_unravel(ys, f, idx);
    double u = a[kr_bcast_at(&io->in[0], idx, ys->rank)];
    double v = b != NULL ? b[kr_bcast_at(&io->in[1], idx, ys->rank)] : scalar;
    switch (c->op) {
    case HAP_OP_ADD: y[f] = u + v; break;
    case HAP_OP_SUB: y[f] = u - v; break;
    case HAP_OP_MUL: y[f] = u * v; break;
    default: y[f] = u / v; break;
    }
  }
  return HAP_OK;
}

/* ---- softmax, log_softmax along `dim` -------------------------------------------------------- */

hap_status kr_softmax(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_shape *xs = &c->io->in[0];
  int dim = kr_dim(kr_attr_i(c, "dim"), xs->rank);
  int64_t len = xs->dims[dim], stride = 1; /* stride: elements between neighbours along dim */
  for (int d = dim + 1; d < xs->rank; d++)
    stride *= xs->dims[d];
  const double *x = kr_x(c, 0);
  double *y = c->out[0];
  bool log_form = c->op == HAP_OP_LOG_SOFTMAX;
  int64_t idx[HAP_MAX_DIMS];
  for (int64_t f = 0; f < kr_numel(xs); f++) {
    kr_unravel(xs, f, idx);
    if (idx[dim] != 0)
      continue; /* one pass per row, from its first element */
    double mx = -INFINITY, z = 0;
    for (int64_t j = 0; j < len; j++)
      mx = fmax(mx, x[f + j * stride]);
    for (int64_t j = 0; j < len; j++)
      z += mx == -INFINITY ? 0 : exp(x[f + j * stride] - mx);
    for (int64_t j = 0; j < len; j++) {
      double t = x[f + j * stride] - mx;
      if (mx == -INFINITY) /* a fully masked row: zeros, or -inf in log form */
        y[f + j * stride] = log_form ? -INFINITY : 0;
      else
        y[f + j * stride] = log_form ? t - log(z) : exp(t) / z;
    }
  }
  return HAP_OK;
}

/* ---- sum, mean over `dims` (empty: every dim), `keepdim` ------------------------------------- */

hap_status kr_reduce(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_shape *xs = &c->io->in[0], *ys = &c->io->out[0];
  const hap_attr_value *dims = kr_attr(c, "dims");
  bool keep = kr_attr_i(c, "keepdim") != 0;
  bool reduced[HAP_MAX_DIMS] = {false};
  for (int d = 0; d < xs->rank; d++)
    reduced[d] = dims->u.ints.n == 0;
  for (int i = 0; i < dims->u.ints.n; i++)
    reduced[kr_dim(dims->u.ints.v[i], xs->rank)] = true;
  double count = 1; /* elements per output */
  for (int d = 0; d < xs->rank; d++)
    if (reduced[d])
      count *= (double)xs->dims[d];
  const double *x = kr_x(c, 0);
  double *y = c->out[0];
  memset(y, 0, (size_t)kr_numel(ys) * sizeof(double));
  int64_t idx[HAP_MAX_DIMS], oidx[HAP_MAX_DIMS];
  for (int64_t f = 0; f < kr_numel(xs); f++) {
    kr_unravel(xs, f, idx);
    int od = 0;
    for (int d = 0; d < xs->rank; d++) {
      if (!reduced[d])
        oidx[od++] = idx[d];
      else if (keep)
        oidx[od++] = 0;
    }
    y[kr_ravel(ys, oidx)] += x[f];
  }
  if (c->op == HAP_OP_MEAN)
    for (int64_t i = 0; i < kr_numel(ys); i++)
      y[i] /= count;
  return HAP_OK;
}
