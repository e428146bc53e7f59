/* kref_nn.c — float64 reference of max_pool2d, adaptive_avg_pool2d, embedding, layer_norm,
 * nll_loss and cross_entropy (docs/ops.md, docs/kernels.md). */
#include <math.h>
#include <string.h>

#include "kref_internal.h"

/* ---- max_pool2d: the largest element of each window; padding is -inf --------------------------
 */

hap_status kr_max_pool2d(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_shape *xs = &c->io->in[0], *ys = &c->io->out[0];
  int64_t planes = xs->dims[0] * xs->dims[1], h = xs->dims[2], w = xs->dims[3];
  int64_t ho = ys->dims[2], wo = ys->dims[3];
  int64_t k = kr_attr_i(c, "kernel"), stride = kr_attr_i(c, "stride"),
          pad = kr_attr_i(c, "padding");
  if (stride == 0)
    stride = k;
  const double *x = kr_x(c, 0);
  double *y = c->out[0];
  for (int64_t p = 0; p < planes; p++)
    for (int64_t oy = 0; oy < ho; oy++)
      for (int64_t ox = 0; ox < wo; ox++) {
        double m = -INFINITY;
        for (int64_t i = 0; i < k; i++)
          for (int64_t j = 0; j < k; j++) {
            int64_t iy = oy * stride - pad + i, jx = ox * stride - pad + j;
            if (iy >= 0 && iy < h && jx >= 0 && jx < w && x[(p * h + iy) * w + jx] > m)
              m = x[(p * h + iy) * w + jx];
          }
        y[(p * ho + oy) * wo + ox] = m;
      }
  return HAP_OK;
}

/* ---- adaptive_avg_pool2d: output i of `out` averages input floor(i in / out) ..
 * ceil((i + 1) in / out) - 1, along both spatial dims (PyTorch's bins) ---------------------------
 */

static void bin(int64_t i, int64_t in, int64_t out, int64_t *lo, int64_t *hi) {
  *lo = (int64_t)floor((double)(i * in) / (double)out);
  *hi = (int64_t)ceil((double)((i + 1) * in) / (double)out); /* exclusive */
}

hap_status kr_avg_pool2d(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_shape *xs = &c->io->in[0], *ys = &c->io->out[0];
  int64_t planes = xs->dims[0] * xs->dims[1], h = xs->dims[2], w = xs->dims[3];
  int64_t ho = ys->dims[2], wo = ys->dims[3];
  const double *x = kr_x(c, 0);
  double *y = c->out[0];
  for (int64_t p = 0; p < planes; p++)
    for (int64_t oy = 0; oy < ho; oy++)
      for (int64_t ox = 0; ox < wo; ox++) {
        int64_t y0, y1, x0, x1;
        bin(oy, h, ho, &y0, &y1);
        bin(ox, w, wo, &x0, &x1);
        double s = 0;
        for (int64_t i = y0; i < y1; i++)
          for (int64_t j = x0; j < x1; j++)
            s += x[(p * h + i) * w + j];
        y[(p * ho + oy) * wo + ox] = s / (double)((y1 - y0) * (x1 - x0));
      }
  return HAP_OK;
}

/* ---- embedding: y [.., D] = weight [index, D] ------------------------------------------------ */

hap_status kr_embedding(const kr_call *c, hap_err *err) {
  const hap_op_io *io = c->io;
  int64_t n = kr_numel(&io->in[0]), v = io->in[1].dims[0], d = io->in[1].dims[1];
  const int64_t *ids = kr_ix(c, 0);
  const double *w = kr_x(c, 1);
  double *y = c->out[0];
  for (int64_t f = 0; f < n; f++) {
    if (ids[f] < 0 || ids[f] >= v)
      return hap_err_set(err, HAP_EINVAL, "kref embedding: index %lld at %lld, expected 0..%lld",
                         (long long)ids[f], (long long)f, (long long)(v - 1));
    for (int64_t j = 0; j < d; j++)
      y[f * d + j] = w[ids[f] * d + j];
  }
  return HAP_OK;
}

/* ---- layer_norm: (x - mean) / sqrt(var + eps) over the trailing `normalized_dims` dims (biased
 * variance), then * weight + bias ----------------------------------------------------------------
 */

hap_status kr_layer_norm(const kr_call *c, hap_err *err) {
  (void)err;
  const hap_op_io *io = c->io;
  const hap_shape *xs = &io->in[0];
  int nd = (int)kr_attr_i(c, "normalized_dims");
  double eps = kr_attr_f(c, "eps");
  int64_t inner = 1;
  for (int d = xs->rank - nd; d < xs->rank; d++)
    inner *= xs->dims[d];
  int64_t rows = kr_numel(xs) / inner;
  const double *x = kr_x(c, 0);
  const double *w = io->n_in > 1 ? kr_x(c, 1) : NULL, *b = io->n_in > 2 ? kr_x(c, 2) : NULL;
  double *y = c->out[0];
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = x + r * inner;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < inner; j++)
      mean += xr[j];
    mean /= (double)inner;
    for (int64_t j = 0; j < inner; j++)
      var += (xr[j] - mean) * (xr[j] - mean);
    var /= (double)inner;
    double den = sqrt(var + eps);
    for (int64_t j = 0; j < inner; j++)
      y[r * inner + j] = (xr[j] - mean) / den * (w != NULL ? w[j] : 1.0) + (b != NULL ? b[j] : 0.0);
  }
  return HAP_OK;
}

/* ---- nll_loss, cross_entropy: input [N, C, d..], target [N, d..]; the loss is
 * -sum logp[n, target, d..] (divided by the target count for "mean"), logp being the input
 * (nll_loss) or its log_softmax over dim 1 (cross_entropy) ------------------------------------ */

hap_status kr_loss(const kr_call *c, hap_err *err) {
  const hap_op_io *io = c->io;
  const hap_shape *xs = &io->in[0];
  int64_t n = xs->dims[0], classes = xs->dims[1], inner = 1;
  for (int d = 2; d < xs->rank; d++)
    inner *= xs->dims[d];
  bool mean = strcmp(kr_attr_s(c, "reduction"), "mean") == 0;
  const double *x = kr_x(c, 0);
  const int64_t *t = kr_ix(c, 1);
  double total = 0;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < inner; j++) {
      int64_t cls = t[i * inner + j];
      if (cls < 0 || cls >= classes)
        return hap_err_set(err, HAP_EINVAL, "kref %s: target %lld at %lld, expected 0..%lld",
                           hap_op_name(c->op), (long long)cls, (long long)(i * inner + j),
                           (long long)(classes - 1));
      const double *row = x + i * classes * inner + j; /* class k at row[k * inner] */
      double logp = row[cls * inner];
      if (c->op == HAP_OP_CROSS_ENTROPY) {
        double mx = -INFINITY, z = 0;
        for (int64_t k = 0; k < classes; k++)
          mx = fmax(mx, row[k * inner]);
        for (int64_t k = 0; k < classes; k++)
          z += exp(row[k * inner] - mx);
        logp -= mx + log(z);
      }
      total -= logp;
    }
  c->out[0][0] = mean ? total / (double)(n * inner) : total;
  return HAP_OK;
}
